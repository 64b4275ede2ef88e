"""The HTTP face: POST /v1, /healthz, /settings, /history, and every plugin's routes."""

from __future__ import annotations

import contextlib
import json
import logging
import sqlite3
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response, StreamingResponse
from starlette.routing import Route

from daemon import __version__
from daemon.core import karma
from daemon.core.approvals import AGENT_PREFIX, own_session, relays_model
from daemon.core.daemon import Daemon
from daemon.core.errors import LmdError
from daemon.core.registry import route_keys
from daemon.core.settings import SettingError, refuse_if_protected
from daemon.core.speak import unfence, wants_raw, wants_speech
from daemon.core.turn import Outcome
from daemon.http import backend, relay
from daemon.http import rules as rule_routes
from daemon.http.body import MAX_PROMPT_ID, decode_text, read_json, read_request_body, session_name
from daemon.http.guard import Guard, same_user, token_presented
from daemon.http.openapi import build_spec
from daemon.http.peer import supported
from daemon.http.reply import TurnReply

log = logging.getLogger("lmd.app")

AGENTS_OWN_SESSIONS = (
    "A client relaying a model's words changes only its own sessions (agent:NAME); the "
    "user promotes prompts of theirs with lmd history promote."
)


def wants_json(request: Request) -> bool:
    accept = request.headers.get("accept", "")
    return "application/json" in accept and "text/plain" not in accept.split(",")[0]


def wants_stream(request: Request) -> bool:
    return "text/event-stream" in request.headers.get("accept", "")


def error_response(request: Request, e: LmdError) -> Response:
    """JSON for JSON clients, one plain sentence for everybody else (voice users)."""
    if wants_json(request) or request.url.path not in ("/v1",):
        return JSONResponse(e.to_json(), status_code=e.status)
    return PlainTextResponse(e.message + "\n", status_code=e.status)


def get_daemon(request: Request) -> Daemon:
    return request.app.state.daemon


# -- /v1 ------------------------------------------------------------------------------------
async def v1(request: Request) -> Response:
    daemon = get_daemon(request)
    given_session = None
    if "json" in request.headers.get("content-type", ""):
        data = await read_json(request, daemon, '{"input": "your words"} or plain text')
        if not isinstance(data, dict) or not isinstance(data.get("input"), str):
            raise LmdError('The JSON body needs an "input" string; send {"input": "your words"}.')
        text = data["input"]
        given_session = data.get("session")
    else:
        text = decode_text(await read_request_body(request, daemon))
    if not text.strip():
        raise LmdError("I heard nothing: the utterance is empty; say something.")
    if "\x00" in text:
        raise LmdError("The utterance contains a NUL character; send plain text.")
    name = session_name(request, given_session)
    cwd = request.headers.get("x-cwd") or request.query_params.get("cwd")
    plain = not wants_json(request) and not wants_stream(request)
    default = plain and daemon.settings()["speak_plain_replies"]
    speak = wants_speech(request.headers, request.query_params, default)
    turn = TurnReply(
        daemon,
        name,
        text,
        stream=wants_stream(request),
        speak=speak,
        cwd=cwd,
        receive=request.receive,
    )
    if wants_stream(request):
        await turn.start()
        events = turn.events(LmdEvents(turn.outcome))
        return StreamingResponse(events, media_type="text/event-stream")
    reply = await turn.whole()
    # the question this reply asks, for a client that answers by its id (daemon.core.approvals)
    asked = {"X-Lmd-Question": turn.outcome.question} if turn.outcome.question else None
    if wants_json(request):
        return JSONResponse(turn.outcome.to_json(), headers=asked)
    if not speak and not wants_raw(request.headers, request.query_params):
        # plain text never carries markdown fences unless asked (speech has none left, and
        # its verbatim spans were kept whole already)
        reply = unfence(reply)
    return PlainTextResponse(reply if reply.endswith("\n") else reply + "\n", headers=asked)


class LmdEvents:
    """/v1's server-sent events: one `data:` event per chunk, then the outcome, then [DONE]."""

    def __init__(self, outcome: Outcome) -> None:
        self.outcome = outcome

    def opening(self, first: str | None) -> list[str]:
        return [] if first is None else [self.chunk(first)]

    def chunk(self, text: str) -> str:
        # JSON-encode so newlines inside a chunk survive the line-based SSE framing.
        return "data: " + json.dumps(text) + "\n\n"

    def closing(self, said: str) -> list[str]:
        return ["event: outcome\ndata: " + json.dumps(self.outcome.to_json()) + "\n\n"]

    def error(self, e: LmdError) -> str:
        return "event: error\ndata: " + json.dumps(e.to_json()) + "\n\n"


# -- health, settings, history ------------------------------------------------------------
async def healthz(request: Request) -> Response:
    daemon = get_daemon(request)
    return JSONResponse({"ok": True, "version": __version__, "modes": sorted(daemon.modes)})


async def settings_list(request: Request) -> Response:
    return JSONResponse({"settings": get_daemon(request).settings().describe()})


async def settings_get(request: Request) -> Response:
    s = get_daemon(request).settings()
    return JSONResponse(s.describe([request.path_params["name"]])[0])


async def settings_put(request: Request) -> Response:
    daemon = get_daemon(request)
    name = request.path_params["name"]
    spec = daemon.settings().spec(name)
    check_unprotected(daemon, spec)
    if "json" in request.headers.get("content-type", ""):
        data = await read_json(request, daemon, '{"value": ...}')
        if not isinstance(data, dict) or "value" not in data:
            raise LmdError('The JSON body needs a "value"; send {"value": ...}.')
        raw = data["value"]
    else:
        raw = decode_text(await read_request_body(request, daemon))
    value = daemon.parse_setting(name, raw)
    daemon.store.set_setting(name, spec.dump(value))
    return JSONResponse(daemon.settings().describe([name])[0])


async def settings_reset(request: Request) -> Response:
    daemon = get_daemon(request)
    name = request.path_params["name"]
    spec = daemon.settings().spec(name)
    check_unprotected(daemon, spec)
    daemon.store.reset_setting(name, spec.dump(spec.default))
    return JSONResponse(daemon.settings().describe([name])[0])


def check_unprotected(daemon: Daemon, spec: Any) -> None:
    """Protected settings change over HTTP only for requests that presented the daemon's
    token: the kernel's word that the client runs as the owner is not enough, since a
    command the user approved (or a sandboxed app of theirs) runs as the owner too."""
    refuse_if_protected(spec, token_presented())


async def history(request: Request) -> Response:
    daemon = get_daemon(request)
    try:
        limit = int(request.query_params.get("limit", "20"))
    except ValueError:
        raise LmdError("limit must be a whole number.") from None
    name = request.query_params.get("session")
    limit = max(1, min(limit, 10000))
    if relays_model():
        # An agent (lmd mcp serve) reads only agents' sessions: the user's words, and what
        # their commands printed, are not for another program's model to carry off.
        prompts = daemon.store.history(own_session(name) if name else None, limit, AGENT_PREFIX)
    else:
        prompts = daemon.store.history(name, limit)
    return JSONResponse({"prompts": karma.prompt_rows(prompts, daemon.settings(), time.time())})


async def promote(request: Request) -> Response:
    daemon = get_daemon(request)
    try:
        prompt_id = int(request.path_params["id"])
    except ValueError:
        raise LmdError("The prompt id must be a whole number.") from None
    if not 0 < prompt_id <= MAX_PROMPT_ID:
        raise LmdError(f"There is no prompt {prompt_id}; `lmd history` lists them.", status=404)
    prompt = daemon.store.prompt(prompt_id)
    if prompt is None:
        raise LmdError(f"There is no prompt {prompt_id}; `lmd history` lists them.", status=404)
    if own_session(prompt.session) != prompt.session:
        # an agent (lmd mcp serve) shapes only its own sessions' contexts, never the user's
        raise LmdError(AGENTS_OWN_SESSIONS, status=403)
    points = karma.karma_for("operative", daemon.settings())
    daemon.store.set_karma([prompt_id], "operative", points)
    return JSONResponse({"id": prompt_id, "kind": "operative", "karma": points})


async def openapi_json(request: Request) -> Response:
    return JSONResponse(build_spec(get_daemon(request)))


# -- the app ----------------------------------------------------------------------------------
async def handle_lmd_error(request: Request, e: Exception) -> Response:
    return error_response(request, e)  # type: ignore[arg-type]  # registered for LmdError


def explain_db_error(e: sqlite3.Error) -> LmdError:
    """A database failure as a sentence: locked by another program, disk full, or other."""
    text = str(e).lower()
    if "locked" in text or "busy" in text:
        return LmdError(
            "The database is locked by another program; try again in a moment.", status=503
        )
    if "full" in text:
        return LmdError(
            "The disk holding the database is full, so nothing could be saved; free some space "
            "and try again.",
            status=507,
        )
    return LmdError(
        f"The database failed ({type(e).__name__}); check the daemon's log and the disk.",
        status=500,
    )


async def handle_db_error(request: Request, e: Exception) -> Response:
    log.error("database error on %s: %s", request.url.path, e)
    return error_response(request, explain_db_error(e))  # type: ignore[arg-type]  # sqlite3.Error


async def handle_http_error(request: Request, e: Exception) -> Response:
    """Starlette's 404/405 as sentences (a voice client reads them out)."""
    status = getattr(e, "status_code", 400)
    headers = dict(getattr(e, "headers", None) or {})
    if status == 404:
        message = f"There is no route {request.url.path}; GET /openapi.json lists them."
    elif status == 405:
        allowed = headers.get("allow") or headers.get("Allow") or "another method"
        message = f"{request.url.path} does not take {request.method}; use {allowed}."
    else:
        message = str(getattr(e, "detail", "")) or "The request was refused."
    response = error_response(request, LmdError(message, status=status))
    response.headers.update(headers)
    return response


async def handle_unexpected(request: Request, e: Exception) -> Response:
    # Starlette logs the traceback after this; the client still gets a sentence, not HTML.
    return error_response(
        request,
        LmdError(
            f"Something went wrong inside lmd ({type(e).__name__}); the details are in the "
            "daemon's log.",
            status=500,
        ),
    )


def create_app(
    home: Path | None = None,
    token: str | None = None,
    loopback_only: bool = True,
    pm: Any = None,
    peer_check: Callable[[dict], bool] | None | str = "kernel",
) -> Any:
    """Build the ASGI app behind its Guard; the lifespan opens the store and runs plugin
    startup hooks.

    `token` is the daemon's token (None: none). `peer_check(scope) -> bool` says whether a
    request's client runs as the daemon's owner: "kernel" asks the kernel (Linux), None
    turns the check off (only the token gets in). It applies only bound to loopback.
    """
    check = (same_user if supported() else None) if peer_check == "kernel" else peer_check
    if isinstance(check, str):
        raise ValueError(f'peer_check is a function, None or "kernel", not {check!r}')
    daemon = Daemon(home=home, pm=pm, token=token)

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        await daemon.warm_up()
        await daemon.call_hook("startup")
        try:
            yield
        finally:
            await daemon.call_hook("shutdown")
            await daemon.close()

    routes = [
        Route("/v1", v1, methods=["POST"]),
        Route("/healthz", healthz, methods=["GET"]),
        Route("/settings", settings_list, methods=["GET"]),
        Route("/settings/{name}", settings_get, methods=["GET"]),
        Route("/settings/{name}", settings_put, methods=["PUT"]),
        Route("/settings/{name}", settings_reset, methods=["DELETE"]),
        Route("/history", history, methods=["GET"]),
        Route("/history/{id}/promote", promote, methods=["POST"]),
        Route("/openapi.json", openapi_json, methods=["GET"]),
        Route("/backend", backend.backend, methods=["GET"]),
        Route("/backend/probe", backend.backend_probe, methods=["POST"]),
        Route("/backend/embedded", relay.embedded, methods=["GET"]),
        Route("/backend/embedded/{path:path}", relay.relay, methods=["GET", "POST"]),
        Route("/rules", rule_routes.rules_list, methods=["GET"]),
        Route("/rules", rule_routes.rules_add, methods=["POST"]),
        Route("/rules/{id}", rule_routes.rules_remove, methods=["DELETE"]),
    ]
    core = {key for r in routes for key in route_keys(r.path, sorted(r.methods or []))}
    for route in daemon.registry.routes:
        for key in route_keys(route.path, route.methods):
            if key in core:
                raise LmdError(
                    f"Plugin {route.plugin} registers the route {key}, which is the core's own; "
                    "remove that plugin, or choose the plugins to load with LMD_LOAD_PLUGINS."
                )
        routes.append(Route(route.path, route.endpoint, methods=route.methods))
    app = Starlette(
        routes=routes,
        lifespan=lifespan,
        exception_handlers={
            LmdError: handle_lmd_error,
            SettingError: handle_lmd_error,
            sqlite3.Error: handle_db_error,
            HTTPException: handle_http_error,
            Exception: handle_unexpected,
        },
    )
    app.state.daemon = daemon
    return Guard(app, daemon, token, loopback_only, check)
