"""Landlock inside the sandbox: a small C applier (landlock.c, next to this file) run first
inside bwrap, so a file opens for writing only beneath the sandbox's writable places (named
pipes and device nodes included, which a read-only mount does not stop)."""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

from .policy import Policy, _others_may, _user_name

LANDLOCK_SOURCE = Path(__file__).with_name("landlock.c")


def landlock_helper(unprivileged: bool = False) -> tuple[str | None, str]:
    """The Landlock applier (landlock.c, compiled on first use next to its source, or else in
    the user's cache directory; as root, or else in /var/cache/lmd) and "", or None and why
    there is none. `unprivileged`: lmd is root and commands run as ROOT_RUNS_AS, who must be
    able to run it (a venv under /root is closed to them)."""
    try:
        source = LANDLOCK_SOURCE.read_bytes()
    except OSError as e:
        return None, f"lmd's Landlock applier {LANDLOCK_SOURCE} is missing ({e.strerror})"
    name = f"lmd-landlock-{hashlib.sha256(source).hexdigest()[:12]}"
    cache = os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache")
    places = [LANDLOCK_SOURCE.parent, Path(cache, "lmd")]
    if unprivileged:
        places.append(Path("/var/cache/lmd"))

    def usable(path: Path) -> bool:
        return os.access(path, os.X_OK) and (not unprivileged or _others_may(str(path), os.X_OK))

    helper = next((p / name for p in places if usable(p / name)), None)
    if helper is None:
        compiler = shutil.which("cc") or shutil.which("gcc") or shutil.which("clang")
        if compiler is None:
            return None, "no C compiler (cc) to build lmd's Landlock applier"
        problems = []
        for place in places:
            built = (place / name).exists()  # there, but closed to the unprivileged user
            problem = "" if built else _compile(compiler, place / name)
            if not problem and usable(place / name):
                helper = place / name
                break
            problems.append(problem or f"the unprivileged user {_user_name()} may not run it")
        else:
            return None, f"lmd's Landlock applier does not build ({'; '.join(problems)})"
    try:
        abi = subprocess.run([str(helper), "--abi"], capture_output=True, text=True, timeout=5)
        version = int(abi.stdout.strip() or 0)
    except (OSError, ValueError, subprocess.SubprocessError) as e:
        return None, f"lmd's Landlock applier does not run ({e})"
    if version < 2:
        return None, "this kernel has no Landlock (ABI 2, Linux 5.19, or later)"
    return str(helper), ""


def _compile(compiler: str, target: Path) -> str:
    """Build landlock.c into `target` (atomically: a half-written binary never runs); the
    compiler's first error, or ""."""
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(dir=target.parent) as tmp:
            out = os.path.join(tmp, target.name)
            # static where the C library allows it: no dynamic loading, 0.3 ms less per command
            for static in (["-static"], []):
                done = subprocess.run(
                    [compiler, "-O2", *static, "-o", out, str(LANDLOCK_SOURCE)],
                    capture_output=True,
                    text=True,
                    timeout=60,
                )
                if done.returncode == 0:
                    break
            if done.returncode != 0:
                lines = [ln.strip() for ln in done.stderr.splitlines() if ln.strip()]
                errors = [ln for ln in lines if "error" in ln] or lines
                return errors[0] if errors else f"exit code {done.returncode}"
            os.chmod(out, 0o755)
            os.replace(out, target)
    except (OSError, subprocess.SubprocessError) as e:
        return str(e)
    return ""


def landlock_writable(policy: Policy) -> list[str]:
    """Where a sandboxed command may open files for writing, as seen inside the sandbox: the
    private /tmp, bwrap's own minimal /dev (null, tty, pts, shm), the sandbox's fresh /proc
    (its kernel parts stay read-only mounts) and, at workspace-write, the workspace."""
    return ["/tmp", "/dev", "/proc", *policy.writable]
