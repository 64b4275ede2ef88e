"""The cobol plugin: a spoken coding mode that works through git (see mode.py)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import TYPE_CHECKING

# Only the hook marker at module level: `lmd --help` imports every plugin to list commands,
# and a Setting or a Mode made here would cost it their modules for nothing.
from daemon.api import hookimpl

if TYPE_CHECKING:
    from daemon.api import Context


async def respond(ctx: Context) -> AsyncIterator[str]:
    from .mode import respond as mode_respond  # the mode's code loads on its first utterance

    async for chunk in mode_respond(ctx):
        yield chunk


@hookimpl
def register_settings(register):
    from .config import SETTINGS

    for setting in SETTINGS:
        register(setting)


@hookimpl
def register_modes(register):
    from daemon.api import Mode

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
    from .patches import migrate_patches_table, migrate_patches_undo

    register("m001_patches", migrate_patches_table)
    register("m002_patches_undo", migrate_patches_undo)
