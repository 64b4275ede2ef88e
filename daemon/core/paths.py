"""Rules for files that features read and write on a user's behalf.

- An output that would destroy an existing file is refused unless the user said so
  (`--force`): a mistyped `-o` must not cost a day of judged battles.
- A path that arrives over HTTP may only name a file in the `files` folder of the daemon's
  home (LMD_HOME/files) or one of the files the calling plugin ships and names (`also`);
  `..`, absolute paths and symlinks leading out are refused, and so are the home's own files
  (the token, the database) and every other lmd home. Over HTTP the caller is a program, not
  the person at the keyboard, so it must not make the daemon read (and send to a model) an
  arbitrary file such as ~/.ssh/id_rsa. Settings that name a file or directory the daemon opens are
  protected (only the CLI or a request with the token may set them), so the rule need not
  be checked again when they are used.
- Outputs are written atomically (a temporary file, then rename) with the mode a plain
  `open(path, "w")` would give: the umask's for a new file, the old mode for a replaced one.
  Only secrets are 0600.
"""

from __future__ import annotations

import os
import secrets
from collections.abc import Iterable
from pathlib import Path

from daemon.core.errors import LmdError


def refuse_overwrite(path: str | Path | None, force: bool, flag: str = "--force") -> None:
    """Refuse to replace an existing non-empty file unless `force`; '-' is stdout."""
    if path is None or str(path) == "-" or force:
        return
    target = Path(path)
    try:
        if target.is_file() and target.stat().st_size > 0:
            raise LmdError(
                f"{target} already exists and would be overwritten; give another file, or add "
                f"{flag} to replace it."
            )
    except OSError:
        return  # unreadable: the writer itself reports it


HTTP_FILES = "files"  # the one folder of a daemon's home that requests may name files in


def allowed_http_path(
    value: str, home: Path, what: str = "file", also: Iterable[str | Path] = ()
) -> Path:
    """`value` resolved once (every symlink followed) when it lies inside the home's `files`
    folder, or is (or lies inside) one of `also`, the files a plugin ships; relative paths are
    taken from that folder. So never the home's own files (the token, the database: a request
    that named the token once sent it to the model and got it back in an error) nor anything
    outside. Otherwise a 403 sentence. The caller opens the returned path: resolved, it holds
    no symlink left to swap."""
    if not isinstance(value, str) or "\x00" in value:
        raise LmdError(f"The {what} must be a file name as text.", status=400)
    files = Path(home) / HTTP_FILES
    # "~/.ssh/x" means the home, as everywhere else: refused below as lying outside
    raw = Path(value).expanduser() if value.startswith("~") else Path(value)
    candidate = raw if raw.is_absolute() else files / raw
    try:
        resolved = candidate.resolve()
    except (OSError, RuntimeError):  # symlink loops
        resolved = None
    roots = [files.resolve(), *(Path(p).resolve() for p in also)]
    if resolved is None or not any(resolved.is_relative_to(root) for root in roots):
        raise LmdError(
            f"Over HTTP the {what} must be a file in {files} (the daemon's folder for files "
            "requests may name); copy it there and give its name, or use the command line.",
            status=403,
        )
    return resolved


def write_atomic(path: str | Path, data: str | bytes, secret: bool = False) -> None:
    """Write `data` to `path` all at once or not at all (temporary file + rename).

    A new file gets 0666 minus the umask, a replaced one keeps its mode, a secret gets 0600.
    (tempfile.mkstemp would make every output 0600, whatever the umask.)
    """
    target = Path(path)
    blob = data.encode("utf-8") if isinstance(data, str) else data
    tmp = target.with_name(f".{target.name}.{secrets.token_hex(4)}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600 if secret else 0o666)
    try:
        if not secret:
            try:
                os.fchmod(fd, target.stat().st_mode & 0o7777)
            except FileNotFoundError:
                pass  # a new file: os.open applied the umask already
        with os.fdopen(fd, "wb") as f:
            f.write(blob)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, target)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
