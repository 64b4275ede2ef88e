"""The selectit plugin (being built; registers nothing yet)."""
