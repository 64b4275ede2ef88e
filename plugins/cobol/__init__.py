"""The cobol plugin (being built; registers nothing yet)."""
