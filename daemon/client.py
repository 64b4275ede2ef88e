"""A small stdlib HTTP client for the daemon: what `lmd say` and scripts use.

It imports nothing heavy, so a shell alias answers as fast as the daemon does.

It sends the daemon's token by itself (LMD_TOKEN, LMD_TOKEN_FILE, else LMD_HOME/token; the
token file only to a daemon on this machine). On Linux it first makes sure that a daemon on a
loopback address runs as the same user: on a shared machine another user could listen on
127.0.0.1:8420 while yours is down, to collect what you say and your token.
"""

from __future__ import annotations

import json
import os
import socket
from typing import Any
from urllib.parse import urlencode, urlsplit

from daemon.core.home import client_token, is_loopback_url
from daemon.http.peer import socket_uid

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
    """A daemon on this machine: one HTTP/1.1 exchange on a plain socket, no proxy, and
    (unless LMD_TOKEN says the user chose the target) the listening socket's owner checked
    first. Neither urllib nor http.client: their imports (email, ssl) cost `lmd say` about a
    third of its start-up; the daemon is ours and speaks plain HTTP/1.1 on loopback."""
    host, port, prefix = _split_http_url(base)
    message = _request_bytes(method, prefix + path, host, port, data, hdrs)
    try:
        with socket.create_connection((host, port), timeout=timeout) as sock:
            if not os.environ.get("LMD_TOKEN"):
                _check_owner(sock, host, port)
            sock.sendall(message)
            with sock.makefile("rb") as f:  # closed with the socket, even on Ctrl-C
                status, headers, raw = _read_response(f)
    except ForeignDaemon as e:
        raise ClientError(str(e)) from None
    except TimeoutError:
        raise ClientError(f"lmd at {base} did not answer within {timeout:g} seconds.") from None
    except (OSError, ValueError) as e:
        raise ClientError(
            f"I could not reach lmd at {base} ({e}); start it with `lmd serve`."
        ) from None
    if status >= 400:
        sentence = _error_sentence(raw) or f"The daemon answered HTTP {status}."
        raise ClientError(sentence, status)
    return status, headers, raw


def _split_http_url(base: str) -> tuple[str, int, str]:
    """(host, port, path prefix) of an http:// URL, or a ClientError saying what to give."""
    try:
        parts = urlsplit(base)
        host, port = parts.hostname, parts.port or 80
        if parts.scheme != "http" or not host:
            raise ValueError
    except ValueError:
        raise ClientError(f"{base} is not a daemon URL; use e.g. http://127.0.0.1:8420.") from None
    return host, port, parts.path.rstrip("/")


def _request_bytes(
    method: str, target: str, host: str, port: int, data: bytes | None, hdrs: dict[str, str]
) -> bytes:
    for text in (method, target, *hdrs, *hdrs.values()):
        if any(c in text for c in "\r\n\0"):  # a header may not smuggle a second request
            raise ClientError("A header or the path holds a line break; send them on one line.")
    name = f"[{host}]" if ":" in host else host
    lines = [f"{method} {target or '/'} HTTP/1.1", f"Host: {name}:{port}", "Connection: close"]
    lines += [f"{k}: {v}" for k, v in hdrs.items()]
    if data is not None or method in ("POST", "PUT", "PATCH"):
        lines.append(f"Content-Length: {len(data or b'')}")
    try:  # HTTP headers are Latin-1; the daemon reads them so
        head = ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")
    except UnicodeEncodeError:
        raise ClientError(
            "A header holds characters HTTP headers cannot carry; send that value in the "
            "query string or the body."
        ) from None
    return head + (data or b"")


def _read_response(f: Any) -> tuple[int, dict[str, str], bytes]:
    """Status, headers (lower-case names) and body of one HTTP/1.1 response: Content-Length,
    chunked, or up to the close."""
    parts = f.readline(65537).split(None, 2)
    if len(parts) < 2 or not parts[0].startswith(b"HTTP/1.") or not parts[1].isdigit():
        raise ValueError("the answer was not HTTP")
    status = int(parts[1])
    headers: dict[str, str] = {}
    for _ in range(101):  # at most 100 header lines, as http.client
        line = f.readline(65537)
        if line in (b"\r\n", b"\n", b""):
            break
        name, _, value = line.decode("latin-1").partition(":")
        headers[name.strip().lower()] = value.strip()
    else:
        raise ValueError("the answer had more than 100 header lines")
    if "chunked" in headers.get("transfer-encoding", "").lower():
        body = bytearray()
        while size := int(f.readline(1026).split(b";")[0].strip() or b"0", 16):
            body += f.read(size)
            f.readline(3)
        return status, headers, bytes(body)
    if "content-length" in headers:
        size = int(headers["content-length"])
        body_bytes = f.read(size)
        if len(body_bytes) != size:
            raise ValueError("the answer was cut off")
        return status, headers, body_bytes
    return status, headers, f.read()


def _remote_request(
    base: str, method: str, path: str, data: bytes | None, hdrs: dict[str, str], timeout: float
) -> tuple[int, dict[str, str], bytes]:
    """A daemon elsewhere: urllib, with the environment's proxies and https."""
    # urllib.request brings http.client, email and ssl: only for a daemon on another machine,
    # never on `lmd say`'s usual path (a loopback socket)
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


def check_owner(sock: socket.socket) -> None:
    """ForeignDaemon when the kernel says the server's end of this connected loopback socket
    belongs to another user: send it nothing."""
    host, port = sock.getpeername()[:2]
    _check_owner(sock, host, port)


def _check_owner(sock: socket.socket, host: str, port: int) -> None:
    """Ask the kernel who owns the server's end; another user's program gets nothing."""
    mine, theirs = sock.getsockname(), sock.getpeername()
    uid = socket_uid((theirs[0], theirs[1]), (mine[0], mine[1]))
    if uid is not None and uid != os.geteuid():
        raise ForeignDaemon(
            f"The program listening at {host}:{port} runs as another user "
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


def client_name() -> str:
    """Who hears a question lmd asks (X-Lmd-Client): LMD_CLIENT, else `lmd say` in this terminal
    (its session id: every `lmd say` typed in one terminal is one client, and a "yes" typed in
    another terminal answers nothing it did not hear). See daemon.core.approvals."""
    name = os.environ.get("LMD_CLIENT", "").strip()
    if name and name.isascii() and name.isprintable():
        return name[:128]
    try:
        return f"lmd-say/{os.getsid(0)}"
    except OSError:
        return f"lmd-say/{os.getppid()}"


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
    headers = {
        "Accept": "application/json" if as_json else "text/plain",
        "X-Lmd-Client": client_name(),
    }
    if speak:
        headers["X-Speak"] = "1"
    query = {}
    for key, header, value in (("session", "X-Session", session), ("cwd", "X-Cwd", cwd)):
        if value and value.isascii():
            headers[header] = value
        elif value:  # a header is Latin-1 only: a UTF-8 path or name goes in the query
            query[key] = value
    path = "/v1"
    if query:
        path += "?" + urlencode(query)
    _, _, raw = request("POST", path, text, url=url, headers=headers, token=token)
    if as_json:
        return json.loads(raw)
    return raw.decode("utf-8")
