"""The lm_score plugin (being built; registers nothing yet)."""
