"""Landlock inside the sandbox: a small C applier (landlock.c, next to this file; helpers.py
builds it) run first inside bwrap, so a file opens for writing only beneath the sandbox's
writable places (named pipes and device nodes included, which a read-only mount does not
stop)."""

from __future__ import annotations

import subprocess
from pathlib import Path

from .helpers import find_helper
from .policy import Policy

LANDLOCK_SOURCE = Path(__file__).with_name("landlock.c")


def landlock_helper(unprivileged: bool = False) -> tuple[str | None, str]:
    """The Landlock applier (landlock.c: built at install time, or else into the user's cache
    directory; as root, or else in /var/cache/lmd) and "", or None and why there is none.
    `unprivileged`: lmd is root and commands run as ROOT_RUNS_AS, who must be able to run it
    (a venv under /root is closed to them)."""
    helper, problem = find_helper("landlock", for_others=unprivileged, source=LANDLOCK_SOURCE)
    if helper is None:
        return None, problem
    try:
        abi = subprocess.run([helper, "--abi"], capture_output=True, text=True, timeout=30)
        version = int(abi.stdout.strip() or 0)
    except (OSError, ValueError, subprocess.SubprocessError) as e:
        return None, f"lmd's Landlock applier does not run ({e})"
    if version < 2:
        return None, "this kernel has no Landlock (ABI 2, Linux 5.19, or later)"
    return helper, ""


def landlock_writable(policy: Policy) -> list[str]:
    """Where a sandboxed command may open files for writing, as seen inside the sandbox: the
    private /tmp, bwrap's own minimal /dev (null, tty, pts, shm), the sandbox's fresh /proc
    (its kernel parts stay read-only mounts) and, at workspace-write, the workspace."""
    return ["/tmp", "/dev", "/proc", *policy.writable]
