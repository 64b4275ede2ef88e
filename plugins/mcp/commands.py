"""`lmd mcp list` and `lmd mcp serve`, and GET /mcp/servers (what `lmd mcp list` asks)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import click
from starlette.responses import JSONResponse

from daemon.api import (
    ClientError,
    McpHub,
    default_home,
    fail,
    home_option,
    mcp_hub,
    open_daemon_state,
    request,
)


@click.group()
def mcp() -> None:
    """MCP: the servers whose tools marat may call, and lmd as an MCP server."""


async def servers_route(request: Any) -> Any:
    """Every configured MCP server with its state and tools (starting those not running)."""
    daemon = request.app.state.daemon
    s = daemon.settings()
    hub = mcp_hub(daemon)
    await hub.tools(s["mcp_start_timeout_secs"], s["mcp_max_tools"])
    return JSONResponse({"servers": hub.describe(), "problem": hub.config_problem})


servers_route.openapi = {
    "get": {
        "summary": "The MCP servers of LMD_HOME/mcp.json: state and tools (starts them).",
        "responses": {"200": {"description": "servers and a problem sentence (or null)"}},
    }
}


async def _local(home: Path, start: float, max_tools: int) -> dict:
    """The same listing without a daemon: start each server here, list, stop."""
    hub = McpHub(home)
    try:
        await hub.tools(start, max_tools)
        return {"servers": hub.describe(), "problem": hub.config_problem}
    finally:
        await hub.close()


@mcp.command("list")
@click.option("--url", envvar="LMD_URL", help="Daemon URL (default http://127.0.0.1:8420).")
@click.option("--json", "as_json", is_flag=True)
@home_option
def list_servers(url: str | None, as_json: bool, home: Path | None) -> None:
    """The MCP servers in LMD_HOME/mcp.json, their state and their tools (asks the running
    daemon; without one, starts each server here for a moment)."""
    try:
        _, _, body = request("GET", "/mcp/servers", url=url, headers={"Accept": "application/json"})
        data = json.loads(body)
        where = "as the daemon started them"
    except ClientError as e:
        if e.status is not None:
            fail(e.message)
        _, store, s = open_daemon_state(home)
        store.close()
        data = asyncio.run(
            _local(home or default_home(), s["mcp_start_timeout_secs"], s["mcp_max_tools"])
        )
        where = "started here for a moment (no daemon is running)"
    if as_json:
        click.echo(json.dumps(data, indent=2, ensure_ascii=False))
        return
    if data.get("problem"):
        fail(data["problem"])
    if not data["servers"]:
        click.echo("No MCP servers are configured: put them in LMD_HOME/mcp.json (docs/mcp.md).")
        return
    click.echo(f"MCP servers, {where}:")
    for row in data["servers"]:
        state = row["state"] + (f": {row['problem']}" if row.get("problem") else "")
        click.echo(f"{row['name']}  {row['transport']}  {row['where']}")
        click.echo(f"  state: {state}")
        for tool in row["tools"]:
            hints = ", ".join(k.removesuffix("_hint") for k, v in tool["hints"].items() if v)
            shown = f"  [{hints}]" if hints else ""
            click.echo(f"  {tool['rule']}{shown}  {tool['description'][:80]}")
        for note in row["notes"]:
            click.echo(f"  left out: {note}")


@mcp.command("serve")
@click.option("--url", envvar="LMD_URL", help="Daemon URL (default http://127.0.0.1:8420).")
@click.option(
    "--http",
    "http_bind",
    metavar="HOST:PORT",
    help="Serve streamable HTTP on a loopback address instead of stdio (behind the daemon's "
    "owner check: its token, or on Linux your own user).",
)
@home_option
def serve(url: str | None, http_bind: str | None, home: Path | None) -> None:
    """Be an MCP server (stdio) for an MCP client: say something to a mode, LM_SCORE,
    SelectIT on a file, the Elo leaderboard, history search. A command that needs a yes is
    never approved by the client's model."""
    try:
        import mcp  # noqa: F401 - the SDK: serving needs it whole
    except ModuleNotFoundError:
        fail(
            "lmd mcp serve needs the mcp package, which is not installed: run `make run` "
            "again (it installs it), or pip install 'lmd[mcp]'."
        )
    from .server import build, serve_http  # the mcp extra: only once it is known installed

    server = build(url)
    if http_bind:
        serve_http(server, http_bind, home)
    else:
        server.run()
