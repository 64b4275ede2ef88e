"""Chat (and legacy) completions with a JSON body lmd encodes itself.

The openai SDK's `create` walks every request through its TypedDict transforms (about 0.1 ms
of CPU per message of history) and its request machinery, and builds the answer without
validation, field by field in Python; with a long history, a thousand LM_SCORE calls or a
streamed answer of hundreds of chunks, that is most of the daemon's work. So for calls whose
arguments are plain JSON, lmd encodes the body once and makes the first try itself, over the
same httpx2 client the SDK uses (or, to a local server, daemon/backends/lean_http.py), with the
SDK's headers, and validates the answer into the SDK's own models (`ChatCompletion`,
`ChatCompletionChunk`, `Completion`).

Anything but a good answer is the SDK's business, through its documented way of posting a
prepared body, `client.post(path, content=..., cast_to=..., stream=..., stream_cls=...)`: the
failed try is handed over as the SDK's own first try (`_Handover`), and the SDK retries as it
sees fit (Retry-After, `x-should-retry`, `llm_max_retries`) and raises its own exceptions, so
every failure is the same sentence (LLM.explain) as through `create`. Calls that are not plain
JSON (extra headers or query, a per-call timeout, unknown parameters, sentinels) go through
`create`. No private SDK name is used.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import json
from collections.abc import AsyncIterator, Callable
from typing import Any

import httpx2
import openai
from openai import AsyncStream
from openai.types import Completion
from openai.types.chat import ChatCompletion, ChatCompletionChunk

from daemon.backends.lean_http import WIRE_HEADERS, LeanClient

# Arguments of `create` that change more than the JSON body: those calls stay with `create`.
SDK_ONLY = frozenset({"extra_headers", "extra_query", "timeout", "stream"})


class Endpoint:
    """One endpoint (`/chat/completions` or `/completions`) taking bodies encoded here."""

    def __init__(
        self,
        client: Any,
        http: Any,
        path: str,
        create: Callable[..., Any],
        given: str,
        result: type,
        chunk: type | None,
        lean: LeanClient | None = None,
    ) -> None:
        """`client` is the SDK's AsyncOpenAI, `http` the httpx2.AsyncClient it was given;
        `lean`, when given, makes first tries to the same server."""
        self.client = client
        self.http = http
        self.path = path
        self.url = str(client.base_url).rstrip("/") + path
        self.lean = lean
        self.target = httpx2.URL(self.url).raw_path.decode("ascii")
        # stands for every lean request in httpx2's exceptions (built once: a request per
        # call costs what the lean way saves)
        self.request = httpx2.Request("POST", self.url)
        self.given = given  # the argument `body` receives positionally: messages or prompt
        self.result = result
        self.chunk = chunk
        # What `create` accepts, read from its signature so a new SDK parameter works at once.
        self.accepted = frozenset(inspect.signature(create).parameters) - SDK_ONLY - {given}
        self._headers: dict[str, str] | None = None
        self._lean_headers: dict[str, str] | None = None

    @classmethod
    def chat(cls, client: Any, http: Any, lean: LeanClient | None = None) -> Endpoint:
        create = client.chat.completions.create
        chunk = ChatCompletionChunk
        path = "/chat/completions"
        return cls(client, http, path, create, "messages", ChatCompletion, chunk, lean)

    @classmethod
    def completions(cls, client: Any, http: Any, lean: LeanClient | None = None) -> Endpoint:
        """The legacy endpoint (raw prompts for base models); streams stay with `create`."""
        create = client.completions.create
        return cls(client, http, "/completions", create, "prompt", Completion, None, lean)

    def body(self, given: Any, kwargs: dict[str, Any], stream: bool = False) -> bytes | None:
        """The JSON body `create` would send, or None when `create` must handle this call."""
        if not kwargs.keys() <= self.accepted or (stream and self.chunk is None):
            return None
        extra = kwargs.get("extra_body")
        if extra is not None and not isinstance(extra, dict):
            return None
        body = {k: v for k, v in kwargs.items() if k != "extra_body"}
        if stream:
            body["stream"] = True
        body[self.given] = given
        if extra:
            body.update(extra)
        try:
            # Encoded as the SDK encodes JSON; its sentinels, pydantic models and generators
            # are not plain JSON, so those calls go to `create`.
            return json.dumps(
                body, ensure_ascii=False, separators=(",", ":"), allow_nan=False
            ).encode()
        except (TypeError, ValueError, RecursionError):
            return None

    def headers(self) -> dict[str, str]:
        """The SDK's headers for a first try (read once, inside the event loop)."""
        if self._headers is None:
            client = self.client
            found = {k: v for k, v in client.default_headers.items() if isinstance(v, str)}
            found.update(client.auth_headers)
            found["x-stainless-retry-count"] = "0"
            read = getattr(client.timeout, "read", client.timeout)
            if read is not None:
                found["x-stainless-read-timeout"] = str(read)
            self._headers = found
        return self._headers

    def lean_headers(self) -> dict[str, str]:
        """What httpx2 would send: its client's headers, then the SDK's."""
        if self._lean_headers is None:
            self._lean_headers = {**dict(self.http.headers), **self.headers()}
        return self._lean_headers

    async def first_try(self, content: bytes, stream: bool = False) -> tuple[Any, Any]:
        """(the good response, None), or (None, what the try gave: a response or an error)."""
        lean = self.lean
        if lean is not None and lean.has_room() and not any(self.http.event_hooks.values()):
            # (hooks, such as a command's check of who holds the daemon's port, see every
            # request: a client with any takes httpx2's way)
            return await self._lean_try(content, stream)
        request = self.http.build_request("POST", self.url, content=content, headers=self.headers())
        try:
            response = await self.http.send(request, stream=stream)
        except Exception as e:  # the SDK decides what each one means
            return None, e
        if response.is_success and (not stream or _is_event_stream(response)):
            return response, None
        return None, response

    async def _lean_try(self, content: bytes, stream: bool) -> tuple[Any, Any]:
        assert self.lean is not None
        try:
            response = await self.lean.post(self.target, self.lean_headers(), content, self.request)
            if response.is_success and stream and _is_event_stream(response):
                return response, None
            try:
                await response.aread()
            finally:
                await response.aclose()
        except Exception as e:  # httpx2's own exceptions: the SDK decides what each one means
            return None, e
        if response.is_success and not stream:
            return response, None
        return None, response.as_httpx()

    async def create(self, content: bytes) -> Any:
        """POST the body; what `create` returns (a ChatCompletion or Completion)."""
        response, failed = await self.first_try(content)
        if response is None:
            async with self.handover(failed) as sdk:
                response = await sdk.post(self.path, content=content, cast_to=httpx2.Response)
        return self.parse(response)

    async def stream(self, content: bytes) -> AsyncIterator[Any]:
        """POST a streaming body; the chunks `create(stream=True)` would yield."""
        response, failed = await self.first_try(content, stream=True)
        if response is not None:
            async for chunk in self.events(response):
                yield chunk
            return
        async with self.handover(failed) as sdk:
            chunks = await sdk.post(
                self.path,
                content=content,
                cast_to=self.result,
                stream=True,
                stream_cls=_stream_of(self.chunk),
            )
            try:
                async for chunk in chunks:
                    yield chunk
            finally:
                await chunks.close()

    @contextlib.asynccontextmanager
    async def handover(self, failed: Any) -> AsyncIterator[Any]:
        """A copy of the SDK client whose first try answers with `failed`: from there on, the
        SDK's own retries and exceptions apply."""
        http = httpx2.AsyncClient(transport=_Handover(failed, self.http), timeout=self.http.timeout)
        async with http:
            yield self.client.with_options(http_client=http)

    async def events(self, response: Any) -> AsyncIterator[Any]:
        """The chunks of a good stream, read as the SDK reads them: up to [DONE], an error
        event raised as APIError, a cut connection as APIConnectionError."""

        events = aiter(httpx2.EventSource(response))
        try:
            async for sse in events:
                if sse.data.startswith("[DONE]"):
                    # Read the rest (briefly) so the connection can serve the next request.
                    with contextlib.suppress(httpx2.HTTPError, TimeoutError):
                        async with asyncio.timeout(1.0):
                            async for _ in events:
                                pass
                    break
                data = json.loads(sse.data)
                if isinstance(data, dict) and data.get("error"):
                    error = data["error"]
                    message = error.get("message") if isinstance(error, dict) else None
                    if not message or not isinstance(message, str):
                        message = "An error occurred during streaming"
                    raise openai.APIError(message, request=response.request, body=error)
                yield self.build(self.chunk, data)
        except httpx2.TimeoutException as e:
            raise openai.APITimeoutError(request=response.request) from e
        except httpx2.RequestError as e:
            raise openai.APIConnectionError(request=response.request) from e
        finally:
            await response.aclose()

    def parse(self, response: Any) -> Any:
        """The answer as the SDK reads it: its model, the text of a non-JSON answer, or
        whatever else the JSON holds."""
        if not response.headers.get("content-type", "*").split(";")[0].endswith("json"):
            try:
                data = json.loads(response.content)
            except ValueError:
                return response.text
        else:
            try:
                return self.result.model_validate_json(response.content)  # type: ignore[attr-defined]
            except ValueError:
                data = json.loads(response.content)  # not JSON: LLM.explain says so
        return self.build(self.result, data) if isinstance(data, dict) else data

    @staticmethod
    def build(model: Any, data: dict) -> Any:
        """`model` from `data`: validated when it fits (fast), else built without validation,
        as the SDK builds every answer (odd but readable answers still arrive)."""
        try:
            return model.model_validate(data)
        except ValueError:
            return model.model_construct(**data)


def _is_event_stream(response: Any) -> bool:
    kind = response.headers.get("content-type", "").split(";")[0].strip().lower()
    return kind == "text/event-stream"


def _stream_of(chunk: Any) -> Any:

    return AsyncStream[chunk]


class _Handover(httpx2.AsyncBaseTransport):
    """A transport answering the first request with a try already made, the rest for real."""

    def __init__(self, failed: Any, http: Any) -> None:
        self.failed = failed
        self.http = http

    async def handle_async_request(self, request: Any) -> Any:
        failed, self.failed = self.failed, None
        if failed is None:
            return await self.http.send(request, stream=True)
        if isinstance(failed, BaseException):
            raise failed
        await failed.aread()
        # The body is decoded already: send it on without the encoding headers.
        headers = [(k, v) for k, v in failed.headers.multi_items() if k.lower() not in WIRE_HEADERS]
        return httpx2.Response(failed.status_code, headers=headers, content=failed.content)

    async def aclose(self) -> None:
        pass  # the daemon's own client and pools stay open
