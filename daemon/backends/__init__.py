"""Talking to language-model servers: the client, prepared bodies, HTTP pools, token counting."""
