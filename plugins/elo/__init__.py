"""The elo plugin (being built; registers nothing yet)."""
