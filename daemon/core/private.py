"""Keeping LMD_HOME private: the daemon's token written 0600, the list of this user's homes
(which the command sandbox hides), and the modes of the home's private files."""

from __future__ import annotations

import logging
import os
import secrets
import stat
from pathlib import Path

from daemon.core.errors import LmdError
from daemon.core.home import (
    MIN_TOKEN_LENGTH,
    PRIVATE_FILES,
    check_token,
    read_token_file,
    token_path,
)
from daemon.core.paths import write_atomic

log = logging.getLogger("lmd.home")


def write_private(path: Path, text: str) -> None:
    """Write a secret atomically, 0600 from the first byte."""
    write_atomic(path, text, secret=True)


def server_token(home: Path, token_file: Path | None = None, environ=None) -> tuple[str, str]:
    """(token, where it came from) for `lmd serve`; LMD_HOME/token holds it afterwards."""
    env = os.environ if environ is None else environ
    path = token_path(home)
    try:
        home.mkdir(parents=True, exist_ok=True, mode=0o700)
    except OSError as e:  # another user's folder, a name that is a file's
        raise LmdError(
            f"I cannot make lmd's home {home} ({e.strerror}); give lmd a directory of your "
            "own with --home or LMD_HOME."
        ) from None
    if token_file is not None:
        token, source = read_token_file(Path(token_file)), f"the file {token_file}"
    elif env.get("LMD_TOKEN"):
        token, source = check_token(env["LMD_TOKEN"], "LMD_TOKEN"), "LMD_TOKEN"
    elif path.exists() or path.is_symlink():
        return read_token_file(path), str(path)
    else:
        token = secrets.token_urlsafe(32)
        write_private(path, token + "\n")
        log.info("created a new token in %s (lmd clients read it from there)", path)
        return token, str(path)
    if len(token) < MIN_TOKEN_LENGTH:
        log.warning("the token from %s is shorter than %d characters", source, MIN_TOKEN_LENGTH)
    try:
        current = read_token_file(path) if path.exists() else None
    except LmdError:
        current = None
    if current != token:
        write_private(path, token + "\n")  # so that clients on this machine find it
    return token, source


def registry_path() -> Path:
    """Where this user's lmd homes and token files are listed, so the command sandbox hides
    every one of them, not only the running daemon's."""
    state = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(state) / "lmd" / "homes"


_REGISTERED: list[str] = []  # this process's own: hidden even if the registry cannot be written


def register_home(*paths: Path | str) -> None:
    """Add paths (a home, a --token-file) to the registry; best effort, never fatal. This
    process keeps its own too (`registered_here`): a registry that cannot be written (a
    read-only home) must not leave the running daemon's token file readable."""
    for p in paths:
        try:
            here = str(Path(p).resolve())
        except (OSError, RuntimeError):  # a symlink loop
            here = os.path.abspath(p)
        if here not in _REGISTERED:
            _REGISTERED.append(here)
    reg = registry_path()
    try:
        known = set(known_homes())
        new = [str(Path(p).resolve()) for p in paths if str(Path(p).resolve()) not in known]
        if not new:
            return
        reg.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        gone = [p for p in known if not os.path.lexists(p)]
        if gone:
            # Homes since deleted (a test run's, a moved one) leave: the list would only grow,
            # and every sandboxed command looks at each entry.
            kept = [p for p in known_homes() if p not in gone] + new
            tmp = reg.with_name(f".{reg.name}.{os.getpid()}")
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                f.write("".join(p + "\n" for p in kept))
            os.replace(tmp, reg)
            return
        fd = os.open(reg, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        with os.fdopen(fd, "a", encoding="utf-8") as f:
            f.write("".join(p + "\n" for p in new))
    except OSError:
        pass


def registered_here() -> list[str]:
    """The homes and token files this process registered (the running daemon's own)."""
    return list(_REGISTERED)


def known_homes() -> list[str]:
    """Every lmd home and token file this user's daemons have used (see register_home)."""
    try:
        text = registry_path().read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return []
    return [line for line in text.splitlines() if line.startswith("/")]


def secure_home(home: Path) -> list[str]:
    """Make LMD_HOME 0700 and its private files 0600 when others can read them; return what
    was fixed (one log line says so). A home owned by another user is refused."""
    fixed: list[str] = []
    try:
        info = home.stat()
    except (FileNotFoundError, NotADirectoryError):
        return fixed  # not made yet (making it says why it cannot be)
    if info.st_uid != os.geteuid():
        raise LmdError(
            f"{home} belongs to another user (uid {info.st_uid}); lmd keeps private history "
            "there, so give it a directory of your own with --home or LMD_HOME."
        )
    if stat.S_IMODE(info.st_mode) & 0o077:
        os.chmod(home, 0o700)
        fixed.append(f"{home} {stat.S_IMODE(info.st_mode):o} -> 700")
    for name in PRIVATE_FILES:
        path = home / name
        try:
            mode = stat.S_IMODE(path.lstat().st_mode)
        except FileNotFoundError:
            continue
        if mode & 0o077 and not path.is_symlink():
            os.chmod(path, mode & 0o700 or 0o600)
            fixed.append(f"{name} {mode:o} -> {mode & 0o700 or 0o600:o}")
    if fixed:
        log.warning("others could read lmd's private files; fixed: %s", ", ".join(fixed))
    return fixed
