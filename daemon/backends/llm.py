"""The LLM backend: openai.AsyncOpenAI against any OpenAI-compatible server.

Every backend failure becomes a BackendError carrying one sentence a voice user can act on.
"""

from __future__ import annotations

import asyncio
import logging
import os
import re
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

from daemon.backends import accounting, tokens
from daemon.errors import BackendError
from daemon.words import plural

log = logging.getLogger("lmd.llm")


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
        self.http = http  # every call's HTTP client (a command's relay checks its connections)
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
        self.context_window: int | None = None  # learnt from a context-length refusal
        self.batch_concurrency = 0  # the batch_concurrency setting (daemon.backends.concurrency)
        self._counting = False  # the server's tokenizer is lmd's token counter

    @property
    def api_key(self) -> str:
        return self._key

    async def capabilities(self, fresh: bool = False) -> Any:
        """The backend's Capabilities: probed once per endpoint and model, then cached;
        `fresh` probes again. A tokenize endpoint found becomes lmd's token counter."""
        from daemon.backends.capabilities import server_root, shared_cache

        cache = self.capability_cache or shared_cache()
        caps = await cache.get(self, fresh=fresh)
        if caps.tokenize and caps.tokenize_path and not self._counting:
            self._counting = True
            tokens.use_server(
                self.model,
                tokens.ServerCounter(
                    server_root(self.url), caps.tokenize_path, caps.tokenize_field or "input",
                    self._key, self.model,
                ),
            )  # fmt: skip
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
        messages = alternate_roles(messages)
        started = time.monotonic()
        try:
            if self.before_call is not None:
                await self.before_call()
            started = time.monotonic()
            try:
                response = await self._within_deadline(self._create(messages, kwargs), started)
            except self._openai.BadRequestError as e:
                shorter = self._shortened(messages, e)
                if shorter is None:
                    raise
                response = await self._within_deadline(self._create(shorter, kwargs), started)
        except Exception as e:
            raise self.explain(e, started) from e
        choices = getattr(response, "choices", None)
        choice = choices[0] if choices else None
        accounting.record(getattr(response, "usage", None), getattr(choice, "finish_reason", None))
        return response

    async def _create(self, messages: list[dict], kwargs: dict) -> Any:
        endpoint = self._chat
        body = endpoint.body(messages, kwargs) if endpoint is not None else None
        if body is not None:
            return await endpoint.create(body)
        return await self.client.chat.completions.create(messages=messages, **kwargs)

    async def _within_deadline(self, call: Awaitable[Any], started: float) -> Any:
        """One backend call, retries included, within llm_timeout_secs of `started`: past
        that, the request is cancelled (its connection closed, so the server can stop)."""
        left = self.timeout - (time.monotonic() - started)
        try:
            async with asyncio.timeout(max(left, 0.001)):
                return await call
        except TimeoutError:
            raise _Deadline() from None

    def _shortened(self, messages: list[dict], e: Exception) -> list[dict] | None:
        """The messages with the oldest turns dropped to fit, when `e` is the server refusing
        a context that is too long; None when it is not, or nothing can be dropped."""
        limit = context_overflow(e)
        if limit is None:
            return None
        window, asked = limit
        if window:
            self.context_window = window
        shorter = drop_oldest(messages, window, asked)
        if shorter is not None:
            log.info(
                "The backend's context is full (%s); trying once more with %d of %d messages.",
                f"{window} tokens" if window else "no size given", len(shorter), len(messages),
            )  # fmt: skip
        return shorter

    async def completion(self, prompt: str, **kwargs: Any) -> Any:
        """The legacy completions endpoint (raw prompts for base models)."""
        kwargs.setdefault("model", self.model)
        started = time.monotonic()
        try:
            if self.before_call is not None:
                await self.before_call()
            started = time.monotonic()
            endpoint = self._completions
            body = endpoint.body(prompt, kwargs) if endpoint is not None else None
            if body is not None:
                call = endpoint.create(body)
            else:
                call = self.client.completions.create(prompt=prompt, **kwargs)
            response = await self._within_deadline(call, started)
        except Exception as e:
            raise self.explain(e, started) from e
        choices = getattr(response, "choices", None)
        choice = choices[0] if choices else None
        accounting.record(getattr(response, "usage", None), getattr(choice, "finish_reason", None))
        return response

    async def stream(self, messages: list[dict], **kwargs: Any) -> AsyncIterator[str]:
        """Text chunks as the backend produces them.

        A stream that ends with no word at all (llama-cpp-python answers a context overflow
        with an empty 200 stream) is asked once more without streaming, which says why."""
        kwargs.setdefault("model", self.model)
        messages = alternate_roles(messages)
        stream: Any = None
        started = time.monotonic()
        said: list[str] = []
        try:
            if self.before_call is not None:
                await self.before_call()
            started = time.monotonic()
            try:
                stream, first = await self._start_stream(messages, kwargs, started)
            except self._openai.BadRequestError as e:
                shorter = self._shortened(messages, e)
                if shorter is None:
                    raise
                messages = shorter
                stream, first = await self._start_stream(messages, kwargs, started)
            finish: str | None = None
            usage: Any = None
            async for chunk in _chain(first, stream):
                if getattr(chunk, "usage", None) is not None:
                    usage = chunk.usage
                if not chunk.choices:
                    continue
                choice = chunk.choices[0]
                if choice.finish_reason:
                    finish = choice.finish_reason
                if choice.delta and choice.delta.content:
                    said.append(choice.delta.content)
                    yield choice.delta.content
            if finish is None and not said:
                await stream.aclose()
                stream = None
                text = await self._ask_again(messages, kwargs, started)
                if text:
                    yield text
                return
            if finish is None:
                # The connection closed mid-answer: say so rather than pass a cut reply as whole.
                raise BackendError(
                    "The language model's answer was cut off before it finished; try again."
                )
            prompt = sum(tokens.count(str(m.get("content") or ""), self.model) + 4
                         for m in messages)  # fmt: skip
            estimate = (prompt, tokens.count("".join(said), self.model))
            accounting.record(usage, finish, estimate)
        except BackendError:
            raise
        except Exception as e:
            raise self.explain(e, started) from e
        finally:
            if stream is not None:
                await stream.aclose()  # a reader that stops early frees the connection at once

    async def _ask_again(self, messages: list[dict], kwargs: dict, started: float) -> str:
        """After a stream that ended without a word: the same request, not streamed, to hear
        why. The server closed the stream's connection, so a kept-alive one may be dead: one
        connection error is tried again on a new connection."""
        o = self._openai
        for attempt in (1, 2):
            try:
                try:
                    response = await self._within_deadline(self._create(messages, kwargs), started)
                except o.BadRequestError as e:
                    shorter = self._shortened(messages, e)
                    if shorter is None:
                        raise
                    response = await self._within_deadline(self._create(shorter, kwargs), started)
                break
            except o.APITimeoutError:
                raise
            except o.APIConnectionError:
                if attempt == 2:
                    raise
        choices = getattr(response, "choices", None)
        choice = choices[0] if choices else None
        if choice is None:
            raise BackendError("The language model sent an empty answer; try again.")
        accounting.record(getattr(response, "usage", None), getattr(choice, "finish_reason", None))
        return choice.message.content or ""

    async def _start_stream(self, messages: list[dict], kwargs: dict, started: float) -> Any:
        """The stream and its first chunk (None when it ends at once), within the deadline:
        a refusal (HTTP 400) or a server that never starts surfaces here, where it can still
        be retried or explained."""
        stream = await self._within_deadline(self._open_stream(messages, kwargs), started)
        try:
            first = await self._within_deadline(anext(aiter(stream), None), started)
        except BaseException:
            await stream.aclose()
            raise
        return stream, first

    async def _open_stream(self, messages: list[dict], kwargs: dict) -> Any:
        endpoint = self._chat
        body = endpoint.body(messages, kwargs, stream=True) if endpoint is not None else None
        if body is not None:
            return endpoint.stream(body)
        return await self.client.chat.completions.create(messages=messages, stream=True, **kwargs)

    def explain(self, e: Exception, started: float | None = None) -> BackendError:
        """Map an openai/httpx exception to one sentence, never carrying the API key."""
        waited = time.monotonic() - started if started is not None else self.timeout
        error = self._explain(e, waited)
        if isinstance(error.detail, str) and len(self._key) >= 8:
            # Some servers echo the key they refused; the detail reaches clients and logs.
            error.detail = error.detail.replace(self._key, "[redacted]")
        return error

    def _explain(self, e: Exception, waited: float) -> BackendError:
        o = self._openai
        if isinstance(e, BackendError):
            return e
        if isinstance(e, (_Deadline, o.APITimeoutError)):
            return BackendError(
                f"The language model did not answer: I waited {_seconds(waited)} "
                f"(llm_timeout_secs is {self.timeout:g}) and cancelled the request; try again, "
                "or raise llm_timeout_secs.",
                status=504,
            )
        limit = context_overflow(e)
        if limit is not None:
            window = f" (it holds {limit[0]} tokens)" if limit[0] else ""
            return BackendError(
                f"The conversation is too long for the model's context{window}, even after "
                "dropping older turns; start a new session, or use a model with a longer "
                "context.",
                detail=_short(e),
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


class _Deadline(Exception):
    """A call ran past llm_timeout_secs (retries included) and was cancelled."""


# How servers word a context that is too long (HTTP 400): OpenAI and vLLM and
# llama-cpp-python ("This model's maximum context length is 512 tokens. However, you requested
# 3239 tokens ..."), llama.cpp's server ("the request exceeds the available context size"),
# Ollama and others ("context length exceeded", "context window").
_WINDOW = re.compile(r"maximum context length is (\d+)|context (?:window|size) of (\d+)", re.I)
_ASKED = re.compile(r"(?:requested|resulted in) (\d+) tokens|Requested tokens \((\d+)\)", re.I)
_OVERFLOW = re.compile(
    r"context_length_exceeded|maximum context length|exceeds? the available context size|"
    r"exceed_context_size|context (?:length|window) (?:exceeded|of \d+)|too many tokens",
    re.I,
)


def context_overflow(e: Exception) -> tuple[int | None, int | None] | None:
    """(the server's window, the tokens asked for) when `e` is a context-length refusal."""
    status = getattr(e, "status_code", None)
    if status not in (400, 413, 422):
        return None
    text = str(getattr(e, "message", "")) + " " + str(getattr(e, "body", "") or "")
    code = getattr(e, "code", None)
    if code != "context_length_exceeded" and not _OVERFLOW.search(text):
        return None
    window = _WINDOW.search(text)
    asked = _ASKED.search(text)
    return (
        int(next(g for g in window.groups() if g)) if window else None,
        int(next(g for g in asked.groups() if g)) if asked else None,
    )


def drop_oldest(messages: list[dict], window: int | None, asked: int | None) -> list[dict] | None:
    """The messages without their oldest turns, to fit `window` when the server said how many
    tokens were asked for (else half of them go); system messages and the last message stay.
    None when nothing can be dropped."""
    keep_head = [m for m in messages[:1] if m.get("role") == "system"]
    body = messages[len(keep_head) : -1]
    last = messages[-1:]
    if not body:
        return None
    share = 0.5
    if window and asked and asked > window:
        share = max(0.0, min(0.9, window / asked * 0.85))
    sizes = [len(str(m.get("content") or "")) for m in body]
    budget = sum(sizes) * share
    kept: list[dict] = []
    for m, size in zip(reversed(body), reversed(sizes), strict=True):
        if size > budget:
            break
        budget -= size
        kept.append(m)
    kept.reverse()
    # tool results must follow their call: a kept result whose call was dropped goes too
    while kept and kept[0].get("role") == "tool":
        kept.pop(0)
    return alternate_roles(keep_head + kept + last)


def alternate_roles(messages: list[dict]) -> list[dict]:
    """Neighbouring messages of the same role (user, assistant or system) merged into one, in
    order: chat templates that require alternation refuse a history that karma pruning left
    with two answers in a row. Tool calls and tool results are never merged."""
    out: list[dict] = []
    for m in messages:
        prev = out[-1] if out else None
        if (
            prev is not None
            and m.get("role") == prev.get("role")
            and m.get("role") in ("user", "assistant", "system")
            and isinstance(m.get("content"), str)
            and isinstance(prev.get("content"), str)
            and set(m) <= {"role", "content"}
            and set(prev) <= {"role", "content"}
        ):
            out[-1] = {"role": m["role"], "content": prev["content"] + "\n\n" + m["content"]}
        else:
            out.append(m)
    return out


async def _chain(first: Any, rest: Any) -> AsyncIterator[Any]:
    if first is None:
        return
    yield first
    async for item in rest:
        yield item


def _seconds(secs: float) -> str:
    """1.5 seconds, 12 seconds: what a person would say."""
    if secs < 10:
        shown = f"{secs:.1f}".rstrip("0").rstrip(".")
        return f"{shown} second" + ("" if shown == "1" else "s")
    return plural(round(secs), "second")
