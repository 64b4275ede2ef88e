"""SpreadTransport: requests spread over small pools, slots freed however a response ends."""

from __future__ import annotations

import asyncio

import httpx2
import pytest

from daemon.backends.http_pools import SpreadTransport
from tests.fake_backend import Reply

BODY = {"model": "fake-model", "messages": [{"role": "user", "content": "hi"}]}


def connections(transport: SpreadTransport) -> list[int]:
    return [len(pool._pool.connections) for pool in transport.pools]


def test_one_request_at_a_time_reuses_one_warm_connection(backend):
    async def go():
        transport = SpreadTransport(pools=4)
        async with httpx2.AsyncClient(transport=transport) as client:
            for _ in range(5):
                r = await client.post(backend.url + "/chat/completions", json=BODY)
                assert r.json()["choices"][0]["message"]["content"] == "ok"
            assert transport.busy == [0, 0, 0, 0]
            return connections(transport)

    assert asyncio.run(go()) == [1, 0, 0, 0]
    assert len(backend.chat_requests) == 5


def test_concurrent_requests_spread_over_the_pools(backend):
    backend.latency = 0.3
    seen = []

    async def go():
        transport = SpreadTransport(pools=4, max_connections=8, keepalive=8)
        async with httpx2.AsyncClient(transport=transport, timeout=10) as client:

            async def watch():
                await asyncio.sleep(0.15)
                seen.append(list(transport.busy))

            calls = [client.post(backend.url + "/chat/completions", json=BODY) for _ in range(8)]
            replies, _ = await asyncio.gather(asyncio.gather(*calls), watch())
            assert all(r.status_code == 200 for r in replies)
            assert transport.busy == [0, 0, 0, 0]
            return connections(transport)

    assert asyncio.run(go()) == [2, 2, 2, 2]
    assert seen == [[2, 2, 2, 2]]  # all in flight at once, two per pool
    assert backend.max_active == 8


def test_slots_are_freed_by_streams_and_failures(backend):
    backend.queue(Reply("one two three", chunk_delay=0.05))

    async def go():
        transport = SpreadTransport(pools=2)
        async with httpx2.AsyncClient(transport=transport) as client:
            stream_body = {**BODY, "stream": True}
            async with client.stream(
                "POST", backend.url + "/chat/completions", json=stream_body
            ) as r:
                assert transport.busy == [1, 0]  # held while the body streams
                first = await anext(r.aiter_lines())
                assert first.startswith("data:")
            assert transport.busy == [0, 0]
            url = backend.url
            backend.stop()
            with pytest.raises(httpx2.ConnectError):
                await client.post(url + "/chat/completions", json=BODY)
            assert transport.busy == [0, 0]

    asyncio.run(go())
