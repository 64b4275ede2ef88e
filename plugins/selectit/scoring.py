"""SelectIT's arithmetic, pure: rating distributions, token scores and the consistency penalty.

token_score = sum(r * P(r) for r in 1..5)      P renormalised over the five ratings
final       = mu / (1 + alpha * sigma)          k > 1, sigma the population std
final       = token_score                       k = 1
"""

from __future__ import annotations

import math
import unicodedata
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

RATINGS = (1, 2, 3, 4, 5)
DEFAULT_SCORE = 3.0  # samples without instruction or output (the spec's neutral score)

# Marks tokenizers put before a word to say "a space was here" (SentencePiece, GPT-2 bytes).
_SPACE_MARKS = "\u2581\u0120\u010a"  # ▁ Ġ Ċ


@dataclass(frozen=True)
class Rating:
    """The five renormalised rating probabilities of one prompt.

    `absent` counts ratings that were not among the server's top logprobs and so got a bound
    instead of a measured probability (always 0 for the local backend).
    """

    probs: tuple[float, float, float, float, float]
    absent: int = 0
    unrated: str | None = None  # why this prompt has no rating at all (its probs mean nothing)

    @property
    def score(self) -> float:
        return token_score(self.probs)


def unrated(why: str) -> Rating:
    """A prompt the model would not rate: kept with its reason, never counted as a score."""
    return Rating((0.2, 0.2, 0.2, 0.2, 0.2), len(RATINGS), why)


def renormalise(probs: Sequence[float]) -> tuple[float, ...]:
    """Scale non-negative masses so they sum to 1."""
    if any(p < 0 or not math.isfinite(p) for p in probs):
        raise ValueError(f"probabilities must be finite and non-negative, got {list(probs)}")
    total = math.fsum(probs)
    if total <= 0:
        raise ValueError("the rating probabilities are all zero")
    return tuple(p / total for p in probs)


def token_score(probs: Sequence[float]) -> float:
    """The expected rating: sum of r * P(r) over r = 1..5 (probs already renormalised)."""
    if len(probs) != len(RATINGS):
        raise ValueError(f"need {len(RATINGS)} probabilities, got {len(probs)}")
    return math.fsum(r * p for r, p in zip(RATINGS, probs, strict=True))


def final_score(token_scores: Sequence[float], alpha: float) -> float:
    """mu / (1 + alpha * sigma) with the population standard deviation; k = 1 gives the score."""
    k = len(token_scores)
    if k == 0:
        raise ValueError("need at least one token score")
    if alpha < 0:
        raise ValueError("alpha must be non-negative")
    if k == 1:
        return float(token_scores[0])
    mu = math.fsum(token_scores) / k
    sigma = math.sqrt(math.fsum((s - mu) ** 2 for s in token_scores) / k)
    return mu / (1 + alpha * sigma)


def rating_of(token: str) -> int | None:
    """The rating a token string stands for ("5", " 5", "▁5", "Ġ5", "５"), or None."""
    text = unicodedata.normalize("NFKC", token).strip()
    text = text.lstrip(_SPACE_MARKS).strip()
    if len(text) == 1 and text in "12345":
        return int(text)
    return None


def rating_from_logprobs(top: Iterable[tuple[str, float]]) -> Rating:
    """A Rating from one position's top logprobs [(token, logprob), ...].

    Several spellings of one rating ("5" and " 5") add up. A rating missing from the list
    cannot have more probability than the least likely listed token, nor more than the mass
    the list leaves unaccounted for; it gets min(that least probability, an even share of the
    unlisted mass among the missing ratings) - an upper bound that never invents mass.
    """
    mass = [0.0] * len(RATINGS)
    seen = [False] * len(RATINGS)
    listed = []
    for token, logprob in top:
        if logprob is None or not math.isfinite(logprob):
            continue
        p = math.exp(logprob)
        listed.append(p)
        r = rating_of(token)
        if r is not None:
            mass[r - 1] += p
            seen[r - 1] = True
    absent = seen.count(False)
    if absent == len(RATINGS):
        shown = ", ".join(repr(t) for t, _ in list(top)[:3]) if isinstance(top, list) else ""
        return unrated(
            "no rating 1-5 among the top logprobs"
            + (f" (the likeliest tokens: {shown})" if shown else "")
        )
    if absent:
        unlisted = max(0.0, 1.0 - math.fsum(listed))
        bound = min(min(listed, default=1.0), unlisted / absent)
        mass = [m if s else bound for m, s in zip(mass, seen, strict=True)]
    if math.fsum(mass) <= 0:  # nothing listed and nothing unlisted: no information at all
        mass = [1.0] * len(RATINGS)
    return Rating(renormalise(mass), absent)  # type: ignore[arg-type]
