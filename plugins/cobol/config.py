"""cobol's settings (imported when the daemon collects settings, not by `lmd --help`)."""

from __future__ import annotations

from daemon.api import Setting

SETTINGS = (
    Setting(
        "cobol_repo",
        "",
        "str",
        "Repository cobol works in; empty means the directory sent with the request (X-Cwd), "
        "and asks before working where the session was left (e.g. by marat's cd).",
        protected=True,  # a directory whose files cobol changes: CLI or token only
    ),
    Setting(
        "cobol_build_command",
        "",
        "str",
        "Build/test command cobol compiles with; empty means detect it from the repository.",
        protected=True,  # a command that runs: CLI or token only
    ),
    Setting(
        "cobol_build_timeout_secs",
        300,
        "int",
        "Seconds a cobol build may run before it and its child processes are killed.",
        min=1,
    ),
)
