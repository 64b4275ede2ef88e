"""lmd-echo: a complete third-party plugin, written only against `daemon.api`.

It adds a mode (`echo`: the model says your words back), a setting (`echo_prefix`), a route
(`GET /echo`) and a command (`lmd echoes`). The tests pip-install it and drive each part
through a live daemon and the `lmd` command.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator

import click

from daemon.api import (
    Context,
    LmdError,
    Mode,
    Setting,
    fail,
    home_option,
    hookimpl,
    open_daemon_state,
)

ECHO_PROMPT = "Say the user's words back to them, in your own words, in one sentence."


async def respond(ctx: Context) -> AsyncIterator[str]:
    """The mode: the model's paraphrase of your words, after the prefix you chose."""
    if not any(c.isalnum() for c in ctx.text):  # bad input: one sentence, and no model call
        raise LmdError("Say some words for echo to say back; I heard none.")
    messages = [{"role": "system", "content": ECHO_PROMPT}, {"role": "user", "content": ctx.text}]
    said = await ctx.llm.chat(messages, temperature=0)
    yield f"{ctx.settings['echo_prefix']}: {said}"


def check_prefix(value: str) -> str | None:
    """A setting's check returns the reason a value is refused, or None."""
    if not value.strip() or len(value) > 20:
        return "it must be a word or two (1 to 20 characters)"
    return None


async def echo_route(request):
    """GET /echo: the prefix in use and the modes this daemon has."""
    from starlette.responses import JSONResponse  # here: `lmd --help` imports this module

    daemon = request.app.state.daemon
    return JSONResponse({"prefix": daemon.settings()["echo_prefix"], "modes": sorted(daemon.modes)})


echo_route.openapi = {
    "get": {
        "summary": "The echo prefix in use and the daemon's modes.",
        "responses": {"200": {"description": "prefix and modes"}},
    }
}


@click.command()
@click.option("--session", "-s", help="Only this session.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@home_option
def echoes(session: str | None, as_json: bool, home) -> None:
    """What the echo mode said, newest last."""
    _, store, settings = open_daemon_state(home)
    said = [
        p.content
        for p in store.history(session, 1000)
        # The mode's replies (not the core's decorative "Switched to echo mode.")
        if p.mode == "echo" and p.role == "assistant" and p.status == "ok" and p.kind == "default"
    ]
    if not said:
        fail("The echo mode has said nothing yet; try `lmd say echo hello`.")
    if as_json:
        click.echo(json.dumps({"prefix": settings["echo_prefix"], "said": said}))
    else:
        click.echo("\n".join(said))


@hookimpl
def register_modes(register):
    register(Mode("echo", respond, description="Says your words back.", aliases=("eko",)))


@hookimpl
def register_settings(register):
    register(
        Setting(
            "echo_prefix",
            "echo",
            "str",
            "What the echo mode puts before its reply.",
            check=check_prefix,
        )
    )


@hookimpl
def register_routes(register):
    register("/echo", echo_route, methods=["GET"])


@hookimpl
def register_commands(cli):
    cli.add_command(echoes)
