"""`marat`: speak a task, the daemon runs bash for you.

A thought loop (Thought / Action / Observation / Final Thought) with one command per model
turn, a working directory that persists per session, timeouts, an approval step a voice user
can answer, an audit of every command, and the "remember: ..." phrase for operative prompts.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

from daemon.api import Context, Mode, Setting, add_history_listing, hookimpl, lazy_command

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
        protected=True,  # only the CLI, or an HTTP request with the token, may change it
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
        protected=True,  # where commands run: only the CLI or the token may move it
    ),
]


async def respond(ctx: Context) -> AsyncIterator[str]:
    from .loop import respond as loop_respond  # keep the client path light

    async for chunk in loop_respond(ctx):
        yield chunk


@hookimpl
def register_modes(register):
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
    for setting in SETTINGS:
        register(setting)


@hookimpl
def register_migrations(register):
    from .audit import m001_marat_commands, m002_marat_sandbox, m003_marat_rule

    register("m001_marat_commands", m001_marat_commands)
    register("m002_marat_sandbox", m002_marat_sandbox)
    register("m003_marat_rule", m003_marat_rule)


@hookimpl
def register_routes(register):
    from .audit import commands_route

    register("/marat/commands", commands_route, methods=["GET"])


@hookimpl
def register_commands(cli):
    # `lmd history commands`, also `lmd history --commands`
    commands = lazy_command(
        "commands",
        "plugins.marat.audit:commands_command",
        "Commands marat ran: where, exit code, duration, how each was approved and sandboxed.",
    )
    add_history_listing(cli, commands, "Commands marat ran (its audit) instead.")
