"""The core: the Daemon, modes and directives, sessions and karma, the turn, settings and the store.

What every mode and feature stands on, and what changes when the daemon itself changes. It
knows no particular mode, agent or backend protocol.
"""
