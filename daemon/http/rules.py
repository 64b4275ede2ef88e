"""GET /rules, POST /rules, DELETE /rules/{id}: the approval rules over HTTP (docs/rules.md).

Reading them needs what every route needs (the owner). Changing them needs the daemon's token
as well, like a protected setting: a command the user let run outside the sandbox runs as the
owner too, and must not widen its own rules.
"""

from __future__ import annotations

from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from daemon.agent import rules
from daemon.core.errors import LmdError
from daemon.http.body import MAX_PROMPT_ID, read_json, session_name
from daemon.http.guard import token_presented

NEEDS_TOKEN = (
    "Rules change over HTTP only with the daemon's token (lmd's own clients send it); or use "
    "lmd rules add and lmd rules remove, or answer a question by voice."
)
READ_ONLY_NOTE = rules.READ_ONLY_NOTE


def _check_token() -> None:
    if not token_presented():
        raise LmdError(NEEDS_TOKEN, status=403)


async def rules_list(request: Request) -> Response:
    daemon = request.app.state.daemon
    session = request.query_params.get("session")
    if session is not None:
        session = session_name(request, session)
    found = rules.all_rules(daemon.store, session)
    return JSONResponse({"rules": [r.to_json() for r in found], "note": READ_ONLY_NOTE})


async def rules_add(request: Request) -> Response:
    _check_token()
    daemon = request.app.state.daemon
    example = '{"decision": "allow", "pattern": "git commit", "directory": "/path/to/project"}'
    data = await read_json(request, daemon, example)
    if not isinstance(data, dict):
        raise LmdError(f"The body must be a JSON object like {example}.")
    decision, pattern = data.get("decision"), data.get("pattern")
    if not isinstance(decision, str) or not isinstance(pattern, str):
        raise LmdError(f'The body needs "decision" and "pattern" strings, like {example}.')
    directory, everywhere = data.get("directory"), data.get("everywhere", False)
    if not isinstance(everywhere, bool):
        raise LmdError('"everywhere" is true or false.')
    if everywhere == (directory is not None):
        raise LmdError(
            'Give a rule either a "directory" or "everywhere": true, not both or neither.'
        )
    if directory is not None and not isinstance(directory, str):
        raise LmdError('"directory" is an absolute path.')
    session = data.get("session")
    if session is not None:
        session = session_name(request, session)
    sandbox = data.get("sandbox")
    if sandbox is not None and not isinstance(sandbox, str):
        raise LmdError('"sandbox" is read-only, workspace-write or none.')
    try:
        rule, made = rules.add_rule(
            daemon.store,
            decision,
            pattern,
            directory=directory,
            session=session,
            sandbox=sandbox,
            origin="http",
            lmd_home=str(daemon.home),
        )
    except rules.RuleError as e:
        raise LmdError(str(e)) from None
    return JSONResponse(
        {"rule": rule.to_json(), "made": made, "sentence": rules.said_back([rule])},
        status_code=201 if made else 200,
    )


async def rules_remove(request: Request) -> Response:
    _check_token()
    daemon = request.app.state.daemon
    raw = request.path_params["id"]
    if not raw.isdigit() or not 0 < int(raw) <= MAX_PROMPT_ID:
        raise LmdError(f"There is no rule {raw[:40]}; GET /rules lists them.", status=404)
    try:
        gone = rules.remove_rule(daemon.store, int(raw))
    except rules.RuleError as e:
        raise LmdError(str(e), status=404) from None
    return JSONResponse({"removed": gone.to_json()})


RULE = {
    "type": "object",
    "properties": {
        "id": {"type": "integer"},
        "decision": {"enum": list(rules.DECISIONS)},
        "kind": {"enum": ["command", "tool"]},
        "pattern": {"type": "string"},
        "directory": {"type": ["string", "null"]},
        "session": {"type": ["string", "null"]},
        "lifetime": {"enum": ["kept", "session"]},
        "sandbox": {"type": ["string", "null"]},
        "origin": {"type": "string"},
        "said": {"type": ["string", "null"]},
        "created_at": {"type": "number"},
        "removed_at": {"type": ["number", "null"]},
        "sentence": {"type": "string"},
    },
    "required": ["id", "decision", "pattern", "sentence"],
}


def openapi_paths(json: Any, error: Any, session: dict) -> dict:
    """The rules routes for GET /openapi.json."""
    return {
        "/rules": {
            "get": {
                "summary": "The approval rules: kept ones, session ones, the built-in defaults.",
                "parameters": [{"name": "session", "in": "query", "schema": session}],
                "responses": {
                    "400": error("A bad session name."),
                    "200": json(
                        "The rules and a note on read-only commands.",
                        {
                            "type": "object",
                            "properties": {
                                "rules": {"type": "array", "items": RULE},
                                "note": {"type": "string"},
                            },
                            "required": ["rules"],
                        },
                    ),
                },
            },
            "post": {
                "summary": "Make a rule (needs the daemon's token).",
                "requestBody": {
                    "required": True,
                    "content": {
                        "application/json": {
                            "schema": {
                                "type": "object",
                                "properties": {
                                    "decision": {"enum": list(rules.DECISIONS)},
                                    "pattern": {"type": "string", "maxLength": 300},
                                    "directory": {"type": "string"},
                                    "everywhere": {"type": "boolean"},
                                    "session": session,
                                    "sandbox": {"enum": list(rules.LEVELS)},
                                },
                                "required": ["decision", "pattern"],
                            }
                        }
                    },
                },
                "responses": {
                    "201": json("The rule made, and the sentence that says it."),
                    "200": json("The same rule existed already."),
                    "400": error("A bad rule, in one sentence."),
                    "403": error("No token: rules change over HTTP only with it."),
                },
            },
        },
        "/rules/{id}": {
            "delete": {
                "summary": "Remove a rule (needs the daemon's token).",
                "parameters": [
                    {"name": "id", "in": "path", "required": True, "schema": {"type": "integer"}}
                ],
                "responses": {
                    "200": json("The rule removed."),
                    "403": error("No token: rules change over HTTP only with it."),
                    "404": error("There is no such rule."),
                },
            }
        },
    }
