"""Did the sandbox stop a command? Judged from its output and exit code, in words for the model
and the user."""

from __future__ import annotations

import os
import re

from .policy import WORKSPACE_WRITE, Policy, _user_name

_SIGNS = (
    (re.compile(r"Read-only file system"), "the file system is read-only there"),
    (
        re.compile(
            r"Network is unreachable|Temporary failure in name resolution|Could not resolve|"
            r"Name or service not known|nodename nor servname|unable to resolve host|"
            r"Connection refused|Address family not supported|No route to host"
        ),
        "it has no network",
    ),
    (re.compile(r"File size limit exceeded"), "it hit the file size limit"),
    (re.compile(r"CPU time limit exceeded"), "it hit the CPU time limit"),
    (
        re.compile(
            r"Cannot allocate memory|MemoryError|memory exhausted|bad_alloc|out of memory",
            re.I,
        ),
        "it hit the memory limit",
    ),
    (re.compile(r"fork: (retry: )?Resource temporarily unavailable"), "it hit the process limit"),
    (re.compile(r"^lmd-stage: ", re.M), "lmd could not stage its writes"),
)
_SIGNAL_EXITS = {128 + 25: "it hit the file size limit", 128 + 24: "it hit the CPU time limit"}


def blocked_reason(policy: Policy, command: str, output: str, exit_code: int | None) -> str | None:
    """Why the sandbox (probably) stopped a command, judged from its output: None when nothing
    says so. Errs towards "blocked": the cost is one question to the user."""
    for pattern, reason in _SIGNS:
        if pattern.search(output):
            return reason
    if os.geteuid() == 0 and "Permission denied" in output:
        # as root the command ran as an unprivileged user: root's files are closed to it
        return f"it ran as the unprivileged user {_user_name()}, who may not do that"
    if exit_code in _SIGNAL_EXITS:
        return _SIGNAL_EXITS[exit_code]
    home = policy.home.rstrip("/")
    for secret in policy.hidden:
        short = "~" + secret[len(home) :] if home and secret.startswith(home + "/") else secret
        if secret in command or secret in output or short in command:
            return f"{short} is hidden from it"
    return None


def describe_level(level: str) -> str:
    if level == WORKSPACE_WRITE:
        return "a sandbox that may write only the working directory and has no network"
    return "a read-only sandbox without network"
