"""An HTTP transport that spreads requests over several small connection pools.

Built on httpx2, the HTTP client the openai SDK is built on (the SDK takes an older `httpx`
client only through compatibility shims). The connection pool walks every connection on each
request's start and end, so its CPU cost grows with the requests in flight: 64 concurrent
calls through one pool cost about 2.7 ms of CPU each here, against 1.2 ms through pools of a
few connections each. Requests go to the least busy pool, so one request at a time keeps
reusing the first pool's warm connection.
"""

from __future__ import annotations

import functools
import ssl
from collections.abc import AsyncIterator
from typing import Any

import httpx2

KEEPALIVE_SECS = 4.0


@functools.cache
def ssl_context() -> ssl.SSLContext:
    """One TLS context for the process: loading the CA certificates costs some 80 ms of CPU,
    which every client (a daemon's LLM, a capability probe, a CLI command's) paid again."""
    return httpx2.create_ssl_context()


class SpreadTransport(httpx2.AsyncBaseTransport):
    """`pools` httpx2.AsyncHTTPTransport pools sharing the connection limits."""

    def __init__(
        self,
        pools: int = 32,
        max_connections: int = 256,
        keepalive: int = 64,
        uds: str | None = None,
    ) -> None:
        """`uds`: connect every request to this Unix socket instead of the URL's host."""
        verify = ssl_context()  # one context for all pools, and all transports
        per_pool = httpx2.Limits(
            max_connections=max(1, -(-max_connections // pools)),
            max_keepalive_connections=max(1, -(-keepalive // pools)),
            # uvicorn (llama-cpp-python, vLLM) drops an idle connection after 5 s: reusing one
            # at that moment fails mid-request. Let ours go first.
            keepalive_expiry=KEEPALIVE_SECS,
        )
        self.pools = [
            httpx2.AsyncHTTPTransport(verify=verify, limits=per_pool, uds=uds) for _ in range(pools)
        ]
        self.busy = [0] * pools

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        busy = self.busy
        i = busy.index(min(busy))
        busy[i] += 1
        try:
            response = await self.pools[i].handle_async_request(request)
        except BaseException:
            busy[i] -= 1
            raise
        response.stream = _Released(response.stream, busy, i)
        return response

    async def aclose(self) -> None:
        for pool in self.pools:
            await pool.aclose()


class _Released(httpx2.AsyncByteStream):
    """The response body; closing it frees the pool's slot."""

    def __init__(self, stream: Any, busy: list[int], index: int) -> None:
        self.stream = stream
        self.busy = busy
        self.index: int | None = index

    async def __aiter__(self) -> AsyncIterator[bytes]:
        async for chunk in self.stream:
            yield chunk

    async def aclose(self) -> None:
        try:
            await self.stream.aclose()
        finally:
            if self.index is not None:
                self.busy[self.index] -= 1
                self.index = None
