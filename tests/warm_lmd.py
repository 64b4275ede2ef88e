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
from collections.abc import Mapping
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

CLIENT = """\
import json, os, socket, sys
s = socket.socket(socket.AF_UNIX)
s.connect({socket_path!r})
request = json.dumps({{"argv": sys.argv[1:], "env": dict(os.environ), "cwd": os.getcwd()}})
socket.send_fds(s, [request.encode()], [0, 1, 2])
code = s.recv(16)
sys.exit(int(code) if code else 70)
"""

# A daemon (and a command that counts tokens) asks tiktoken for its encoding; with no network
# (these machines) tiktoken imports requests to download it, fails, and lmd estimates: some 0.1
# CPU-s of imports in each forked daemon. The child still asks and fails exactly so; only the
# imports are done once, here (in both preloads). numpy likewise: lmd's store keeps it out of
# sqlite-utils, and the Elo commands and routes import it when they need it.

# What a warm process imports before it forks: for the docs' examples, lmd's own imports and
# every plugin's commands resolved (as a command's first use resolves them); for a daemon, what
# `lmd serve` imports, plugins left to the child (their set follows the child's environment).
PRELOAD_COMMANDS = """\
import daemon.cli, daemon.store, daemon.core, openai  # noqa: E401,F401
import requests, tiktoken, tiktoken.load, tiktoken_ext.openai_public  # noqa
import numpy  # noqa: the Elo ratings' arrays (lmd imports it where it needs it)
from daemon.lazy import resolve

daemon.cli.cli._load_plugins()
for name in list(daemon.cli.cli.commands):
    resolve(daemon.cli.cli, name)
"""
PRELOAD_SERVE = """\
import daemon.cli, daemon.store, daemon.core, daemon.http.app, daemon.http.server  # noqa
import hypercorn.asyncio, openai, httpx2, concurrent.futures.thread  # noqa
import openai.resources.chat.completions.completions, openai.resources.completions  # noqa
import daemon.execution.bash, plugins.marat.loop, plugins.cobol.mode, plugins.elo.store  # noqa
import tree_sitter, tree_sitter_bash  # noqa: the bash reader, on a command's first question
import mcp, mcp.client.stdio, mcp.client.streamable_http  # noqa: what marat's MCP tools import
import daemon.backends.embedded  # noqa: F401
import requests, tiktoken, tiktoken.load, tiktoken_ext.openai_public  # noqa
import numpy  # noqa: the Elo ratings' arrays (lmd imports it where it needs it)
from daemon.backends.http_pools import ssl_context

ssl_context()  # the CA certificates, loaded once (~0.1 CPU-s) rather than in every daemon
"""

SERVER = """\
import json, os, selectors, signal, socket, sys, traceback

if sys.path[0] == "":  # python -c: the directory it started in, not each child's
    sys.path[0] = os.getcwd()
{preload}
listener = socket.socket(socket.AF_UNIX)
listener.bind(sys.argv[1])
listener.listen(64)
# Children are reaped as they end; a detached one's caller hears its exit status (as
# Popen.wait would give it) on the connection that started it.
wake_r, wake_w = os.pipe()
os.set_blocking(wake_r, False)
os.set_blocking(wake_w, False)
signal.set_wakeup_fd(wake_w)
signal.signal(signal.SIGCHLD, lambda *_: None)
detached = {{}}


def reap():
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        conn = detached.pop(pid, None)
        if conn is not None:
            try:
                conn.sendall(f"{{os.waitstatus_to_exitcode(status)}}\\n".encode())
            except OSError:
                pass  # its caller stopped listening
            conn.close()


selector = selectors.DefaultSelector()
selector.register(listener, selectors.EVENT_READ)
selector.register(wake_r, selectors.EVENT_READ)
# Its stdin is a pipe its starter never writes: at its end the starter is gone (a worker that
# crashed runs no atexit), and the warm process ends with every child in its process group.
selector.register(0, selectors.EVENT_READ)
print("ready", flush=True)
while True:
    events = selector.select()
    if any(key.fileobj == wake_r for key, _ in events):
        while True:
            try:
                if not os.read(wake_r, 512):
                    break
            except BlockingIOError:
                break
        reap()
    if any(key.fileobj == 0 for key, _ in events) and not os.read(0, 512):
        os.killpg(0, signal.SIGKILL)
    if not any(key.fileobj is listener for key, _ in events):
        continue
    conn, _ = listener.accept()
    message, fds, _, _ = socket.recv_fds(conn, 1 << 20, 3)
    request = json.loads(message)
    pid = os.fork()
    if pid:  # the parent: back to accepting, its copies closed
        for fd in fds:
            os.close(fd)
        if request.get("detach"):  # a long-running command (lmd serve): its pid first
            try:
                conn.sendall(f"{{pid}}\\n".encode())
            except OSError:
                pass
            detached[pid] = conn
        else:
            conn.close()
        reap()
        continue
    # the child: none of the warm process's own descriptors or handlers
    signal.set_wakeup_fd(-1)
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    selector.close()
    os.close(wake_r)
    os.close(wake_w)
    listener.close()
    # a subclass's setup, while 0, 1 and 2 are still taken: a descriptor it opens lands above
    {child_setup}
    os.close(0)  # the starter's pipe: replaced by the request's stdin below
    for other in detached.values():
        other.close()
    if request.get("detach"):
        conn.close()
        conn = None
    for target, fd in enumerate(fds):
        os.dup2(fd, target)
        os.close(fd)
    os.environ.clear()
    os.environ.update(request["env"])
    sys.path[1:1] = request.get("path_first", [])  # a longer PYTHONPATH's own entries
    os.chdir(request["cwd"])
    sys.argv = [{argv0}, *request["argv"]]
    code = 0
    try:
        {main}
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
    if conn is not None:
        try:
            conn.sendall(str(code).encode())
        except OSError:
            pass
        os._exit(0)
    os._exit(code)
"""


class WarmLmd:
    """The warm process of one page (its environment as the page's `lmd` would have it).

    Subclasses fork another program the same way: they name its client (the command on
    disk), the argv[0] and the call its children run, and code each child runs first, with
    `conn` (its starter's connection) at hand."""

    client_name = "lmd"
    client_source = CLIENT
    argv0 = '"lmd"'
    main = "daemon.cli.main()"
    child_setup = "pass"

    def __init__(
        self,
        directory: Path,
        env: dict[str, str],
        preload: str = PRELOAD_COMMANDS,
        python: list[str] | None = None,
    ) -> None:
        """`python`: how the warm process's interpreter starts (default this one; another
        user's runs it through setpriv: its last word is the interpreter the client runs)."""
        self.directory = directory
        self.env = env
        self.preload = preload
        self.python = python or [sys.executable]
        self.bin = directory / "bin"
        self.socket_path = directory / "lmd.sock"
        self.proc: subprocess.Popen | None = None

    def start(self, timeout: float = 10.0) -> WarmLmd:
        self.bin.mkdir(parents=True, exist_ok=True)
        client = self.client = self.bin / self.client_name
        client.write_text(
            f"#!{self.python[-1]} -S\n"
            + self.client_source.format(socket_path=str(self.socket_path))
        )
        client.chmod(0o755)
        self.socket_path.unlink(missing_ok=True)  # a warm process stopped before this one
        self.proc = subprocess.Popen(
            [*self.python, "-c", self.server_source(), str(self.socket_path)],
            env=self.env,
            cwd=ROOT,
            stdin=subprocess.PIPE,  # never written: its end tells the warm process to end
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

    def server_source(self) -> str:
        return SERVER.format(
            preload=self.preload, argv0=self.argv0, main=self.main, child_setup=self.child_setup
        )

    def spawn(self, argv: list[str], env: dict[str, str], cwd: Path, output: int) -> int:
        """Start `lmd ARGV` (e.g. serve) in the background, its stdout and stderr to the file
        descriptor `output`; its pid. It stops with the warm process at the latest."""
        child = self.start_child(argv, env, cwd, output)
        child.detach()
        return child.pid

    def start_child(
        self, argv: list[str], env: dict[str, str], cwd: Path, output: int
    ) -> WarmChild:
        """Like spawn, but looked after as a Popen is: poll, wait, send_signal, returncode.
        `env` must pass forkable()."""
        import json
        import socket

        s = socket.socket(socket.AF_UNIX)
        try:
            s.connect(str(self.socket_path))
            with open(os.devnull) as devnull:
                request = {"argv": argv, "env": env, "cwd": str(cwd), "detach": True}
                request["path_first"] = self.path_first(env)
                socket.send_fds(
                    s, [json.dumps(request).encode()], [devnull.fileno(), output, output]
                )
            return WarmChild(s)
        except BaseException:
            s.close()
            raise

    def same_interpreter(self, env: dict[str, str]) -> bool:
        """Would a fresh `python` started with env be set up as this warm one was? (Python's
        own variables decide sys.path, buffering and the like at start-up.)"""
        return interpreter_env(env) == interpreter_env(self.env)

    def forkable(self, env: dict[str, str]) -> bool:
        """Can a child of this warm process be what a fresh `python` started with env would
        be: the same interpreter, or one whose PYTHONPATH only puts absolute directories
        before this one's (a plugin's site): the child puts them in sys.path where Python
        would, after the start directory; nothing from them is imported before the fork."""
        return self.same_interpreter(env) or self.path_first(env) != []

    def path_first(self, env: dict[str, str]) -> list[str]:
        """The directories env's PYTHONPATH puts before this warm process's own; [] if none
        or when env differs otherwise."""
        mine, theirs = interpreter_env(self.env), interpreter_env(env)
        own = [p for p in mine.pop("PYTHONPATH", "").split(os.pathsep) if p]
        new = [p for p in theirs.pop("PYTHONPATH", "").split(os.pathsep) if p]
        if mine != theirs or len(new) <= len(own) or new[len(new) - len(own) :] != own:
            return []
        first = new[: len(new) - len(own)]
        return first if all(os.path.isabs(p) for p in first) else []

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


def interpreter_env(env: Mapping[str, str]) -> dict[str, str]:
    """The variables that set up a starting Python (sys.path, buffering and the like)."""
    return {k: v for k, v in env.items() if k.startswith(("PYTHON", "LD_"))}


def put_back_interpreter_env(start: Mapping[str, str]) -> list[str]:
    """Set os.environ's PYTHON* and LD_* variables back to `start`; the names that differed."""
    now = interpreter_env(os.environ)
    changed = sorted(k for k in {*now, *start} if now.get(k) != start.get(k))
    for name in changed:
        os.environ.pop(name, None)
        if name in start:
            os.environ[name] = start[name]
    return changed


class WarmChild:
    """A detached child of a warm process, with the part of Popen's interface tests use: its
    exit status (negative for a signal) comes on the connection that started it."""

    def __init__(self, conn) -> None:
        self._conn = conn
        self._buffer = b""
        self.returncode: int | None = None
        line = self._line(None)
        if line is None:
            conn.close()
            raise RuntimeError("the warm lmd closed the connection before it started the command")
        self.pid = int(line)

    def _line(self, timeout: float | None) -> bytes | None:
        """The next line from the warm process; None at its end, TimeoutError when none came."""
        self._conn.settimeout(timeout)
        while b"\n" not in self._buffer:
            data = self._conn.recv(64)
            if not data:
                return None
            self._buffer += data
        line, self._buffer = self._buffer.split(b"\n", 1)
        return line

    def _status(self, timeout: float | None) -> bool:
        if self.returncode is None:
            try:
                line = self._line(timeout)
            except (TimeoutError, BlockingIOError):
                return False
            # no status: the warm process itself was stopped, and its session with it
            self.returncode = int(line) if line is not None else -signal.SIGKILL
            self._conn.close()
        return True

    def poll(self) -> int | None:
        self._status(0.0)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        if not self._status(timeout):
            raise subprocess.TimeoutExpired(f"lmd (pid {self.pid})", timeout)
        return self.returncode

    def send_signal(self, sig: int) -> None:
        if self.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, sig)

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)

    def detach(self) -> None:
        """Stop listening for its exit status."""
        if self.returncode is None:
            self._conn.close()
