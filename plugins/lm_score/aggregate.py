"""Combining ensemble members' scores: maj (the mode) and avg (the mean, half up)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence


def round_half_up(numerator: int, denominator: int) -> int:
    """numerator/denominator rounded half up, exactly (6.5 -> 7; the original floored)."""
    return (2 * numerator + denominator) // (2 * denominator)


def average(scores: Sequence[int]) -> int:
    return round_half_up(sum(scores), len(scores))


def majority(scores: Sequence[int]) -> int:
    """The most common score. Ties go to the tied score nearest the members' mean, and
    if two are equally near (e.g. 3,3,7,7), to the lower: a doubtful yes counts as less."""
    counts = Counter(scores)
    top = max(counts.values())
    tied = [s for s, c in counts.items() if c == top]
    mean = sum(scores) / len(scores)
    return min(tied, key=lambda s: (abs(s - mean), s))


def aggregate(scores: Sequence[int], how: str) -> int:
    if not scores:
        raise ValueError("no scores to aggregate")
    return average(scores) if how == "avg" else majority(scores)
