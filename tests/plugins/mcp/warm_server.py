"""The test MCP server (mcp_test_server.py) started as a daemon starts any stdio server, without
paying the SDK's imports each time (some 1.3 CPU-seconds; a run starts a dozen and more).

A warm process imports mcp_test_server (and so the `mcp` SDK) once and forks a child for each
start. The command the daemon runs is a small launcher (Python without site, stdlib only): it
hands the warm process its arguments, environment, working directory and stdin/stdout/stderr
(SCM_RIGHTS), then stands for the server as the daemon sees it: a signal sent to it (the
daemon's SIGTERM to the server's process group) goes on to the server, and it ends as the
server ended (its exit code, or the same signal). A launcher killed outright (SIGKILL) closes
its connection, and the server then exits at once. The server is the real one, SDK and all,
speaking the protocol over the pipes the daemon made.

    warm = WarmMcpServer(directory).start()
    config = {"command": str(warm.launcher), "args": [...], "env": {...}}
    ...
    warm.stop()
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent

LAUNCHER = """\
import json, os, signal, socket, sys
s = socket.socket(socket.AF_UNIX)
s.connect({socket_path!r})
request = json.dumps({{"argv": sys.argv[1:], "env": dict(os.environ), "cwd": os.getcwd()}})
socket.send_fds(s, [request.encode()], [0, 1, 2])
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

ZYGOTE = """\
import json, os, selectors, signal, socket, sys, threading

sys.path.insert(0, {here!r})
import mcp_test_server  # noqa: the SDK and the server's module, once

listener = socket.socket(socket.AF_UNIX)
listener.bind(sys.argv[1])
listener.listen(64)
wake_r, wake_w = os.pipe()
os.set_blocking(wake_r, False)
os.set_blocking(wake_w, False)
signal.set_wakeup_fd(wake_w)
signal.signal(signal.SIGCHLD, lambda *_: None)
started = {{}}  # pid -> the launcher's connection


def reap():
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        conn = started.pop(pid, None)
        if conn is not None:
            try:
                conn.sendall(f"{{os.waitstatus_to_exitcode(status)}}\\n".encode())
            except OSError:
                pass
            conn.close()


selector = selectors.DefaultSelector()
selector.register(listener, selectors.EVENT_READ)
selector.register(wake_r, selectors.EVENT_READ)
selector.register(0, selectors.EVENT_READ)  # its starter's pipe: at its end, stop all
print("ready", flush=True)
while True:
    events = {{key.fileobj for key, _ in selector.select()}}
    if wake_r in events:
        while True:
            try:
                if not os.read(wake_r, 512):
                    break
            except BlockingIOError:
                break
        reap()
    if 0 in events and not os.read(0, 512):
        os.killpg(0, signal.SIGKILL)
    if listener not in events:
        continue
    conn, _ = listener.accept()
    message, fds, _, _ = socket.recv_fds(conn, 1 << 20, 3)
    request = json.loads(message)
    pid = os.fork()
    if pid:
        for fd in fds:
            os.close(fd)
        started[pid] = conn
        try:
            conn.sendall(f"{{pid}}\\n".encode())
        except OSError:
            pass
        reap()
        continue
    # the child: the server, on the launcher's descriptors, in its environment
    signal.set_wakeup_fd(-1)
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    selector.close()
    for fd in (wake_r, wake_w, 0):
        os.close(fd)
    listener.close()
    for other in started.values():
        other.close()
    for target, fd in enumerate(fds):
        os.dup2(fd, target)
        os.close(fd)
    os.environ.clear()
    os.environ.update(request["env"])
    os.chdir(request["cwd"])
    sys.argv = [mcp_test_server.__file__, *request["argv"]]

    def launcher_gone(conn=conn):
        # the launcher's end closes when it is killed outright: so ends the server
        try:
            while conn.recv(64):
                pass
        except OSError:
            pass
        os._exit(1)

    threading.Thread(target=launcher_gone, daemon=True).start()
    code = 0
    try:
        mcp_test_server.main()
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
    except BaseException:
        import traceback

        traceback.print_exc()
        code = 1
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except OSError:
            pass
    os._exit(code)
"""


class WarmMcpServer:
    """A warm process forking the test MCP server, and the launcher that asks it for one."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.socket_path = directory / "mcp.sock"
        self.launcher = directory / "mcp-test-server"
        self.proc: subprocess.Popen | None = None

    def start(self) -> WarmMcpServer:
        self.directory.mkdir(parents=True, exist_ok=True)
        self.launcher.write_text(
            f"#!{sys.executable} -S\n" + LAUNCHER.format(socket_path=str(self.socket_path))
        )
        self.launcher.chmod(0o755)
        self.proc = subprocess.Popen(
            [sys.executable, "-c", ZYGOTE.format(here=str(HERE)), str(self.socket_path)],
            stdin=subprocess.PIPE,  # never written: its end tells the warm process to end
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,  # its children are stopped with it
        )
        line = self.proc.stdout.readline()
        if line.strip() != "ready":
            self.stop()
            raise RuntimeError(f"the warm MCP test server did not start: {line}")
        return self

    def stop(self) -> None:
        if self.proc is not None:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            self.proc.wait()
            self.proc.stdout.close()
            self.proc.stdin.close()
            self.proc = None
