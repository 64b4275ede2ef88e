"""The HTTP face of the daemon: the app, the guard, peer checks, OpenAPI, the server."""
