"""The environment a command runs with: an allowlist, the user's passthrough names, never the
API key or the daemon's token."""

from __future__ import annotations

import os
from collections.abc import Sequence

# Environment variables that must never reach a command, whatever the passthrough says.
NEVER_PASSED = frozenset({"OPENAI_API_KEY", "LMD_TOKEN"})


ENV_ALLOWLIST = ("PATH", "HOME", "USER", "LOGNAME", "LANG", "LANGUAGE", "TZ", "TERM", "SHELL")


def command_env(
    cwd: str, extra: dict | None = None, passthrough: Sequence[str] = ()
) -> dict[str, str]:
    """An allowlisted environment: the basics, LC_*, TMPDIR, the names the user passes through
    (`command_env_passthrough`), then `extra`. The API key and the daemon token never."""
    env = {
        k: v
        for k, v in os.environ.items()
        if k in ENV_ALLOWLIST or k.startswith("LC_") or k == "TMPDIR"
    }
    for name in passthrough:
        if name in os.environ:
            env[name] = os.environ[name]
    env.setdefault("PATH", os.defpath)
    env["PWD"] = cwd
    env.update(extra or {})
    for name in NEVER_PASSED:
        env.pop(name, None)
    return env
