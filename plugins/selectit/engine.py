"""Scoring samples with a rater: prompts in, SelectIT scores out (shared by CLI and route)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from .datasets import Sample
from .prompts import Prompt, Tokens, TooLong, build_prompt, fit
from .scoring import DEFAULT_SCORE, Rating, final_score


class Rater(Protocol):
    """A source of rating distributions (the openai and transformers backends)."""

    max_length: int | None

    @property
    def tokens(self) -> Tokens: ...

    def rate_samples(
        self, prompt_lists: Sequence[Sequence[Prompt]]
    ) -> AsyncIterator[tuple[int, list[Rating]]]: ...


@dataclass
class Result:
    id: Any
    score: float | None  # None: the model rated none of the sample's prompts
    valid: bool = True
    ratings: list[Rating] = field(default_factory=list)
    removed: list[int] = field(default_factory=list)  # sample tokens cut, per rating prompt
    skipped: str | None = None  # why the sample got the default score without a rating

    @property
    def truncated(self) -> bool:
        return any(self.removed)

    @property
    def unrated(self) -> list[str]:
        """Why each prompt the model would not rate got no rating."""
        return [r.unrated for r in self.ratings if r.unrated]

    @property
    def quality(self) -> str:
        """measured (every rating read), bounded (some bounded), unrated (no rating at all),
        partly unrated, or default (3.0 by the spec's rule: missing fields or too long)."""
        if not self.valid or self.skipped:
            return "default"
        if self.score is None:
            return "unrated"
        if self.unrated:
            return "partly unrated"
        return "bounded" if any(r.absent for r in self.ratings) else "measured"

    def to_json(self, details: bool = False) -> dict:
        out: dict[str, Any] = {"id": self.id, "score": self.score}
        if self.skipped:
            out["skipped"] = self.skipped  # always: a 3.0 that is no rating must say so
        if self.unrated:  # always: a missing or partial score must say why
            out["unrated"] = self.unrated
        if details:
            out["token_scores"] = [r.score for r in self.ratings]
            out["distributions"] = [list(r.probs) for r in self.ratings]
            if not self.valid:
                out["missing_fields"] = True
            if self.truncated:
                out["truncated"] = True
                out["removed_tokens"] = self.removed
        return out


def prompts_for(sample: Sample, templates: Sequence[str]) -> list[Prompt]:
    return [
        build_prompt(t, sample.instruction or "", sample.output or "", sample.input)
        for t in templates
    ]


def fitted_prompts(
    sample: Sample, templates: Sequence[str], rater: Rater
) -> list[Prompt] | TooLong:
    """The sample's k prompts, each fitted to the rater's max_length; TooLong if one cannot."""
    prompts = prompts_for(sample, templates)
    if not rater.max_length:
        return prompts
    tokens = rater.tokens
    try:
        return [fit(p, rater.max_length, tokens) for p in prompts]
    except TooLong as e:
        return e


def combine(sample: Sample, ratings: list[Rating], alpha: float, prompts: list[Prompt]) -> Result:
    return rated(sample, ratings, alpha, [p.removed for p in prompts])


def rated(sample: Sample, ratings: list[Rating], alpha: float, removed: list[int]) -> Result:
    """The Result of a rated sample; `removed`: sample tokens cut from each prompt. Prompts
    the model would not rate count for nothing: the score comes from the others, or there is
    none (never the neutral 3.0 passed off as a rating)."""
    counted = [r.score for r in ratings if not r.unrated]
    score = final_score(counted, alpha) if counted else None
    return Result(sample.id, score, True, ratings, removed)


async def score_samples(
    samples: Sequence[Sample], templates: Sequence[str], alpha: float, rater: Rater
) -> AsyncIterator[Result]:
    """A Result per sample, as each finishes. Samples without instruction or output, and those
    whose prompts cannot fit max_length, come first, at the default score."""
    valid = []
    for s in samples:
        if s.valid:
            valid.append(s)
        else:
            yield Result(s.id, DEFAULT_SCORE, False)
    if not valid:
        return
    # Counting tokens takes a while on big datasets: not on the daemon's event loop.
    fitted = await asyncio.to_thread(lambda: [fitted_prompts(s, templates, rater) for s in valid])
    rated, prompt_lists = [], []
    for s, prompts in zip(valid, fitted, strict=True):
        if isinstance(prompts, TooLong):
            yield Result(s.id, DEFAULT_SCORE, True, skipped=prompts.message)
        else:
            rated.append(s)
            prompt_lists.append(prompts)
    if not rated:
        return
    async for index, ratings in rater.rate_samples(prompt_lists):
        yield combine(rated[index], ratings, alpha, prompt_lists[index])
