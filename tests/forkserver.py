"""A fork server: a process that imports a program once and forks a child for each start.

    python -m tests.forkserver SOCKET PROFILE [DIRECTORY...]

PROFILE names a `Profile` (`module:attribute`, e.g. `tests.warm_lmd:SERVE`; the DIRECTORYs are
put first on sys.path to find it): what to import
before forking, what each child runs first, and the program's entry point. A client (a small
stdlib script on disk: tests/warm_client.py) connects to SOCKET and hands over its arguments,
environment, working directory and standard descriptors (SCM_RIGHTS); the child takes them as
its own, runs the entry point, and its exit status goes back to the client. A start asking to
be `detach`ed (a long-running program such as `lmd serve`) gets the child's pid at once and
its exit status when it ends.

The server ends, with every child (its process group), when its stdin closes: its starter
keeps a pipe open and never writes to it, so a test worker that crashes (no atexit) still
takes its warm processes with it.
"""

from __future__ import annotations

import importlib
import json
import os
import selectors
import signal
import socket
import sys
import traceback
from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True)
class Profile:
    """A program as a fork server runs it: plain functions, called in the server and children."""

    preload: Callable[[], None]  # in the server, before it listens
    main: Callable[[], object]  # in each child: the program's entry point
    argv0: Callable[[], str]  # in each child: its sys.argv[0]
    # in each child before descriptors 0-2 are replaced, with the starter's connection
    child_setup: Callable[[socket.socket], None] = lambda conn: None


def load(name: str) -> Profile:
    """The Profile that `module:attribute` names."""
    module, _, attribute = name.partition(":")
    return getattr(importlib.import_module(module), attribute)


class Server:
    """The listening side: accepts starts, forks children, reaps them."""

    def __init__(self, socket_path: str, profile: Profile) -> None:
        self.profile = profile
        self.listener = socket.socket(socket.AF_UNIX)
        self.listener.bind(socket_path)
        self.listener.listen(64)
        # children are reaped as they end; a detached one's caller hears its exit status (as
        # Popen.wait would give it) on the connection that started it
        self.wake_r, self.wake_w = os.pipe()
        os.set_blocking(self.wake_r, False)
        os.set_blocking(self.wake_w, False)
        signal.set_wakeup_fd(self.wake_w)
        signal.signal(signal.SIGCHLD, lambda *_: None)
        self.detached: dict[int, socket.socket] = {}
        self.selector = selectors.DefaultSelector()
        self.selector.register(self.listener, selectors.EVENT_READ)
        self.selector.register(self.wake_r, selectors.EVENT_READ)
        self.selector.register(0, selectors.EVENT_READ)

    def reap(self) -> None:
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            conn = self.detached.pop(pid, None)
            if conn is not None:
                try:
                    conn.sendall(f"{os.waitstatus_to_exitcode(status)}\n".encode())
                except OSError:
                    pass  # its caller stopped listening
                conn.close()

    def _drain_wakeups(self) -> None:
        while True:
            try:
                if not os.read(self.wake_r, 512):
                    return
            except BlockingIOError:
                return

    def serve_forever(self) -> None:
        print("ready", flush=True)
        while True:
            ready = {key.fileobj for key, _ in self.selector.select()}
            if self.wake_r in ready:
                self._drain_wakeups()
                self.reap()
            if 0 in ready and not os.read(0, 512):
                os.killpg(0, signal.SIGKILL)  # the starter is gone
            if self.listener in ready:
                self.start_one()

    def start_one(self) -> None:
        conn, _ = self.listener.accept()
        message, fds, _, _ = socket.recv_fds(conn, 1 << 20, 3)
        request = json.loads(message)
        pid = os.fork()
        if pid == 0:
            self.run_child(conn, request, fds)  # never returns
        for fd in fds:  # the parent: back to accepting, its copies closed
            os.close(fd)
        if request.get("detach"):  # a long-running command (lmd serve): its pid first
            try:
                conn.sendall(f"{pid}\n".encode())
            except OSError:
                pass
            self.detached[pid] = conn
        else:
            conn.close()
        self.reap()

    def run_child(self, conn: socket.socket | None, request: dict, fds: list[int]) -> None:
        """In the child: become the requested start of the program, then exit."""
        # none of the server's own descriptors or handlers
        signal.set_wakeup_fd(-1)
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        self.selector.close()
        os.close(self.wake_r)
        os.close(self.wake_w)
        self.listener.close()
        # while 0, 1 and 2 are still taken: a descriptor the setup opens lands above them
        self.profile.child_setup(conn)
        os.close(0)  # the starter's pipe: replaced by the request's stdin below
        for other in self.detached.values():
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
        sys.argv = [self.profile.argv0(), *request["argv"]]
        code = run_main(self.profile.main)
        if conn is not None:
            try:
                conn.sendall(str(code).encode())
            except OSError:
                pass
            os._exit(0)
        os._exit(code)


def run_main(main: Callable[[], object]) -> int:
    """Run an entry point as a program's start would: its exit status, output flushed."""
    code = 0
    try:
        main()
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
    return code


def main() -> None:
    if sys.path[0] in ("", "."):  # the directory it started in, not each child's
        sys.path[0] = os.getcwd()
    socket_path, profile_name, *directories = sys.argv[1:]
    sys.path[0:0] = directories
    profile = load(profile_name)
    profile.preload()
    Server(socket_path, profile).serve_forever()


if __name__ == "__main__":
    main()
