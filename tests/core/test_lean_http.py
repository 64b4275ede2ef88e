"""daemon/backends/lean_http.py: first tries to a local server, written with h11.

A real server on loopback (and on a Unix socket) answers with exactly the bytes each test
scripts, and counts its connections: kept-alive connections are reused, a connection the
server closed while idle is not, a stream left early closes its connection (so the server
stops writing), a compressed answer is read, a client with event hooks (a command's check of
who holds the daemon's port) never takes this way, and a server that answers no HTTP at all
is the same sentence as through the SDK.
"""

from __future__ import annotations

import asyncio
import gzip
import json
import os
import resource
import threading
from pathlib import Path

import h11
import pytest

from daemon.backends.lean_http import usable
from daemon.backends.llm import LLM
from daemon.core.errors import BackendError

HISTORY = [{"role": "user", "content": "hello"}]


def completion(text: str) -> bytes:
    return json.dumps(
        {
            "id": "c",
            "object": "chat.completion",
            "created": 1,
            "model": "m",
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": text},
                    "finish_reason": "stop",
                }
            ],
        }
    ).encode()


def chunk(text: str, finish: str | None = None) -> bytes:
    event = {
        "id": "c",
        "object": "chat.completion.chunk",
        "created": 1,
        "model": "m",
        "choices": [{"index": 0, "delta": {"content": text}, "finish_reason": finish}],
    }
    return b"data: " + json.dumps(event).encode() + b"\n\n"


class Server:
    """A loopback (or Unix-socket) HTTP/1.1 server in a thread of its own. Each request is
    answered by the next of `answers`: (status, headers, body parts, then what to do: "keep"
    the connection, "close" it, or "hold" the rest of the stream until the client leaves)."""

    def __init__(self, answers: list, uds: Path | None = None) -> None:
        self.answers = list(answers)
        self.uds = uds
        self.connections = 0
        self.bodies: list[dict] = []
        self.left = threading.Event()  # a held stream's client closed its connection
        self.loop = asyncio.new_event_loop()
        started = threading.Event()
        self.thread = threading.Thread(target=self._run, args=(started,), daemon=True)
        self.thread.start()
        started.wait()

    def _run(self, started: threading.Event) -> None:
        asyncio.set_event_loop(self.loop)
        if self.uds is not None:
            self.server = self.loop.run_until_complete(
                asyncio.start_unix_server(self.handle, str(self.uds))
            )
        else:
            self.server = self.loop.run_until_complete(
                asyncio.start_server(self.handle, "127.0.0.1", 0)
            )
        self.port = self.server.sockets[0].getsockname()[1] if self.uds is None else 0
        started.set()
        self.loop.run_forever()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1" if self.uds is None else "http://localhost/v1"

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        conn = h11.Connection(h11.SERVER)
        try:
            while True:
                body = b""
                while True:
                    event = conn.next_event()
                    if event is h11.NEED_DATA:
                        data = await reader.read(65536)
                        if not data:
                            return
                        conn.receive_data(data)
                    elif isinstance(event, h11.Data):
                        body += event.data
                    elif isinstance(event, h11.EndOfMessage):
                        break
                self.bodies.append(json.loads(body))
                status, headers, parts, then = self.answers.pop(0)
                if status is None:  # not HTTP at all
                    writer.write(b"".join(parts))
                    await writer.drain()
                    return
                writer.write(conn.send(h11.Response(status_code=status, headers=headers)))
                for part in parts:
                    writer.write(conn.send(h11.Data(data=part)))
                    await writer.drain()
                if then == "hold":
                    while await reader.read(65536):
                        pass  # until the client closes its end
                    self.left.set()
                    return
                writer.write(conn.send(h11.EndOfMessage()))
                await writer.drain()
                if then == "close":
                    return  # closed while the client keeps it for reuse (an idle timeout)
                conn.start_next_cycle()
        finally:
            writer.close()

    def stop(self) -> None:
        async def shut() -> None:
            self.server.close()
            handlers = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
            for task in handlers:  # connections the client kept open
                task.cancel()
            await asyncio.gather(*handlers, return_exceptions=True)

        asyncio.run_coroutine_threadsafe(shut(), self.loop).result()
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join()
        self.loop.close()


JSON = [("Content-Type", "application/json")]
SSE = [("Content-Type", "text/event-stream")]


@pytest.fixture
def serve():
    servers: list[Server] = []

    def start(answers: list, uds: Path | None = None) -> Server:
        servers.append(Server(answers, uds))
        return servers[-1]

    yield start
    for s in servers:
        s.stop()


def ask(url: str, calls, uds: str | None = None, hooks: bool = False):
    """Run `calls(llm)` on a new LLM for `url`; its result or BackendError."""

    async def go():
        llm = LLM(url, "k", 5.0, 0, "m", uds=uds)
        assert llm._chat is not None and llm._chat.lean is not None
        if hooks:
            seen: list = []

            async def hook(request):
                seen.append(request.url.path)

            llm.http.event_hooks["request"].append(hook)
        try:
            result = await calls(llm)
            return (result, seen) if hooks else result
        except BackendError as e:
            return e
        finally:
            await llm.close()

    return asyncio.run(go())


def test_one_connection_serves_requests_one_after_another(serve):
    s = serve([(200, JSON, [completion("one")], "keep"), (200, JSON, [completion("two")], "keep")])

    async def twice(llm):
        said = [await llm.chat(HISTORY), await llm.chat(HISTORY)]
        assert llm._lean.open == 0 and len(llm._lean.idle) == 1
        return said

    assert ask(s.url, twice) == ["one", "two"]
    assert s.connections == 1
    assert [b["messages"] for b in s.bodies] == [HISTORY, HISTORY]


def test_a_connection_the_server_closed_while_idle_is_not_reused(serve):
    s = serve([(200, JSON, [completion("one")], "close"), (200, JSON, [completion("two")], "keep")])

    async def twice(llm):
        first = await llm.chat(HISTORY)
        # the server closed its end after answering: wait until this side has seen it
        conn = llm._lean.idle[0]
        while not conn.reader.at_eof():
            await conn.reader.read(1)
        return [first, await llm.chat(HISTORY)]

    assert ask(s.url, twice) == ["one", "two"]
    assert s.connections == 2 and len(s.bodies) == 2


def test_a_stream_left_early_closes_its_connection(serve):
    s = serve(
        [
            (200, SSE, [chunk("first "), chunk("second ")], "hold"),
            (200, JSON, [completion("next")], "keep"),
        ]
    )

    async def leave_early(llm):
        stream = llm.stream(HISTORY)
        first = await anext(stream)
        await stream.aclose()  # the client went away
        await asyncio.to_thread(s.left.wait)
        assert llm._lean.open == 0 and llm._lean.idle == []
        return [first, await llm.chat(HISTORY)]

    assert ask(s.url, leave_early) == ["first ", "next"]
    assert s.left.is_set() and s.connections == 2
    assert s.bodies[0]["stream"] is True


def test_a_compressed_answer_is_read(serve):
    zipped = gzip.compress(completion("unzipped"))
    headers = [*JSON, ("Content-Encoding", "gzip")]
    s = serve([(200, headers, [zipped[:10], zipped[10:]], "keep")])
    assert ask(s.url, lambda llm: llm.chat(HISTORY)) == "unzipped"


def test_the_engine_s_unix_socket_takes_this_way(serve, tmp_path):
    sock = tmp_path / "engine.sock"
    s = serve([(200, SSE, [chunk("over "), chunk("the socket", "stop")], "keep")], uds=sock)

    async def stream(llm):
        return [piece async for piece in llm.stream(HISTORY)]

    assert ask(s.url, stream, uds=str(sock)) == ["over ", "the socket"]
    assert s.connections == 1


def test_a_client_with_event_hooks_takes_httpx2(serve):
    s = serve([(200, JSON, [completion("checked")], "keep")])
    text, seen = ask(s.url, lambda llm: llm.chat(HISTORY), hooks=True)
    assert text == "checked" and seen == ["/v1/chat/completions"]


@pytest.mark.parametrize(
    "garbage",
    [b"this is not HTTP\r\n\r\n", b'HTTP/1.1 200 OK\r\nContent-Length: 99\r\n\r\n{"cut'],
)
def test_a_server_that_speaks_no_http_is_the_sdk_s_sentence(serve, garbage):
    results = []
    s = serve([(None, [], [garbage], "close"), (None, [], [garbage], "close")])
    for lean in (True, False):

        async def call(llm, lean=lean):
            if not lean:
                llm._chat = None
            return await llm.chat(HISTORY)

        results.append(ask(s.url, call))
    fast, sdk = results
    assert isinstance(fast, BackendError) and isinstance(sdk, BackendError)
    assert fast.message == sdk.message and type(fast.__cause__) is type(sdk.__cause__)
    assert "could not reach the language model" in fast.message and s.connections == 2


def test_a_command_s_next_event_loop_opens_a_connection_of_its_own(serve):
    s = serve([(200, JSON, [completion("one")], "keep"), (200, JSON, [completion("two")], "keep")])
    llm = LLM(s.url, "k", 5.0, 0, "m")
    try:
        assert asyncio.run(llm.chat(HISTORY)) == "one"
        assert asyncio.run(llm.chat(HISTORY)) == "two"  # not the first loop's socket
    finally:
        asyncio.run(llm.close())
    assert s.connections == 2


@pytest.mark.parametrize(
    ("url", "uds", "lean"),
    [
        ("http://127.0.0.1:9/v1", None, True),
        ("http://localhost/v1", "/run/engine.sock", True),
        ("https://api.example.com/v1", None, False),
        ("http://user:secret@127.0.0.1:9/v1", None, False),  # httpx2 makes its header
    ],
)
def test_which_endpoints_take_this_way(url, uds, lean):
    assert usable(url, uds) is lean


def test_a_connection_above_descriptor_1023_is_reused(serve):
    """A busy daemon's sockets may be numbered above 1023, where select() cannot look."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if max(soft, hard if hard != resource.RLIM_INFINITY else 4096) < 1200:
        pytest.skip(f"this process may open only {max(soft, hard)} files")
    if soft < 1200:
        resource.setrlimit(resource.RLIMIT_NOFILE, (1200, hard))
    s = serve([(200, JSON, [completion("one")], "keep"), (200, JSON, [completion("two")], "keep")])
    held = []
    try:
        while not held or held[-1] < 1030:
            held.append(os.dup(0))

        async def twice(llm):
            said = [await llm.chat(HISTORY)]
            assert llm._lean.idle[0].writer.get_extra_info("socket").fileno() > 1023
            said.append(await llm.chat(HISTORY))
            return said

        assert ask(s.url, twice) == ["one", "two"]
        assert s.connections == 1
    finally:
        for fd in held:
            os.close(fd)
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
