"""LMD_HOME: where it is, the token file in it, and keeping both private.

Standard library only: `lmd say` and `daemon.client` import this to find the token.

The token is what proves a request comes from the daemon's owner when the kernel cannot tell
(another machine, macOS, a protected setting). `lmd serve` uses, in order: the file named by
`--token-file`/`LMD_TOKEN_FILE`, the `LMD_TOKEN` environment variable, or `LMD_HOME/token`,
created on first start with 32 random bytes (like Jupyter's token). The token in use is
always written to `LMD_HOME/token` (0600), so every lmd client on this machine finds it there.
A token is never taken from the command line, where every user sees it in `ps`.
"""

from __future__ import annotations

import os
import re
import stat
from pathlib import Path
from urllib.parse import urlsplit

from daemon.errors import LmdError

TOKEN_NAME = "token"
# What an Authorization header can carry as a bearer token (RFC 6750's token68, plus "~").
TOKEN_SHAPE = re.compile(r"[A-Za-z0-9\-._~+/]+=*")
MIN_TOKEN_LENGTH = 16
# mcp.json: the MCP servers' headers and environment often hold secrets
PRIVATE_FILES = ("lmd.db", "lmd.db-wal", "lmd.db-shm", "lmd.db-journal", TOKEN_NAME, "mcp.json")


def default_home() -> Path:
    """LMD_HOME, else $XDG_DATA_HOME/lmd, else ~/.local/share/lmd."""
    if os.environ.get("LMD_HOME"):
        return Path(os.environ["LMD_HOME"]).expanduser()
    data = os.environ.get("XDG_DATA_HOME") or Path.home() / ".local" / "share"
    return Path(data) / "lmd"


def token_path(home: Path | None = None) -> Path:
    return Path(home or default_home()) / TOKEN_NAME


def check_token(token: str, where: str) -> str:
    """The token, or a sentence saying why a header cannot carry it."""
    token = token.strip()
    if not token:
        raise LmdError(f"{where} is empty; put a long random token in it, or remove it.")
    if not TOKEN_SHAPE.fullmatch(token):
        raise LmdError(
            f"{where} holds characters an HTTP header cannot carry as a token; use letters, "
            "digits and - . _ ~ + / only (e.g. the output of `openssl rand -hex 24`)."
        )
    return token


def read_token_file(path: Path, where: str | None = None) -> str:
    """A token from a file that only its owner may read (symlinks are not followed)."""
    where = where or f"The token file {path}"
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except FileNotFoundError:
        raise LmdError(f"{where} does not exist; create it, or leave the option out.") from None
    except OSError as e:
        raise LmdError(f"{where} cannot be read ({e.strerror}).") from None
    with os.fdopen(fd, "rb") as f:
        info = os.fstat(f.fileno())
        if not stat.S_ISREG(info.st_mode):
            raise LmdError(f"{where} is not a regular file.")
        if info.st_mode & 0o077:
            raise LmdError(
                f"{where} is readable by other users (mode {stat.S_IMODE(info.st_mode):o}); "
                f"run `chmod 600 {path}` and start again."
            )
        raw = f.read(4096)
    try:
        return check_token(raw.decode("ascii"), where)
    except UnicodeDecodeError:
        raise LmdError(f"{where} is not plain ASCII text; put only the token in it.") from None


def write_private(path: Path, text: str) -> None:
    """Write a secret atomically, 0600 from the first byte."""
    from daemon.paths import write_atomic

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
        import secrets

        token = secrets.token_urlsafe(32)
        write_private(path, token + "\n")
        _log().info("created a new token in %s (lmd clients read it from there)", path)
        return token, str(path)
    if len(token) < MIN_TOKEN_LENGTH:
        _log().warning("the token from %s is shorter than %d characters", source, MIN_TOKEN_LENGTH)
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


def _log():
    import logging  # the client path does not need logging

    return logging.getLogger("lmd.home")


def is_loopback_url(url: str) -> bool:
    try:
        host = urlsplit(url).hostname or ""
    except ValueError:
        return False
    if host in ("localhost", "127.0.0.1", "::1"):
        return True
    import ipaddress

    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def client_token(url: str, environ=None) -> str | None:
    """The token a client sends: LMD_TOKEN, else LMD_TOKEN_FILE, else LMD_HOME/token; the
    token file goes only to a daemon on this machine (a loopback URL), never further."""
    env = os.environ if environ is None else environ
    if env.get("LMD_TOKEN"):
        return env["LMD_TOKEN"].strip()
    if env.get("LMD_TOKEN_FILE"):
        try:
            return Path(env["LMD_TOKEN_FILE"]).expanduser().read_text("ascii").strip() or None
        except (OSError, UnicodeDecodeError):
            return None
    if not is_loopback_url(url):
        return None
    try:
        return token_path().read_text("ascii").strip() or None
    except (OSError, UnicodeDecodeError):
        return None  # no daemon started yet, or another user's home


def secure_home(home: Path) -> list[str]:
    """Make LMD_HOME 0700 and its private files 0600 when others can read them; return what
    was fixed (one log line says so). A home owned by another user is refused."""
    fixed = []
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
        _log().warning("others could read lmd's private files; fixed: %s", ", ".join(fixed))
    return fixed
