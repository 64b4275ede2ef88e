"""The cobol plugin: a spoken coding mode that works through git (see mode.py)."""

from __future__ import annotations

from daemon.api import Mode, Setting, hookimpl

SETTINGS = (
    Setting(
        "cobol_repo",
        "",
        "str",
        "Repository cobol works in; empty means the session's working directory (X-Cwd).",
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


@hookimpl
def register_settings(register):
    for setting in SETTINGS:
        register(setting)


@hookimpl
def register_modes(register):
    from .mode import respond

    register(
        Mode(
            "cobol",
            respond,
            description="Code through git: focus, rewrite, compile, compile and fix, undo, diff.",
            aliases=("kobol", "co bol"),  # how speech engines hear it
        )
    )


@hookimpl
def register_migrations(register):
    from .patches import migrate_patches_table

    register("m001_patches", migrate_patches_table)
