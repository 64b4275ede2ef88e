"""marat's settings (imported when the daemon collects settings, not by `lmd --help`)."""

from __future__ import annotations

from daemon.api import Setting

__all__ = ["SETTINGS"]

SETTINGS = [
    Setting(
        "marat_approval",
        "unsafe",
        "choice",
        "Which commands wait for a spoken yes: never (none; nothing sandboxed), unsafe (all but "
        "clearly read-only ones, which run in the sandbox), always.",
        choices=("never", "unsafe", "always"),
        synonyms={"none": "never", "off": "never", "all": "always", "safe": "unsafe"},
        shapes=("approval",),  # only the CLI, or an HTTP request with the token, may change it
    ),
    Setting(
        "marat_command_timeout_secs",
        30.0,
        "float",
        "Seconds one command may run before its whole process group is killed.",
        min=0.1,
        max=86400,
    ),
    Setting(
        "marat_start_dir",
        "~",
        "str",
        "Directory a new session's commands start in (~ is the user's home).",
        shapes=("safety", "prompt"),  # where commands run (and the prompt names it)
    ),
]
