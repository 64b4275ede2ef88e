"""POST /selectit: score one record or a list, with the same code and numbers as the CLI."""

from __future__ import annotations

import asyncio
from dataclasses import replace
from typing import Any

from starlette.responses import JSONResponse

from daemon.api import LmdError, allowed_http_path, choose_backend, read_json, token_presented

from .config import resolve
from .datasets import check_unique, id_key, parse_fields, read_dataset, to_sample
from .engine import score_samples
from .prompts import BUILTIN_FILE, choose_templates, load_templates
from .raters import check_served, make_openai_rater, make_transformers_rater

OPTION_KEYS = ("k", "alpha", "rp_file", "model", "api", "backend", "top_logprobs", "details")
OPTION_KEYS += ("fields", "file", "max_records")


def split_body(body: Any) -> tuple[list, dict, bool]:
    """(records, options, single) from a record, a list, {"records": [...], options} or
    {"file": NAME, options} (the records then come from read_file)."""
    if isinstance(body, list):
        return body, {}, False
    if not isinstance(body, dict):
        raise LmdError(
            'Send a JSON record {"instruction": ..., "output": ...}, a list of them, '
            '{"records": [...]} or {"file": "records.jsonl"}.'
        )
    # a record names its instruction (or conversations): a body without one names a file
    names_file = "file" in body and not {"instruction", "conversations"} & set(body)
    if "records" not in body and "record" not in body and not names_file:
        return [body], {}, True
    options = {k: v for k, v in body.items() if k not in ("records", "record")}
    unknown = sorted(set(options) - set(OPTION_KEYS))
    if unknown:
        raise LmdError(f"Unknown option {unknown[0]!r}; the options are {', '.join(OPTION_KEYS)}.")
    if names_file:
        if "records" in body or "record" in body:
            raise LmdError('Send the records or a "file" that holds them, not both.')
        return [], options, False
    if "record" in body:
        return [body["record"]], options, True
    records = body["records"]
    if not isinstance(records, list):
        raise LmdError('"records" must be a list of JSON records.')
    return records, options, False


def fields_option(value: Any) -> str | None:
    if value is None or isinstance(value, str):
        return value
    if isinstance(value, dict):
        return ",".join(f"{ours}={theirs}" for ours, theirs in value.items())
    raise LmdError('"fields" must be like {"instruction": "prompt"} or "instruction=prompt".')


def read_file(value: Any, daemon: Any, fields: dict) -> list:
    """The samples of a JSON or JSONL file the request names: in the daemon's files folder
    (daemon.paths.allowed_http_path, as every path a request names) and no larger than a
    request body may be, read as `lmd selectit` reads a dataset."""

    path = allowed_http_path(value, daemon.home, "file of records")
    limit = daemon.settings()["max_body_bytes"]
    try:
        size = path.stat().st_size
    except OSError:
        size = 0  # missing: read_dataset says so
    if size > limit:
        raise LmdError(
            f"{path.name} is {size:,} bytes, more than a request may carry (max_body_bytes, "
            f"{limit:,}); score it with lmd selectit.",
            status=413,
        )
    return read_dataset(path, fields).samples


def refuse_choosing_the_model(options: dict, settings: Any) -> None:
    """An option that picks who rates (one standing for a setting of the `model` shape: model,
    backend, api) is the user's alone, as that setting is: only a request with the daemon's
    token may send it, never an agent (X-Lmd-Agent) nor a program without the token."""

    for key in options:
        spec = settings.specs.get(f"selectit_{key}")
        if spec is not None and "model" in spec.shapes and not token_presented():
            raise LmdError(
                f'The option "{key}" picks the model that rates, which only you choose: send '
                f"the daemon's token with the request, or set {spec.name} with "
                f"`lmd settings set {spec.name} ...`.",
                status=403,
            )


def confine_paths(cfg: Any, options: dict, home: Any) -> Any:
    """Paths in the request (rp_file; model when the backend is a local model) must lie in
    the daemon's home: a request must not make the daemon read an arbitrary file."""
    if options.get("rp_file"):
        # Our own rating prompts may be named too: they are public and hold no secret.
        path = allowed_http_path(cfg.rp_file, home, "rp_file", also=[BUILTIN_FILE])
        cfg = replace(cfg, rp_file=str(path))
    if options.get("model") and cfg.backend == "transformers":
        cfg = replace(cfg, model=str(allowed_http_path(cfg.model, home, "model directory")))
    return cfg


async def selectit_route(request: Any) -> Any:
    daemon = request.app.state.daemon
    records, options, single = split_body(await read_json(request, daemon))
    if not records and "file" not in options:
        raise LmdError("The list of records is empty; send at least one record.")
    for number, record in enumerate(records, start=1):
        if not isinstance(record, dict):
            raise LmdError(
                f"Record {number} is not a JSON object; send objects with "
                '"instruction" and "output".'
            )
    details = options.pop("details", False)
    if not isinstance(details, bool):
        raise LmdError('"details" must be true or false.')
    most = options.pop("max_records", None)
    if most is not None and (type(most) is not int or most < 1):
        raise LmdError('"max_records" must be a whole number of at least 1.')
    fields = parse_fields(fields_option(options.pop("fields", None)))
    named = options.pop("file", None)
    settings = daemon.settings()
    refuse_choosing_the_model(options, settings)
    cfg = resolve(settings, {}, options, "in the request")
    cfg = confine_paths(cfg, options, daemon.home)
    templates = choose_templates(load_templates(cfg.rp_file or None), cfg.k)
    if named is not None:
        samples = await asyncio.to_thread(read_file, named, daemon, fields)
    else:
        samples = [to_sample(r, n, fields) for n, r in enumerate(records, start=1)]
        check_unique(samples, "the request")
    if most is not None and len(samples) > most:
        raise LmdError(
            f"That is {len(samples)} records; this request scores at most {most} "
            "(lmd selectit scores any number)."
        )
    rater = None
    if any(s.valid for s in samples):
        if cfg.backend == "transformers":
            key = ("selectit_rater", cfg.model, cfg.device, cfg.batch_size, cfg.max_length)
            rater = daemon.state.get(key)
            if rater is None:
                rater = daemon.state[key] = await asyncio.to_thread(make_transformers_rater, cfg)
        else:
            llm = daemon.llm(settings)
            check_served(cfg, llm.model, choose_backend(settings).embedded)
            rater = make_openai_rater(cfg, llm)
    by_key, quality = {}, {}
    async for result in score_samples(samples, templates, cfg.alpha, rater):
        by_key[id_key(result.id)] = result.to_json(bool(details))
        quality[id_key(result.id)] = result.quality
    results = [by_key[s.key] for s in samples]
    if single:
        return JSONResponse({**results[0], "quality": quality[samples[0].key]})
    missing = sum(not s.valid for s in samples)
    skipped = sum("skipped" in r for r in results)
    # how each score came about: never a silent neutral 3.0
    kinds = ("measured", "bounded", "partly unrated", "unrated")
    counts = {k.replace(" ", "_"): sum(q == k for q in quality.values()) for k in kinds}
    return JSONResponse(
        {
            "results": results,
            "count": len(results),
            "missing": missing,
            "skipped": skipped,
            **counts,
        }
    )


# OpenAPI description of the route (served at /openapi.json, checked by schemathesis).
_RECORD = {"type": "object", "description": 'An Alpaca record: {"instruction", "output"}.'}
_RESULT = {
    "type": "object",
    "properties": {
        "id": {},
        "score": {"type": ["number", "null"], "description": "null: the model rated nothing."},
        "skipped": {"type": "string", "description": "Why the sample got 3.0 unrated."},
        "unrated": {
            "type": "array",
            "items": {"type": "string"},
            "description": "Why each prompt the model would not rate has no rating.",
        },
        "quality": {
            "type": "string",
            "description": "measured, bounded, partly unrated, unrated or default (one record).",
        },
    },
    "required": ["id", "score"],
}
selectit_route.openapi = {
    "post": {
        "summary": "SelectIT scores of one record or a list (as the CLI computes them).",
        "requestBody": {
            "required": True,
            "content": {
                "application/json": {
                    "schema": {
                        "oneOf": [
                            {"type": "array", "items": _RECORD, "minItems": 1},
                            {
                                "type": "object",
                                "description": "One record, or {records|record|file, options} "
                                "(a file in LMD_HOME/files).",
                            },
                        ]
                    }
                }
            },
        },
        "responses": {
            "200": {
                "description": "One result, or {results, count, missing}.",
                "content": {
                    "application/json": {
                        "schema": {
                            "oneOf": [
                                _RESULT,
                                {
                                    "type": "object",
                                    "properties": {
                                        "results": {"type": "array", "items": _RESULT},
                                        "count": {"type": "integer"},
                                        "missing": {"type": "integer"},
                                        "skipped": {"type": "integer"},
                                        "measured": {"type": "integer"},
                                        "bounded": {"type": "integer"},
                                        "partly_unrated": {"type": "integer"},
                                        "unrated": {"type": "integer"},
                                    },
                                    "required": ["results", "count", "missing"],
                                },
                            ]
                        }
                    }
                },
            },
            **{
                code: {
                    "description": why,
                    "content": {
                        "application/json": {"schema": {"$ref": "#/components/schemas/Error"}}
                    },
                }
                for code, why in (
                    ("400", "A bad record or option, in one sentence."),
                    (
                        "403",
                        "A path option outside the daemon's home, or an option that "
                        "picks the model (model, backend, api) without the daemon's token.",
                    ),
                    ("413", "The body is too large."),
                    ("502", "The backend failed."),
                    ("504", "The backend took too long."),
                )
            },
        },
    }
}
