"""A lean path for chat completions (and legacy completions), beside the openai SDK.

The SDK spends milliseconds of CPU per call walking each request through its TypedDict
transforms (about 0.1 ms per message of history) and building the response models; with a
long history, or a thousand LM_SCORE calls, that is most of the daemon's work. For requests
that are plain JSON this path posts the same body with the SDK client's own httpx pool and
builds the same `ChatCompletion` (or, streamed, decodes the events with the SDK's own SSE
decoder into the same chunks, ending at [DONE] and raising on an error event as the SDK does),
following the SDK's retry policy and raising the SDK's own exception types, so `LLM.explain`
maps errors exactly as before. Anything else (extra headers
or query, a per-call timeout, unknown parameters, values that are not plain JSON) goes through
the SDK, as does everything when the SDK lacks the internals used here. `FastCompletions`
does the same for the legacy `/completions` endpoint (not streamed).
"""

from __future__ import annotations

import json
import logging
import math
import random
from collections.abc import AsyncIterator
from typing import Any

log = logging.getLogger("lmd.llm")

# The SDK's retry constants (openai._constants); the literals are their values since 1.0.
INITIAL_RETRY_DELAY = 0.5
MAX_RETRY_DELAY = 8.0
MAX_RETRY_AFTER_DELAY = 120.0

# Arguments of `chat.completions.create` that change more than the JSON body.
SDK_ONLY = frozenset({"extra_headers", "extra_query", "timeout", "stream"})


class FastChat:
    """Chat completions, plain and streamed, for one `openai.AsyncOpenAI` client."""

    PATH = "/chat/completions"
    INPUT = "messages"  # the argument that `body` receives positionally

    @staticmethod
    def sdk_create(client: Any) -> Any:
        """The SDK method this path stands in for (its signature lists what is accepted)."""
        return client.chat.completions.create

    @staticmethod
    def result_models() -> tuple[Any, Any]:
        """The SDK's models for a whole answer and for a streamed chunk."""
        from openai.types.chat import ChatCompletion, ChatCompletionChunk

        return ChatCompletion, ChatCompletionChunk

    def __init__(self, client: Any, api_key: str) -> None:
        """Raise AttributeError when the SDK lacks what this path relies on."""
        import inspect

        import httpx
        import openai

        for name in (
            "_should_retry",
            "_parse_retry_after_header",
            "_make_status_error_from_response",
            "_make_sse_decoder",
        ):
            getattr(client, name)
        self.client = client
        self.http = client._client
        if not isinstance(self.http, httpx.AsyncClient):
            raise AttributeError("the SDK does not use an httpx.AsyncClient")
        self.url = str(client.base_url).rstrip("/") + self.PATH
        self.api_key = api_key
        params = inspect.signature(self.sdk_create(client)).parameters
        self.accepted = frozenset(params) - SDK_ONLY - {self.INPUT}
        self.httpx = httpx
        self.openai = openai
        self.ChatCompletion, self.ChatCompletionChunk = self.result_models()
        self._headers: dict[str, str] | None = None

    def body(self, messages: Any, kwargs: dict[str, Any], stream: bool = False) -> bytes | None:
        """The JSON body the SDK would send, or None when the SDK must handle this call."""
        if not kwargs.keys() <= self.accepted:
            return None
        extra = kwargs.get("extra_body")
        if extra is not None and not isinstance(extra, dict):
            return None
        body = {k: v for k, v in kwargs.items() if k != "extra_body"}
        if stream:
            body["stream"] = True
        body[self.INPUT] = messages
        if extra:
            body.update(extra)
        try:
            # The SDK's own encoding (openai._utils._json.openapi_dumps); the SDK's sentinels,
            # pydantic models and generators are not JSON, so they fall back to the SDK.
            return json.dumps(
                body, ensure_ascii=False, separators=(",", ":"), allow_nan=False
            ).encode()
        except (TypeError, ValueError, RecursionError):
            return None

    def headers(self) -> dict[str, str]:
        """The SDK's default headers (read once, inside the event loop) plus the bearer key."""
        if self._headers is None:
            found = {k: v for k, v in self.client.default_headers.items() if isinstance(v, str)}
            found["Authorization"] = f"Bearer {self.api_key}"
            timeout = self.client.timeout
            read = getattr(timeout, "read", timeout)
            if read is not None:
                found["x-stainless-read-timeout"] = str(read)
            self._headers = found
        return self._headers

    async def create(self, content: bytes) -> Any:
        """POST the body; retry as the SDK would; return what the SDK would return."""
        return self.parse(await self.send(content))

    async def stream(self, content: bytes) -> AsyncIterator[Any]:
        """POST a streaming body; yield each ChatCompletionChunk as the SDK's stream does."""
        import anyio

        response = await self.send(content, stream=True)
        try:
            events = self.client._make_sse_decoder().aiter_bytes(response.aiter_bytes())
            async for sse in events:
                if sse.data.startswith("[DONE]"):
                    # Read the rest (briefly) so the connection can serve the next request.
                    with anyio.move_on_after(1.0):
                        try:
                            async for _ in events:
                                pass
                        except self.httpx.HTTPError:
                            pass
                    break
                data = sse.json()
                if isinstance(data, dict) and data.get("error"):
                    error = data["error"]
                    message = error.get("message") if isinstance(error, dict) else None
                    if not message or not isinstance(message, str):
                        message = "An error occurred during streaming"
                    raise self.openai.APIError(
                        message=message, request=response.request, body=error
                    )
                yield self.build(self.ChatCompletionChunk, data)
        finally:
            await response.aclose()

    async def send(self, content: bytes, stream: bool = False) -> Any:
        """The successful response, after the SDK's retries; else the SDK's exception."""
        import anyio

        o, httpx = self.openai, self.httpx
        retries = self.client.max_retries
        response = None
        for taken in range(retries + 1):
            remaining = retries - taken
            request = self.http.build_request(
                "POST",
                self.url,
                content=content,
                headers={**self.headers(), "x-stainless-retry-count": str(taken)},
            )
            try:
                response = await self.http.send(request, stream=stream)
            except httpx.TimeoutException as err:
                if remaining > 0:
                    await anyio.sleep(self.retry_delay(taken, None))
                    continue
                raise o.APITimeoutError(request=request) from err
            except httpx.RequestError as err:
                if remaining > 0:
                    await anyio.sleep(self.retry_delay(taken, None))
                    continue
                raise o.APIConnectionError(request=request) from err
            if not response.is_success:
                if remaining > 0 and self.client._should_retry(response):
                    await response.aclose()
                    await anyio.sleep(self.retry_delay(taken, response.headers))
                    continue
                await response.aread()
                raise self.client._make_status_error_from_response(response) from None
            break
        assert response is not None
        return response

    def retry_delay(self, taken: int, headers: Any) -> float:
        """The SDK's wait before retry number taken + 1: Retry-After, else backoff with jitter."""
        after = self.client._parse_retry_after_header(headers)
        if after is not None and math.isfinite(after) and 0 < after <= MAX_RETRY_AFTER_DELAY:
            delay = after
        else:
            delay = min(INITIAL_RETRY_DELAY * 2.0 ** min(taken, 1000), MAX_RETRY_DELAY)
            delay *= 1 - 0.25 * random.random()
        log.info("Retrying request in %f seconds (retry %i)", delay, taken + 1)
        return max(delay, 0.0)

    def parse(self, response: Any) -> Any:
        """What the SDK's response parsing gives for a ChatCompletion (lenient, not strict)."""
        content_type = response.headers.get("content-type", "*").split(";")[0]
        if not content_type.endswith("json"):
            try:
                data = json.loads(response.content)
            except Exception:
                return response.text  # the SDK, too, hands back the text
        else:
            data = json.loads(response.content)
        if not isinstance(data, dict):
            return data
        return self.build(self.ChatCompletion, data)

    @staticmethod
    def build(model: Any, data: dict) -> Any:
        """The SDK's model for `data`: validated when it fits (fast), else built as is."""
        try:
            return model.model_validate(data)
        except Exception:
            # Odd but readable answers: the SDK builds them without validation.
            from openai._models import construct_type

            return construct_type(type_=model, value=data)


class FastCompletions(FastChat):
    """The legacy completions endpoint (raw prompts), not streamed, the same lean way.

    `body(prompt, kwargs)` takes the prompt where FastChat takes the messages; `create`
    returns the SDK's `Completion`. Streaming stays with the SDK (`stream` is refused here).
    """

    PATH = "/completions"
    INPUT = "prompt"

    @staticmethod
    def sdk_create(client: Any) -> Any:
        return client.completions.create

    @staticmethod
    def result_models() -> tuple[Any, Any]:
        from openai.types import Completion

        return Completion, Completion  # the second is never used: no streams here

    def body(self, messages: Any, kwargs: dict[str, Any], stream: bool = False) -> bytes | None:
        return None if stream else super().body(messages, kwargs)
