"""The OpenAPI description served at GET /openapi.json: the core routes, documented here, plus
every plugin route — documented by the plugin (an `openapi` dict on the endpoint function,
one OpenAPI operation per method) or else described generically so clients and fuzzers still
see it."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

from daemon import __version__
from daemon.http.rules import openapi_paths

if TYPE_CHECKING:
    from daemon.core.daemon import Daemon

# What /v1 accepts: some non-space character and no NUL (ECMA regex, as JSON Schema uses).
UTTERANCE = {"type": "string", "pattern": "^[^\\u0000]*[^\\s\\u0000][^\\u0000]*$"}
SESSION = {"type": "string", "pattern": "^[A-Za-z0-9_.:@+-]{1,128}$"}
CWD = {"type": "string", "pattern": "^/[^\\u0000]*$"}

_PARAM = re.compile(r"{(\w+)(?::\w+)?}")

ERROR = {
    "type": "object",
    "properties": {
        "error": {"type": "string", "description": "One sentence: what went wrong, what to do."},
        "kind": {"type": "string"},
        "status": {"type": "integer"},
        "detail": {},
    },
    "required": ["error"],
}


def _error(description: str) -> dict:
    return {
        "description": description,
        "content": {
            "application/json": {"schema": {"$ref": "#/components/schemas/Error"}},
            "text/plain": {"schema": {"type": "string"}},
        },
    }


def _json(description: str, schema: dict | None = None) -> dict:
    return {
        "description": description,
        "content": {"application/json": {"schema": schema or {"type": "object"}}},
    }


COMMON_ERRORS = {
    "401": _error(
        "Not the daemon's owner: no valid bearer token, and (on Linux loopback) "
        "the client runs as another user."
    ),
    "403": _error("A non-loopback Host, a page of another origin, or a protected setting."),
    "500": _error("An unexpected failure, explained in one sentence."),
    "503": _error("The database is locked, or default_prompt names a mode that is not loaded."),
    "507": _error("The disk holding the database is full."),
}


SETTING_ROW = {
    "type": "object",
    "properties": {
        "name": {"type": "string"},
        "value": {},
        "default": {},
        "source": {"type": "string"},
        "type": {"type": "string"},
        "allowed": {"type": "string"},
        "help": {"type": "string"},
        "plugin": {"type": "string"},
        "protected": {"type": "boolean"},
    },
    "required": ["name", "value", "default", "source", "type"],
}


def core_paths(setting_names: list[str]) -> dict[str, dict]:
    """The core's own routes."""
    setting_name = {
        "name": "name",
        "in": "path",
        "required": True,
        "schema": {"type": "string", "enum": setting_names},
    }
    session_params = [
        {"name": "X-Session", "in": "header", "schema": SESSION},
        {"name": "session", "in": "query", "schema": SESSION},
        {"name": "X-Cwd", "in": "header", "schema": CWD},
        {"name": "cwd", "in": "query", "schema": CWD},
    ]
    # who hears a question, and which question an answer is for (docs/security.md)
    answer_params = [
        {"name": "X-Lmd-Client", "in": "header", "schema": {"type": "string", "maxLength": 128}},
        {"name": "X-Lmd-Question", "in": "header", "schema": {"type": "string", "maxLength": 64}},
    ]
    v1_reply = {
        "type": "object",
        "properties": {
            "mode": {"type": ["string", "null"]},
            "reply": {"type": "string"},
            "session": {"type": "string"},
            "prompt_ids": {"type": "object"},
            "pending": {"type": ["object", "null"]},
        },
        "required": ["mode", "reply", "session", "prompt_ids"],
    }
    return {
        "/v1": {
            "post": {
                "summary": "Say something; the mode named by the first word (or the session's) "
                "answers.",
                "parameters": session_params + answer_params,
                "requestBody": {
                    "required": True,
                    "content": {
                        "text/plain": {"schema": UTTERANCE},
                        "application/json": {
                            "schema": {
                                "type": "object",
                                "properties": {"input": UTTERANCE, "session": SESSION},
                                "required": ["input"],
                            }
                        },
                    },
                },
                "responses": {
                    "200": {
                        "description": "The reply: plain text, JSON, or server-sent events.",
                        "content": {
                            "text/plain": {"schema": {"type": "string"}},
                            "application/json": {"schema": v1_reply},
                            "text/event-stream": {"schema": {"type": "string"}},
                        },
                    },
                    "400": _error("Empty, malformed or non-UTF-8 input, or a bad session name."),
                    "408": _error("The body arrived too slowly."),
                    "413": _error("The body is over max_body_bytes."),
                    "502": _error("The language model failed."),
                    "504": _error("The language model did not answer in time."),
                },
            }
        },
        "/healthz": {
            "get": {
                "summary": "Liveness; never touches the backend and needs no token.",
                "security": [],
                "responses": {"200": _json("Alive, with version and modes.")},
            }
        },
        "/settings": {
            "get": {
                "summary": "Every setting with its value, default and source.",
                "responses": {
                    "200": _json(
                        "The settings.",
                        {
                            "type": "object",
                            "properties": {"settings": {"type": "array", "items": SETTING_ROW}},
                        },
                    )
                },
            }
        },
        "/settings/{name}": {
            "get": {
                "summary": "One setting.",
                "parameters": [setting_name],
                "responses": {
                    "200": _json("The setting.", SETTING_ROW),
                    "404": _error("No such setting."),
                },
            },
            "put": {
                "summary": "Change a setting (validated; protected ones need a token).",
                "parameters": [setting_name],
                "requestBody": {
                    "required": True,
                    "content": {
                        "text/plain": {"schema": {"type": "string"}},
                        "application/json": {
                            "schema": {
                                "type": "object",
                                "properties": {"value": {}},
                                "required": ["value"],
                            }
                        },
                    },
                },
                "responses": {
                    "200": _json("The setting as now stored.", SETTING_ROW),
                    "400": _error("A value the setting does not allow."),
                    "404": _error("No such setting."),
                    "408": _error("The body arrived too slowly."),
                    "413": _error("The body is over max_body_bytes."),
                },
            },
            "delete": {
                "summary": "Reset a setting to its default.",
                "parameters": [setting_name],
                "responses": {
                    "200": _json("The setting as now stored.", SETTING_ROW),
                    "404": _error("No such setting."),
                },
            },
        },
        "/history": {
            "get": {
                "summary": "Stored prompts with karma and the score each would get now.",
                "parameters": [
                    {"name": "limit", "in": "query", "schema": {"type": "integer"}},
                    {"name": "session", "in": "query", "schema": {"type": "string"}},
                ],
                "responses": {
                    "200": _json("The prompts, oldest first."),
                    "400": _error("A limit that is not a whole number."),
                },
            }
        },
        "/history/{id}/promote": {
            "post": {
                "summary": "Mark a prompt operative (it then weighs more in every context).",
                "parameters": [
                    {"name": "id", "in": "path", "required": True, "schema": {"type": "integer"}}
                ],
                "responses": {
                    "200": _json("The promoted prompt's id, kind and karma."),
                    "400": _error("An id that is not a whole number."),
                    "404": _error("No such prompt."),
                },
            }
        },
        "/backend": {
            "get": {
                "summary": "The backend in use and what it can do (probed once, then cached).",
                "responses": {"200": _json("Endpoint, model, capabilities and the probe's notes.")},
            }
        },
        "/backend/probe": {
            "post": {
                "summary": "Probe the backend's capabilities again.",
                "responses": {"200": _json("Endpoint, model, capabilities and the probe's notes.")},
            }
        },
        "/backend/embedded": {
            "get": {
                "summary": "The embedded model this daemon serves (lmd's commands ask it here).",
                "responses": {
                    "200": _json("The model's name, its file's identity and file name."),
                    "404": _error("This daemon's backend is not the embedded model."),
                },
            }
        },
        "/backend/embedded/{path}": {
            method: {
                "summary": "Forward a request to the embedded model server's PATH (owner only).",
                "parameters": [
                    {"name": "path", "in": "path", "required": True, "schema": {"type": "string"}}
                ],
                "responses": {
                    "200": {"description": "The model server's answer, as it sends it."},
                    "404": _error("This daemon's backend is not the embedded model."),
                    "502": _error("The embedded model server failed."),
                },
            }
            for method in ("get", "post")
        },
        "/openapi.json": {
            "get": {
                "summary": "This description.",
                "responses": {"200": _json("The OpenAPI document.")},
            }
        },
        **_rule_paths(),
    }


def _rule_paths() -> dict:
    return openapi_paths(_json, _error, SESSION)


def plugin_operation(path: str, endpoint: Any, method: str) -> dict:
    """The plugin's own operation if it documented one, else a generic one."""
    documented = getattr(endpoint, "openapi", None)
    if isinstance(documented, dict) and method in documented:
        return documented[method]
    doc = (getattr(endpoint, "__doc__", None) or "").strip().splitlines()
    operation: dict = {
        "summary": doc[0] if doc else f"A plugin route ({getattr(endpoint, '__name__', '?')}).",
        "x-lmd-undocumented": True,
        "responses": {
            "200": {"description": "The plugin's answer."},
            "400": _error("Bad input, in one sentence."),
            "404": _error("Not found."),
        },
    }
    params = [
        {"name": name, "in": "path", "required": True, "schema": {"type": "string"}}
        for name in _PARAM.findall(path)
    ]
    if params:
        operation["parameters"] = params
    if method in ("post", "put", "patch"):
        operation["requestBody"] = {
            "content": {
                "application/json": {"schema": {}},
                "text/plain": {"schema": {"type": "string"}},
            }
        }
    return operation


def build_spec(daemon: Daemon) -> dict:
    """The whole OpenAPI 3.1 document for this daemon and its plugins."""
    paths = core_paths(sorted(daemon.registry.specs))
    for path, endpoint, methods, plugin in daemon.registry.routes:
        clean = _PARAM.sub(r"{\1}", path)
        item = paths.setdefault(clean, {})
        for method in methods or ["GET"]:
            m = method.lower()
            if m == "head" or m in item:
                continue
            op = plugin_operation(path, endpoint, m)
            op.setdefault("x-lmd-plugin", plugin)
            item[m] = op
    for item in paths.values():
        for op in item.values():
            for code, response in COMMON_ERRORS.items():
                op.setdefault("responses", {}).setdefault(code, response)
    security: list = [{"bearer": []}] if daemon.token else []
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "lmd",
            "version": __version__,
            "description": "A language-model daemon: POST an utterance to /v1, a mode answers.",
        },
        "paths": paths,
        "components": {
            "schemas": {"Error": ERROR},
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
        },
        "security": security,
    }
