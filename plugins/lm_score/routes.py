"""POST /lm_score: {"contents": [...], "question": "..."} or {"prompt": "..."}."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from starlette.responses import JSONResponse

from daemon.api import LmdError, choose_backend, read_json

from .cache import ScoreCache
from .config import own_endpoint, resolve
from .scorer import Scorer


def scorer_for(daemon: Any, settings: Any) -> Any:
    """The daemon's Scorer for the current settings (kept, so n-support is learnt once): on
    LM_SCORE's own endpoint where one is set, else on the daemon's backend, whose model (the
    embedded one's name, when it answers) the reply and the cache key name."""
    llm = None
    backend = None
    if not own_endpoint(settings):
        llm = daemon.llm(settings)
        backend = SimpleNamespace(
            url=llm.url,
            key=llm.api_key,
            model=llm.model,
            identity=llm.identity,
            embedded=choose_backend(settings).embedded,
        )
    config = resolve(settings, backend=backend)
    scorers = daemon.state.setdefault("lm_score_scorers", {})
    scorer = scorers.get(config)
    if scorer is None:
        cache = ScoreCache(daemon.store.db, daemon.store.lock)
        scorer = scorers[config] = Scorer(config, llm=llm, cache=cache)
    return scorer


def parse_body(data: Any) -> tuple[list | None, str | None, bool]:
    """(parts, prompt, use_cache) from the JSON body, refusing bad shapes with a sentence."""
    if not isinstance(data, dict):
        raise LmdError('Send a JSON object: {"contents": [...], "question": "..."}.')
    use_cache = data.get("cache", True)
    if not isinstance(use_cache, bool):
        raise LmdError('"cache" must be true or false.')
    if "prompt" in data:
        prompt = data["prompt"]
        if not isinstance(prompt, str) or not prompt.strip():
            raise LmdError('"prompt" must be the full prompt text; it is empty or not text.')
        return None, prompt, use_cache
    contents = data.get("contents")
    if isinstance(contents, str):
        contents = [contents]
    if not isinstance(contents, list):
        raise LmdError(
            'The body needs "contents", a list of texts, and "question", a yes/no question.'
        )
    if "question" not in data:
        raise LmdError('The body needs a "question": the yes/no question to score.')
    return [*contents, data["question"]], None, use_cache


async def lm_score(request: Any) -> Any:
    daemon = request.app.state.daemon
    parts, prompt, use_cache = parse_body(await read_json(request, daemon))
    scorer = scorer_for(daemon, daemon.settings())
    result = await scorer.score(parts, prompt=prompt, cache=use_cache)
    return JSONResponse(result.to_json())


async def close_scorers(daemon: Any) -> None:
    for scorer in daemon.state.pop("lm_score_scorers", {}).values():
        await scorer.close()


# OpenAPI description of the route (served at /openapi.json, checked by schemathesis).
_ERR = {"$ref": "#/components/schemas/Error"}
lm_score.openapi = {
    "post": {
        "summary": "Score a yes/no question over some texts 0-10 (or score a full prompt).",
        "requestBody": {
            "required": True,
            "content": {
                "application/json": {
                    "schema": {
                        "oneOf": [
                            {
                                "type": "object",
                                "properties": {
                                    "contents": {
                                        "oneOf": [
                                            {"type": "string"},
                                            {"type": "array", "items": {"type": "string"}},
                                        ]
                                    },
                                    "question": {"type": "string"},
                                    "cache": {"type": "boolean"},
                                },
                                "required": ["contents", "question"],
                                "not": {"required": ["prompt"]},
                            },
                            {
                                "type": "object",
                                "properties": {
                                    "prompt": {"type": "string", "pattern": "\\S"},
                                    "cache": {"type": "boolean"},
                                },
                                "required": ["prompt"],
                            },
                        ]
                    }
                }
            },
        },
        "responses": {
            "200": {
                "description": "The score and how it was reached.",
                "content": {
                    "application/json": {
                        "schema": {
                            "type": "object",
                            "properties": {
                                "score": {"type": "integer", "minimum": 0, "maximum": 10},
                                "scores": {"type": "array", "items": {"type": "integer"}},
                                "members": {"type": "integer"},
                                "requested": {"type": "integer"},
                                "method": {"type": "string"},
                                "model": {"type": "string"},
                                "cached": {"type": "boolean"},
                            },
                            "required": ["score", "scores", "method", "model"],
                        }
                    }
                },
            },
            **{
                code: {"description": why, "content": {"application/json": {"schema": _ERR}}}
                for code, why in (
                    ("400", "A bad body, in one sentence."),
                    ("413", "The body is too large."),
                    ("422", "The model answered without a score 0-10."),
                    ("429", "The backend asks to slow down."),
                    ("502", "The backend failed."),
                    ("504", "The backend took too long."),
                )
            },
        },
    }
}
