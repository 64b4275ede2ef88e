"""lmd's compiled helpers: landlock.c (Landlock inside the sandbox) and stage.c (the overlay that
stages a command's writes), two small C programs beside this file.

Each is built at install time beside its source (setup.py, like the Elo extension), or on
first use into the user's cache directory; never into the package directory at run time (an
installed package's directory may be read-only, or shared by users). Before use a helper is
checked: a regular file, owned by root or this user, that no one else may change (nor its
directory), and built from this very source (the source's digest is in its name and is what
it answers to --source)."""

from __future__ import annotations

import hashlib
import os
import shutil
import stat
import subprocess
import tempfile
from pathlib import Path

from .policy import _others_may, _user_name

HERE = Path(__file__).resolve().parent
SOURCES = {"landlock": "landlock.c", "stage": "stage.c"}
WHAT = {"landlock": "Landlock applier", "stage": "write stager"}
SHARED_CACHE = Path("/var/cache/lmd")  # root's helpers that nobody must be able to run


def digest(source: bytes) -> str:
    """The short digest that names a helper built from `source` (setup.py computes the same)."""
    return hashlib.sha256(source).hexdigest()[:12]


def user_cache() -> Path:
    """The user's cache directory for lmd's helpers."""
    return Path(os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "lmd")


def find_helper(
    kind: str, *, for_others: bool = False, source: Path | None = None
) -> tuple[str | None, str]:
    """The path of a checked helper of `kind` and "", or None and why there is none.

    Looks beside the source (built at install time; never built there now), then in the
    user's cache directory, and, when `for_others` (lmd is root and the helper runs as the
    unprivileged user), in /var/cache/lmd; builds into the first cache place that works."""
    what = f"lmd's {WHAT[kind]}"
    source = source or HERE / SOURCES[kind]
    try:
        text = source.read_bytes()
    except OSError as e:
        return None, f"{what} {source} is missing ({e.strerror})"
    tag = digest(text)
    name = f"lmd-{kind}-{tag}"
    caches = [user_cache()] + ([SHARED_CACHE] if for_others else [])
    problems: list[str] = []
    for place in [source.parent, *caches]:
        if os.path.lexists(place / name):
            problem = check(place / name, tag, for_others)
            if not problem:
                return str(place / name), ""
            problems.append(problem)
    compiler = shutil.which("cc") or shutil.which("gcc") or shutil.which("clang")
    if compiler is None:
        return None, f"no C compiler (cc) to build {what}, and none was built at install time"
    for place in caches:
        if os.path.lexists(place / name):
            continue  # there, but not usable (said above): try the next place
        problem = build(compiler, source, place / name, tag) or check(place / name, tag, for_others)
        if not problem:
            return str(place / name), ""
        problems.append(problem)
    return None, f"{what} does not build ({'; '.join(problems)})"


def check(path: Path, tag: str, for_others: bool = False) -> str:
    """Why the helper at `path` must not be run, or "" when it may."""
    try:
        st = os.lstat(path)
        parent = os.stat(path.parent)
    except OSError as e:
        return f"{path} cannot be read ({e.strerror})"
    me = os.geteuid()
    if not stat.S_ISREG(st.st_mode):
        return f"{path} is not a regular file"
    if st.st_uid not in (0, me) or parent.st_uid not in (0, me):
        return f"{path} belongs to another user"
    if st.st_mode & 0o022 or parent.st_mode & 0o022:
        return f"other users may change {path}"
    if for_others and not _others_may(str(path), os.X_OK):
        return f"the unprivileged user {_user_name()} may not run {path}"
    try:
        said = subprocess.run([str(path), "--source"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError) as e:
        return f"{path} does not run ({e})"
    if said.stdout.strip() != tag:
        return f"{path} was not built from lmd's source"
    return ""


def build(compiler: str, source: Path, target: Path, tag: str) -> str:
    """Build `source` into `target` (atomically: a half-written binary never runs); the
    compiler's first error, or ""."""
    try:
        target.parent.mkdir(mode=0o755, parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(dir=target.parent) as tmp:
            out = os.path.join(tmp, target.name)
            # static where the C library allows it: no dynamic loading, 0.3 ms less per command
            for static in (["-static"], []):
                done = subprocess.run(
                    [compiler, "-O2", *static, f'-DLMD_SOURCE_ID="{tag}"', "-o", out, str(source)],
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
