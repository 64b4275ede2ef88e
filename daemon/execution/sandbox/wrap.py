"""`prepare()`: a policy and an argv into the wrapped argv the runner starts, in the sandbox
`detect()` found; `wrap_script()`: the command after the line that sets its limits."""

from __future__ import annotations

import tempfile

from .bwrap import Prepared, prepare_bwrap
from .detection import Availability, detect
from .policy import Policy
from .seatbelt import seatbelt_profile
from .staging import Stage


def prepare(
    policy: Policy, argv: list[str], found: Availability | None = None, stage: Stage | None = None
) -> Prepared:
    """Wrap `argv` (e.g. ["bash", "-c", script]) in the sandbox for `policy`; a policy that
    writes a tree needs its `stage` (staging.new_stage)."""
    found = found or detect()
    if found.kind == "bwrap":
        return prepare_bwrap(policy, argv, found, stage)
    if found.kind == "seatbelt" and not policy.writable:  # Seatbelt cannot stage writes
        tmp = tempfile.mkdtemp(prefix="lmd-sandbox-")
        profile = seatbelt_profile(policy, tmp)
        return Prepared(
            [found.binary or "/usr/bin/sandbox-exec", "-p", profile, "--", *argv],
            env={"TMPDIR": tmp + "/"},
        )
    raise RuntimeError(f"No sandbox is available: {found.reason}")


def wrap_script(
    policy: Policy, command: str, setup: str = "", found: Availability | None = None
) -> str:
    """`command` after one line that sets the limits (and runs `setup`), so the command's own
    lines are numbered from 2 as without the sandbox. (On macOS the process count stays
    unlimited: there RLIMIT_NPROC counts all of the user's processes, not the sandbox's.)"""
    found = found or detect()
    first = policy.limits.ulimit_line(processes=found.kind == "bwrap")
    return f"{first}; {setup}\n{command}" if setup else f"{first}\n{command}"
