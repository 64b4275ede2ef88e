"""A memory bound on a whole sandboxed command where no memory cgroup can be made (an ordinary
user whose session has no delegated cgroup): lmd watches the command, 20 times a second, and
ends it when its processes (their proportional share of anonymous and shared memory, so a
fork's shared pages count once) and its private /tmp and /dev/shm together hold more than
the limit. Each process is still capped by its own rlimit (the data segment) in between: what
one sampling interval lets through is what the command allocates in 50 ms beyond the bound.
"""

from __future__ import annotations

import asyncio
import os
import signal
from collections.abc import Callable

INTERVAL = 0.05  # seconds between two looks at the command
_FIELDS = (b"Pss_Anon:", b"Pss_Shmem:")


def descendants(pid: int) -> list[int]:
    """`pid`'s processes below it, all generations (from /proc/PID/task/TID/children)."""
    found: list[int] = []
    pending = [pid]
    while pending:
        parent = pending.pop()
        try:
            tasks = os.listdir(f"/proc/{parent}/task")
        except OSError:
            continue
        for tid in tasks:
            try:
                with open(f"/proc/{parent}/task/{tid}/children", "rb") as f:
                    children = [int(c) for c in f.read().split()]
            except (OSError, ValueError):
                continue
            found += children
            pending += children
    return found


def process_bytes(pid: int) -> int:
    """A process's proportional share of anonymous and shared memory, in bytes (0 when it is
    gone or unreadable)."""
    try:
        with open(f"/proc/{pid}/smaps_rollup", "rb") as f:
            text = f.read()
    except OSError:
        return 0
    total = 0
    fallback = 0
    for line in text.splitlines():
        if line.startswith(_FIELDS):
            total += int(line.split()[1]) * 1024
        elif line.startswith(b"Pss:"):
            fallback = int(line.split()[1]) * 1024
    return total or fallback  # kernels before 5.x have only Pss


def tmpfs_bytes(pid: int) -> int:
    """What the sandbox's private /tmp and /dev/shm hold, seen through a process inside it. A
    place that is still the machine's own (the process has not entered its sandbox yet: bwrap
    sets up its mounts after it forks) is not the sandbox's and counts nothing; counting it
    once ended commands at start for the machine's whole /tmp disk."""
    total = 0
    for place in ("tmp", "dev/shm"):
        # one open directory for both questions: bwrap moves its mounts while we ask, and a
        # path asked twice was once a fresh tmpfs, then the machine's disk (33 GB counted)
        try:
            fd = os.open(f"/proc/{pid}/root/{place}", os.O_RDONLY | os.O_DIRECTORY)
        except OSError:
            continue
        try:
            if os.fstat(fd).st_dev == os.stat(f"/{place}").st_dev:
                continue
            st = os.fstatvfs(fd)
        except OSError:
            continue
        finally:
            os.close(fd)
        total += (st.f_blocks - st.f_bfree) * st.f_frsize
    return total


def command_bytes(top: int) -> tuple[int, list[int]]:
    """The whole command's memory under the process `top` (bwrap), and its processes."""
    pids = descendants(top)
    used = sum(process_bytes(p) for p in pids)
    if pids:
        used += tmpfs_bytes(pids[0])  # bwrap's child: the sandbox's first process
    return used, pids


async def watch(proc: asyncio.subprocess.Process, limit_mb: int, ended: Callable[[], None]) -> None:
    """Until cancelled: end the command (bwrap, `proc`) once it holds more than `limit_mb`, and
    call `ended`. Only bwrap itself is killed, never a pid read from /proc (it could be reused
    by then): its sandbox's first process dies with it (--die-with-parent), and with that
    first process the kernel ends every process of the sandbox's pid namespace."""
    limit = limit_mb * 1024 * 1024
    while proc.returncode is None:
        await asyncio.sleep(INTERVAL)
        used, _ = await asyncio.to_thread(command_bytes, proc.pid)
        if used > limit and proc.returncode is None:
            proc.send_signal(signal.SIGKILL)
            ended()
            return
