"""`marat`: speak a task, the daemon runs bash for you.

A thought loop (Thought / Action / Observation / Final Thought) with one command per model
turn, a working directory that persists per session, timeouts, an approval step a voice user
can answer, an audit of every command, and the "remember: ..." phrase for operative prompts.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import TYPE_CHECKING

# Only the hook marker and lazy_command at module level: `lmd --help` imports every plugin to
# list commands, and a Setting or a Mode made here would cost it their modules for nothing.
from daemon.api import hookimpl, lazy_command

if TYPE_CHECKING:
    from daemon.api import Context


async def respond(ctx: Context) -> AsyncIterator[str]:
    from .loop import respond as loop_respond  # keep the client path light

    async for chunk in loop_respond(ctx):
        yield chunk


@hookimpl
def register_modes(register):
    from daemon.api import Mode

    register(
        Mode(
            "marat",
            respond,
            description="Speak a task; the daemon runs bash for you, asking before it writes.",
            aliases=("murat", "marrat", "ma rat"),  # how speech engines hear it
        )
    )


@hookimpl
def register_settings(register):
    from .config import SETTINGS

    for setting in SETTINGS:
        register(setting)


@hookimpl
def register_migrations(register):
    from .tables import m001_marat_commands, m002_marat_sandbox, m003_marat_rule

    register("m001_marat_commands", m001_marat_commands)
    register("m002_marat_sandbox", m002_marat_sandbox)
    register("m003_marat_rule", m003_marat_rule)


@hookimpl
def register_routes(register):
    from .audit import commands_route

    register("/marat/commands", commands_route, methods=["GET"])


@hookimpl
def register_commands(cli):
    from daemon.api import add_history_listing

    # `lmd history commands`, also `lmd history --commands`
    commands = lazy_command("commands", "plugins.marat.audit:commands_command")
    add_history_listing(cli, commands, "Commands marat ran (its audit) instead.")


@hookimpl
def shutdown(daemon):
    from daemon.api import close_mcp_hub

    return close_mcp_hub(daemon)  # the MCP servers started for marat's MCP tools stop with lmd
