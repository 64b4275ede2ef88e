"""/backend/embedded: the daemon's embedded model, for lmd's own commands.

A command run while the daemon serves the embedded model asks that model through the daemon
(daemon/backends/for_commands.py) rather than starting a second server: one model in memory,
one queue, the daemon's restarts. GET /backend/embedded says which model file it serves;
/backend/embedded/<path> forwards a request to the embedded server's <path> with the server's
private key (which never leaves the daemon). Like every route but /healthz, owner only.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import httpx2
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse

from daemon.backends.capabilities import server_root
from daemon.backends.choice import choose_backend
from daemon.backends.for_commands import embedded_identity
from daemon.core.errors import BackendError, LmdError
from daemon.http.body import read_request_body

# Request headers that mean something to the model server; the rest (the daemon's token
# among them) stay here.
FORWARDED = ("content-type", "accept", "x-lmd-probe")


def _supervisor(request: Request) -> Any:
    daemon = request.app.state.daemon
    settings = daemon.settings()
    if not choose_backend(settings).embedded:
        raise LmdError(
            "This daemon's backend is not the embedded model; ask the configured server directly.",
            status=404,
        )
    return daemon.embedded_server(settings)


async def embedded(request: Request) -> Response:
    """The embedded model this daemon serves: its name and its file's identity."""
    sup = _supervisor(request)
    try:
        identity = embedded_identity(sup.model_path)
    except OSError as e:
        raise LmdError(
            f"The embedded model's file cannot be read ({e.strerror}); run `lmd doctor`.",
            status=503,
        ) from None
    return JSONResponse({"model": sup.alias, "identity": identity, "file": sup.model_path.name})


async def relay(request: Request) -> Response:
    """Forward one request to the embedded server; its answer comes back as it is made. A
    client that goes away cancels the request at the server."""
    daemon = request.app.state.daemon
    sup = _supervisor(request)
    body = await read_request_body(request, daemon)
    await sup.wait_ready()
    url = f"{server_root(sup.url)}/{request.path_params['path']}"
    if request.url.query:
        url += "?" + request.url.query
    headers = {h: request.headers[h] for h in FORWARDED if h in request.headers}
    headers["authorization"] = f"Bearer {sup.key}"
    started = time.monotonic()
    client = httpx2.AsyncClient(
        timeout=httpx2.Timeout(None, connect=10.0),
        transport=httpx2.AsyncHTTPTransport(uds=sup.uds),  # the server's private socket
    )
    sending = asyncio.ensure_future(
        client.send(client.build_request(request.method, url, content=body, headers=headers),
                    stream=True)
    )  # fmt: skip
    gone = asyncio.ensure_future(_disconnected(request))
    try:
        await asyncio.wait({sending, gone}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        if not sending.done():  # the client left (or we are cancelled): stop the server too
            sending.cancel()
            await asyncio.gather(sending, return_exceptions=True)
        gone.cancel()
        await asyncio.gather(gone, return_exceptions=True)
    try:
        upstream = sending.result()
    except asyncio.CancelledError:
        await client.aclose()
        return Response(status_code=499)  # nobody is listening
    except httpx2.HTTPError:
        await client.aclose()
        raise BackendError(
            sup.unreachable(started)
            or "The embedded model server did not answer; try again in a moment."
        ) from None

    async def answer() -> Any:
        try:
            async for chunk in upstream.aiter_bytes():
                yield chunk
        finally:
            await upstream.aclose()
            await client.aclose()

    return StreamingResponse(
        answer(),
        status_code=upstream.status_code,
        media_type=upstream.headers.get("content-type"),
    )


async def _disconnected(request: Request) -> None:
    """Return when the client closes its connection (its body is read by then)."""
    while (await request.receive())["type"] != "http.disconnect":
        pass
