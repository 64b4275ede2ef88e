"""Rating probabilities from any OpenAI-compatible server that returns logprobs.

One request per rating prompt: `max_tokens` 1 and the top logprobs of that one token, either
on the completions endpoint with the raw prompt (base models) or on chat (instruct models).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Sequence
from typing import Any

from daemon.api import BackendError, batch_concurrency, tokens

from .prompts import Prompt
from .scoring import Rating, rating_from_logprobs, unrated

FALLBACK_TOP_LOGPROBS = 5  # what OpenAI's completions endpoint allows at most
LOOK_AHEAD = 3  # tokens asked for: the rating may follow a space or a newline
_SPACE_MARKS = "\u2581\u0120\u010a"  # ▁ Ġ Ċ: tokenizers' marks for a space or newline


class OpenAIRater:
    """Rates prompts through a daemon.backends.llm.LLM, at most `concurrency` requests at a
    time (0: as many as the backend serves, daemon.api.batch_concurrency)."""

    def __init__(
        self,
        llm: Any,
        model: str,
        api: str = "completions",
        top_logprobs: int = 20,
        concurrency: int = 0,
        max_length: int | None = None,
    ) -> None:
        self.llm = llm
        self.model = model
        self.api = api
        self.top_logprobs = top_logprobs
        self.concurrency = concurrency
        self.max_length = max_length
        self._gate: asyncio.Semaphore | None = None

    async def limit(self) -> int:
        """Requests in flight at most: `concurrency`, or what the backend serves."""
        if not self.concurrency:
            self.concurrency = await batch_concurrency(self.llm)
        if self._gate is None:
            self._gate = asyncio.Semaphore(self.concurrency)
        return self.concurrency

    @property
    def tokens(self) -> DaemonTokens:
        """How prompts are counted for max_length (see DaemonTokens)."""
        return DaemonTokens(self.model)

    async def rate(self, prompt: Prompt) -> Rating:
        """The rating distribution of one prompt (fitted to max_length already)."""
        text = prompt.text
        await self.limit()
        assert self._gate is not None
        async with self._gate:
            while True:
                asked = self.top_logprobs
                try:
                    response = await self._request(text, asked)
                    break
                except BackendError as e:
                    if not self._refused_logprobs(e, asked):
                        raise
                    # The server caps top logprobs (OpenAI completions: 5); ask for fewer.
                    self.top_logprobs = min(self.top_logprobs, FALLBACK_TOP_LOGPROBS)
        top = self._top_tokens(response)
        if isinstance(top, str):
            return unrated(top)
        return rating_from_logprobs(top)

    async def rate_samples(
        self, prompt_lists: Sequence[Sequence[Prompt]]
    ) -> AsyncIterator[tuple[int, list[Rating]]]:
        """(index, ratings) for each sample as soon as all its prompts are rated."""

        async def one(i: int, prompts: Sequence[Prompt]) -> tuple[int, list[Rating]]:
            return i, list(await asyncio.gather(*(self.rate(p) for p in prompts)))

        todo = iter(enumerate(prompt_lists))
        pending: set[asyncio.Task] = set()
        slots = await self.limit()
        try:
            while True:
                # Keep enough samples in flight to fill every request slot, but no more.
                while len(pending) < slots:
                    nxt = next(todo, None)
                    if nxt is None:
                        break
                    pending.add(asyncio.ensure_future(one(*nxt)))
                if not pending:
                    return
                done, pending = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
                failed = [t.exception() for t in done if t.exception() is not None]
                if failed:
                    raise failed[0]
                for result in sorted((t.result() for t in done), key=lambda r: r[0]):
                    yield result
        finally:
            for task in pending:
                task.cancel()
            if pending:
                await asyncio.gather(*pending, return_exceptions=True)

    async def _request(self, text: str, top: int) -> Any:
        # Three tokens, not one: a model may open with a bare space or a newline (SmolLM2
        # does, on the completions API) and rate at the next position.
        if self.api == "chat":
            return await self.llm.complete(
                [{"role": "user", "content": text}],
                model=self.model,
                max_tokens=LOOK_AHEAD,
                temperature=0,
                logprobs=True,
                top_logprobs=top,
            )
        return await self.llm.completion(
            text, model=self.model, max_tokens=LOOK_AHEAD, temperature=0, logprobs=top
        )

    def _refused_logprobs(self, e: BackendError, asked: int) -> bool:
        said = f"{e.message} {e.detail or ''}".lower()
        return asked > FALLBACK_TOP_LOGPROBS and "http 400" in said and "logprob" in said

    def _top_tokens(self, response: Any) -> list[tuple[str, float]] | str:
        """[(token, logprob)] of the first generated position that is not whitespace alone,
        the chosen token included; or why the model gave no rating at all.

        Reads the chat shape (`content[i].top_logprobs`) and the legacy completions shape
        (`top_logprobs[i]` a dict) on either endpoint: llama.cpp's server answers completions
        in the chat shape.
        """
        choice = response.choices[0] if getattr(response, "choices", None) else None
        logprobs = _get(choice, "logprobs") if choice is not None else None
        positions: list[tuple[tuple[str, float] | None, list[tuple[str, float]]]] = []
        content = _get(logprobs, "content")
        if content:
            for at in content:
                alts = [
                    (_get(t, "token"), _get(t, "logprob")) for t in _get(at, "top_logprobs") or []
                ]
                positions.append(((_get(at, "token"), _get(at, "logprob")), alts))
        else:
            tops = _get(logprobs, "top_logprobs") or []
            tokens, lps = _get(logprobs, "tokens") or [], _get(logprobs, "token_logprobs") or []
            for i, alts in enumerate(tops):
                chosen = (tokens[i], lps[i]) if i < len(tokens) and i < len(lps) else None
                positions.append((chosen, list(alts.items()) if isinstance(alts, dict) else []))
        if not positions:
            said = self._reply_text(choice)
            if choice is not None and not said.strip():
                # The model ended at once (end of sequence first): nothing to read, and
                # nothing wrong with the server. A rating it would not give.
                return "the model ended its answer at once, without a word (end of sequence)"
            raise BackendError(
                f"The server at {self.llm.url} answered without logprobs (model {self.model}, "
                f"its reply: {said!r}); SelectIT needs a server that returns "
                "logprobs, such as vLLM, SGLang or the llama.cpp server.",
                detail={"reply": said},
            )
        found = next(
            (at for at in positions if at[0] is not None and isinstance(at[0][0], str)
             and not _blank(at[0][0])),
            None,
        )  # fmt: skip
        if found is None:
            return "the model answered with whitespace only"
        chosen, alts = found
        listed = {t for t, _ in alts}
        pairs = alts + [chosen] if chosen and chosen[0] not in listed else alts
        return [(t, lp) for t, lp in pairs if isinstance(t, str) and isinstance(lp, int | float)]

    def _reply_text(self, choice: Any) -> str:
        if choice is None:
            return ""
        message = getattr(choice, "message", None)
        text = getattr(message, "content", None) if message is not None else None
        if text is None:
            text = getattr(choice, "text", None)
        return (text or "")[:200]


class DaemonTokens:
    """Counts the daemon's way: tiktoken for the model, or 4 UTF-8 bytes a token offline.

    The server's own tokenizer is unknown here, so this guards against context-length errors
    (which would stop a run at the same sample on every resume); it is not an exact count.
    """

    def __init__(self, model: str) -> None:
        self.model = model
        self.encoding = tokens.encoding_for(model)

    def count(self, text: str) -> int:
        if self.encoding is None:
            return tokens.estimate(text)
        return len(self.encoding.encode(text, disallowed_special=()))

    part = count

    def ends(self, text: str, head: int, tail: int) -> tuple[str, str]:
        if self.encoding is None:  # the estimate's "tokens" are 4-byte slices
            raw = text.encode("utf-8", "surrogatepass")
            first = raw[: head * 4].decode("utf-8", "ignore")
            last = raw[len(raw) - tail * 4 :].decode("utf-8", "ignore") if tail else ""
            return _whole_words(first, text, True), _whole_words(last, text, False)
        ids = self.encoding.encode(text, disallowed_special=())
        decode = self.encoding.decode_bytes
        return (
            decode(ids[:head]).decode("utf-8", "ignore"),
            decode(ids[len(ids) - tail :]).decode("utf-8", "ignore") if tail else "",
        )


def _whole_words(piece: str, text: str, head: bool) -> str:
    """A byte slice of `text` trimmed to whole words, when a word boundary is near (the
    estimate knows no tokens, and half words only confuse the model)."""
    if len(piece) == len(text) or not piece:
        return piece
    cut_inside = not (text[len(piece)] if head else text[-len(piece) - 1]).isspace()
    if not cut_inside:
        return piece
    space = piece.rfind(" ") if head else piece.find(" ")
    near = space >= len(piece) - 16 if head else 0 <= space < 16
    if not near:
        return piece
    return piece[:space] if head else piece[space + 1 :]


def _blank(token: str) -> bool:
    """A token of whitespace only, written plainly or with a tokenizer's space marks."""
    return not token.strip().strip(_SPACE_MARKS).strip()


def _get(obj: Any, name: str) -> Any:
    """A field of an SDK object or of a plain dict (fields the SDK does not know stay dicts)."""
    if obj is None:
        return None
    if isinstance(obj, dict):
        return obj.get(name)
    value = getattr(obj, name, None)
    if value is None:
        extra = getattr(obj, "model_extra", None) or {}
        value = extra.get(name)
    return value
