"""An OpenAI-compatible face: POST /v1/chat/completions and GET /v1/models.

Editors and tools that speak the OpenAI protocol use lmd as their "model". The last user
message is the utterance (directives and modes apply as on /v1); lmd keeps its own history per
session, so earlier messages in the request are not replayed. The model name may pick a mode:
`lmd` (directives, then default_prompt) or `lmd-<mode>` (e.g. `lmd-marat`).
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from typing import Any

from starlette.responses import JSONResponse, StreamingResponse

from daemon.api import (
    LmdError,
    TurnReply,
    read_json,
    session_name,
    tokens,
    unmark,
    wants_speech,
    working_directory,
)

MODEL_PREFIX = "lmd"
ROLES = {"system", "developer", "user", "assistant", "tool", "function"}
MAX_TOKENS_LIMIT = 1_000_000
# Accepted and ignored: sampling knobs belong to the daemon's settings and modes, not the caller.
IGNORED = {
    "temperature",
    "top_p",
    "stop",
    "presence_penalty",
    "frequency_penalty",
    "seed",
    "stream_options",
    "metadata",
    "store",
    "parallel_tool_calls",
    "service_tier",
    "user",
    "logit_bias",
    "reasoning_effort",
    "verbosity",
    "prompt_cache_key",
    "safety_identifier",
}
HANDLED = {"model", "messages", "stream", "max_tokens", "max_completion_tokens", "n"}
UNSUPPORTED = {
    "tools": "lmd's modes act on their own; it cannot call your tools",
    "functions": "lmd's modes act on their own; it cannot call your functions",
    "tool_choice": "lmd cannot call your tools",
    "function_call": "lmd cannot call your functions",
    "logprobs": "lmd's replies come from modes, which have no token log probabilities",
    "top_logprobs": "lmd's replies come from modes, which have no token log probabilities",
    "audio": "lmd answers in text only",
    "modalities": "lmd answers in text only",
    "prediction": "lmd does not use predicted outputs",
    "response_format": "lmd answers in plain text only",
}


class OpenAIError(LmdError):
    """An error shaped as OpenAI clients expect: {"error": {message, type, param, code}}."""

    def __init__(
        self,
        message: str,
        status: int = 400,
        param: str | None = None,
        code: str | None = None,
        kind: str = "invalid_request_error",
    ) -> None:
        super().__init__(message, status=status)
        self.param = param
        self.code = code
        self.kind = kind

    def to_json(self) -> dict:
        return {
            "error": {
                "message": self.message,
                "type": self.kind,
                "param": self.param,
                "code": self.code,
            }
        }


def from_lmd_error(e: LmdError) -> OpenAIError:
    """An lmd error (bad body, backend down, ...) in OpenAI's shape."""
    if isinstance(e, OpenAIError):
        return e
    if e.status in (401, 403):
        kind = "authentication_error"
    elif e.status >= 500:
        kind = "server_error" if e.kind != "backend" else "backend_error"
    else:
        kind = "invalid_request_error"
    return OpenAIError(
        e.message, status=e.status, kind=kind, code=None if e.kind == "error" else e.kind
    )


@dataclass
class ChatRequest:
    """What lmd takes from a chat-completions body."""

    model: str
    utterance: str
    mode: str | None
    stream: bool
    include_usage: bool
    user: str | None


def model_ids(modes: list[str]) -> list[str]:
    """The model names lmd serves: `lmd` and `lmd-<mode>` for every mode."""
    return [MODEL_PREFIX, *(f"{MODEL_PREFIX}-{m}" for m in sorted(modes))]


def mode_for_model(model: str, modes: list[str]) -> str | None:
    """The mode a model name picks (None for plain `lmd`); unknown names are refused."""
    if model == MODEL_PREFIX:
        return None
    if model.startswith(MODEL_PREFIX + "-") and model[len(MODEL_PREFIX) + 1 :] in modes:
        return model[len(MODEL_PREFIX) + 1 :]
    raise OpenAIError(
        f"The model {model!r} does not exist here; use one of {', '.join(model_ids(modes))}.",
        status=404,
        param="model",
        code="model_not_found",
    )


def message_text(content: Any, where: str) -> str:
    """A message's text: a string, or an array of text parts joined."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        texts = []
        for i, part in enumerate(content):
            kind = part.get("type") if isinstance(part, dict) else None
            if kind == "text" and isinstance(part.get("text"), str):
                texts.append(part["text"])
            elif kind in ("image_url", "input_image", "image"):
                raise OpenAIError(
                    f"{where}.content[{i}] is an image; lmd takes text only, so send the words.",
                    param=f"{where}.content",
                    code="unsupported_content",
                )
            elif kind in ("input_audio", "file"):
                raise OpenAIError(
                    f"{where}.content[{i}] is a {kind} part; lmd takes text only, so send the "
                    "words.",
                    param=f"{where}.content",
                    code="unsupported_content",
                )
            else:
                raise OpenAIError(
                    f'{where}.content[{i}] must be a text part like {{"type": "text", '
                    '"text": "..."}.',
                    param=f"{where}.content",
                )
        return "".join(texts)
    raise OpenAIError(
        f"{where}.content must be a string or an array of text parts, not {_json_type(content)}.",
        param=f"{where}.content",
    )


def parse_request(body: Any, modes: list[str]) -> ChatRequest:
    """Validate a chat-completions body; every refusal is one sentence naming the field."""
    if not isinstance(body, dict):
        raise OpenAIError(
            f"The request body must be a JSON object, not {_json_type(body)}; send "
            '{"model": "lmd", "messages": [...]}.'
        )
    for key in body:
        if key in UNSUPPORTED and body[key] not in (
            None,
            False,
            [],
            "none",
            "auto",
            {"type": "text"},
        ):
            raise OpenAIError(
                f"The parameter {key!r} is not supported: {UNSUPPORTED[key]}; leave it out.",
                param=key,
                code="unsupported_parameter",
            )
        if key not in UNSUPPORTED and key not in IGNORED and key not in HANDLED:
            raise OpenAIError(
                f"Unrecognized request argument supplied: {key}; leave it out.",
                param=key,
                code="unsupported_parameter",
            )
    model = body.get("model", MODEL_PREFIX)
    if not isinstance(model, str) or not model:
        raise OpenAIError('model must be a string such as "lmd" or "lmd-marat".', param="model")
    mode = mode_for_model(model, modes)
    messages = body.get("messages")
    if messages is None:
        raise OpenAIError(
            'messages is missing; send {"messages": [{"role": "user", "content": "..."}]}.',
            param="messages",
        )
    if not isinstance(messages, list) or not messages:
        raise OpenAIError(
            "messages must be a non-empty array of {role, content} objects.", param="messages"
        )
    texts = []
    for i, m in enumerate(messages):
        where = f"messages[{i}]"
        if not isinstance(m, dict):
            raise OpenAIError(f"{where} must be an object with role and content.", param=where)
        role = m.get("role")
        if role not in ROLES:
            raise OpenAIError(
                f"{where}.role must be one of {', '.join(sorted(ROLES))}, not {role!r}.",
                param=f"{where}.role",
            )
        content = m.get("content")
        if content is None and role == "assistant":
            texts.append("")
            continue
        if content is None:
            raise OpenAIError(f"{where}.content is missing.", param=f"{where}.content")
        texts.append(message_text(content, where))
    if messages[-1]["role"] != "user":
        raise OpenAIError(
            "The last message must be the user's: lmd answers the newest user message.",
            param=f"messages[{len(messages) - 1}].role",
        )
    utterance = texts[-1]
    if not utterance.strip():
        raise OpenAIError(
            "The last user message is empty; say something.",
            param=f"messages[{len(messages) - 1}].content",
        )
    if "\x00" in utterance:
        raise OpenAIError(
            "The last user message contains a NUL character; send plain text.",
            param=f"messages[{len(messages) - 1}].content",
        )
    for key in ("max_tokens", "max_completion_tokens"):
        value = body.get(key)
        if value is not None and (
            not isinstance(value, int)
            or isinstance(value, bool)
            or not 1 <= value <= MAX_TOKENS_LIMIT
        ):
            raise OpenAIError(
                f"{key} must be a whole number from 1 to {MAX_TOKENS_LIMIT}, not "
                f"{json.dumps(value)}.",
                param=key,
            )
    n = body.get("n", 1)
    if n is not None and n != 1:
        raise OpenAIError(
            "n must be 1: lmd gives one answer per utterance.", param="n", code="unsupported_value"
        )
    stream = body.get("stream", False)
    if stream is not None and not isinstance(stream, bool):
        raise OpenAIError("stream must be true or false.", param="stream")
    options = body.get("stream_options") or {}
    if not isinstance(options, dict):
        raise OpenAIError("stream_options must be an object.", param="stream_options")
    user = body.get("user")
    if user is not None and not isinstance(user, str):
        raise OpenAIError("user must be a string (it names the lmd session).", param="user")
    return ChatRequest(
        model=model,
        utterance=utterance,
        mode=mode,
        stream=bool(stream),
        include_usage=bool(options.get("include_usage")),
        user=user or None,
    )


def _json_type(value: Any) -> str:
    names = {dict: "an object", list: "an array", str: "a string", bool: "a boolean"}
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    return names.get(type(value), type(value).__name__)


# -- routes ---------------------------------------------------------------------------------
async def models(request: Any) -> Any:
    """GET /v1/models: `lmd` and `lmd-<mode>` for every registered mode."""
    daemon = request.app.state.daemon
    created = int(time.time())
    data = [
        {"id": m, "object": "model", "created": created, "owned_by": "lmd"}
        for m in model_ids(list(daemon.modes))
    ]
    return JSONResponse({"object": "list", "data": data})


async def model(request: Any) -> Any:
    """GET /v1/models/{model}: one model object, or an OpenAI-style 404."""
    daemon = request.app.state.daemon
    name = request.path_params["model"]
    try:
        mode_for_model(name, list(daemon.modes))
    except OpenAIError as e:
        return JSONResponse(e.to_json(), status_code=e.status)
    return JSONResponse({"id": name, "object": "model", "created": 0, "owned_by": "lmd"})


async def chat_completions(request: Any) -> Any:
    """POST /v1/chat/completions: one lmd turn, answered as a chat completion."""
    try:
        return await _chat(request)
    except LmdError as e:
        err = from_lmd_error(e)
        return JSONResponse(err.to_json(), status_code=err.status)


async def _chat(request: Any) -> Any:
    daemon = request.app.state.daemon
    body = await read_json(request, daemon)
    chat = parse_request(body, list(daemon.modes))
    header = request.headers.get("x-session")
    try:
        # The X-Session header names the session; else the OpenAI `user` field.
        session = session_name(request, header or chat.user)
    except LmdError as e:
        raise OpenAIError(e.message, param="X-Session" if header else "user") from None
    try:
        cwd = working_directory(request.headers.get("x-cwd"))
    except LmdError:
        raise OpenAIError("The X-Cwd header must be an absolute path.", param="X-Cwd") from None
    speak = wants_speech(request.headers, request.query_params)
    # finish_reason "length" tells an OpenAI client that the answer was cut; the spoken note
    # /v1 adds would only be noise in an editor
    turn = TurnReply(
        daemon,
        session,
        chat.utterance,
        stream=chat.stream,
        speak=speak,
        cwd=cwd,
        mode=chat.mode,
        say_cut=False,
        receive=request.receive,  # a client that leaves stops the answer
    )
    model_name = daemon.settings()["openai_model"]

    def usage(reply: str) -> dict:
        """What the backend counted for every call of this turn (the whole context it was
        sent, not just the last utterance); counted here for a turn that made no call."""
        if turn.outcome.usage.calls:
            return turn.outcome.usage.to_json()
        p = tokens.count(chat.utterance, model_name)
        c = tokens.count(reply, model_name)
        return {"prompt_tokens": p, "completion_tokens": c, "total_tokens": p + c}

    form = ChatFormat(chat, turn.outcome, usage)
    if chat.stream:
        await turn.start()
        return StreamingResponse(turn.events(form), media_type="text/event-stream")
    return JSONResponse(form.completion(unmark(await turn.whole())))


class ChatFormat:
    """A turn as OpenAI writes chat completions: one JSON object, or chunk events (role and
    text deltas, a final finish_reason, usage when asked)."""

    def __init__(self, chat: ChatRequest, outcome: Any, usage: Any) -> None:
        self.chat = chat
        self.outcome = outcome
        self.usage = usage
        self.created = int(time.time())

    @property
    def finish_reason(self) -> str:
        """The backend's own reason for the turn's last answer ("length" when it was cut)."""
        return "length" if self.outcome.usage.cut else "stop"

    @property
    def ident(self) -> str:
        return f"chatcmpl-lmd-{self.outcome.user_prompt_id}"  # known once the turn has begun

    def completion(self, reply: str) -> dict:
        return {
            "id": self.ident,
            "object": "chat.completion",
            "created": self.created,
            "model": self.chat.model,
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": reply},
                    "finish_reason": self.finish_reason,
                    "logprobs": None,
                }
            ],
            "usage": self.usage(reply),
            "lmd": self.outcome.to_json(),
        }

    def _event(self, choices: list, **extra: Any) -> str:
        chunk = {
            "id": self.ident,
            "object": "chat.completion.chunk",
            "created": self.created,
            "model": self.chat.model,
            "choices": choices,
            **extra,
        }
        return "data: " + json.dumps(chunk) + "\n\n"

    def _delta(self, delta: dict, finish: str | None = None, **extra: Any) -> str:
        choice = {"index": 0, "delta": delta, "finish_reason": finish, "logprobs": None}
        return self._event([choice], **extra)

    def opening(self, first: str | None) -> list[str]:
        return [self._delta({"role": "assistant", "content": first or ""})]

    def chunk(self, text: str) -> str:
        return self._delta({"content": text})

    def closing(self, said: str) -> list[str]:
        events = [self._delta({}, self.finish_reason, lmd=self.outcome.to_json())]
        if self.chat.include_usage:
            events.append(self._event([], usage=self.usage(said)))
        return events

    def error(self, e: LmdError) -> str:
        # OpenAI's own streams report a late failure as an error object; clients raise it.
        return "data: " + json.dumps(from_lmd_error(e).to_json()) + "\n\n"


# -- OpenAPI descriptions (served at /openapi.json, checked by schemathesis) --------------------
_OPENAI_ERROR = {
    "type": "object",
    "properties": {
        "error": {
            "type": "object",
            "properties": {
                "message": {"type": "string"},
                "type": {"type": "string"},
                "param": {"type": ["string", "null"]},
                "code": {"type": ["string", "null"]},
            },
            "required": ["message", "type"],
        }
    },
    "required": ["error"],
}


def _openai_errors(*codes: tuple[str, str]) -> dict:
    return {
        code: {"description": why, "content": {"application/json": {"schema": _OPENAI_ERROR}}}
        for code, why in codes
    }


_MODEL = {
    "type": "object",
    "properties": {
        "id": {"type": "string"},
        "object": {"const": "model"},
        "created": {"type": "integer"},
        "owned_by": {"type": "string"},
    },
    "required": ["id", "object", "created", "owned_by"],
}
models.openapi = {
    "get": {
        "summary": "The model names lmd serves: lmd and lmd-<mode>.",
        "responses": {
            "200": {
                "description": "The models.",
                "content": {
                    "application/json": {
                        "schema": {
                            "type": "object",
                            "properties": {
                                "object": {"const": "list"},
                                "data": {"type": "array", "items": _MODEL},
                            },
                            "required": ["object", "data"],
                        }
                    }
                },
            }
        },
    }
}
model.openapi = {
    "get": {
        "summary": "One model.",
        "parameters": [
            {"name": "model", "in": "path", "required": True, "schema": {"type": "string"}}
        ],
        "responses": {
            "200": {
                "description": "The model.",
                "content": {"application/json": {"schema": _MODEL}},
            },
            **_openai_errors(("404", "No such model here.")),
        },
    }
}
chat_completions.openapi = {
    "post": {
        "summary": "One lmd turn as an OpenAI chat completion (the last user message is said).",
        "parameters": [
            {"name": "X-Session", "in": "header", "schema": {"type": "string"}},
        ],
        "requestBody": {
            "required": True,
            "content": {
                "application/json": {
                    "schema": {
                        "type": "object",
                        "properties": {
                            "model": {"type": "string"},
                            "messages": {
                                "type": "array",
                                "minItems": 1,
                                "items": {
                                    "type": "object",
                                    "properties": {
                                        "role": {"enum": sorted(ROLES)},
                                        "content": {"type": "string"},
                                    },
                                    "required": ["role", "content"],
                                },
                            },
                            "stream": {"type": "boolean"},
                        },
                        "required": ["messages"],
                    }
                }
            },
        },
        "responses": {
            "200": {
                "description": "A chat completion, or its stream of chunks.",
                "content": {
                    "application/json": {
                        "schema": {
                            "type": "object",
                            "properties": {
                                "id": {"type": "string"},
                                "object": {"const": "chat.completion"},
                                "choices": {"type": "array", "minItems": 1},
                                "usage": {"type": "object"},
                            },
                            "required": ["id", "object", "choices"],
                        }
                    },
                    "text/event-stream": {"schema": {"type": "string"}},
                },
            },
            **_openai_errors(
                ("400", "A bad body, naming the field."),
                ("404", "No such model here."),
                ("408", "The body came too slowly."),
                ("413", "The body is too large."),
                ("502", "The backend failed."),
                ("503", "The database is locked, or lmd is shutting down."),
                ("504", "The backend took too long."),
            ),
        },
    }
}
