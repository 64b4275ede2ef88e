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

from tests.forkserver import Profile

ROOT = Path(__file__).resolve().parent.parent

# A daemon (and a command that counts tokens) asks tiktoken for its encoding; with no network
# (these machines) tiktoken imports requests to download it, fails, and lmd estimates: some 0.1
# CPU-s of imports in each forked daemon. The child still asks and fails exactly so; only the
# imports are done once, here (in both preloads). numpy likewise: lmd's store keeps it out of
# sqlite-utils, and the Elo commands and routes import it when they need it.


def _preload_shared() -> None:
    import numpy  # noqa: F401  the Elo ratings' arrays (lmd imports it where it needs it)
    import requests  # noqa: F401
    import tiktoken  # noqa: F401
    import tiktoken.load  # noqa: F401
    import tiktoken_ext.openai_public  # noqa: F401


def preload_commands() -> None:
    """For the docs' examples: lmd's own imports, every plugin's commands resolved (as a
    command's first use resolves them)."""
    import openai  # noqa: F401

    import daemon.cli
    import daemon.core.daemon  # noqa: F401
    import daemon.core.store  # noqa: F401
    from daemon.lazy import resolve

    _preload_shared()
    daemon.cli.cli._load_plugins()
    for name in list(daemon.cli.cli.commands):
        resolve(daemon.cli.cli, name)


def preload_serve() -> None:
    """For a daemon: what `lmd serve` and a first turn import; plugins are left to the child
    (their set follows the child's environment)."""
    import concurrent.futures.thread  # noqa: F401

    import httpx2  # noqa: F401
    import hypercorn.asyncio  # noqa: F401
    import mcp  # noqa: F401  what marat's MCP tools import
    import mcp.client.stdio  # noqa: F401
    import mcp.client.streamable_http  # noqa: F401
    import openai  # noqa: F401
    import openai.resources.chat.completions.completions  # noqa: F401
    import openai.resources.completions  # noqa: F401
    import tree_sitter  # noqa: F401  the bash reader, on a command's first question
    import tree_sitter_bash  # noqa: F401

    import daemon.backends.embedded  # noqa: F401
    import daemon.cli  # noqa: F401
    import daemon.core.daemon  # noqa: F401
    import daemon.core.store  # noqa: F401
    import daemon.execution.bash  # noqa: F401
    import daemon.http.app  # noqa: F401
    import daemon.http.server  # noqa: F401
    import plugins.cobol.mode  # noqa: F401
    import plugins.elo.store  # noqa: F401
    import plugins.marat.loop  # noqa: F401
    from daemon.backends.http_pools import ssl_context

    _preload_shared()
    ssl_context()  # the CA certificates, loaded once (~0.1 CPU-s) rather than in every daemon


def run_lmd() -> None:
    import daemon.cli

    daemon.cli.main()


COMMANDS = Profile(preload=preload_commands, main=run_lmd, argv0=lambda: "lmd")
SERVE = Profile(preload=preload_serve, main=run_lmd, argv0=lambda: "lmd")


class WarmLmd:
    """A fork server (tests/forkserver.py) of one page or worker, with the environment the
    page's `lmd` would have, and the command on disk that starts its program
    (tests/warm_client.py). `profile` names what it imports and runs; `client` is "client"
    (wait for the exit code) or "launcher" (stand for a detached program)."""

    def __init__(
        self,
        directory: Path,
        env: dict[str, str],
        profile: str = "tests.warm_lmd:COMMANDS",
        name: str = "lmd",
        client: str = "client",
        profile_path: tuple[Path, ...] = (),
        python: list[str] | None = None,
    ) -> None:
        """`python`: how the warm process's interpreter starts (default this one; another
        user's runs it through setpriv: its last word is the interpreter the client runs)."""
        self.directory = directory
        self.env = env
        self.profile = profile
        self.python = python or [sys.executable]
        self.bin = directory / "bin"
        self.client = self.bin / name
        self.client_call = client
        self.socket_path = directory / "lmd.sock"
        self.profile_path = profile_path
        self.proc: subprocess.Popen | None = None

    def start(self, timeout: float = 10.0) -> WarmLmd:
        self.bin.mkdir(parents=True, exist_ok=True)
        source = (ROOT / "tests" / "warm_client.py").read_text()
        self.client.write_text(f"#!{self.python[-1]} -S\n{source}\n{self.client_call}()\n")
        self.client.chmod(0o755)
        self.socket_path.unlink(missing_ok=True)  # a warm process stopped before this one
        self.proc = subprocess.Popen(
            [
                *(*self.python, "-m", "tests.forkserver", str(self.socket_path)),
                *(self.profile, *map(str, self.profile_path)),
            ],
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
