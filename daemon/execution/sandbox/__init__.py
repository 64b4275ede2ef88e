"""The OS sandbox for commands that run without a spoken yes.

A string check cannot tell what a bash command will do; the operating system can stop it. On
Linux every such command runs under bubblewrap (`bwrap`): the whole file system read-only, a
private empty /tmp, a fresh /proc in its own pid namespace, no network (its own network
namespace), no capabilities, no new privileges, Unix sockets and kernel keyrings refused by a
seccomp filter, the places that hold credentials hidden, and limits on memory, CPU time, file
size and processes. On macOS `sandbox-exec` runs a generated Seatbelt profile with the same
intent (untested here). Anywhere else there is no sandbox, and modes ask before every command.

`detect()` finds out once per process whether a sandbox can be had and why not; `prepare()`
turns a policy and an argv into the wrapped argv the runner starts. The parts live in small
modules (policy, workspace, detection, bwrap, landlock, cgroups, seccomp, seatbelt,
environment, wrap, blocked); this package re-exports what callers use.
"""

from __future__ import annotations

from .blocked import blocked_reason, describe_level
from .bwrap import READ_ONLY_PROC, SHM_MB, Prepared, bwrap_args
from .cgroups import MemoryGroup, PidsGroup, sweep_cgroups
from .detection import APT_HINT, Availability, bwrap_binary, detect
from .environment import ENV_ALLOWLIST, NEVER_PASSED, command_env
from .landlock import LANDLOCK_SOURCE, landlock_helper, landlock_writable
from .policy import (
    LEVELS,
    NONE,
    OFF,
    READ_ONLY,
    ROOT_RUNS_AS,
    SECRET_HOME_PATHS,
    WORKSPACE_WRITE,
    Limits,
    Policy,
    hidden_paths,
    root_problem,
)
from .seatbelt import seatbelt_profile
from .seccomp import seccomp_program
from .workspace import policy_from_settings, rule_problem, workspace_problem
from .wrap import prepare, wrap_script

__all__ = [
    "APT_HINT",
    "ENV_ALLOWLIST",
    "LANDLOCK_SOURCE",
    "LEVELS",
    "NEVER_PASSED",
    "NONE",
    "OFF",
    "READ_ONLY",
    "READ_ONLY_PROC",
    "ROOT_RUNS_AS",
    "SECRET_HOME_PATHS",
    "SHM_MB",
    "WORKSPACE_WRITE",
    "Availability",
    "Limits",
    "MemoryGroup",
    "PidsGroup",
    "Policy",
    "Prepared",
    "blocked_reason",
    "bwrap_args",
    "bwrap_binary",
    "command_env",
    "describe_level",
    "detect",
    "hidden_paths",
    "landlock_helper",
    "landlock_writable",
    "policy_from_settings",
    "prepare",
    "root_problem",
    "rule_problem",
    "seatbelt_profile",
    "seccomp_program",
    "sweep_cgroups",
    "workspace_problem",
    "wrap_script",
]
