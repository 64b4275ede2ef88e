"""A real OpenAI-compatible HTTP server on 127.0.0.1 for tests and benchmarks.

It answers /v1/chat/completions, /v1/completions and /v1/models with scripted replies,
streams, logprobs, error codes, latency, broken bodies and dropped connections, and records
every request it receives so tests can assert the bodies the daemon sent.

    backend = FakeBackend().start()
    backend.queue("first reply", Reply(status=500), Reply("7", logprobs=[...]))
    backend.handler = lambda body: Reply(...)   # or compute replies from the request
    ... backend.requests[-1].body["messages"] ...
    backend.stop()
"""

from __future__ import annotations

import json
import socket
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from daemon.backends.capabilities import shared_cache

DEFAULT_CAPABILITIES: dict[str, Any] = {
    "tools": False,
    "tool_choice": False,
    "json_schema": False,
    "schema_format": "json_schema",
    "logprobs": True,
    "top_logprobs": 20,
    "n": True,
    "tokenize": False,
    "tokenize_path": "/extras/tokenize",
    "prefill": True,
}


@dataclass
class Reply:
    """One scripted answer.

    text: the assistant's content (or the completion text).
    status: HTTP status; non-200 sends an OpenAI-style error object (or `body`).
    delay: seconds to wait before answering; chunk_delay: between stream chunks.
    logprobs: per generated token, [(token, logprob, [(alt_token, alt_logprob), ...]), ...];
        sent in chat format on chat calls and in legacy format on completions calls.
    body: raw body to send instead (bytes/str sent verbatim, dict as JSON) — garbage tests.
    headers: extra response headers (e.g. Retry-After).
    reasoning: a `reasoning_content` field, as thinking models on vLLM send.
    truncate: for streams, close the connection after this many chunks without [DONE].
    reset: close the connection without any response.
    chunks: how to split `text` when streaming (default: words).
    """

    text: str = "ok"
    status: int = 200
    delay: float = 0.0
    chunk_delay: float = 0.0
    logprobs: list | None = None
    body: Any = None
    headers: dict[str, str] = field(default_factory=dict)
    reasoning: str | None = None
    truncate: int | None = None
    reset: bool = False
    chunks: list[str] | None = None
    finish_reason: str = "stop"
    tool_calls: list[tuple[str, str]] | None = None  # (name, arguments as sent), chat only


@dataclass
class Recorded:
    method: str
    path: str
    headers: Any  # an http.client.HTTPMessage: case-insensitive, headers["authorization"]
    body: Any  # parsed JSON, or the raw text when not JSON


class Capabilities(dict):
    """The profile the backend answers lmd's probe from; every change runs `changed` (the
    backend then forgets the probe results kept for it: tests/daemons.py probed_on)."""

    def __init__(self, profile: dict[str, Any], changed: Callable[[], None]) -> None:
        super().__init__(profile)
        self._changed = changed

    def __setitem__(self, key: str, value: Any) -> None:
        super().__setitem__(key, value)
        self._changed()

    def __delitem__(self, key: str) -> None:
        super().__delitem__(key)
        self._changed()

    def update(self, *args: Any, **kwargs: Any) -> None:
        super().update(*args, **kwargs)
        self._changed()

    def setdefault(self, key: str, default: Any = None) -> Any:
        value = super().setdefault(key, default)
        self._changed()
        return value

    def pop(self, *args: Any) -> Any:
        value = super().pop(*args)
        self._changed()
        return value

    def clear(self) -> None:
        super().clear()
        self._changed()


class FakeBackend:
    """The server. Replies come from `handler(body)` if set, else the queue, else `default`."""

    def __init__(self, models: list[str] | None = None) -> None:
        self._lock = threading.Lock()
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None
        # databases holding a probe result for this backend (tests/daemons.py probed_on)
        self.probe_kept_in: list[str] = []
        self.reset(models)

    def reset(self, models: list[str] | None = None) -> None:
        """Back to a fresh backend's script and record (the server keeps running): a backend
        shared by a module's tests is reset before each of them."""
        self.models = models or ["fake-model"]
        self.requests: list[Recorded] = []
        self.default = Reply("ok")
        self.handler: Callable[[dict], Reply | str | None] | None = None
        self.reject_n = False  # answer 400 to n > 1, as llama.cpp and Ollama do
        self.no_logprobs = False  # ignore logprobs requests, as some servers do
        self.ignore_n = False  # answer n > 1 with one choice, as some servers do
        self.latency = 0.0  # added to every reply
        # What the backend shows lmd's capability probe (requests with an X-Lmd-Probe header,
        # answered from here and kept in `probes`, apart from the scripted requests): by
        # default a text-only server with logprobs and n, so the text protocols are used.
        self.capabilities = DEFAULT_CAPABILITIES
        self.probes: list[Recorded] = []
        self._queue: deque[Reply] = deque()
        self.active = 0
        self.max_active = 0
        # Requests whose client (lmd) closed the connection before the answer was whole
        # (mid-stream, or during `delay`: the model reading the prompt): their bodies.
        self.closed: list[Any] = []
        self.client_closed = threading.Event()

    @property
    def capabilities(self) -> Capabilities:
        return self._capabilities

    @capabilities.setter
    def capabilities(self, profile: dict[str, Any]) -> None:
        self._capabilities = Capabilities(profile, self.forget_probes)
        self.forget_probes()

    def forget_probes(self) -> None:
        """Drop the probe results kept for this backend (its profile changed): a daemon on
        those homes then probes it itself."""
        import sqlite3

        kept, self.probe_kept_in = self.probe_kept_in, []
        for path in kept:
            db = sqlite3.connect(path)
            try:
                with db:
                    db.execute("DELETE FROM backend_capabilities WHERE endpoint = ?", [self.url])
            finally:
                db.close()

    # -- control ---------------------------------------------------------------------------
    def start(self) -> FakeBackend:
        backend = self

        class Handler(_Handler):
            owner = backend

        server = _Server(("127.0.0.1", 0), Handler)
        self._server = server
        # shutdown() waits for serve_forever's next poll: the default 0.5 s poll made every
        # test's teardown half a second long (about 40% of a whole `make test`).
        self._thread = threading.Thread(
            target=server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True
        )
        self._thread.start()
        # the port may be one an earlier backend of this process had: what the process's probe
        # cache learnt of that one is not true of this one
        shared_cache().forget(self.url)
        return self

    def stop(self) -> None:
        if self._server:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    def __enter__(self) -> FakeBackend:
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()

    @property
    def port(self) -> int:
        assert self._server is not None
        return self._server.server_address[1]

    @property
    def url(self) -> str:
        """Base URL to give openai clients and openai_chat_endpoint."""
        return f"http://127.0.0.1:{self.port}/v1"

    def queue(self, *replies: Reply | str) -> None:
        with self._lock:
            for r in replies:
                self._queue.append(Reply(r) if isinstance(r, str) else r)

    def clear(self) -> None:
        with self._lock:
            self._queue.clear()
            self.requests.clear()

    @property
    def chat_requests(self) -> list[dict]:
        return [r.body for r in self.requests if r.path.endswith("/chat/completions")]

    def next_reply(self, body: dict) -> Reply:
        if self.handler is not None:
            r = self.handler(body)
            if r is not None:
                return Reply(r) if isinstance(r, str) else r
        with self._lock:
            if self._queue:
                return self._queue.popleft()
        return self.default


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 512  # listen() backlog: the default 5 drops bursts of connections

    def handle_error(self, request, client_address) -> None:
        import sys

        if isinstance(sys.exc_info()[1], ConnectionError):
            return  # a client killed mid-request (crash tests): not the backend's error
        super().handle_error(request, client_address)


class _Handler(BaseHTTPRequestHandler):
    owner: FakeBackend
    protocol_version = "HTTP/1.1"
    # Buffer writes and disable Nagle: headers and body leave in one segment, so no client
    # waits on a delayed ACK (that cost 40 ms a request).
    wbufsize = 1 << 16
    disable_nagle_algorithm = True

    def log_message(self, *args: Any) -> None:  # keep test output clean
        pass

    def do_GET(self) -> None:
        if self.headers.get("X-Lmd-Probe"):  # what the server says of itself (/props, ...)
            with self.owner._lock:
                self.owner.probes.append(Recorded(self.command, self.path, self.headers, {}))
        else:
            self._record(None)
        if self.path.rstrip("/").endswith("/models"):
            data = [{"id": m, "object": "model", "owned_by": "fake"} for m in self.owner.models]
            self._send_json(200, {"object": "list", "data": data})
        else:
            self._send_json(404, _error("not found", "invalid_request_error"))

    def do_POST(self) -> None:
        length = int(self.headers.get("content-length") or 0)
        raw = self.rfile.read(length) if length else b""
        if len(raw) < length:
            # the client died mid-request (a killed test process): nothing to record or
            # answer; recording it raced with the next test's requests (an empty body)
            self.close_connection = True
            return
        try:
            body = json.loads(raw) if raw else {}
        except ValueError:
            body = raw.decode("utf-8", "replace")
        if self.headers.get("X-Lmd-Probe"):
            return self._probe(self.headers["X-Lmd-Probe"], body)
        if self.path.rstrip("/").endswith("/tokenize"):  # counting, when the profile has it
            return self._probe("tokenize", body)
        self._record(body)
        owner = self.owner
        owner.active += 1
        owner.max_active = max(owner.max_active, owner.active)
        try:
            self._answer(body)
        finally:
            owner.active -= 1

    def _record(self, body: Any) -> None:
        with self.owner._lock:
            self.owner.requests.append(Recorded(self.command, self.path, self.headers, body))

    def _answer(self, body: Any) -> None:
        path = self.path.rstrip("/")
        if not isinstance(body, dict):
            return self._send_json(400, _error("body is not JSON", "invalid_request_error"))
        chat = path.endswith("/chat/completions")
        if not chat and not path.endswith("/completions"):
            return self._send_json(404, _error("not found", "invalid_request_error"))
        n = int(body.get("n") or 1)
        if n > 1 and self.owner.reject_n:
            return self._send_json(400, _error("n > 1 is not supported", "invalid_request_error"))
        if self.owner.ignore_n:
            n = 1
        replies = [self.owner.next_reply(body) for _ in range(n)]
        first = replies[0]
        wait = first.delay + self.owner.latency
        if wait and self._closed_within(wait):
            return self._client_left(body)  # lmd gave up while the "model" read the prompt
        if first.reset:
            self.connection.setsockopt(
                socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00"
            )
            self.close_connection = True
            self.connection.close()
            return
        if first.status != 200 or first.body is not None:
            payload = first.body
            if payload is None:
                payload = _error(first.text, "server_error", first.status)
            return self._send_raw(first.status, payload, first.headers)
        model = body.get("model", "fake-model")
        if body.get("stream"):
            return self._stream(first, model, chat, body)
        want_logprobs = not self.owner.no_logprobs and (
            body.get("logprobs") not in (None, False, 0)
        )
        choices = []
        for i, r in enumerate(replies):
            if chat:
                message: dict[str, Any] = {"role": "assistant", "content": r.text}
                if r.reasoning is not None:
                    message["reasoning_content"] = r.reasoning
                if r.tool_calls:
                    message["tool_calls"] = [
                        {"id": f"call_{k}", "type": "function",
                         "function": {"name": name, "arguments": args}}
                        for k, (name, args) in enumerate(r.tool_calls)
                    ]  # fmt: skip
                    message["content"] = r.text or None
                choice: dict[str, Any] = {
                    "index": i,
                    "message": message,
                    "finish_reason": "tool_calls" if r.tool_calls else r.finish_reason,
                }
                if want_logprobs and r.logprobs is not None:
                    choice["logprobs"] = {"content": _chat_logprobs(r.logprobs)}
            else:
                choice = {"index": i, "text": r.text, "finish_reason": r.finish_reason}
                if want_logprobs and r.logprobs is not None:
                    choice["logprobs"] = _legacy_logprobs(r.logprobs)
                else:
                    choice["logprobs"] = None
            choices.append(choice)
        prompt_tokens = len(json.dumps(body.get("messages") or body.get("prompt") or "")) // 4
        completion_tokens = sum(max(1, len(r.text) // 4) for r in replies)
        self._send_json(
            200,
            {
                "id": "chatcmpl-fake" if chat else "cmpl-fake",
                "object": "chat.completion" if chat else "text_completion",
                "created": int(time.time()),
                "model": model,
                "choices": choices,
                "usage": {
                    "prompt_tokens": prompt_tokens,
                    "completion_tokens": completion_tokens,
                    "total_tokens": prompt_tokens + completion_tokens,
                },
            },
            first.headers,
        )

    def _stream(self, r: Reply, model: str, chat: bool, body: dict) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Connection", "close")
        for k, v in r.headers.items():
            self.send_header(k, v)
        self.end_headers()
        self.close_connection = True
        pieces = r.chunks if r.chunks is not None else _words(r.text)
        try:
            for i, piece in enumerate(pieces):
                if r.truncate is not None and i >= r.truncate:
                    return  # the connection closes mid-stream, without [DONE]
                if chat:
                    delta = {"content": piece}
                    if i == 0:
                        delta["role"] = "assistant"
                    choice = {"index": 0, "delta": delta, "finish_reason": None}
                    obj = "chat.completion.chunk"
                else:
                    choice = {"index": 0, "text": piece, "finish_reason": None}
                    obj = "text_completion"
                chunk = {
                    "id": "chatcmpl-fake",
                    "object": obj,
                    "created": int(time.time()),
                    "model": model,
                    "choices": [choice],
                }
                self.wfile.write(f"data: {json.dumps(chunk)}\n\n".encode())
                self.wfile.flush()
                if r.chunk_delay and self._closed_within(r.chunk_delay):
                    return self._client_left(body)
            final = {"index": 0, "delta": {}, "finish_reason": r.finish_reason}
            if not chat:
                final = {"index": 0, "text": "", "finish_reason": r.finish_reason}
            end = {
                "id": "chatcmpl-fake",
                "object": "chat.completion.chunk",
                "created": int(time.time()),
                "model": model,
                "choices": [final],
            }
            self.wfile.write(f"data: {json.dumps(end)}\n\n".encode())
            options = body.get("stream_options") or {}
            if isinstance(options, dict) and options.get("include_usage"):
                # OpenAI's way: one more chunk, no choices, the request's usage
                prompt = len(json.dumps(body.get("messages") or body.get("prompt") or "")) // 4
                done = {**end, "choices": [], "usage": {
                    "prompt_tokens": prompt, "completion_tokens": len(pieces),
                    "total_tokens": prompt + len(pieces),
                }}  # fmt: skip
                self.wfile.write(f"data: {json.dumps(done)}\n\n".encode())
            self.wfile.write(b"data: [DONE]\n\n")
            self.wfile.flush()
        except (BrokenPipeError, ConnectionResetError):
            self._client_left(body)

    def _closed_within(self, seconds: float) -> bool:
        """Wait `seconds`, or until the client closes its connection (then True)."""
        import select

        deadline = time.monotonic() + seconds
        while (left := deadline - time.monotonic()) > 0:
            if not select.select([self.connection], [], [], left)[0]:
                return False
            try:
                if not self.connection.recv(1, socket.MSG_PEEK):
                    return True
            except OSError:
                return True
            time.sleep(left)  # bytes of a next request, not a close: wait the rest
        return False

    def _client_left(self, body: Any) -> None:
        self.close_connection = True
        with self.owner._lock:
            self.owner.closed.append(body)
        self.owner.client_closed.set()

    def _probe(self, feature: str, body: Any) -> None:
        """Answer lmd's capability probe as a server with `owner.capabilities` would."""
        owner = self.owner
        with owner._lock:
            owner.probes.append(Recorded(self.command, self.path, self.headers, body))
        caps = owner.capabilities
        if owner.latency:
            time.sleep(owner.latency)
        if feature == "tokenize":
            path = self.path.rstrip("/")
            if caps.get("tokenize") and path == caps.get("tokenize_path", "/extras/tokenize"):
                text = str(next(iter(body.values()), "")) if isinstance(body, dict) else ""
                return self._send_json(200, {"tokens": list(range(1, len(text.split()) + 1))})
            return self._send_json(404, _error("not found", "invalid_request_error"))
        if not isinstance(body, dict):
            return self._send_json(400, _error("body is not JSON", "invalid_request_error"))
        message: dict[str, Any] = {"role": "assistant", "content": "I can only talk."}
        choice: dict[str, Any] = {"index": 0, "message": message, "finish_reason": "stop"}
        choices = [choice]
        forced = isinstance(body.get("tool_choice"), dict)
        if body.get("tools") and (caps.get("tools") or (forced and caps.get("tool_choice"))):
            name = body["tools"][0]["function"]["name"]
            call = {"name": name, "arguments": json.dumps({"word": "ok"})}
            message.update(content=None, tool_calls=[{"id": "call_1", "type": "function",
                                                      "function": call}])  # fmt: skip
            choice["finish_reason"] = "tool_calls"
        if "response_format" in body:
            fmt = body["response_format"]
            shape = caps.get("schema_format", "json_schema") if caps.get("json_schema") else ""
            if fmt.get("type") != shape:
                return self._send_json(400, _error("response_format", "invalid_request_error"))
            schema = fmt["json_schema"]["schema"] if shape == "json_schema" else fmt["schema"]
            key, spec = next(iter(schema["properties"].items()))
            message["content"] = json.dumps({key: spec["enum"][0]})
        if body.get("logprobs"):
            if not caps.get("logprobs"):
                pass  # a server that ignores logprobs: none come back
            elif body.get("top_logprobs", 0) > caps.get("top_logprobs", 0):
                return self._send_json(400, _error("top_logprobs", "invalid_request_error"))
            else:
                alts = [(f"t{i}", -float(i)) for i in range(body.get("top_logprobs", 0))]
                choice["logprobs"] = {"content": _chat_logprobs([("Yes", -0.1, alts)])}
        if int(body.get("n") or 1) > 1 and caps.get("n"):
            choices = [choice, {**choice, "index": 1}]
        messages = body.get("messages") or []
        if messages and messages[-1].get("role") == "assistant":
            message["content"] = " 7, 8, 9, 10" if caps.get("prefill") else "1, 2, 3"
        self._send_json(200, {"id": "chatcmpl-probe", "object": "chat.completion",
                              "created": int(time.time()), "model": body.get("model"),
                              "choices": choices})  # fmt: skip

    def _send_json(self, status: int, payload: Any, headers: dict | None = None) -> None:
        self._send_raw(status, payload, headers or {})

    def _send_raw(self, status: int, payload: Any, headers: dict) -> None:
        if isinstance(payload, bytes):
            data = payload
        elif isinstance(payload, str):
            data = payload.encode()
        else:
            data = json.dumps(payload).encode()
        try:
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            for k, v in headers.items():
                self.send_header(k, v)
            self.end_headers()
            self.wfile.write(data)
            self.wfile.flush()
        except (BrokenPipeError, ConnectionResetError):
            pass


def _error(message: str, kind: str, code: int | None = None) -> dict:
    return {"error": {"message": message, "type": kind, "param": None, "code": code}}


def _words(text: str) -> list[str]:
    """Split text into stream chunks that join back exactly."""
    out, current = [], ""
    for ch in text:
        current += ch
        if ch == " ":
            out.append(current)
            current = ""
    if current:
        out.append(current)
    return out or [""]


def _entry(token: str, logprob: float) -> dict:
    return {"token": token, "logprob": logprob, "bytes": list(token.encode("utf-8"))}


def _chat_logprobs(spec: list) -> list[dict]:
    out = []
    for token, logprob, alts in spec:
        item = _entry(token, logprob)
        item["top_logprobs"] = [_entry(t, lp) for t, lp in alts]
        out.append(item)
    return out


def _legacy_logprobs(spec: list) -> dict:
    tokens, token_logprobs, top, offsets, pos = [], [], [], [], 0
    for token, logprob, alts in spec:
        tokens.append(token)
        token_logprobs.append(logprob)
        top.append(dict(alts))
        offsets.append(pos)
        pos += len(token)
    return {
        "tokens": tokens,
        "token_logprobs": token_logprobs,
        "top_logprobs": top,
        "text_offset": offsets,
    }


if __name__ == "__main__":  # `python tests/fake_backend.py [--latency S]` serves until Ctrl-C
    import sys

    b = FakeBackend().start()
    if "--latency" in sys.argv:
        b.latency = float(sys.argv[sys.argv.index("--latency") + 1])
    print(b.url, flush=True)
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        b.stop()
