"""Chat (and legacy) completions with a JSON body lmd encodes itself, sent by the openai SDK.

`chat.completions.create` walks every request through the SDK's TypedDict transforms, about
0.1 ms of CPU per message of history; with a long history, or a thousand LM_SCORE calls, that
was most of the daemon's work. For calls whose arguments are plain JSON this module encodes the
body once and hands it to the SDK's documented way of posting a prepared body,
`client.post(path, content=..., cast_to=..., stream=..., stream_cls=...)`, so the SDK's own
retries, errors, SSE decoding and response models still apply. Anything else (extra headers or
query, a per-call timeout, unknown parameters, values that are not plain JSON) goes through
`create` as usual.
"""

from __future__ import annotations

import inspect
import json
from collections.abc import Callable
from typing import Any

# Arguments of `create` that change more than the JSON body: those calls stay with `create`.
SDK_ONLY = frozenset({"extra_headers", "extra_query", "timeout", "stream"})


class Endpoint:
    """One SDK endpoint (`/chat/completions` or `/completions`) taking bodies encoded here."""

    def __init__(
        self,
        client: Any,
        path: str,
        create: Callable[..., Any],
        given: str,
        result: type,
        chunk: type | None,
    ) -> None:
        self.client = client
        self.path = path
        self.given = given  # the argument `body` receives positionally: messages or prompt
        self.result = result
        self.stream_cls: Any = None
        if chunk is not None:
            from openai import AsyncStream

            self.stream_cls = AsyncStream[chunk]  # type: ignore[valid-type]
        # What `create` accepts, read from its signature so a new SDK parameter works at once.
        self.accepted = frozenset(inspect.signature(create).parameters) - SDK_ONLY - {given}

    @classmethod
    def chat(cls, client: Any) -> Endpoint:
        from openai.types.chat import ChatCompletion, ChatCompletionChunk

        create = client.chat.completions.create
        chunk = ChatCompletionChunk
        return cls(client, "/chat/completions", create, "messages", ChatCompletion, chunk)

    @classmethod
    def completions(cls, client: Any) -> Endpoint:
        """The legacy endpoint (raw prompts for base models); streams stay with `create`."""
        from openai.types import Completion

        return cls(client, "/completions", client.completions.create, "prompt", Completion, None)

    def body(self, given: Any, kwargs: dict[str, Any], stream: bool = False) -> bytes | None:
        """The JSON body `create` would send, or None when `create` must handle this call."""
        if not kwargs.keys() <= self.accepted or (stream and self.stream_cls is None):
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

    async def create(self, content: bytes) -> Any:
        """POST the body; what `create` returns (a ChatCompletion or Completion).

        The SDK sends it (retries, errors); the answer is read here, because building the
        model without validation, as the SDK does, costs more CPU than the whole call else.
        """
        import httpx2

        response = await self.client.post(self.path, content=content, cast_to=httpx2.Response)
        return self.parse(response)

    def parse(self, response: Any) -> Any:
        """The answer as the SDK reads it: the model when it validates (fast), else built
        as is (odd but readable answers), the text of a non-JSON answer, or what JSON holds."""
        if not response.headers.get("content-type", "*").split(";")[0].endswith("json"):
            try:
                data = json.loads(response.content)
            except ValueError:
                return response.text
        else:
            try:
                return self.result.model_validate_json(response.content)  # type: ignore[attr-defined]
            except ValueError:
                data = json.loads(response.content)  # a JSON error goes to LLM.explain
        if not isinstance(data, dict):
            return data
        try:
            return self.result.model_validate(data)  # type: ignore[attr-defined]
        except ValueError:
            return self.result.model_construct(**data)  # type: ignore[attr-defined]

    async def stream(self, content: bytes) -> Any:
        """POST a streaming body; the SDK's AsyncStream of chunks."""
        return await self.client.post(
            self.path,
            content=content,
            cast_to=self.result,
            stream=True,
            stream_cls=self.stream_cls,
        )
