"""The command on disk that starts a program through a fork server (tests/forkserver.py).

WarmLmd writes this file, with a shebang running Python without site (stdlib only: it must
start in a few milliseconds) and one last line calling `client()` or `launcher()`, as
DIRECTORY/bin/NAME; the fork server listens on DIRECTORY/lmd.sock.

- `client()` (the docs' `lmd`): hands over its arguments, environment, working directory and
  descriptors 0-2, then exits with the program's exit code.
- `launcher()` (a stdio server a daemon starts, such as an MCP server): the same, detached, and
  then stands for the program as its starter sees it: a signal sent to it goes on to the
  program, and it ends as the program ended (its exit code, or the same signal). Killed
  outright, it closes its connection, and the program exits at once (its child_setup watches).
"""

import json
import os
import signal
import socket
import sys


def _connect() -> socket.socket:
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    s = socket.socket(socket.AF_UNIX)
    s.connect(os.path.join(here, "lmd.sock"))
    return s


def _request(detach: bool) -> bytes:
    request = {"argv": sys.argv[1:], "env": dict(os.environ), "cwd": os.getcwd()}
    if detach:
        request["detach"] = True
    return json.dumps(request).encode()


def client() -> None:
    s = _connect()
    socket.send_fds(s, [_request(detach=False)], [0, 1, 2])
    code = s.recv(16)
    sys.exit(int(code) if code else 70)


def launcher() -> None:
    s = _connect()
    socket.send_fds(s, [_request(detach=True)], [0, 1, 2])
    null = os.open(os.devnull, os.O_RDWR)
    os.dup2(null, 0)  # the program has them now: its starter sees their ends as the program's
    os.dup2(null, 1)
    f = s.makefile("rb")
    pid = int(f.readline())

    def forward(sig: int, frame: object) -> None:
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            pass

    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, forward)
    line = f.readline()
    code = int(line) if line.strip() else 70
    if code < 0:  # the program was killed by a signal: so is its stand-in
        signal.signal(-code, signal.SIG_DFL)
        os.kill(os.getpid(), -code)
    sys.exit(code)
