"""The first try of a prepared body to a local server: HTTP/1.1 through h11 on asyncio streams.

A streamed answer's first words wait on this exchange. Through httpx2 (client, pools, httpcore,
anyio) it cost about 2.5 ms more than the same request written with h11, the HTTP/1.1 protocol
library httpcore itself is built on (measured against the stand-in backend): a twentieth of
the embedded engine's own time to first token. So a request to a plain `http://` endpoint or
to the embedded engine's Unix socket is made here; https (a hosted API, where the network takes
far longer) and every retry stay with httpx2 and the SDK (daemon/backends/prepared_body.py).

The answer looks enough like an httpx2.Response for prepared_body.py (status, headers, the
body as bytes or text, closing); failures are httpx2's own exceptions, so the SDK reads them
as it reads its own. Connections are kept alive and reused for a few seconds, as httpx2's are.
"""

from __future__ import annotations

import asyncio
import codecs
import select
import time
import zlib
from collections.abc import AsyncIterator
from typing import Any
from urllib.parse import urlsplit

import h11
import httpx2

from daemon.backends.http_pools import KEEPALIVE_SECS

# what a body read whole and decompressed no longer has: a response rebuilt from it drops them
WIRE_HEADERS = frozenset({"content-encoding", "content-length", "transfer-encoding"})
MAX_IDLE = 64  # connections kept for reuse (as the httpx2 pools keep)
MAX_OPEN = 256  # beyond this many at once, requests wait in httpx2's pools
READ_SIZE = 65536


def usable(url: str, uds: str | None) -> bool:
    """Whether requests to `url` (or to the socket `uds`) can take this way: plain http
    without credentials in the URL (httpx2 turns those into a header of its own)."""
    if uds is not None:
        return True
    parts = urlsplit(url)
    return parts.scheme == "http" and parts.username is None and parts.password is None


class _Connection:
    """One socket and its h11 state, reused across requests while both ends keep it open."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer
        self.h11 = h11.Connection(h11.CLIENT)
        self.idle_since = 0.0
        self.loop = asyncio.get_running_loop()

    def reusable(self, now: float) -> bool:
        """Still open, not expired, of this event loop (a command may run several), and
        silent (a closed or chattering peer is not reused)."""
        if now - self.idle_since > KEEPALIVE_SECS or self.writer.is_closing():
            return False
        if self.loop is not asyncio.get_running_loop():
            return False
        sock = self.writer.get_extra_info("socket")
        if sock is None or self.reader.at_eof():
            return False
        poll = select.poll()  # (select.select cannot take a descriptor above 1023)
        poll.register(sock.fileno(), select.POLLIN)
        return not poll.poll(0)

    def close(self) -> None:
        try:
            self.writer.close()
        except RuntimeError:
            pass  # its event loop is closed, and the socket with it


class LeanClient:
    """Plain-HTTP (or Unix-socket) POSTs to one server, with kept-alive connections."""

    def __init__(self, url: str, uds: str | None, timeout: Any) -> None:
        """`timeout` is the httpx2.Timeout of the client this one stands in for."""
        parts = urlsplit(url)
        self.host = parts.hostname or "localhost"
        self.port = parts.port or 80
        self.host_header = parts.netloc.rpartition("@")[2]
        self.uds = uds
        self.connect_timeout = getattr(timeout, "connect", None)
        self.read_timeout = getattr(timeout, "read", None)
        self.write_timeout = getattr(timeout, "write", None)
        self.idle: list[_Connection] = []
        self.open = 0  # requests under way

    def has_room(self) -> bool:
        return self.open < MAX_OPEN

    async def post(
        self, target: str, headers: dict[str, str], content: bytes, request: httpx2.Request
    ) -> LeanResponse:
        """POST `content` to `target` (a path); the response once its head has arrived.
        `request` stands for this one in httpx2's exceptions and the SDK's errors."""
        self.open += 1
        try:
            conn = self._idle_connection() or await self._connect(request)
        except BaseException:
            self.open -= 1
            raise
        try:
            head = [("Host", self.host_header), ("Content-Length", str(len(content)))]
            head += [(k, v) for k, v in headers.items() if k.lower() not in _SET_HERE]
            request_events = (
                h11.Request(method="POST", target=target, headers=head),
                h11.Data(data=content),
                h11.EndOfMessage(),
            )
            conn.writer.write(b"".join(conn.h11.send(e) or b"" for e in request_events))
            async with asyncio.timeout(self.write_timeout):
                await conn.writer.drain()
            response = LeanResponse(self, conn, request)
            event = await response.next_event()
            while isinstance(event, h11.InformationalResponse):
                event = await response.next_event()  # a 100 Continue, say: the answer follows
            if not isinstance(event, h11.Response):
                raise httpx2.RemoteProtocolError("the server sent no response", request=request)
            response.begin(event)
            return response
        except BaseException as e:
            self.open -= 1
            conn.close()  # a request cut short (cancelled, failed) leaves no half-used socket
            _raise_as_httpx(e, request)
            raise

    def _idle_connection(self) -> _Connection | None:
        now = time.monotonic()
        while self.idle:
            conn = self.idle.pop()
            if conn.reusable(now):
                return conn
            conn.close()
        return None

    async def _connect(self, request: httpx2.Request) -> _Connection:
        try:
            async with asyncio.timeout(self.connect_timeout):
                if self.uds is not None:
                    reader, writer = await asyncio.open_unix_connection(self.uds, limit=READ_SIZE)
                else:
                    reader, writer = await asyncio.open_connection(
                        self.host, self.port, limit=READ_SIZE
                    )
        except TimeoutError:
            raise httpx2.ConnectTimeout("the connection timed out", request=request) from None
        except OSError as e:
            raise httpx2.ConnectError(str(e), request=request) from e
        return _Connection(reader, writer)

    def release(self, conn: _Connection) -> None:
        """Take a connection back after a whole exchange, when both sides keep it open."""
        state = conn.h11
        if state.our_state is h11.DONE and state.their_state is h11.DONE:
            state.start_next_cycle()
            if len(self.idle) < MAX_IDLE:
                conn.idle_since = time.monotonic()
                self.idle.append(conn)
                return
        conn.close()

    def close(self) -> None:
        while self.idle:
            self.idle.pop().close()


# headers this client writes itself
_SET_HERE = frozenset({"host", "content-length", "transfer-encoding"})
# what a body compressed as httpx2 asks servers to compress it (Accept-Encoding: gzip,
# deflate) is decompressed with
_WBITS = {"gzip": 16 + zlib.MAX_WBITS, "deflate": zlib.MAX_WBITS, "identity": None}


class LeanResponse:
    """An HTTP response read as it arrives, with the parts of httpx2.Response lmd reads."""

    def __init__(self, client: LeanClient, conn: _Connection, request: httpx2.Request) -> None:
        self.client = client
        self.conn: _Connection | None = conn
        self.request = request
        self.status_code = 0
        self.headers = httpx2.Headers()
        self._content: bytes | None = None
        self._ended = False

    def begin(self, head: h11.Response) -> None:
        self.status_code = head.status_code
        self.headers = httpx2.Headers(
            [(k.decode("latin-1"), v.decode("latin-1")) for k, v in head.headers]
        )

    @property
    def is_success(self) -> bool:
        return 200 <= self.status_code < 300

    async def next_event(self) -> Any:
        """The next h11 event, reading from the socket as needed (within the read timeout)."""
        conn = self.conn
        assert conn is not None, "the response is closed"
        while True:
            event = conn.h11.next_event()
            if event is not h11.NEED_DATA:
                return event
            async with asyncio.timeout(self.client.read_timeout):
                data = await conn.reader.read(READ_SIZE)
            conn.h11.receive_data(data)  # b"" says the server closed the connection

    async def aiter_bytes(self) -> AsyncIterator[bytes]:
        """The body as it arrives (decompressed)."""
        if self._content is not None:
            yield self._content
            return
        encoding = self.headers.get("content-encoding", "identity").strip().lower()
        if encoding not in _WBITS:
            self._drop()
            raise httpx2.DecodingError(
                f"unknown content encoding {encoding!r}", request=self.request
            )
        wbits = _WBITS[encoding]
        inflate = zlib.decompressobj(wbits) if wbits is not None else None
        try:
            while self.conn is not None and not self._ended:
                event = await self.next_event()
                if isinstance(event, h11.Data):
                    data = bytes(event.data)
                    if inflate is not None:
                        try:
                            data = inflate.decompress(data)
                        except zlib.error as e:
                            raise httpx2.DecodingError(str(e), request=self.request) from e
                    if data:
                        yield data
                elif isinstance(event, h11.EndOfMessage):
                    self._ended = True
                    self._done(keep=True)
                elif isinstance(event, h11.ConnectionClosed):
                    raise httpx2.RemoteProtocolError(
                        "the server closed the connection before the answer ended",
                        request=self.request,
                    )
        except BaseException as e:
            self._drop()
            _raise_as_httpx(e, self.request)
            raise

    async def aiter_text(self) -> AsyncIterator[str]:
        decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        async for chunk in self.aiter_bytes():
            text = decoder.decode(chunk)
            if text:
                yield text
        rest = decoder.decode(b"", final=True)
        if rest:
            yield rest

    async def aread(self) -> bytes:
        if self._content is None:
            self._content = b"".join([chunk async for chunk in self.aiter_bytes()])
        return self._content

    @property
    def content(self) -> bytes:
        if self._content is None:
            raise httpx2.ResponseNotRead()
        return self._content

    @property
    def text(self) -> str:
        return self.content.decode("utf-8", errors="replace")

    async def aclose(self) -> None:
        """Done with the answer: a connection whose answer was not read to its end is closed
        (so the server stops writing it), a finished one kept for the next request."""
        self._drop()

    def _drop(self) -> None:
        self._done(keep=False)

    def _done(self, keep: bool) -> None:
        """The exchange is over: its connection kept for the next request, or closed."""
        conn, self.conn = self.conn, None
        if conn is None:
            return
        self.client.open -= 1
        if keep:
            self.client.release(conn)
        else:
            conn.close()

    def as_httpx(self) -> httpx2.Response:
        """This (read) answer as an httpx2.Response, for the SDK to judge."""
        # the body is decompressed and whole: no encoding or length of the wire to apply again
        headers = [(k, v) for k, v in self.headers.multi_items() if k.lower() not in WIRE_HEADERS]
        return httpx2.Response(
            self.status_code, headers=headers, content=self.content, request=self.request
        )


def _raise_as_httpx(e: BaseException, request: httpx2.Request) -> None:
    """Raise `e` as httpx2 would have raised it (what the SDK and prepared_body.py read);
    return when it is one of httpx2's already, a cancellation, or no failure of the exchange."""
    if isinstance(e, TimeoutError):
        raise httpx2.ReadTimeout("the server did not answer in time", request=request) from e
    if isinstance(e, h11.RemoteProtocolError):
        raise httpx2.RemoteProtocolError(str(e), request=request) from e
    if isinstance(e, OSError):
        raise httpx2.ReadError(str(e) or type(e).__name__, request=request) from e
