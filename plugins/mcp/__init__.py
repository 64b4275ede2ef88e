"""MCP both ways: `lmd mcp list` shows the MCP servers marat may call (LMD_HOME/mcp.json), and
`lmd mcp serve` lets MCP clients (editors, desktop assistants) use lmd itself.

The client side is shared by the agent modes (daemon/agent/mcpclient.py: started on first
need); this plugin adds the commands and GET /mcp/servers, and stops the servers with lmd.
"""

from __future__ import annotations

from daemon.api import hookimpl, lazy_command


@hookimpl
def register_commands(cli):
    cli.add_command(lazy_command("mcp", "plugins.mcp.commands:mcp"))


@hookimpl
def register_routes(register):
    from .commands import servers_route

    register("/mcp/servers", servers_route, methods=["GET"])


@hookimpl
def shutdown(daemon):
    from daemon.api import close_mcp_hub

    return close_mcp_hub(daemon)  # the MCP servers started for GET /mcp/servers stop with lmd
