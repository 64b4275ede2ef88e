"""The test MCP server (mcp_test_server.py) started as a daemon starts any stdio server, without
paying the SDK's imports each time (some 1.3 CPU-seconds; a run starts a dozen and more).

A warm process (tests/warm_lmd.py's, running this server instead of lmd) imports
mcp_test_server, and so the `mcp` SDK, once and forks a child for each start. The command the
daemon runs is a small launcher (Python without site, stdlib only): it hands the warm process
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

import os
from pathlib import Path

from tests.warm_lmd import PRELOAD_COMMANDS, WarmLmd

HERE = Path(__file__).resolve().parent

LAUNCHER = """\
import json, os, signal, socket, sys
s = socket.socket(socket.AF_UNIX)
s.connect({socket_path!r})
request = {{"argv": sys.argv[1:], "env": dict(os.environ), "cwd": os.getcwd(), "detach": True}}
socket.send_fds(s, [json.dumps(request).encode()], [0, 1, 2])
null = os.open(os.devnull, os.O_RDWR)
os.dup2(null, 0)  # the server has them now: the daemon sees their ends as the server's
os.dup2(null, 1)
f = s.makefile("rb")
pid = int(f.readline())
def forward(sig, frame):
    try:
        os.kill(pid, sig)
    except ProcessLookupError:
        pass
for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
    signal.signal(sig, forward)
line = f.readline()
code = int(line) if line.strip() else 70
if code < 0:  # the server was killed by a signal: so is its stand-in
    signal.signal(-code, signal.SIG_DFL)
    os.kill(os.getpid(), -code)
sys.exit(code)
"""

WATCH = """\
import fcntl
import threading


def watch_launcher(conn):
    # the launcher's end closes when it is killed outright: so ends the server. The copy
    # takes a descriptor above 2: 0, 1 and 2 are about to become the launcher's pipes.
    watch = socket.socket(fileno=fcntl.fcntl(conn.fileno(), fcntl.F_DUPFD_CLOEXEC, 3))

    def gone():
        try:
            while watch.recv(64):
                pass
        except OSError:
            pass
        os._exit(1)

    threading.Thread(target=gone, daemon=True).start()
"""
PRELOAD = (
    WATCH
    + f"""
sys.path.insert(0, {str(HERE)!r})
import mcp_test_server  # noqa: the SDK and the server's module, once
"""
)


class WarmMcpServer(WarmLmd):
    """A warm process forking the test MCP server, and the launcher that asks it for one."""

    client_name = "mcp-test-server"
    client_source = LAUNCHER
    argv0 = "mcp_test_server.__file__"
    main = "mcp_test_server.main()"
    child_setup = "watch_launcher(conn)"

    def __init__(self, directory: Path) -> None:
        super().__init__(directory, dict(os.environ), preload=PRELOAD)


class WarmLmdMcpServe(WarmLmd):
    """`lmd` forked warm for `lmd mcp serve` over stdio, as an MCP client starts it (lmd's and the
    SDK's imports once, not some 2 CPU-seconds a start), with the launcher above standing for
    it. The command's own start, cold, is tested over HTTP (test_serve.py)."""

    client_source = LAUNCHER
    child_setup = "watch_launcher(conn)"

    def __init__(self, directory: Path) -> None:
        preload = PRELOAD_COMMANDS + "import plugins.mcp.server  # noqa: F401\n" + WATCH
        super().__init__(directory, dict(os.environ), preload=preload)
