"""The LLM backend: openai.AsyncOpenAI against any OpenAI-compatible server.

Every backend failure becomes a BackendError carrying one sentence a voice user can act on.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

from daemon.errors import BackendError
from daemon.words import plural


def base_url(endpoint: str) -> str:
    """Accept a base URL (http://host:port/v1) or a full .../chat/completions URL."""
    url = endpoint.strip().rstrip("/")
    for suffix in ("/chat/completions", "/completions"):
        if url.endswith(suffix):
            url = url[: -len(suffix)]
    return url


def endpoint_from(settings: Any, environ: dict | None = None) -> str:
    """LMD_OPENAI_CHAT_ENDPOINT > OPENAI_BASE_URL > the settings table."""
    env = os.environ if environ is None else environ
    if env.get("LMD_OPENAI_CHAT_ENDPOINT"):
        return base_url(settings["openai_chat_endpoint"])
    if env.get("OPENAI_BASE_URL"):
        return base_url(env["OPENAI_BASE_URL"])
    return base_url(settings["openai_chat_endpoint"])


NO_KEY = "sk-no-key-needed"  # sent when there is no key: local servers ignore it


def api_key(environ: dict | None = None) -> str:
    """OPENAI_API_KEY, or a placeholder that local servers ignore."""
    env = os.environ if environ is None else environ
    return env.get("OPENAI_API_KEY") or NO_KEY


class LLM:
    """A chat client bound to one endpoint; methods take the model per call."""

    def __init__(self, url: str, key: str, timeout: float, retries: int, model: str) -> None:
        import httpx2
        import openai

        from daemon.backends.http_pools import SpreadTransport
        from daemon.backends.prepared_body import Endpoint

        self.url = url
        self.model = model
        self._key = key
        self.timeout = timeout
        self._openai = openai
        http = httpx2.AsyncClient(
            timeout=timeout, transport=SpreadTransport(max_connections=256, keepalive=64)
        )
        self.client = openai.AsyncOpenAI(
            base_url=url, api_key=key, timeout=timeout, max_retries=retries, http_client=http
        )
        # Plain-JSON calls take the lean way of daemon/backends/prepared_body.py; None sends
        # every call through the SDK's `create` (the tests compare both ways).
        self._chat: Endpoint | None = Endpoint.chat(self.client, http)
        self._completions: Endpoint | None = Endpoint.completions(self.client, http)
        # What the backend can do (daemon/backends/capabilities.py): the Daemon gives its
        # database-backed cache and the `backend_capabilities` setting's overrides.
        self.capability_cache: Any = None
        self.capability_overrides: dict = {}
        # The embedded model's supervisor sets these: calls wait until its server answers, a
        # lost connection is explained by what happened to it, and its capabilities are kept
        # per model file rather than per (random) port.
        self.before_call: Callable[[], Awaitable[None]] | None = None
        self.unreachable: Callable[[], str | None] | None = None
        self.identity = url

    @property
    def api_key(self) -> str:
        return self._key

    async def capabilities(self, fresh: bool = False) -> Any:
        """The backend's Capabilities: probed once per endpoint and model, then cached;
        `fresh` probes again."""
        from daemon.backends.capabilities import shared_cache

        cache = self.capability_cache or shared_cache()
        caps = await cache.get(self, fresh=fresh)
        return caps.with_overrides(self.capability_overrides)

    async def close(self) -> None:
        await self.client.close()

    async def chat(self, messages: list[dict], **kwargs: Any) -> str:
        """One completion's text."""
        response = await self.complete(messages, **kwargs)
        choice = response.choices[0] if response.choices else None
        if choice is None:
            raise BackendError("The language model sent an empty answer; try again.")
        return choice.message.content or ""

    async def complete(self, messages: list[dict], **kwargs: Any) -> Any:
        """The raw ChatCompletion object (for logprobs, n, reasoning fields)."""
        kwargs.setdefault("model", self.model)
        try:
            if self.before_call is not None:
                await self.before_call()
            endpoint = self._chat
            body = endpoint.body(messages, kwargs) if endpoint is not None else None
            if body is not None:
                return await endpoint.create(body)
            return await self.client.chat.completions.create(messages=messages, **kwargs)
        except Exception as e:
            raise self.explain(e) from e

    async def completion(self, prompt: str, **kwargs: Any) -> Any:
        """The legacy completions endpoint (raw prompts for base models)."""
        kwargs.setdefault("model", self.model)
        try:
            if self.before_call is not None:
                await self.before_call()
            endpoint = self._completions
            body = endpoint.body(prompt, kwargs) if endpoint is not None else None
            if body is not None:
                return await endpoint.create(body)
            return await self.client.completions.create(prompt=prompt, **kwargs)
        except Exception as e:
            raise self.explain(e) from e

    async def stream(self, messages: list[dict], **kwargs: Any) -> AsyncIterator[str]:
        """Text chunks as the backend produces them."""
        kwargs.setdefault("model", self.model)
        stream: Any = None
        try:
            if self.before_call is not None:
                await self.before_call()
            endpoint = self._chat
            body = endpoint.body(messages, kwargs, stream=True) if endpoint is not None else None
            if body is not None:
                stream = endpoint.stream(body)
            else:
                stream = await self.client.chat.completions.create(
                    messages=messages, stream=True, **kwargs
                )
            finished = False
            async for chunk in stream:
                if chunk.choices and chunk.choices[0].finish_reason:
                    finished = True
                if chunk.choices and chunk.choices[0].delta and chunk.choices[0].delta.content:
                    yield chunk.choices[0].delta.content
            if not finished:
                # The connection closed mid-answer: say so rather than pass a cut reply as whole.
                raise BackendError(
                    "The language model's answer was cut off before it finished; try again."
                )
        except BackendError:
            raise
        except Exception as e:
            raise self.explain(e) from e
        finally:
            if stream is not None:
                await stream.aclose()  # a reader that stops early frees the connection at once

    def explain(self, e: Exception) -> BackendError:
        """Map an openai/httpx exception to one sentence, never carrying the API key."""
        error = self._explain(e)
        if isinstance(error.detail, str) and len(self._key) >= 8:
            # Some servers echo the key they refused; the detail reaches clients and logs.
            error.detail = error.detail.replace(self._key, "[redacted]")
        return error

    def _explain(self, e: Exception) -> BackendError:
        o = self._openai
        if isinstance(e, BackendError):
            return e
        if isinstance(e, o.APITimeoutError):
            return BackendError(
                f"The language model did not answer within {plural(self.timeout, 'second')}; "
                "try again, or raise llm_timeout_secs.",
                status=504,
            )
        if isinstance(e, o.APIConnectionError):
            known = self.unreachable() if self.unreachable is not None else None
            if known:
                return BackendError(known)
            return BackendError(
                f"I could not reach the language model at {shown_url(self.url)}; check that it "
                "is running and that openai_chat_endpoint is right."
            )
        if isinstance(e, o.AuthenticationError):
            return BackendError(
                "The language model refused the API key; set OPENAI_API_KEY to a valid key."
            )
        if isinstance(e, o.RateLimitError):
            return BackendError(
                "The language model is rate limiting us; wait a moment and try again."
            )
        if isinstance(e, o.NotFoundError):
            return BackendError(
                f"The backend does not serve the model {self.model!r} or this API; set "
                "openai_model to a model it serves.",
                detail=_short(e),
            )
        if isinstance(e, o.APIStatusError):
            return BackendError(
                f"The language model failed with HTTP {e.status_code}; try again later.",
                detail=_short(e),
            )
        return BackendError(
            f"The language model sent something I could not read ({type(e).__name__}); try again.",
            detail=str(e)[:300],
        )


def shown_url(url: str) -> str:
    """The URL without user:password (some proxies take credentials in the URL)."""
    from urllib.parse import urlsplit, urlunsplit

    parts = urlsplit(url)
    if "@" not in parts.netloc:
        return url
    return urlunsplit(parts._replace(netloc=parts.netloc.rsplit("@", 1)[1]))


def _short(e: Exception) -> str:
    return str(getattr(e, "message", e))[:300]
