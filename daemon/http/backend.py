"""GET /backend and POST /backend/probe: which backend answers, and what it can do."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from daemon.backends.llm import shown_url


async def describe(request: Request, fresh: bool = False) -> dict:
    daemon = request.app.state.daemon
    llm = daemon.llm()
    caps = await llm.capabilities(fresh=fresh)
    engine = daemon.embedded.state() if daemon.embedded is not None else None
    return {
        "endpoint": shown_url(llm.url),
        "model": llm.model,
        "source": caps.source,
        "capabilities": {name: getattr(caps, name) for name in caps.FEATURES},
        "schema_format": caps.schema_format,
        "tokenize_path": caps.tokenize_path,
        "notes": list(caps.notes),
        "probed_at": caps.probed_at,
        "slots": caps.slots,
        "context_window": llm.context_window,
        "engine": engine,  # the embedded model's server: running, starting or down, and why
    }


async def backend(request: Request) -> Response:
    """The backend and its capabilities (probed on first use, then cached)."""
    return JSONResponse(await describe(request))


async def backend_probe(request: Request) -> Response:
    """Probe the backend again (after an upgrade of the server, say)."""
    return JSONResponse(await describe(request, fresh=True))
