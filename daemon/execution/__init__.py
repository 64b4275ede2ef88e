"""Running commands: the runner and the OS sandbox."""
