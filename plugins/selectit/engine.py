"""Scoring samples with a rater: prompts in, SelectIT scores out (shared by CLI and route)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from .datasets import Sample
from .prompts import Prompt, build_prompt
from .scoring import DEFAULT_SCORE, Rating, final_score


class Rater(Protocol):
    """A source of rating distributions (the openai and transformers backends)."""

    def rate_samples(
        self, prompt_lists: Sequence[Sequence[Prompt]]
    ) -> AsyncIterator[tuple[int, list[Rating]]]: ...


@dataclass
class Result:
    id: Any
    score: float
    valid: bool = True
    ratings: list[Rating] = field(default_factory=list)

    def to_json(self, details: bool = False) -> dict:
        out: dict[str, Any] = {"id": self.id, "score": self.score}
        if details:
            out["token_scores"] = [r.score for r in self.ratings]
            out["distributions"] = [list(r.probs) for r in self.ratings]
            if not self.valid:
                out["missing_fields"] = True
        return out


def prompts_for(sample: Sample, templates: Sequence[str]) -> list[Prompt]:
    return [
        build_prompt(t, sample.instruction or "", sample.output or "", sample.input)
        for t in templates
    ]


def combine(sample: Sample, ratings: list[Rating], alpha: float) -> Result:
    return Result(sample.id, final_score([r.score for r in ratings], alpha), True, ratings)


async def score_samples(
    samples: Sequence[Sample], templates: Sequence[str], alpha: float, rater: Rater
) -> AsyncIterator[Result]:
    """A Result per sample, as each finishes; invalid samples first, at the default score."""
    valid = []
    for s in samples:
        if s.valid:
            valid.append(s)
        else:
            yield Result(s.id, DEFAULT_SCORE, False)
    if not valid:
        return
    prompt_lists = [prompts_for(s, templates) for s in valid]
    async for index, ratings in rater.rate_samples(prompt_lists):
        yield combine(valid[index], ratings, alpha)
