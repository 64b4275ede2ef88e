"""Getting a score from the backend: the text method (single or ensemble), the logprob
method, thinking suppression, retries, concurrency limits and the cache."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import openai

from daemon.api import LLM, BackendError, LmdError, batch_concurrency, shown_url, tokens

from .aggregate import aggregate
from .cache import ScoreCache, cache_key
from .config import ScoreConfig
from .logprob import expected_score, rated_position
from .parse import parse_score
from .prompt import THINK_PREFILL, prompt_for

log = logging.getLogger("lmd.lm_score")

# The answer's shape where the server constrains output: an integer from 0 to 10 (an enum:
# the form every server's schema support knows), in an object (OpenAI wants one at the top).
SCORE_SCHEMA = {
    "type": "object",
    "properties": {"score": {"type": "integer", "enum": list(range(11))}},
    "required": ["score"],
    "additionalProperties": False,
}


class NoScore(LmdError):
    """The model answered, but not with a score from 0 to 10."""

    status = 422
    kind = "no_score"


@dataclass
class ScoreResult:
    """One LM_SCORE answer and how it was reached."""

    score: int
    scores: list[int]
    members: int  # members whose score counted
    requested: int  # members asked for
    method: str
    model: str
    aggregation: str | None = None
    raw: list[str] = field(default_factory=list)
    retries: int = 0
    failures: list[str] = field(default_factory=list)
    expected: float | None = None
    distribution: dict[str, float] | None = None
    fallback: str | None = None
    cached: bool = False

    def to_json(self) -> dict:
        return {k: v for k, v in asdict(self).items() if v is not None}


@dataclass
class _Member:
    score: int | None = None
    raw: str | None = None
    error: LmdError | None = None


def _backend_failure(e: BackendError, config: ScoreConfig | None = None) -> LmdError:
    """A 429 keeps its status so clients can tell 'slow down' from 'broken'; a 400 while
    thinking is suppressed most likely means the server does not know those fields."""
    cause = e.__cause__
    if config is not None and not config.thinking and getattr(cause, "status_code", 0) == 400:
        return BackendError(
            "The scoring backend refused the request (HTTP 400), perhaps the fields that "
            f"suppress thinking ({config.thinking_strategy}); set lm_score_thinking to true "
            "or choose another lm_score_thinking_strategy.",
            detail=e.detail,
        )
    if config is not None and _unreachable(cause):
        return BackendError(
            f"I could not reach the scoring model at {shown_url(config.endpoint)}; check that "
            f"it is running and that {config.endpoint_source} is right.",
            detail=e.detail,
        )
    if type(cause).__name__ == "RateLimitError":
        return LmdError(
            "The scoring model is rate limiting us (HTTP 429); wait a moment and try again, "
            "or lower lm_score_concurrency.",
            status=429,
            detail=e.detail,
        )
    return e


def _unreachable(cause: BaseException | None) -> bool:
    """A connection that failed (not one that timed out, which has its own sentence)."""
    return isinstance(cause, openai.APIConnectionError) and not isinstance(
        cause, openai.APITimeoutError
    )


def _rejects_n(e: BackendError) -> bool:
    return getattr(e.__cause__, "status_code", None) in (400, 422)


class Scorer:
    """Scores prompts against one backend with one ScoreConfig."""

    def __init__(
        self, config: ScoreConfig, llm: Any = None, cache: ScoreCache | None = None
    ) -> None:
        self.config = config
        self.owns_llm = llm is None
        self.on_close: Callable[[], Any] | None = None  # what else ends with the scorer
        self.llm = llm or LLM(
            config.endpoint, config.api_key, config.timeout, config.retries, config.model
        )
        self.cache = cache if config.cache else None
        self.n_rejected = False  # learnt when the backend refuses n > 1
        self.calls = 0
        self._sem: asyncio.Semaphore | None = None
        self._sem_loop: Any = None
        self._inflight: dict[str, asyncio.Future] = {}  # one backend round per prompt at once
        # Whether the server continues an assistant prefill (the "prefill" way to suppress
        # thinking): probed on first need; None until then.
        self.prefill_ok: bool | None = None
        # The `response_format` that holds the answer to {"score": 0..10} where the server can
        # constrain output to a JSON schema (the prompt stays the spec's, word for word).
        self.score_format: dict | None = None
        self._probed = False

    async def close(self) -> None:
        if self.owns_llm:
            await self.llm.close()
        if self.on_close is not None:
            done, self.on_close = self.on_close, None
            await asyncio.to_thread(done)

    # -- public ------------------------------------------------------------------------
    async def score(
        self, parts: Sequence[Any] | None = None, *, prompt: str | None = None, cache: bool = True
    ) -> ScoreResult:
        """LM_SCORE(*parts), or the score of a ready prompt."""
        if prompt is None:
            prompt = prompt_for(parts or [])
        self.check_budget(prompt)
        key = cache_key(self.config.fingerprint(), prompt)
        if cache and self.cache is not None:
            hit = self.cache.get(key)
            if hit is not None:
                return ScoreResult(**{**hit, "cached": True})
        loop = asyncio.get_running_loop()
        running = self._inflight.get(key)
        if running is not None and running.get_loop() is loop:
            try:  # the same prompt is being scored: share its answer
                return await asyncio.shield(running)
            except asyncio.CancelledError:
                if not running.cancelled():
                    raise  # we were cancelled ourselves
                # the one scoring it was cancelled (its client left): score it ourselves
        future = self._inflight[key] = loop.create_future()
        try:
            await self._check_backend()
            if self.config.method == "logprob":
                result = await self._logprob_or_fallback(prompt)
            else:
                result = await self._text(prompt)
        except Exception as e:
            future.set_exception(e)
            future.exception()  # marked retrieved: nobody else may be waiting
            raise
        except BaseException:
            future.cancel()
            raise
        finally:
            self._inflight.pop(key, None)
        future.set_result(result)
        if self.cache is not None:
            identity = self.config.fingerprint()["identity"]
            self.cache.put(key, result.score, result.to_json(), identity)
        return result

    async def score_many(
        self,
        rows: Sequence[Sequence[Any]],
        *,
        cache: bool = True,
        progress: Callable[[], None] | None = None,
    ) -> list[ScoreResult | LmdError]:
        """Scores for many argument tuples at once (calls bounded by lm_score_concurrency).

        Cached scores are looked up together first, so a fully cached query costs a few
        database reads rather than one round of the scoring machinery per row."""
        results: list[ScoreResult | LmdError | None] = [None] * len(rows)
        if cache and self.cache is not None:
            fingerprint = self.config.fingerprint()
            keys: dict[str, list[int]] = {}
            for i, parts in enumerate(rows):
                try:
                    keys.setdefault(cache_key(fingerprint, prompt_for(parts)), []).append(i)
                except LmdError as e:
                    results[i] = e
                    if progress:
                        progress()
            for key, hit in self.cache.get_many(list(keys)).items():
                for i in keys[key]:
                    results[i] = ScoreResult(**{**hit, "cached": True})
                    if progress:
                        progress()

        async def one(i: int) -> None:
            try:
                results[i] = await self.score(rows[i], cache=cache)
            except LmdError as e:
                results[i] = e
            finally:
                if progress:
                    progress()

        await asyncio.gather(*(one(i) for i, r in enumerate(results) if r is None))
        return results  # type: ignore[return-value]

    def check_budget(self, prompt: str) -> None:
        limit = self.config.max_prompt_tokens
        # Cheap bound first: a token is at least one byte, so short prompts need no count.
        if len(prompt.encode("utf-8")) <= limit:
            return
        used = tokens.count(prompt, self.config.model)
        if used > limit:
            raise LmdError(
                f"The contents are about {used} tokens, more than the scoring budget of "
                f"{limit} (lm_score_max_prompt_tokens); shorten them or raise the setting.",
                status=413,
            )

    # -- one backend call --------------------------------------------------------------
    async def gate(self) -> asyncio.Semaphore:
        """What bounds the calls in flight (rows and ensemble members together): one with
        lm_score_sequential, lm_score_concurrency where set, else what the backend serves
        in parallel (batch_concurrency)."""
        loop = asyncio.get_running_loop()
        if self._sem is None or self._sem_loop is not loop:
            cfg = self.config
            size = 1 if cfg.sequential else cfg.concurrency or await batch_concurrency(self.llm)
            if self._sem is None or self._sem_loop is not loop:  # nobody made it meanwhile
                self._sem, self._sem_loop = asyncio.Semaphore(size), loop
        return self._sem

    def wants_prefill(self) -> bool:
        cfg = self.config
        return not cfg.thinking and cfg.thinking_strategy in ("prefill", "both")

    async def _check_backend(self) -> None:
        """Ask the backend's capabilities once: whether it can constrain the answer to a JSON
        schema (then the score comes back as {"score": N}), and whether it honours the
        prefill (a server that ignores it, as llama-cpp-python does, would answer the
        question afresh, thinking and all)."""
        if self._probed:
            return
        self._probed = True
        caps = await self.llm.capabilities()
        if self.config.constrain:
            self.score_format = caps.response_format("lm_score", SCORE_SCHEMA)
        if not self.wants_prefill():
            return
        self.prefill_ok = bool(caps.prefill) or caps.source == "assumed"
        if not self.prefill_ok:
            log.info(
                "The scoring server ignores the assistant prefill (continue_final_message); "
                "thinking is suppressed by %s.",
                "template kwargs only"
                if self.config.thinking_strategy == "both"
                else "nothing: set lm_score_thinking_strategy to template_kwargs",
            )

    @property
    def prefill_note(self) -> str | None:
        """What the result says when the prefill had to be left out."""
        if self.prefill_ok is False:
            return (
                "no prefill: the server ignores continue_final_message, so the assistant "
                "prefill that suppresses thinking was not sent"
            )
        return None

    def request(self, prompt: str) -> tuple[list[dict], dict]:
        """Messages and extra body fields: the spec's prefill and/or template kwargs."""
        messages: list[dict] = [{"role": "user", "content": prompt}]
        extra: dict = {}
        cfg = self.config
        if not cfg.thinking:
            if cfg.thinking_strategy in ("prefill", "both") and self.prefill_ok is not False:
                messages.append({"role": "assistant", "content": THINK_PREFILL})
                extra["continue_final_message"] = True
                extra["add_generation_prompt"] = False
            if cfg.thinking_strategy in ("template_kwargs", "both"):
                extra["chat_template_kwargs"] = {"enable_thinking": False}
        return messages, extra

    async def call(
        self, prompt: str, *, n: int = 1, temperature: float = 0.0, logprobs: bool = False
    ) -> Any:
        cfg = self.config
        messages, extra = self.request(prompt)
        kwargs: dict[str, Any] = {"model": cfg.model, "temperature": temperature}
        if n > 1:
            kwargs["n"] = n
        if cfg.max_tokens:
            kwargs["max_tokens"] = cfg.max_tokens
        if logprobs:
            # Few tokens: the score, maybe a split "1","0", maybe a leading space.
            kwargs.update(logprobs=True, top_logprobs=cfg.top_logprobs)
            kwargs["max_tokens"] = cfg.max_tokens or 4
        if self.score_format is not None:
            # {"score": 10} is some eight tokens; the logprob method reads the digit's place
            kwargs["response_format"] = self.score_format
            kwargs["max_tokens"] = max(kwargs.get("max_tokens") or 0, 16)
        if extra:
            kwargs["extra_body"] = extra
        async with await self.gate():
            self.calls += 1
            try:
                return await self.llm.complete(messages, **kwargs)
            except BackendError as e:
                status = getattr(e.__cause__, "status_code", None)
                if "response_format" not in kwargs or status not in (400, 422) or n > 1:
                    # with n > 1 the refusal may be of n (more choices than the server has
                    # slots): the ensemble asks member by member, schema and all
                    raise
                # The probe said yes, the server says no: ask in words from now on.
                log.info("The scoring server refused the JSON schema; asking in words.")
                self.score_format = None
                kwargs.pop("response_format")
                self.calls += 1
                return await self.llm.complete(messages, **kwargs)

    # -- the text method ---------------------------------------------------------------
    async def _text(self, prompt: str) -> ScoreResult:
        cfg = self.config
        size = cfg.ensemble_size if cfg.ensemble else 1
        temperature = cfg.temperature if cfg.ensemble else 0.0
        members = await self._first_round(prompt, size, temperature)
        # Each member that failed or gave no score is asked once more.
        again = [i for i, m in enumerate(members) if m.score is None]
        if again:
            redo = await self._singles(prompt, len(again), temperature)
            for i, m in zip(again, redo, strict=True):
                if m.score is None and m.raw is None and members[i].raw is not None:
                    m.raw = members[i].raw
                members[i] = m
        counted = [m.score for m in members if m.score is not None]
        raw = [m.raw for m in members if m.raw is not None]
        failures = [_why(m) for m in members if m.score is None]
        if not counted:
            errors = [m.error for m in members if m.error is not None]
            if errors and len(errors) == len(members):
                raise errors[0]
            said = raw[-1] if raw else ""
            raise NoScore(
                f"The model did not answer with a score from 0 to 10 (it said: {_quote(said)}); "
                + self._what_to_do(),
                detail={"raw": raw},
            )
        return ScoreResult(
            fallback=self.prefill_note,
            score=aggregate(counted, cfg.aggregation) if size > 1 else counted[0],
            scores=counted,
            members=len(counted),
            requested=size,
            method="text",
            model=cfg.model,
            aggregation=cfg.aggregation if size > 1 else None,
            raw=raw,
            retries=len(again),
            failures=failures,
        )

    async def _first_round(self, prompt: str, size: int, temperature: float) -> list[_Member]:
        cfg = self.config
        if size > 1 and cfg.use_n and not cfg.sequential and not self.n_rejected:
            try:
                response = await self.call(prompt, n=size, temperature=temperature)
            except BackendError as e:
                if not _rejects_n(e):
                    return [_Member(error=_backend_failure(e, self.config)) for _ in range(size)]
                self.n_rejected = True  # llama.cpp and Ollama: fall back to parallel calls
                log.info("The backend refuses n > 1; ensemble members are separate calls.")
            else:
                members = [_read(c) for c in response.choices[:size]]
                if len(members) < size:  # servers that ignore n send one choice
                    members += await self._singles(prompt, size - len(members), temperature)
                return members
        return await self._singles(prompt, size, temperature)

    async def _singles(self, prompt: str, count: int, temperature: float) -> list[_Member]:
        async def one() -> _Member:
            try:
                response = await self.call(prompt, temperature=temperature)
            except BackendError as e:
                return _Member(error=_backend_failure(e, self.config))
            if not response.choices:
                return _Member(error=BackendError("The scoring model sent no answer."))
            return _read(response.choices[0])

        return list(await asyncio.gather(*(one() for _ in range(count))))

    def _what_to_do(self) -> str:
        if self.prefill_ok is False and self.config.thinking_strategy == "prefill":
            return (
                "the server ignores the assistant prefill that stops thinking (it does not "
                "honour continue_final_message): set lm_score_thinking_strategy to "
                "template_kwargs, or lm_score_thinking to true."
            )
        return "rephrase the question or try another model."

    # -- the logprob method ------------------------------------------------------------
    async def _logprob_or_fallback(self, prompt: str) -> ScoreResult:
        try:
            return await self._logprob(prompt)
        except NoLogprobs as e:
            if not self.config.logprob_fallback:
                raise
            log.info("%s Falling back to the text method.", e.message)
            result = await self._text(prompt)
            result.fallback = "text (the backend sent no logprobs)"
            return result

    async def _logprob(self, prompt: str) -> ScoreResult:
        cfg = self.config
        raw: list[str] = []
        for attempt in range(2):
            try:
                response = await self.call(prompt, logprobs=True)
            except BackendError as e:
                raise _backend_failure(e, self.config) from e
            choice = response.choices[0] if response.choices else None
            content = getattr(getattr(choice, "logprobs", None), "content", None)
            if not content:
                raise NoLogprobs(
                    "The scoring backend sent no logprobs; set lm_score_method to text, or "
                    "turn on lm_score_logprob_fallback.",
                    status=502,
                )
            raw.append(choice.message.content or "")
            tokens = [
                (t.token, t.logprob, [(a.token, a.logprob) for a in (t.top_logprobs or [])])
                for t in content
            ]
            # only where the reply is a rating (the text method's guards), at its score
            at = rated_position(tokens)
            found = expected_score(tokens, at) if at is not None else None
            if found is not None:
                return ScoreResult(
                    score=found.score,
                    scores=[found.score],
                    members=1,
                    requested=1,
                    method="logprob",
                    model=cfg.model,
                    raw=raw,
                    retries=attempt,
                    expected=round(found.expected, 4),
                    distribution={str(k): round(v, 6) for k, v in found.distribution.items()},
                )
        what = self._what_to_do()
        if what.startswith("rephrase"):
            what = "rephrase the question or use the text method."
        raise NoScore(
            f"The model did not answer with a score from 0 to 10 (it said: "
            f"{_quote(raw[-1])}); " + what,
            detail={"raw": raw},
        )


class NoLogprobs(LmdError):
    status = 502
    kind = "no_logprobs"


def _read(choice: Any) -> _Member:
    raw = choice.message.content or ""
    return _Member(score=parse_score(raw), raw=raw)


def _why(m: _Member) -> str:
    if m.error is not None:
        return m.error.message
    return f"no score in the reply {_quote(m.raw or '')}"


def _quote(text: str, limit: int = 120) -> str:
    text = " ".join(text.split())
    if len(text) > limit:
        text = text[: limit - 3] + "..."
    return repr(text)
