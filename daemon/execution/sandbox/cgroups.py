"""Per-command cgroups: a pids cgroup (root: the kernel ignores RLIMIT_NPROC for uid 0) and a
memory cgroup (the whole command's memory, not each process's), made where this process may
make them, emptied and removed after the command."""

from __future__ import annotations

import atexit
import itertools
import os
import signal
import time
from pathlib import Path

_counter = itertools.count(1)
ORPHAN_AGE = 60.0  # seconds an empty cgroup of a pid not seen here is left alone


def _own_cgroup(controller: str) -> str | None:
    """This process's cgroup path for a v1 controller, or the v2 path for "" ."""
    try:
        lines = Path("/proc/self/cgroup").read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        _, controllers, path = line.split(":", 2)
        if controller in controllers.split(","):
            return path
    return None


def _cgroup_base(controller: str, group: type[CommandGroup]) -> str | None:
    """A directory where per-command cgroups of `controller` can be made, or None: cgroup v1's
    hierarchy of that controller, or a v2 cgroup that has it delegated (root, or a user whose
    session cgroup is delegated to them). A probe group proves it."""
    candidates = []
    v1 = _own_cgroup(controller)
    if v1 is not None and os.path.isdir(f"/sys/fs/cgroup/{controller}"):
        candidates.append(os.path.join(f"/sys/fs/cgroup/{controller}", v1.lstrip("/")))
    v2 = _own_cgroup("")
    for mount in ("/sys/fs/cgroup", "/sys/fs/cgroup/unified"):
        if v2 is not None and os.path.isfile(os.path.join(mount, "cgroup.subtree_control")):
            here = os.path.join(mount, v2.lstrip("/"))
            try:
                if controller in Path(here, "cgroup.subtree_control").read_text().split():
                    candidates.append(here)
            except OSError:
                pass
    for parent in candidates:
        base = os.path.join(parent, "lmd-sandbox")
        try:
            os.makedirs(base, exist_ok=True)
            _remove_orphans(base)
            group(base, group.PROBE).close()
            return base
        except OSError:
            continue
    return None


def pids_cgroup_base() -> str | None:
    """Where per-command pids cgroups can be made (root only, see detection), or None."""
    return _cgroup_base("pids", PidsGroup)


def memory_cgroup_base() -> str | None:
    """Where per-command memory cgroups can be made, or None."""
    return _cgroup_base("memory", MemoryGroup)


def _remove_orphans(base: str) -> None:
    """Empty cgroups left by daemons that died (kill -9) before removing them. A young one is
    left: its daemon may live in another PID namespace (a container, or `unshare --pid`, on
    the same cgroup tree) where its pid is not seen, and a cgroup is empty between its
    creation and its command's joining it (removing it then failed that command)."""
    now = time.time()
    for name in os.listdir(base):
        parts = name.split("-")
        if len(parts) == 3 and parts[0] == "cmd" and parts[1].isdigit():
            if not os.path.exists(f"/proc/{parts[1]}"):
                path = os.path.join(base, name)
                try:
                    if now - os.stat(path).st_mtime < ORPHAN_AGE:
                        continue
                    os.rmdir(path)
                except OSError:
                    pass  # still holds a process (or already gone): leave it


class CommandGroup:
    """One command's cgroup: created with a ceiling, emptied and removed after."""

    PROBE = 0  # the ceiling of the group that proves a base works

    def __init__(self, base: str, ceiling: int) -> None:
        self.path = os.path.join(base, f"cmd-{os.getpid()}-{next(_counter)}")
        os.mkdir(self.path)
        try:
            self._limit(ceiling)
        except OSError:
            os.rmdir(self.path)
            raise
        self.procs = os.path.join(self.path, "cgroup.procs")

    def _limit(self, ceiling: int) -> None:
        raise NotImplementedError

    def close(self) -> None:
        """Kill what is left; remove the cgroup now, or (while the kernel still reaps the
        killed processes) on a later call: the event loop must not wait for it."""
        try:
            pids = [int(p) for p in Path(self.procs).read_text().split()]
        except OSError:
            pids = []
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        _stale.append(self.path)
        sweep_cgroups()


class PidsGroup(CommandGroup):
    """One command's pids cgroup: at most `ceiling` processes."""

    PROBE = 8

    def _limit(self, ceiling: int) -> None:
        Path(self.path, "pids.max").write_text(str(ceiling))


class MemoryGroup(CommandGroup):
    """One command's memory cgroup: the whole tree's memory (MiB), not each process's."""

    PROBE = 64

    def _limit(self, ceiling: int) -> None:
        limit = str(ceiling * 1024 * 1024)
        if os.path.exists(os.path.join(self.path, "memory.max")):  # cgroup v2
            Path(self.path, "memory.max").write_text(limit)
            Path(self.path, "memory.swap.max").write_text("0")
        else:  # v1; memsw (swap included) only where the kernel accounts swap
            Path(self.path, "memory.limit_in_bytes").write_text(limit)
            swap = Path(self.path, "memory.memsw.limit_in_bytes")
            if swap.exists():
                swap.write_text(limit)


_stale: list[str] = []


def sweep_cgroups(wait: float = 0.0) -> None:
    """Remove the emptied per-command cgroups (waiting up to `wait` seconds for the rest)."""
    deadline = time.monotonic() + wait
    while _stale:
        for path in list(_stale):
            try:
                os.rmdir(path)
            except FileNotFoundError:
                pass
            except OSError:
                continue
            _stale.remove(path)
        if not _stale or time.monotonic() >= deadline:
            return
        time.sleep(0.01)


atexit.register(sweep_cgroups, 2.0)
