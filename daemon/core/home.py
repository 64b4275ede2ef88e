"""LMD_HOME: where it is, and the token file in it as clients read it.

Standard library only: `lmd say` and `daemon.client` import this to find the token; the
daemon's side (writing the token, keeping the home private) is daemon/core/private.py.

The token is what proves a request comes from the daemon's owner when the kernel cannot tell
(another machine, macOS, a protected setting). `lmd serve` uses, in order: the file named by
`--token-file`/`LMD_TOKEN_FILE`, the `LMD_TOKEN` environment variable, or `LMD_HOME/token`,
created on first start with 32 random bytes (like Jupyter's token). The token in use is
always written to `LMD_HOME/token` (0600), so every lmd client on this machine finds it there.
A token is never taken from the command line, where every user sees it in `ps`.
"""

from __future__ import annotations

import ipaddress
import os
import re
import stat
from pathlib import Path
from urllib.parse import urlsplit

from daemon.core.errors import LmdError

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


def is_loopback_url(url: str) -> bool:
    try:
        host = urlsplit(url).hostname or ""
    except ValueError:
        return False
    if host in ("localhost", "127.0.0.1", "::1"):
        return True

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
