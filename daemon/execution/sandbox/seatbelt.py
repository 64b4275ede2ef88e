"""macOS: `sandbox-exec` with a generated Seatbelt (SBPL) profile of the same intent as the
bubblewrap sandbox (untested here: no macOS machine)."""

from __future__ import annotations

import os

from .policy import Policy


def _sb(path: str) -> str:
    return '"' + path.replace("\\", "\\\\").replace('"', '\\"') + '"'


def seatbelt_profile(policy: Policy, tmpdir: str) -> str:
    """A Seatbelt (SBPL) profile for `policy`: read everything but the hidden places, write
    only the private temp dir, no network. (Never a workspace: Seatbelt cannot stage a
    command's writes, so on macOS a command that would write one asks first.)
    Later rules win over earlier ones."""
    lines = [
        "(version 1)",
        "(deny default)",
        "(allow process-exec)",
        "(allow process-fork)",
        "(allow signal (target same-sandbox))",
        "(allow process-info* (target same-sandbox))",
        "(allow sysctl-read)",
        "(allow file-read*)",
        '(allow file-write-data (literal "/dev/null") (literal "/dev/zero"))',
        '(allow file-read* file-write* (regex #"^/dev/tty"))',
        "(allow ipc-posix-sem)",
        "(allow ipc-posix-shm)",
        "(allow user-preference-read)",
        '(allow mach-lookup (global-name "com.apple.system.opendirectoryd.libinfo"))',
        '(allow mach-lookup (global-name "com.apple.system.notification_center"))',
        f"(allow file-write* (subpath {_sb(os.path.realpath(tmpdir))}))",
    ]
    for secret in policy.hidden:
        lines.append(f"(deny file-read* file-write* (subpath {_sb(os.path.realpath(secret))}))")
    lines.append("(deny network*)")
    return "\n".join(lines) + "\n"
