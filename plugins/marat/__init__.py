"""The marat plugin (being built; registers nothing yet)."""
