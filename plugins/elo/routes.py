"""HTTP: /elo (the page), /elo/leaderboard (JSON) and POST /elo/battles."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from starlette.responses import HTMLResponse, JSONResponse

from daemon.api import LmdError, read_json

from .files import FULL_COLUMNS, Table
from .leaderboard import compute, options_from, render
from .report import content_security_policy, render_page, with_policy
from .store import add_battles as add
from .store import all_battles, fingerprint, validate


def _options(request: Any, settings: Any) -> Any:
    q = request.query_params

    def number(name: str, kind: type) -> Any:
        if name not in q:
            return None
        try:
            return kind(q[name])
        except ValueError:
            raise LmdError(f"The query parameter {name} must be a number.") from None

    method = q.get("method")
    if method is not None and method not in ("bt", "online"):
        raise LmdError("The method must be bt or online.")
    style = q.get("style", "0").strip().lower()
    if style not in ("0", "1", "true", "false", "yes", "no", ""):
        raise LmdError("style must be 1 (style control) or 0.")
    bootstrap = number("bootstrap", int)
    if bootstrap is not None and not 0 <= bootstrap <= settings.spec("elo_bootstrap_rounds").max:
        raise LmdError("bootstrap must be from 0 to 100000 rounds.")
    return options_from(
        settings,
        method=method,
        bootstrap=bootstrap,
        seed=number("seed", int),
        k=number("k", float),
        anchor=q.get("anchor"),
        style=style in ("1", "true", "yes"),
    )


def _compute(daemon: Any, request: Any) -> tuple[dict, Any, Any, list, Any]:
    """The leaderboard of the stored battles; the last one is reused while neither the
    battles nor the options changed (a seeded bootstrap gives the same numbers anyway)."""
    settings = daemon.settings()
    opts = _options(request, settings)
    key = (fingerprint(daemon.store), repr(opts))
    cached = daemon.state.get("elo_leaderboard")
    if cached and cached[0] == key and opts.seed is not None:
        return cached[1]
    rows = all_battles(daemon.store)
    if not rows:
        return {"method": opts.method, "ratings": {}, "battles": {}}, None, None, rows, opts
    board, battles, ratings = compute(rows, opts, "the stored battles")
    result = (board, battles, ratings, rows, opts)
    daemon.state["elo_leaderboard"] = (key, result)
    return result


async def leaderboard(request: Any) -> Any:
    daemon = request.app.state.daemon
    board, battles, *_ = await asyncio.to_thread(_compute, daemon, request)
    if battles is None:
        return JSONResponse(board)

    return JSONResponse(json.loads(render(board, "json")))


EMPTY_PAGE = """<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">
<title>Elo leaderboard</title></head><body style="font-family:sans-serif;margin:2em">
<h1>Elo leaderboard</h1><p>No battles yet. Add some with <code>lmd elo import FILE</code>
or <code>POST /elo/battles</code>.</p>
<script>document.documentElement.setAttribute("data-elo-ready", "0");</script></body></html>"""


async def page(request: Any) -> Any:
    daemon = request.app.state.daemon

    def build() -> str:
        board, battles, ratings, rows, opts = _compute(daemon, request)
        if battles is None:
            return with_policy(EMPTY_PAGE)
        return render_page(board, battles, ratings, rows, opts.params, source="the daemon")

    text = await asyncio.to_thread(build)
    # The page runs on the daemon's own origin: it must not be able to drive the daemon, and
    # no other page may frame it.
    policy = content_security_policy(text) + "; frame-ancestors 'none'"
    return HTMLResponse(text, headers={"Content-Security-Policy": policy})


async def add_battles(request: Any) -> Any:
    """Body: {"battles": [{model_a, model_b, winner, ...}, ...]} (or the bare list)."""
    daemon = request.app.state.daemon
    data = await read_json(request, daemon)
    items = data.get("battles") if isinstance(data, dict) else data
    if not isinstance(items, list) or not items:
        raise LmdError('Send {"battles": [{"model_a": ..., "model_b": ..., "winner": ...}]}.')
    rows = []
    for n, item in enumerate(items, 1):
        if not isinstance(item, dict):
            raise LmdError(
                f"Battle {n} is not an object; send objects with model_a, model_b, winner."
            )
        rows.append({c: "" if item.get(c) is None else str(item.get(c)) for c in FULL_COLUMNS})
    missing = [c for c in ("model_a", "model_b", "winner") if not any(c in i for i in items)]
    columns = [c for c in FULL_COLUMNS if c not in missing]
    table = Table("The request", columns, rows, list(range(1, len(rows) + 1)), unit="battle")
    valid = await asyncio.to_thread(validate, table)
    stored = await asyncio.to_thread(add, daemon.store, valid)
    return JSONResponse({"added": stored, "skipped_invalid": len(rows) - stored})


# OpenAPI descriptions of the routes (served at /openapi.json, checked by schemathesis).
_ERR = {
    "description": "",
    "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}},
}
_QUERY = [
    {"name": "method", "in": "query", "schema": {"type": "string", "enum": ["bt", "online"]}},
    {
        "name": "bootstrap",
        "in": "query",
        "schema": {"type": "integer", "minimum": 0, "maximum": 100000},
    },
    {"name": "seed", "in": "query", "schema": {"type": "integer"}},
    {"name": "k", "in": "query", "schema": {"type": "number", "minimum": 0}},
    {"name": "style", "in": "query", "schema": {"type": "string", "enum": ["0", "1"]}},
]


def _errors(*codes: tuple[str, str]) -> dict:
    return {code: {**_ERR, "description": why} for code, why in codes}


leaderboard.openapi = {
    "get": {
        "summary": "The leaderboard of the stored battles as JSON.",
        "parameters": _QUERY,
        "responses": {
            "200": {
                "description": "Ratings (and intervals) per model.",
                "content": {
                    "application/json": {
                        "schema": {
                            "type": "object",
                            "properties": {
                                "method": {"type": "string"},
                                "ratings": {"type": "object"},
                                "battles": {"type": "object"},
                            },
                            "required": ["method", "ratings", "battles"],
                        }
                    }
                },
            },
            **_errors(("400", "A bad query parameter, in one sentence.")),
        },
    }
}
page.openapi = {
    "get": {
        "summary": "The leaderboard page (HTML).",
        "parameters": _QUERY,
        "responses": {
            "200": {
                "description": "A self-contained HTML page.",
                "content": {"text/html": {"schema": {"type": "string"}}},
            },
            **_errors(("400", "A bad query parameter, in one sentence.")),
        },
    }
}
_BATTLE = {  # values are taken as text; a model battling itself is refused too
    "type": "object",
    "properties": {
        "model_a": {},
        "model_b": {},
        "winner": {"enum": ["model_a", "model_b", "tie", "tie (bothbad)"]},
    },
    "required": ["model_a", "model_b", "winner"],
}
add_battles.openapi = {
    "post": {
        "summary": "Store judged battles (invalid ones are counted, not stored).",
        "requestBody": {
            "required": True,
            "content": {
                "application/json": {
                    "schema": {
                        "oneOf": [
                            {"type": "array", "items": _BATTLE, "minItems": 1},
                            {
                                "type": "object",
                                "properties": {
                                    "battles": {"type": "array", "items": _BATTLE, "minItems": 1}
                                },
                                "required": ["battles"],
                            },
                        ]
                    }
                }
            },
        },
        "responses": {
            "200": {
                "description": "How many were stored and skipped.",
                "content": {
                    "application/json": {
                        "schema": {
                            "type": "object",
                            "properties": {
                                "added": {"type": "integer", "minimum": 0},
                                "skipped_invalid": {"type": "integer", "minimum": 0},
                            },
                            "required": ["added", "skipped_invalid"],
                        }
                    }
                },
            },
            **_errors(
                ("400", "A bad battle or file shape, in one sentence."),
                ("413", "The body is too large."),
            ),
        },
    }
}
