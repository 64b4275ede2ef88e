"""Helpers for the sandbox tests: a skip when no sandbox can be had, tree hashes, a loopback
listener that records connections, and a look at the process table."""

from __future__ import annotations

import hashlib
import os
import socket
import stat
import threading
from pathlib import Path

import pytest

from daemon import sandbox


def bwrap_reason() -> str | None:
    """Why the real sandbox cannot be used here, or None when it can."""
    found = sandbox.detect()
    if found.kind != "bwrap":
        return f"needs bubblewrap: {found.reason} ({found.remedy})"
    return None


needs_bwrap = pytest.mark.skipif(bwrap_reason() is not None, reason=bwrap_reason() or "")


def tree_hash(root: Path) -> dict[str, str]:
    """Every entry under `root`: file contents, modes, symlink targets, empty dirs."""
    found: dict[str, str] = {}
    for dirpath, dirnames, filenames in os.walk(root, followlinks=False):
        for name in sorted(dirnames + filenames):
            p = Path(dirpath) / name
            rel = str(p.relative_to(root))
            st = p.lstat()
            mode = stat.S_IMODE(st.st_mode)
            if stat.S_ISLNK(st.st_mode):
                found[rel] = f"link {os.readlink(p)}"
            elif stat.S_ISDIR(st.st_mode):
                found[rel] = f"dir {mode:o}"
            elif stat.S_ISREG(st.st_mode):
                found[rel] = f"file {mode:o} {hashlib.sha256(p.read_bytes()).hexdigest()}"
            else:
                found[rel] = f"other {st.st_mode:o}"
    return found


class Listener:
    """A TCP listener on 127.0.0.1 that records every connection it accepts."""

    def __init__(self) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.port = self.sock.getsockname()[1]
        self.connections: list[tuple[str, int]] = []
        self._stop = False
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        self.sock.settimeout(0.1)
        while not self._stop:
            try:
                conn, addr = self.sock.accept()
            except OSError:
                continue
            self.connections.append(addr)
            conn.close()

    def close(self) -> None:
        self._stop = True
        self._thread.join(2)
        self.sock.close()


def processes_with(marker: str) -> list[str]:
    """Command lines of live (non-zombie) processes that mention `marker`."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            cmdline = (
                (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode("utf-8", "replace")
            )
            state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if marker in cmdline and state != "Z":
            found.append(f"{entry.name}: {cmdline.strip()}")
    return found
