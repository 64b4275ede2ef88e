"""The settings mode (being built; registers nothing yet)."""
