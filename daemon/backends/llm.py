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
from urllib.parse import urlsplit, urlunsplit

from daemon.backends import accounting, tokens
from daemon.backends.capabilities import server_root, shared_cache
from daemon.core.errors import AnswerCut, BackendError
from daemon.core.words import plural

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


# Context windows learned from a server (its /props, or the size it gave refusing a longer
# request), per backend identity and model: every client of that backend uses them, whatever
# its timeout or retries (a daemon makes a client per such setting).
_WINDOWS: dict[tuple[str, str], int] = {}


def learned_window(identity: str, model: str) -> int | None:
    """The context window learned for this backend and model, if any."""
    return _WINDOWS.get((identity, model))


def learn_window(identity: str, model: str, window: int) -> None:
    if window > 0:
        _WINDOWS[(identity, model)] = window


class LLM:
    """A chat client bound to one endpoint; methods take the model per call."""

    def __init__(
        self,
        url: str,
        key: str,
        timeout: float,
        retries: int,
        model: str,
        uds: str | None = None,
    ) -> None:
        """`uds`: a Unix socket that carries every request (the embedded server's private
        endpoint); `url` then only names the paths."""
        # lazy: the HTTP stack and openai load in ~0.3 s; commands that only name a backend
        # (shown_url, api_key) import this module
        import httpx2
        import openai

        # lazy too: they import httpx2
        from daemon.backends.http_pools import SpreadTransport
        from daemon.backends.lean_http import LeanClient, usable
        from daemon.backends.prepared_body import Endpoint

        self.url = url
        self.model = model
        self._key = key
        self.timeout = timeout
        self.uds = uds
        self._openai = openai
        http = httpx2.AsyncClient(
            timeout=timeout,
            transport=SpreadTransport(max_connections=256, keepalive=64, uds=uds),
        )
        self.client = openai.AsyncOpenAI(
            base_url=url, api_key=key, timeout=timeout, max_retries=retries, http_client=http
        )
        self.http = http  # every call's HTTP client (a command's relay checks its connections)
        # Plain-JSON calls take the lean way of daemon/backends/prepared_body.py; None sends
        # every call through the SDK's `create` (the tests compare both ways).
        # To a local server (plain http, or the embedded engine's socket), first tries take
        # daemon/backends/lean_http.py.
        self._lean = LeanClient(url, uds, http.timeout) if usable(url, uds) else None
        self._chat: Endpoint | None = Endpoint.chat(self.client, http, self._lean)
        self._completions: Endpoint | None = Endpoint.completions(self.client, http, self._lean)
        # What the backend can do (daemon/backends/capabilities.py): the Daemon gives its
        # database-backed cache and the `backend_capabilities` setting's overrides.
        self.capability_cache: Any = None
        self.capability_overrides: dict = {}
        self.batch_concurrency = 0  # the batch_concurrency setting (0: learn it from the probe)
        # The embedded model's supervisor sets these: calls wait until its server answers, a
        # lost connection is explained by what happened to it (given when the call started),
        # and its capabilities are kept per model file rather than per process.
        self.before_call: Callable[[], Awaitable[None]] | None = None
        self.after_lost: Callable[[], Awaitable[None]] | None = None
        self.unreachable: Callable[[float], str | None] | None = None
        self.identity = url
        self._counting = False  # the server's tokenizer is lmd's token counter
        self._stream_usage = True  # ask streams for the server's usage (until one refuses)
        self.max_n = 0  # choices the server gives in one request (its slots); 0: no limit known
        self.prefill_echo = False  # its answers to a prefill repeat it (llama.cpp's server)
        # a schema answer's structure gets its own room in max_tokens (llama.cpp's grammar)
        self.schema_room = False

    @property
    def context_window(self) -> int | None:
        """The model's context window in tokens, where the server told it."""
        return learned_window(self.identity, self.model)

    @context_window.setter
    def context_window(self, window: int | None) -> None:
        if window:
            learn_window(self.identity, self.model, window)

    @property
    def api_key(self) -> str:
        return self._key

    async def capabilities(self, fresh: bool = False) -> Any:
        """The backend's Capabilities: probed once per endpoint and model, then cached;
        `fresh` probes again. A tokenize endpoint found becomes lmd's token counter."""
        cache = self.capability_cache or shared_cache()
        caps = await cache.get(self, fresh=fresh)
        if caps.context_window and not self.context_window:
            self.context_window = caps.context_window
        self.max_n = caps.max_n
        self.prefill_echo = caps.prefill_echo
        self.schema_room = caps.slots > 0  # a llama.cpp server (it said its slots)
        if caps.tokenize and caps.tokenize_path and not self._counting:
            self._counting = True
            tokens.use_server(
                self.model,
                tokens.ServerCounter(
                    server_root(self.url), caps.tokenize_path, caps.tokenize_field or "input",
                    self._key, self.model, uds=self.uds,
                ),
            )  # fmt: skip
        return caps.with_overrides(self.capability_overrides)

    async def close(self) -> None:
        if self._lean is not None:
            self._lean.close()
        await self.client.close()

    async def chat(self, messages: list[dict], **kwargs: Any) -> str:
        """One completion's text."""
        response = await self.complete(messages, **kwargs)
        choice = response.choices[0] if response.choices else None
        if choice is None:
            raise BackendError("The language model sent an empty answer; try again.")
        return choice.message.content or ""

    async def complete(self, messages: list[dict], **kwargs: Any) -> Any:
        """The raw ChatCompletion object (for logprobs, n, reasoning fields). An `n` above what
        the server answers at once (llama.cpp: its slots) is asked as several requests at
        once, their choices joined in one answer."""
        n = kwargs.get("n")
        if isinstance(n, int) and 0 < self.max_n < n:
            return await self._complete_split(messages, kwargs, n)
        if self.schema_room:
            kwargs = with_schema_room(kwargs)
        kwargs.setdefault("model", self.model)
        messages = alternate_roles(messages)
        started = time.monotonic()
        try:
            if self.before_call is not None:
                await self.before_call()
            started = time.monotonic()
            try:
                response = await self._within_deadline(self._create(messages, kwargs), started)
            except self._openai.APIStatusError as e:
                most = n_limit(e)
                if most and isinstance(n, int) and n > most:
                    self.max_n = most  # llama.cpp: no more choices than slots
                    return await self._complete_split(messages, kwargs, n)
                plain = _without_prefill_under_grammar(messages, kwargs, e)
                if plain is not None:
                    # llama.cpp refuses a prefill under a grammar; the grammar alone holds
                    # the answer to its form (no thinking can start where JSON must)
                    messages, kwargs = plain
                    response = await self._within_deadline(self._create(messages, kwargs), started)
                else:
                    shorter = self._shortened(messages, e)
                    if shorter is None:
                        raise
                    response = await self._within_deadline(self._create(shorter, kwargs), started)
            except self._openai.APIConnectionError as e:
                if isinstance(e, self._openai.APITimeoutError) or self.after_lost is None:
                    raise
                # the embedded server died under this request (a crash, a kill): it is being
                # started again; once it answers, this request is asked again, once, so a
                # batch job goes on where it was
                await self.after_lost()
                response = await self._within_deadline(self._create(messages, kwargs), started)
        except Exception as e:
            if kwargs.get("tools") and context_overflow(e) is not None:
                raise BackendError(
                    f"The {plural(len(kwargs['tools']), 'tool')} on offer do not fit in the "
                    "model's context together with the conversation; configure fewer MCP "
                    "tools, or use a model with a longer context.",
                    detail=_short(e),
                ) from e
            raise self.explain(e, started) from e
        choices = getattr(response, "choices", None)
        choice = choices[0] if choices else None
        accounting.record(getattr(response, "usage", None), getattr(choice, "finish_reason", None))
        return self._without_prefill(messages, response)

    def _without_prefill(self, messages: list[dict], response: Any) -> Any:
        """The answer to an assistant prefill as every server gives it, the continuation
        alone: llama.cpp's server repeats the prefill before it."""
        last = messages[-1] if messages else {}
        prefill = last.get("content") if last.get("role") == "assistant" else None
        if not self.prefill_echo or not isinstance(prefill, str) or not prefill:
            return response
        for choice in getattr(response, "choices", None) or ():
            message = getattr(choice, "message", None)
            text = getattr(message, "content", None)
            if message is not None and isinstance(text, str) and text.startswith(prefill):
                message.content = text[len(prefill) :]
        return response

    async def _complete_split(self, messages: list[dict], kwargs: dict, n: int) -> Any:
        sizes = [self.max_n] * (n // self.max_n) + ([n % self.max_n] if n % self.max_n else [])
        parts = await asyncio.gather(
            *(self.complete(messages, **{**kwargs, "n": size}) for size in sizes)
        )
        choices = [c for part in parts for c in (part.choices or [])]
        choices = [c.model_copy(update={"index": i}) for i, c in enumerate(choices)]
        usage = parts[0].usage
        if usage is not None and all(p.usage is not None for p in parts):
            usage = usage.model_copy(
                update={
                    name: sum(getattr(p.usage, name) or 0 for p in parts)
                    for name in ("prompt_tokens", "completion_tokens", "total_tokens")
                }
            )
        return parts[0].model_copy(update={"choices": choices, "usage": usage})

    async def _create(self, messages: list[dict], kwargs: dict) -> Any:
        endpoint = self._chat
        if endpoint is not None:
            body = endpoint.body(messages, kwargs)
            if body is not None:
                return await endpoint.create(body)
        return await self.client.chat.completions.create(messages=messages, **kwargs)  # type: ignore[arg-type]

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
            try:
                response = await self._within_deadline(self._legacy(prompt, kwargs), started)
            except self._openai.APIConnectionError as e:
                if isinstance(e, self._openai.APITimeoutError) or self.after_lost is None:
                    raise
                await self.after_lost()  # the embedded server restarted: ask it again, once
                response = await self._within_deadline(self._legacy(prompt, kwargs), started)
        except Exception as e:
            raise self.explain(e, started) from e
        choices = getattr(response, "choices", None)
        choice = choices[0] if choices else None
        accounting.record(getattr(response, "usage", None), getattr(choice, "finish_reason", None))
        return response

    async def _legacy(self, prompt: str, kwargs: dict) -> Any:
        endpoint = self._completions
        if endpoint is not None:
            body = endpoint.body(prompt, kwargs)
            if body is not None:
                return await endpoint.create(body)
        return await self.client.completions.create(prompt=prompt, **kwargs)

    async def stream(self, messages: list[dict], **kwargs: Any) -> AsyncIterator[str]:
        """Text chunks as the backend produces them.

        llm_timeout_secs bounds the whole answer, as it bounds a call that is not streamed
        (and so each pause between chunks). An answer stopped after it began (the deadline,
        a lost connection) raises AnswerCut carrying what was said: the chunks yielded so
        far, which the caller keeps, marked as cut. The server's own `usage` is asked for
        (`stream_options.include_usage`) and recorded where it sends one.

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
            stream, first, messages = await self._begin_stream(messages, kwargs, started)
            finish: str | None = None
            usage: Any = None
            chunk = first
            while chunk is not None:
                if getattr(chunk, "usage", None) is not None:
                    usage = chunk.usage
                choice = chunk.choices[0] if chunk.choices else None
                if choice is not None:
                    if choice.finish_reason:
                        finish = choice.finish_reason
                    if choice.delta and choice.delta.content:
                        said.append(choice.delta.content)
                        yield choice.delta.content
                chunk = await self._within_deadline(anext(stream, None), started)
            if finish is None and not said:
                await stream.aclose()
                stream = None
                text = await self._ask_again(messages, kwargs, started)
                if text:
                    yield text
                return
            if finish is None:
                # The connection closed mid-answer: say so rather than pass a cut reply as whole.
                raise AnswerCut(
                    "The language model's answer was cut off before it finished; try again.",
                    said="".join(said),
                )
            prompt = sum(tokens.count(str(m.get("content") or ""), self.model) + 4
                         for m in messages)  # fmt: skip
            estimate = (prompt, tokens.count("".join(said), self.model))
            accounting.record(usage, finish, estimate)
        except BackendError:
            raise
        except _Deadline as e:
            if said:
                raise AnswerCut(
                    f"The language model's answer was cut off after {_seconds(self.timeout)} "
                    f"(llm_timeout_secs is {self.timeout:g}); try again, or raise "
                    "llm_timeout_secs.",
                    said="".join(said),
                    status=504,
                ) from e
            raise self.explain(e, started) from e
        except Exception as e:
            if said:
                error = self.explain(e, started)
                raise AnswerCut(
                    f"The language model's answer was cut off: {error.message}",
                    said="".join(said),
                    detail=error.detail,
                ) from e
            raise self.explain(e, started) from e
        finally:
            if stream is not None:
                await stream.aclose()  # a reader that stops early frees the connection at once

    async def _begin_stream(
        self, messages: list[dict], kwargs: dict, started: float
    ) -> tuple[Any, Any, list[dict]]:
        """The stream, its first chunk and the messages sent: shortened once when the server
        refuses a context too long, and asked again without `stream_options` when it refuses
        those (a server that knows no streamed usage)."""
        for _ in range(3):
            try:
                stream, first = await self._start_stream(messages, kwargs, started)
                return stream, first, messages
            except self._openai.APIStatusError as e:
                if self._stream_usage and "stream_options" in _short(e):
                    self._stream_usage = False
                    continue
                shorter = self._shortened(messages, e)
                if shorter is None:
                    raise
                messages = shorter
        raise BackendError("The language model refused the request; try again.")

    async def _ask_again(self, messages: list[dict], kwargs: dict, started: float) -> str:
        """After a stream that ended without a word: the same request, not streamed, to hear
        why. The server closed the stream's connection, so a kept-alive one may be dead: one
        connection error is tried again on a new connection."""
        o = self._openai
        for attempt in (1, 2):
            try:
                try:
                    response = await self._within_deadline(self._create(messages, kwargs), started)
                except o.APIStatusError as e:
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
        """The stream (an async iterator) and its first chunk (None when it ends at once),
        within the deadline: a refusal (HTTP 400) or a server that never starts surfaces here,
        where it can still be retried or explained."""
        if self._stream_usage and "stream_options" not in kwargs:
            kwargs = {**kwargs, "stream_options": {"include_usage": True}}
        stream = await self._within_deadline(self._open_stream(messages, kwargs), started)
        stream = _Chunks(stream)
        try:
            first = await self._within_deadline(anext(stream, None), started)
        except BaseException:
            await stream.aclose()
            raise
        return stream, first

    async def _open_stream(self, messages: list[dict], kwargs: dict) -> Any:
        endpoint = self._chat
        if endpoint is not None:
            body = endpoint.body(messages, kwargs, stream=True)
            if body is not None:
                return endpoint.stream(body)
        return await self.client.chat.completions.create(messages=messages, stream=True, **kwargs)  # type: ignore[arg-type]

    def explain(self, e: Exception, started: float | None = None) -> BackendError:
        """Map an openai/httpx exception to one sentence, never carrying the API key."""
        now = time.monotonic()
        waited = now - started if started is not None else self.timeout
        error = self._explain(e, waited, started if started is not None else now)
        if isinstance(error.detail, str) and len(self._key) >= 8:
            # Some servers echo the key they refused; the detail reaches clients and logs.
            error.detail = error.detail.replace(self._key, "[redacted]")
        return error

    def _explain(self, e: Exception, waited: float, started: float) -> BackendError:
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
            known = self.unreachable(started) if self.unreachable is not None else None
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


def with_schema_room(kwargs: dict) -> dict:
    """`kwargs` with max_tokens raised by what a JSON schema's own structure may cost.

    A grammar lets the model put whitespace between tokens (llama.cpp's: newlines and up to 20
    spaces of indentation) and hold it to the schema's keys and punctuation, which it often
    writes a character a token: `{"score": 0}` took 20 tokens on llama-server, LM_SCORE gave
    16 and got `{ "score"`. The budget a caller sets is for the values; the structure gets its
    own room on top (a model stops at the object's end, so a larger cap costs nothing)."""
    fmt = kwargs.get("response_format")
    limit = kwargs.get("max_tokens")
    if not isinstance(fmt, dict) or not isinstance(limit, int) or limit <= 0:
        return kwargs
    schema = fmt.get("schema") or (fmt.get("json_schema") or {}).get("schema")
    if not isinstance(schema, dict):
        return kwargs
    return {**kwargs, "max_tokens": limit + _structure_tokens(schema)}


def _structure_tokens(schema: Any, depth: int = 0) -> int:
    """Tokens a schema's keys, braces and whitespace may take, at a character a token."""
    if not isinstance(schema, dict) or depth > 32:
        return 0
    room = 0
    variants = [v for key in ("anyOf", "oneOf") for v in schema.get(key) or ()]
    if variants:
        room += max(_structure_tokens(v, depth + 1) for v in variants)
    properties = schema.get("properties")
    if isinstance(properties, dict):
        room += 8  # braces, and the whitespace around them
        for name, sub in properties.items():
            room += len(str(name)) + 12 + _structure_tokens(sub, depth + 1)
    items = schema.get("items")
    if isinstance(items, dict):
        room += 4 + _structure_tokens(items, depth + 1)
    return room


def shown_url(url: str) -> str:
    """The URL without user:password (some proxies take credentials in the URL)."""

    parts = urlsplit(url)
    if "@" not in parts.netloc:
        return url
    return urlunsplit(parts._replace(netloc=parts.netloc.rsplit("@", 1)[1]))


def _short(e: Exception) -> str:
    return str(getattr(e, "message", e))[:300]


class _Deadline(Exception):
    """A call ran past llm_timeout_secs (retries included) and was cancelled."""


# How servers word a context that is too long: OpenAI, vLLM and llama-cpp-python ("This
# model's maximum context length is 512 tokens. However, you requested 3239 tokens ...", 400),
# llama.cpp's server ("request (3239 tokens) exceeds the available context size (512 tokens),
# try increasing it" or "input (3239 tokens) is larger than the max context size (512
# tokens)", 400, with the numbers as n_prompt_tokens and n_ctx; "Context size has been
# exceeded." when slots sharing one cache fill it mid-answer, 500), Ollama and others
# ("context length exceeded", "context window").
_WINDOW = re.compile(
    r"maximum context length is (\d+)|context (?:window|size) of (\d+)|"
    r"context size \((\d+) tokens\)",
    re.I,
)
_ASKED = re.compile(
    r"(?:requested|resulted in) (\d+) tokens|Requested tokens \((\d+)\)|"
    r"(?:request|input) \((\d+) tokens\)",
    re.I,
)
_OVERFLOW = re.compile(
    r"context_length_exceeded|maximum context length|exceeds? the available context size|"
    r"exceed_context_size|larger than the max context size|context size has been exceeded|"
    r"context (?:length|window) (?:exceeded|of \d+)|too many tokens",
    re.I,
)


def context_overflow(e: Exception) -> tuple[int | None, int | None] | None:
    """(the server's window, the tokens asked for) when `e` is a context-length refusal."""
    status = getattr(e, "status_code", None)
    if status not in (400, 413, 422, 500):
        return None
    body = getattr(e, "body", None)
    text = str(getattr(e, "message", "")) + " " + str(body or "")
    code = getattr(e, "code", None)
    if code != "context_length_exceeded" and not _OVERFLOW.search(text):
        return None
    if status == 500 and not re.search(r"context size has been exceeded", text, re.I):
        return None  # a server error that merely mentions a context
    fields = body.get("error", body) if isinstance(body, dict) else {}
    fields = fields if isinstance(fields, dict) else {}
    window = _number(fields.get("n_ctx")) or _first(_WINDOW.search(text))
    asked = _number(fields.get("n_prompt_tokens")) or _first(_ASKED.search(text))
    return window, asked


def _without_prefill_under_grammar(
    messages: list[dict], kwargs: dict, e: Exception
) -> tuple[list[dict], dict] | None:
    """The request without its assistant prefill, when `e` is llama.cpp refusing a prefill
    under a response_format grammar ("Failed to initialize samplers"); else None."""
    said = str(getattr(e, "message", "")) + " " + str(getattr(e, "body", ""))
    if getattr(e, "status_code", None) != 400 or "initialize samplers" not in said:
        return None
    if not messages or messages[-1].get("role") != "assistant" or "response_format" not in kwargs:
        return None
    kwargs = dict(kwargs)
    extra = dict(kwargs.get("extra_body") or {})
    for key in ("continue_final_message", "add_generation_prompt"):
        extra.pop(key, None)
    if extra:
        kwargs["extra_body"] = extra
    else:
        kwargs.pop("extra_body", None)
    return messages[:-1], kwargs


_N_LIMIT = re.compile(r"'n'.*?value <= (\d+)", re.I | re.S)


def n_limit(e: Exception) -> int | None:
    """The most choices a server gives in one request, when `e` is its refusal of more
    (llama.cpp: "Field 'n': Value must be between 1 <= value <= 4, but got 5")."""
    if getattr(e, "status_code", None) != 400:
        return None
    found = _N_LIMIT.search(str(getattr(e, "message", "")) + " " + str(getattr(e, "body", "")))
    return int(found.group(1)) if found else None


def _number(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


def _first(found: re.Match | None) -> int | None:
    return int(next(g for g in found.groups() if g)) if found else None


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


class _Chunks:
    """A stream's chunks one `anext` at a time (each awaited within the deadline), closed
    with the stream."""

    def __init__(self, stream: Any) -> None:
        self.stream = stream
        self.chunks = aiter(stream)

    def __aiter__(self) -> _Chunks:
        return self

    async def __anext__(self) -> Any:
        return await anext(self.chunks)

    async def aclose(self) -> None:
        await self.stream.aclose()


def _seconds(secs: float) -> str:
    """1.5 seconds, 12 seconds: what a person would say."""
    if secs < 10:
        shown = f"{secs:.1f}".rstrip("0").rstrip(".")
        return f"{shown} second" + ("" if shown == "1" else "s")
    return plural(round(secs), "second")
