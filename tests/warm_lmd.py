"""`lmd` for the docs' examples without paying Python's start-up and lmd's imports each time.

A warm process imports lmd once (daemon.cli, the store, every plugin, openai) and forks a child
for each `lmd ...` that a page's bash runs: the `lmd` that bash finds first on PATH is a tiny
client (Python without site, stdlib only) that hands the warm process its arguments, its
environment, its working directory and its stdin/stdout/stderr (SCM_RIGHTS), then exits with
the child's exit code. The child runs the console script's own function, `daemon.cli:main`,
as that command would: the examples read, write and exit exactly as with the installed
`lmd` (whose real entry point tests/core/test_cli.py and the README tour test run), in about
a twentieth of the CPU time.

    server = WarmLmd(directory, env).start()
    env["PATH"] = f"{server.bin}:{env['PATH']}"
    ...
    server.stop()
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from pathlib import Path

CLIENT = """\
import json, os, socket, sys
s = socket.socket(socket.AF_UNIX)
s.connect({socket_path!r})
request = json.dumps({{"argv": sys.argv[1:], "env": dict(os.environ), "cwd": os.getcwd()}})
socket.send_fds(s, [request.encode()], [0, 1, 2])
code = s.recv(16)
sys.exit(int(code) if code else 70)
"""

SERVER = """\
import json, os, socket, sys, traceback

# lmd's own imports, once: what each example would otherwise import again (every plugin's
# commands resolved, as a command's first use resolves it).
import daemon.cli, daemon.store, daemon.core, openai  # noqa: E401,F401
from daemon.lazy import resolve

daemon.cli.cli._load_plugins()
for name in list(daemon.cli.cli.commands):
    resolve(daemon.cli.cli, name)
listener = socket.socket(socket.AF_UNIX)
listener.bind(sys.argv[1])
listener.listen(64)
print("ready", flush=True)
while True:
    conn, _ = listener.accept()
    message, fds, _, _ = socket.recv_fds(conn, 1 << 20, 3)
    if os.fork():  # the parent: back to accepting, its copies closed, children reaped
        for fd in fds:
            os.close(fd)
        conn.close()
        while True:
            try:
                if os.waitpid(-1, os.WNOHANG)[0] == 0:
                    break
            except ChildProcessError:
                break
        continue
    listener.close()
    request = json.loads(message)
    if request.get("detach"):  # a long-running command (lmd serve): its pid first
        conn.sendall(f"{os.getpid()}\\n".encode())
    for target, fd in enumerate(fds):
        os.dup2(fd, target)
        os.close(fd)
    os.environ.clear()
    os.environ.update(request["env"])
    os.chdir(request["cwd"])
    sys.argv = ["lmd", *request["argv"]]
    code = 0
    try:
        daemon.cli.main()
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
        if not isinstance(e.code, int | None):
            print(e.code, file=sys.stderr)
    except BaseException:
        traceback.print_exc()
        code = 1
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except OSError:
            pass
    try:
        conn.sendall(str(code).encode())
    except OSError:
        pass  # a detached command's caller stopped listening
    os._exit(0)
"""


class WarmLmd:
    """The warm process of one page (its environment as the page's `lmd` would have it)."""

    def __init__(self, directory: Path, env: dict[str, str]) -> None:
        self.directory = directory
        self.env = env
        self.bin = directory / "bin"
        self.socket_path = directory / "lmd.sock"
        self.proc: subprocess.Popen | None = None

    def start(self, timeout: float = 10.0) -> WarmLmd:
        self.bin.mkdir(parents=True, exist_ok=True)
        client = self.bin / "lmd"
        client.write_text(
            f"#!{sys.executable} -S\n" + CLIENT.format(socket_path=str(self.socket_path))
        )
        client.chmod(0o755)
        self.socket_path.unlink(missing_ok=True)  # a warm process stopped before this one
        self.proc = subprocess.Popen(
            [sys.executable, "-c", SERVER, str(self.socket_path)],
            env=self.env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,  # its children too are stopped with it
        )
        line = self.proc.stdout.readline()  # "ready" once imported, else the error
        if line.strip() != "ready":
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.proc.wait(timeout)
            line += self.proc.stdout.read() if self.proc.poll() is not None else ""
            self.stop()
            raise RuntimeError(f"the warm lmd did not start:\n{line}")
        return self

    def spawn(self, argv: list[str], env: dict[str, str], cwd: Path, output: int) -> int:
        """Start `lmd ARGV` (e.g. serve) in the background, its stdout and stderr to the file
        descriptor `output`; its pid. It stops with the warm process at the latest."""
        import json
        import socket

        with socket.socket(socket.AF_UNIX) as s, open(os.devnull) as devnull:
            s.connect(str(self.socket_path))
            request = {"argv": argv, "env": env, "cwd": str(cwd), "detach": True}
            socket.send_fds(s, [json.dumps(request).encode()], [devnull.fileno(), output, output])
            return int(s.makefile().readline())

    def stop(self) -> None:
        if self.proc is not None:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            self.proc.wait()
            self.proc.stdout.close()
            self.proc = None
