"""Helpers for the LM_SCORE tests: a Scorer against the fake backend, the golden prompt."""

from __future__ import annotations

import asyncio
from typing import Any

from plugins.lm_score.cache import ScoreCache
from plugins.lm_score.config import ScoreConfig
from plugins.lm_score.scorer import Scorer

# The spec's prompt for LM_SCORE("Weekly invoice 12/12/2022", "$14,000",
# "Is my invoice greater than $5,000?"), written out by hand, byte for byte.
GOLDEN_INVOICE_PROMPT = """Based on the following content, answer this yes/no question: Is my invoice greater than $5,000?

Content: 
Weekly invoice 12/12/2022
$14,000

Provide a score from 0 to 10 based on your confidence in the answer:
- 10 = strongly yes, definitely true
- 7-9 = probably yes, likely true
- 5-6 = uncertain, could go either way
- 3-4 = probably no, likely false
- 0-2 = strongly no, definitely false

Provide only a single number from 0 to 10.
Score:"""  # noqa: E501, W291


def config(backend: Any, **kw: Any) -> ScoreConfig:
    base = dict(
        endpoint=backend.url,
        api_key="sk-test",
        model="fake-model",
        timeout=10.0,
        retries=0,
        cache=False,
    )
    return ScoreConfig(**{**base, **kw})


def run_score(backend: Any, parts: list, store: ScoreCache | None = None, **kw: Any):
    """Score once with a fresh Scorer (cached in `store` when given); (result, scorer)."""
    if store is not None:
        kw.setdefault("cache", True)

    async def go():
        scorer = Scorer(config(backend, **kw), cache=store)
        try:
            return await scorer.score(parts), scorer
        finally:
            await scorer.close()

    return asyncio.run(go())


def digits_logprobs(first: list[tuple[str, float]], chosen: str | None = None, then=None):
    """A logprobs spec whose first generated token is `chosen` (default: the likeliest)."""
    import math

    chosen = chosen or max(first, key=lambda t: t[1])[0]
    lp = dict(first).get(chosen, math.log(1e-6))
    spec = [(chosen, lp, first)]
    if then:
        spec.append(then)
    return spec
