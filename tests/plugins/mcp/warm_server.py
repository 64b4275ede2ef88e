"""The test MCP server (mcp_test_server.py) started as a daemon starts any stdio server, without
paying the SDK's imports each time (some 1.3 CPU-seconds; a run starts a dozen and more).

A warm process (tests/warm_lmd.py's, running this server instead of lmd) imports
mcp_test_server, and so the `mcp` SDK, once and forks a child for each start. The command the
daemon runs is a small launcher (tests/warm_client.py's launcher()): it hands the warm process
its arguments, environment, working directory and stdin/stdout/stderr (SCM_RIGHTS), then
stands for the server as the daemon sees it: a signal sent to it (the daemon's SIGTERM to the
server's process group) goes on to the server, and it ends as the server ended (its exit code,
or the same signal). A launcher killed outright (SIGKILL) closes its connection, and the
server then exits at once. The server is the real one, SDK and all, speaking the protocol over
the pipes the daemon made.

    warm = WarmMcpServer(directory).start()
    config = {"command": str(warm.client), "args": [...], "env": {...}}
    ...
    warm.stop()
"""

from __future__ import annotations

import fcntl
import os
import socket
import sys
import threading
from pathlib import Path

from tests.forkserver import Profile
from tests.warm_lmd import WarmLmd, preload_commands, run_lmd

HERE = Path(__file__).resolve().parent


def watch_launcher(conn: socket.socket) -> None:
    """The launcher's end closes when it is killed outright: so ends the server. The copy takes
    a descriptor above 2: 0, 1 and 2 are about to become the launcher's pipes."""
    watch = socket.socket(fileno=fcntl.fcntl(conn.fileno(), fcntl.F_DUPFD_CLOEXEC, 3))

    def gone() -> None:
        try:
            while watch.recv(64):
                pass
        except OSError:
            pass
        os._exit(1)

    threading.Thread(target=gone, daemon=True).start()


def _test_server():
    sys.path.insert(0, str(HERE))
    import mcp_test_server  # the SDK and the server's module, once

    return mcp_test_server


def _preload_lmd_mcp_serve() -> None:
    preload_commands()
    import plugins.mcp.server  # noqa: F401


MCP_TEST_SERVER = Profile(
    preload=_test_server,
    main=lambda: _test_server().main(),
    argv0=lambda: _test_server().__file__,
    child_setup=watch_launcher,
)
LMD_MCP_SERVE = Profile(
    preload=_preload_lmd_mcp_serve, main=run_lmd, argv0=lambda: "lmd", child_setup=watch_launcher
)


class WarmMcpServer(WarmLmd):
    """A warm process forking the test MCP server, and the launcher that asks it for one."""

    def __init__(self, directory: Path) -> None:
        super().__init__(
            directory,
            dict(os.environ),
            profile="warm_server:MCP_TEST_SERVER",  # this directory has no __init__.py
            name="mcp-test-server",
            client="launcher",
            profile_path=(HERE,),
        )


class WarmLmdMcpServe(WarmLmd):
    """`lmd` forked warm for `lmd mcp serve` over stdio, as an MCP client starts it (lmd's and the
    SDK's imports once, not some 2 CPU-seconds a start), with the launcher standing for it. The
    command's own start, cold, is tested over HTTP (test_serve.py)."""

    def __init__(self, directory: Path) -> None:
        super().__init__(
            directory,
            dict(os.environ),
            profile="warm_server:LMD_MCP_SERVE",
            client="launcher",
            profile_path=(HERE,),
        )
