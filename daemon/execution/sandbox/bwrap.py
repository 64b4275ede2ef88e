"""Linux: the bubblewrap (bwrap) command line for a policy, and the argv that starts it (as
root through setpriv, joined to the command's cgroups, with the Landlock applier first)."""

from __future__ import annotations

import os
import shutil
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from .cgroups import MemoryGroup, PidsGroup
from .landlock import landlock_writable
from .policy import ROOT_RUNS_AS, Policy, _others_may
from .seccomp import seccomp_program

if TYPE_CHECKING:
    from .detection import Availability
    from .staging import Stage

# Parts of a fresh /proc that are kernel interfaces rather than processes: read-only always
# (Docker's list; the unprivileged uid cannot write them anyway, this is the second line).
READ_ONLY_PROC = ("/proc/sys", "/proc/sysrq-trigger", "/proc/irq", "/proc/bus", "/proc/fs")
SHM_MB = 64  # /dev/shm, the one writable place under /dev
DEV_KB = 64  # /dev itself: device nodes and links only, read-only once built
DEV_NODES = ("null", "zero", "full", "random", "urandom", "tty")
DEV_LINKS = (("fd", "/proc/self/fd"), ("stdin", "/proc/self/fd/0"),
             ("stdout", "/proc/self/fd/1"), ("stderr", "/proc/self/fd/2"))  # fmt: skip


@dataclass
class Prepared:
    """The argv to start, the fds it must inherit, and what to undo afterwards."""

    argv: list[str]
    pass_fds: tuple[int, ...] = ()
    env: dict[str, str] = field(default_factory=dict)  # on top of the command's environment
    cgroup: PidsGroup | None = None
    _fds: list[int] = field(default_factory=list)
    memory: MemoryGroup | None = None
    watch_mb: int = 0  # no memory cgroup: the runner watches the whole command's memory
    memory_ended: bool = False  # the watch ended the command

    def ended(self) -> None:
        """The memory watch ended the command."""
        self.memory_ended = True

    def started(self) -> None:
        """The child has the fds now: close the parent's copies."""
        for fd in self._fds:
            try:
                os.close(fd)
            except OSError:
                pass
        self._fds.clear()

    def close(self) -> None:
        """Kill whatever is left in the command's cgroup and remove it."""
        self.started()
        for group in (self.cgroup, self.memory):
            if group is not None:
                group.close()
        self.cgroup = self.memory = None


def bwrap_args(
    policy: Policy,
    features: frozenset[str] | set[str] = frozenset(),
    seccomp_fd: int | None = None,
    empty_fd: Callable[[], int] | None = None,
    unprivileged: bool = False,
) -> list[str]:
    """bwrap's options for `policy` (mount order matters: later mounts cover earlier ones).
    `empty_fd` gives a new descriptor that reads as an empty file, one per hidden file (bwrap
    reads and closes each; a shared one failed every command once two files were hidden).
    `unprivileged`: bwrap runs as ROOT_RUNS_AS (lmd is root), and sees only what others may."""
    a = ["--ro-bind", "/", "/"]
    # /dev: a small tmpfs of its own (bwrap's --dev cannot be capped: a 12 GiB tmpfs here)
    # holding the host's null, zero, full, random, urandom and tty and the fd links, and a
    # /dev/shm of SHM_MB, then read-only; a bwrap before 0.8 cannot cap a tmpfs: its own
    # minimal /dev then, read-only, and no /dev/shm
    if "--size" in features:
        a += ["--size", str(DEV_KB * 1024), "--tmpfs", "/dev"]
        for node in DEV_NODES:
            if os.path.exists(f"/dev/{node}"):
                a += ["--dev-bind", f"/dev/{node}", f"/dev/{node}"]
        for name, target in DEV_LINKS:
            a += ["--symlink", target, f"/dev/{name}"]
        a += ["--size", str(SHM_MB * 1024 * 1024), "--tmpfs", "/dev/shm"]
    else:
        a += ["--dev", "/dev"]
    a += ["--remount-ro", "/dev", "--proc", "/proc"]
    for part in READ_ONLY_PROC:
        if os.path.exists(part):
            a += ["--ro-bind", part, part]
    if "--size" in features:
        a += ["--size", str(max(64, policy.limits.file_size_mb) * 1024 * 1024)]
    a += ["--tmpfs", "/tmp"]
    # /tmp is private, but when the working directory or home lives in it, the directory tree
    # of /tmp holding it comes back (read-only), so `cd ..` and siblings still work. So does
    # lmd's own installation (a clone or venv in /tmp): a command sees the same programs
    # wherever lmd was installed.
    here = (policy.cwd, policy.home, *_own_install())
    for top in dict.fromkeys(_tmp_tree(p) for p in here):
        if top and not (unprivileged and not _others_may(top, os.X_OK)):
            a += ["--ro-bind", top, top]
    for root in policy.writable:
        # the staging overlay lmd-stage mounted over the tree (bwrap's --ro-bind / / carried
        # it in read-only): the command's writes land in the stage, never in the tree
        a += ["--bind", root, root]
    for secret in policy.hidden:
        if unprivileged and not _others_may(os.path.dirname(secret), os.X_OK):
            continue  # the unprivileged user cannot reach it anyway (nor could bwrap cover it)
        if os.path.isdir(secret) and not os.path.islink(secret):
            a += ["--tmpfs", secret, "--remount-ro", secret]
        elif os.path.lexists(secret) and not os.path.islink(secret):
            # An empty file, so a program reading its config (wget and ~/.netrc) still runs.
            if empty_fd is not None:
                a += ["--ro-bind-data", str(empty_fd()), secret]
            else:
                a += ["--ro-bind", "/dev/null", secret]  # unreadable on a nodev mount
    a += ["--chdir", policy.cwd]
    a += ["--unshare-user", "--unshare-ipc", "--unshare-pid", "--unshare-net", "--unshare-uts"]
    a += ["--unshare-cgroup-try"]
    if seccomp_fd is None and "--disable-userns" in features:
        # No nested user namespace (the seccomp filter refuses them more cheaply).
        a.append("--disable-userns")
    a += ["--die-with-parent", "--new-session", "--cap-drop", "ALL"]
    if seccomp_fd is not None:
        a += ["--seccomp", str(seccomp_fd)]
    return a


def _own_install() -> tuple[str, ...]:
    """Where lmd runs from: its Python environment and the folder holding its packages."""
    return (sys.prefix, sys.base_prefix, str(Path(__file__).resolve().parents[2]))


def _tmp_tree(path: str) -> str | None:
    """/tmp/a for /tmp/a/b/c; None outside /tmp (and for /tmp itself, which stays private)."""
    parts = Path(os.path.realpath(path)).parts
    if len(parts) > 2 and parts[1] == "tmp":
        return os.path.join("/", parts[1], parts[2])
    return None


def prepare_bwrap(
    policy: Policy, argv: list[str], found: Availability, stage: Stage | None = None
) -> Prepared:
    """`argv` wrapped in bwrap for `policy`, with the pipes and cgroups it needs. A policy
    that writes a tree needs its `stage` (lmd-stage mounts it over the tree first)."""
    if policy.writable and (stage is None or found.stage is None):
        raise RuntimeError("A command that may write runs only with its writes staged.")
    fds: list[int] = []
    seccomp_fd = None
    program = seccomp_program() if found.seccomp else None
    if program is not None:
        read, write = os.pipe()
        os.write(write, program)  # a few hundred bytes: fits the pipe buffer
        os.close(write)
        fds.append(read)
        seccomp_fd = read
    empty_fd = None
    if "--ro-bind-data" in found.features:

        def empty_fd() -> int:
            read, write = os.pipe()  # closed at once: reading gives an empty file
            os.close(write)
            fds.append(read)
            return read

    bwrap = found.binary or "bwrap"
    args = bwrap_args(policy, found.features, seccomp_fd, empty_fd, bool(found.setpriv))
    if argv and "/" not in argv[0]:
        argv = [shutil.which(argv[0]) or argv[0], *argv[1:]]  # no PATH walk inside bwrap
    if found.landlock:
        # first inside the sandbox: after bwrap's mounts (Landlock forbids mounting), before
        # the command
        argv = [found.landlock, *landlock_writable(policy), "--", *argv]
    wrapped = [bwrap, *args, "--", *argv]
    if stage is not None and found.stage:
        # lmd-stage mounts the overlay, then (as root) becomes the unprivileged user itself
        wrapped = [*stage.argv(found.stage), *wrapped]
    elif found.setpriv:
        # As root: become the unprivileged user before bwrap, so uid 0 never enters the
        # sandbox (bwrap then builds it as that user, in a user namespace of its own).
        uid = str(ROOT_RUNS_AS)
        wrapped = [found.setpriv, f"--reuid={uid}", f"--regid={uid}", "--clear-groups", "--",
                   *wrapped]  # fmt: skip
    cgroup = memory = None
    if found.pids_cgroup:
        try:
            cgroup = PidsGroup(found.pids_cgroup, policy.limits.max_processes)
        except OSError:
            cgroup = None
    if found.memory_cgroup:
        try:
            memory = MemoryGroup(found.memory_cgroup, policy.limits.memory_mb)
        except OSError:
            memory = None
    joins = [g.procs for g in (cgroup, memory) if g is not None]
    if joins:
        # Join the cgroups before bwrap starts, so nothing it forks is ever outside them.
        script = 'for f in "$@"; do [ "$f" = -- ] && break; echo $$ > "$f"; done; '
        script += 'while [ "$1" != -- ]; do shift; done; shift; exec "$@"'
        wrapped = ["/bin/sh", "-c", script, "sh", *joins, "--", *wrapped]
    watch = 0 if memory is not None else policy.limits.memory_mb
    return Prepared(wrapped, tuple(fds), {"TMPDIR": "/tmp"}, cgroup, fds, memory, watch)
