"""Who may talk to the daemon: its owner, and pages the owner allowed. Pure ASGI, for speed.

Every request but GET /healthz must prove it comes from the daemon's own user, one of two ways:
- the token (`Authorization: Bearer ...`, from LMD_HOME/token), or
- on Linux, bound to loopback: the kernel says the client's socket belongs to the daemon's
  own uid (daemon.http.peer). This keeps `curl -d 'dali hi' localhost:8420/v1` working for the
  owner with nothing to configure.

The owner's browser runs as the owner too, so pages are checked apart: a request carrying
an `Origin` passes only from the daemon's own origin or one listed in `allowed_origins`, and
one marked `Sec-Fetch-Site: cross-site`/`same-site` needs such an Origin as well. Bound to
loopback, the `Host` must be a loopback name (DNS rebinding).

How a request got in is kept in a context variable for the code it reaches: protected settings
change only for requests that presented the token (`token_presented()`).
"""

from __future__ import annotations

import contextvars
import hmac
import json
import logging
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from daemon.core.approvals import REQUEST_AGENT, REQUEST_LISTENER, Listener
from daemon.core.home import read_token_file, token_path
from daemon.http.peer import socket_uid, supported

log = logging.getLogger("lmd.guard")

LOOPBACK_HOSTS = {"localhost", "127.0.0.1", "::1", "[::1]"}
LOOPBACK_ORIGIN_HOSTS = ("127.0.0.1", "localhost", "[::1]")
OPEN_PATHS = {"/healthz"}

# "token" (the request presented the daemon's token), "peer" (the kernel vouched for it),
# "agent" (the token, but marked X-Lmd-Agent: a model's words relayed, see
# daemon.core.approvals) or None (not an HTTP request: the CLI, a test calling a function).
REQUEST_AUTH: contextvars.ContextVar[str | None] = contextvars.ContextVar(
    "lmd_request_auth", default=None
)

NEEDS_OWNER = (
    "This lmd answers only the user who started it: run the client as that user, or send "
    "its token as Authorization: Bearer <token> (lmd's own clients read it from "
    "LMD_HOME/token)."
)
NEEDS_TOKEN = (
    "This lmd needs its token: send Authorization: Bearer <token>, with the token from "
    "LMD_HOME/token on the daemon's machine (or the LMD_TOKEN it was started with)."
)
NOT_LOCAL = "This daemon answers only requests addressed to localhost."
FOREIGN_PAGE = (
    "Requests from other web pages are refused; add the page's origin to allowed_origins "
    "(`lmd settings set allowed_origins ...`) if you trust it."
)


def token_presented() -> bool:
    """Did the HTTP request being served present the daemon's token?"""
    return REQUEST_AUTH.get() == "token"


def same_user(scope: dict) -> bool:
    """The kernel says the client's socket belongs to the daemon's own (effective) user."""
    client, server = scope.get("client"), scope.get("server")
    if not client or not server:
        return False
    return socket_uid((client[0], client[1]), (server[0], server[1])) == os.geteuid()


class Guard:
    """The middleware in front of the Starlette app; see the module docstring."""

    def __init__(
        self,
        app: Any,
        daemon: Any,
        token: str | None,
        loopback_only: bool,
        peer_check: Callable[[dict], bool] | None,
    ) -> None:
        self.app = app
        self.daemon = daemon
        self.state = getattr(app, "state", None)
        self.token = token
        self._bearer = f"Bearer {token}".encode() if token else None
        self.loopback_only = loopback_only
        self.peer_check = peer_check if loopback_only else None
        self._own: dict[int, frozenset[str]] = {}

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] == "websocket":  # no route takes one; never let one past the checks
            return await send({"type": "websocket.close", "code": 1008})
        if scope["type"] != "http":  # lifespan
            return await self.app(scope, receive, send)
        host = auth = site = agent = approve = None
        client = question = ""
        origins: list[str] = []
        for key, value in scope["headers"]:
            if key == b"host":
                if host is not None:
                    return await refuse(scope, send, 400, "The request has two Host headers.")
                host = value.decode("latin-1")
            elif key == b"authorization":
                auth = value
            elif key == b"origin":
                origins.append(value.decode("latin-1"))
            elif key == b"sec-fetch-site":
                site = value
            elif key == b"x-lmd-agent":
                agent = value
            elif key == b"x-lmd-approve":
                approve = value.decode("latin-1").strip()
            elif key == b"x-lmd-client":  # who hears a question (daemon.core.approvals)
                client = value.decode("latin-1").strip()[:128]
            elif key == b"x-lmd-question":  # the question an answer is for
                question = value.decode("latin-1").strip()[:64]
        if self.loopback_only and _host_name(host or "") not in LOOPBACK_HOSTS:
            return await refuse(scope, send, 403, NOT_LOCAL)
        path = scope["path"]
        open_path = path in OPEN_PATHS and scope["method"] in ("GET", "HEAD")
        if (origins or site in (b"cross-site", b"same-site")) and not open_path:
            if not origins or not all(self.origin_allowed(o, scope, host) for o in origins):
                return await refuse(scope, send, 403, FOREIGN_PAGE)
            # A page of an accepted origin may read the answer (CORS), preflight included.
            if scope["method"] == "OPTIONS" and _header(scope, b"access-control-request-"):
                return await preflight(scope, send, origins[0])
            send = with_cors(send, origins[0])
        how = None
        if not open_path:
            if (
                self._bearer is not None
                and auth is not None
                and hmac.compare_digest(auth, self._bearer)
            ):
                how = "token"
            elif self.peer_check is not None and self.peer_check(scope):
                how = "peer"
            else:
                sentence = NEEDS_OWNER if self.peer_check is not None else NEEDS_TOKEN
                return await refuse(scope, send, 401, sentence)
        if agent is not None and how == "token":
            # A model's words relayed (lmd mcp serve): never the token's rights
            how = "agent"
        mark = REQUEST_AUTH.set(how)
        agent_mark = REQUEST_AGENT.set(None if agent is None else (approve or ""))
        listener_mark = REQUEST_LISTENER.set(Listener(client, question))
        try:
            await self.app(scope, receive, send)
        finally:
            REQUEST_LISTENER.reset(listener_mark)
            REQUEST_AGENT.reset(agent_mark)
            REQUEST_AUTH.reset(mark)

    def origin_allowed(self, origin: str, scope: dict, host: str | None) -> bool:
        """The daemon's own origin, or one listed in allowed_origins (exactly)."""
        origin = origin.strip().lower()
        if origin in self.own_origins(scope, host):
            return True
        if self.daemon is None:
            return False
        try:
            allowed = self.daemon.settings()["allowed_origins"]
        except Exception:  # an unreadable setting allows nothing more
            return False
        return origin in {a.lower().rstrip("/") for a in allowed}

    def own_origins(self, scope: dict, host: str | None) -> frozenset[str]:
        """The origins of pages the daemon itself serves: http://{name}:{port}."""
        server = scope.get("server")
        if not self.loopback_only:  # the name the client used; the token is required anyway
            return frozenset({f"http://{(host or '').strip().lower()}"})
        if not server:
            return frozenset()  # no port known: no page is the daemon's own
        port: int = server[1]
        own = self._own.get(port)
        if own is None:
            names = [f"http://{name}:{port}" for name in LOOPBACK_ORIGIN_HOSTS]
            if port == 80:
                names += [f"http://{name}" for name in LOOPBACK_ORIGIN_HOSTS]
            own = self._own[port] = frozenset(names)
        return own


def _header(scope: dict, prefix: bytes) -> bool:
    return any(k.startswith(prefix) for k, _ in scope["headers"])


def _host_name(host: str) -> str:
    """The name part of a Host value; the whole value when what follows is not a port."""
    host = host.strip().lower()
    if host.startswith("[") and "]" in host:
        end = host.index("]") + 1
        name, rest = host[:end], host[end:]
    elif host.count(":") == 1:
        name, rest = host.split(":")[0], ":" + host.split(":")[1]
    else:
        name, rest = host, ""
    if rest and not (rest[:1] == ":" and rest[1:].isdigit()):
        return host  # "[::1]evil", "localhost:x": not a loopback name, so refused
    return name


async def refuse(scope: dict, send: Any, status: int, message: str) -> None:
    """One sentence: plain text on /v1 for plain-text clients (voice), JSON elsewhere."""
    accept = origin = b""
    for key, value in scope["headers"]:
        if key == b"accept":
            accept = value
        elif key == b"origin":
            origin = value
    if log.isEnabledFor(logging.DEBUG):  # why a page or a client got nowhere, for the owner
        log.debug(
            "refused %s %s from %s%s: %s",
            scope.get("method"),
            scope["path"],
            (scope.get("client") or ("?",))[0],
            f" (page {origin.decode('latin-1')})" if origin else "",
            message,
        )
    headers = []
    if scope["path"] == "/v1" and b"application/json" not in accept:
        body = (message + "\n").encode()
        headers.append((b"content-type", b"text/plain; charset=utf-8"))
    else:
        body = json.dumps({"error": message, "kind": "auth", "status": status}).encode()
        headers.append((b"content-type", b"application/json"))
    if status == 401:
        headers.append((b"www-authenticate", b'Bearer realm="lmd"'))
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


async def preflight(scope: dict, send: Any, origin: str) -> None:
    """Answer a CORS preflight from an allowed origin (browsers send no credentials here)."""
    asked = {k: v for k, v in scope["headers"] if k.startswith(b"access-control-request-")}
    headers = [
        (b"access-control-allow-origin", origin.encode("latin-1")),
        (b"access-control-allow-methods", asked.get(b"access-control-request-method", b"GET")),
        (b"access-control-max-age", b"600"),
        (b"vary", b"Origin"),
    ]
    if b"access-control-request-headers" in asked:
        headers.append((b"access-control-allow-headers", asked[b"access-control-request-headers"]))
    if b"access-control-request-private-network" in asked:
        headers.append((b"access-control-allow-private-network", b"true"))
    await send({"type": "http.response.start", "status": 204, "headers": headers})
    await send({"type": "http.response.body", "body": b""})


def with_cors(send: Any, origin: str) -> Any:
    """Let a page from an allowed origin read the response."""

    async def send_with_cors(message: dict) -> None:
        if message["type"] == "http.response.start":
            message = {
                **message,
                "headers": [
                    *message.get("headers", []),
                    (b"access-control-allow-origin", origin.encode("latin-1")),
                    (b"vary", b"Origin"),
                ],
            }
        await send(message)

    return send_with_cors


def owner_only(app: Any, home: Any) -> Any:
    """`app` behind the daemon's owner check, for a server beside the daemon on loopback
    (`lmd mcp serve --http`): the token in LMD_HOME/token (or LMD_TOKEN), or on Linux the
    kernel's word that the client runs as the same user."""
    token = os.environ.get("LMD_TOKEN", "").strip() or None
    path = token_path(Path(home))
    if token is None and path.exists():
        token = read_token_file(path)
    return Guard(app, None, token, True, same_user if supported() else None)
