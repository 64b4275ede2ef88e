"""MCP both ways: `lmd mcp list` shows the MCP servers marat may call (LMD_HOME/mcp.json), and
`lmd mcp serve` lets MCP clients (editors, desktop assistants) use lmd itself.

The client side lives in the core (daemon/agent/mcpclient.py: started on first need, stopped
with the daemon); this plugin adds the commands and GET /mcp/servers.
"""

from __future__ import annotations

from daemon.api import hookimpl, lazy_command


@hookimpl
def register_commands(cli):
    cli.add_command(
        lazy_command(
            "mcp",
            "plugins.mcp.commands:mcp",
            "MCP: the servers whose tools marat may call, and lmd as an MCP server.",
        )
    )


@hookimpl
def register_routes(register):
    from .commands import servers_route

    register("/mcp/servers", servers_route, methods=["GET"])
