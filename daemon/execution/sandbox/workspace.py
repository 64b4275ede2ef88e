"""The writable workspace of a sandboxed command: why a place may not be one (the policy's
places, and whether this machine can stage a command's writes at all), and the policy the
settings ask for."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from daemon.execution.protected import PROTECTED_DIRS, VENV_MARK

from .detection import detect
from .policy import (
    READ_ONLY,
    SYSTEM_PLACES,
    WORKSPACE_WRITE,
    Limits,
    Policy,
    _inside,
    config_place,
    hidden_paths,
    root_problem,
)


def workspace_problem(path: str, home: str, lmd_home: str | None, hidden: list[str]) -> str | None:
    """Why `path` may not be a tree that commands write (through staging), or None: the root,
    a place holding the home or lmd's directory, a hidden place, the home's configuration
    places (dot folders: ~/.config/git/config with core.fsmonitor runs on every git command),
    the system's own directories; as root, a place the unprivileged user cannot enter; and
    anywhere, when this machine cannot stage a command's writes."""
    real = os.path.realpath(path)
    if real == "/":
        return "the working directory is the root of the file system"
    for guarded, what in ((home, "your home directory"), (lmd_home, "lmd's own directory")):
        if guarded and _inside(guarded, real):
            return f"the working directory {path} holds {what}"
    for secret in hidden:
        if _inside(real, secret):
            return f"the working directory {path} is a hidden secret place"
    place = config_place(real, home)
    if place:
        return f"the working directory {path} is in your home's configuration places ({place})"
    place = tool_place(real)
    if place:
        return (
            f"the working directory {path} is in a folder whose files tools read and run ({place})"
        )
    for system in SYSTEM_PLACES:
        if _inside(real, system):
            return f"the working directory {path} is a system directory ({system})"
    problem = root_problem(real, READ_ONLY)
    if problem:
        return problem
    found = detect()
    if found.available and found.stage is None:
        return f"this machine cannot stage a command's writes: {found.stage_problem}"
    return None


def rule_problem(directory: str | None, level: str, home: str, lmd_home: str | None) -> str | None:
    """Why an allow rule at sandbox `level` for `directory` (None: everywhere) would not run
    its commands at once, as a sentence for when the rule is made (never later, when its
    command comes): as root a place the unprivileged user cannot enter, a tree its commands
    may not write, no staging on this machine; None when it will work."""
    if level not in (READ_ONLY, WORKSPACE_WRITE):
        return None
    entering = root_problem(directory, READ_ONLY) if directory is not None else None
    problem = entering
    if level == WORKSPACE_WRITE and directory is not None:
        problem = workspace_problem(directory, home, lmd_home, hidden_paths(home, lmd_home))
    elif level == WORKSPACE_WRITE:
        found = detect()
        if found.available and found.stage is None:
            problem = f"this machine cannot stage a command's writes: {found.stage_problem}"
    if problem is None:
        return None
    if problem == entering:
        return (
            f"I make no rule for commands there: {problem}; a project that others may enter "
            "(not under /root) can have one."
        )
    return (
        f"I make no rule that lets commands write there: {problem}. Make it in a project "
        "directory, or ask for the read-only sandbox."
    )


def tool_place(path: str) -> str | None:
    """The folder on the way to `path` (itself included) whose files tools read and run: a dot
    folder (`.git`), a protected one (`venv`, `.vscode`) or a virtual environment (it holds
    pyvenv.cfg); None. What a command writes is judged by its path inside the tree, so a tree
    inside such a folder would make `.git/config` plain `config` (an "everywhere" rule writes
    the working directory, which the model's `cd` chooses)."""
    here = "/"
    for part in Path(os.path.realpath(path)).parts[1:]:
        here = os.path.join(here, part)
        if part.startswith(".") or part in PROTECTED_DIRS:
            return here
        if os.path.isfile(os.path.join(here, VENV_MARK)):
            return here
    return None


def policy_from_settings(
    settings: Any,
    level: str,
    cwd: str,
    lmd_home: str | None = None,
    home: str | None = None,
    writable: str | None = None,
) -> Policy:
    """The policy the settings ask for, for a command running in `cwd`; at workspace-write
    the writable place is `writable` (an approval rule's directory) or else `cwd`."""
    home = home or os.path.expanduser("~")
    hidden = hidden_paths(home, lmd_home, settings["sandbox_hide_paths"])
    limits = Limits(
        memory_mb=settings["sandbox_memory_mb"],
        cpu_secs=settings["sandbox_cpu_secs"],
        file_size_mb=settings["sandbox_file_size_mb"],
        max_processes=settings["sandbox_max_processes"],
    )
    roots: tuple[str, ...] = ()
    if level == WORKSPACE_WRITE:
        root = writable or cwd
        problem = workspace_problem(root, home, lmd_home, hidden)
        if problem:
            raise ValueError(problem)
        roots = (os.path.realpath(root),)
    problem = root_problem(cwd, level)
    if problem:
        raise ValueError(problem)
    stage_root = os.path.join(lmd_home, "staged") if lmd_home else None
    return Policy(level, cwd, home, tuple(hidden), roots, limits, stage_root)
