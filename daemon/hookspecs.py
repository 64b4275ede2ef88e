"""The plugin contract. Each hook is documented in full once, in docs/plugins.md."""

from pluggy import HookimplMarker, HookspecMarker

hookspec = HookspecMarker("lmd")
hookimpl = HookimplMarker("lmd")


@hookspec
def register_modes(register):
    """Register modes: call register(Mode(...)) for each."""


@hookspec
def register_settings(register):
    """Register settings: call register(Setting(...)) for each."""


@hookspec
def register_routes(register):
    """Register HTTP routes: call register(path, endpoint, methods=[...])."""


@hookspec
def register_commands(cli):
    """Add click commands or groups to the `lmd` command group."""


@hookspec
def register_migrations(register):
    """Register database migrations: call register(name, fn) with fn(db) run once per name."""


@hookspec
def startup(daemon):
    """Run when the server starts; may return an awaitable."""


@hookspec
def shutdown(daemon):
    """Run when the server stops; may return an awaitable."""
