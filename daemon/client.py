"""A small stdlib HTTP client for the daemon: what `lmd say` and scripts use.

It imports nothing heavy, so a shell alias answers as fast as the daemon does.

It sends the daemon's token by itself (LMD_TOKEN, LMD_TOKEN_FILE, else LMD_HOME/token; the
token file only to a daemon on this machine). On Linux it first makes sure that a daemon on a
loopback address runs as the same user: on a shared machine another user could listen on
127.0.0.1:8420 while yours is down, to collect what you say and your token.
"""

from __future__ import annotations

import http.client
import json
import os
from typing import Any

from daemon.home import client_token, is_loopback_url

DEFAULT_URL = "http://127.0.0.1:8420"


class ClientError(Exception):
    """The daemon could not be reached or answered with an error sentence."""

    def __init__(self, message: str, status: int | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.status = status


def daemon_url(url: str | None = None) -> str:
    """The daemon's base URL: `url`, else LMD_URL, else http://127.0.0.1:8420."""
    return (url or os.environ.get("LMD_URL") or DEFAULT_URL).rstrip("/")


def request(
    method: str,
    path: str,
    body: bytes | str | dict | list | None = None,
    *,
    url: str | None = None,
    headers: dict[str, str] | None = None,
    token: str | None = None,
    timeout: float = 600.0,
) -> tuple[int, dict[str, str], bytes]:
    """One HTTP request to the daemon; raises ClientError with a sentence on failure."""
    base = daemon_url(url)
    hdrs = {"User-Agent": "lmd-client", **(headers or {})}
    token = token or client_token(base)
    if token:
        hdrs["Authorization"] = f"Bearer {token}"
    data: bytes | None
    if isinstance(body, dict | list):
        data = json.dumps(body).encode()
        hdrs.setdefault("Content-Type", "application/json")
    elif isinstance(body, str):
        data = body.encode("utf-8")
        hdrs.setdefault("Content-Type", "text/plain; charset=utf-8")
    else:
        data = body
    if is_loopback_url(base):
        return _loopback_request(base, method, path, data, hdrs, timeout)
    return _remote_request(base, method, path, data, hdrs, timeout)


def _loopback_request(
    base: str, method: str, path: str, data: bytes | None, hdrs: dict[str, str], timeout: float
) -> tuple[int, dict[str, str], bytes]:
    """A daemon on this machine: http.client straight, no proxy, and (unless LMD_TOKEN says
    the user chose the target) the listening socket's owner checked first. Without urllib:
    its imports cost `lmd say` a fifth of its start-up."""
    from urllib.parse import urlsplit

    try:
        parts = urlsplit(base)
        host, port = parts.hostname, parts.port
        if parts.scheme != "http" or not host:
            raise ValueError
    except ValueError:
        raise ClientError(f"{base} is not a daemon URL; use e.g. http://127.0.0.1:8420.") from None
    prefix = parts.path.rstrip("/")
    kind = (
        _OwnerCheckedConnection if not os.environ.get("LMD_TOKEN") else http.client.HTTPConnection
    )
    conn = kind(host, port or 80, timeout=timeout)
    try:
        conn.request(method, prefix + path, body=data, headers=hdrs)
        resp = conn.getresponse()
        status, headers, raw = resp.status, dict(resp.getheaders()), resp.read()
    except ForeignDaemon as e:
        raise ClientError(str(e)) from None
    except TimeoutError:
        raise ClientError(f"lmd at {base} did not answer within {timeout:g} seconds.") from None
    except (OSError, http.client.HTTPException) as e:
        raise ClientError(
            f"I could not reach lmd at {base} ({e}); start it with `lmd serve`."
        ) from None
    finally:
        conn.close()
    if status >= 400:
        message = _error_sentence(raw) or f"The daemon answered HTTP {status}."
        raise ClientError(message, status)
    return status, headers, raw


def _remote_request(
    base: str, method: str, path: str, data: bytes | None, hdrs: dict[str, str], timeout: float
) -> tuple[int, dict[str, str], bytes]:
    """A daemon elsewhere: urllib, with the environment's proxies and https."""
    import urllib.error
    import urllib.request

    try:
        req = urllib.request.Request(base + path, data=data, method=method, headers=hdrs)
    except ValueError:
        raise ClientError(f"{base} is not a daemon URL; use e.g. http://127.0.0.1:8420.") from None
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            return resp.status, dict(resp.headers), resp.read()
    except urllib.error.HTTPError as e:
        raw = e.read()
        message = _error_sentence(raw) or f"The daemon answered HTTP {e.code}."
        raise ClientError(message, e.code) from None
    except urllib.error.URLError as e:
        raise ClientError(
            f"I could not reach lmd at {base} ({e.reason}); start it with `lmd serve`."
        ) from None
    except TimeoutError:
        raise ClientError(f"lmd at {base} did not answer within {timeout:g} seconds.") from None


class ForeignDaemon(OSError):
    """The loopback port is held by a program of another user."""


class _OwnerCheckedConnection(http.client.HTTPConnection):
    """An HTTP connection that, once connected, asks the kernel who owns the server's end."""

    def connect(self) -> None:
        super().connect()
        from daemon.http.peer import socket_uid

        mine, theirs = self.sock.getsockname(), self.sock.getpeername()
        uid = socket_uid((theirs[0], theirs[1]), (mine[0], mine[1]))
        if uid is not None and uid != os.geteuid():
            self.sock.close()
            raise ForeignDaemon(
                f"The program listening at {self.host}:{self.port} runs as another user "
                f"(uid {uid}), not as you, so I sent it nothing. Start your own lmd with "
                "`lmd serve`, or point LMD_URL at it."
            )


def _error_sentence(raw: bytes) -> str:
    text = raw.decode("utf-8", "replace").strip()
    try:
        data = json.loads(text)
    except ValueError:
        return text
    if isinstance(data, dict):
        err = data.get("error")
        if isinstance(err, dict):
            return str(err.get("message") or err)
        if err:
            return str(err)
    return text


def say(
    text: str,
    *,
    session: str | None = None,
    url: str | None = None,
    as_json: bool = False,
    cwd: str | None = None,
    token: str | None = None,
    speak: bool = False,
) -> Any:
    """Send an utterance to POST /v1; return the reply text (or the JSON reply)."""
    headers = {"Accept": "application/json" if as_json else "text/plain"}
    if speak:
        headers["X-Speak"] = "1"
    if session:
        headers["X-Session"] = session
    if cwd:
        headers["X-Cwd"] = cwd
    _, _, raw = request("POST", "/v1", text, url=url, headers=headers, token=token)
    if as_json:
        return json.loads(raw)
    return raw.decode("utf-8")
