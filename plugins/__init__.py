"""Built-in lmd plugins. Each registers through the same hooks a third-party plugin uses."""
