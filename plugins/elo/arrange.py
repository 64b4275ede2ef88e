"""Arrange battles: every pair of models that answered a question, each pair once."""

from __future__ import annotations

import random
from collections.abc import Iterable
from dataclasses import dataclass, field
from itertools import combinations

from .files import QA, EloFileError, Table, check_arrangement


def battle_key(question: str, model_a: str, model_b: str) -> tuple[str, frozenset[str]]:
    """A battle's identity regardless of orientation (A/B swapped is the same battle)."""
    return question.strip(), frozenset((model_a.strip(), model_b.strip()))


@dataclass
class Arrangement:
    battles: list[dict[str, str]]
    already: int = 0  # pairs skipped because an existing file has them
    unavailable: list[int] = field(default_factory=list)  # --order-from lines not in the Q&A


def arrange(
    qa: QA,
    existing: Iterable[Table] = (),
    shuffle: bool = False,
    seed: int | None = None,
    order_from: Table | None = None,
) -> Arrangement:
    """All C(n1, 2) pairs per question with n1 >= 2 answers, minus those already arranged.

    Order: question order, then the natural combination order of the model columns;
    `shuffle` permutes that (seeded); `order_from` puts the battles of another file first,
    in its order and orientation.
    """
    if len(qa.models) < 2:
        raise EloFileError(
            f"The Q&A collection has {len(qa.models)} model column"
            f"{'' if len(qa.models) == 1 else 's'}; battles need answers from at least two models."
        )
    seen: set[tuple[str, frozenset[str]]] = set()
    for table in existing:
        check_arrangement(table)
        for r in table.rows:
            seen.add(battle_key(r["question"], r["model_a"], r["model_b"]))
    out = Arrangement([])
    fresh: list[dict[str, str]] = []
    for q in qa.questions:
        for a, b in combinations(qa.answered(q), 2):
            key = battle_key(q, a, b)
            if key in seen:
                out.already += 1
                continue
            seen.add(key)
            fresh.append({"question": q, "model_a": a, "model_b": b})
    if shuffle:
        random.Random(seed).shuffle(fresh)
    if order_from is not None:
        check_arrangement(order_from)
        by_key = {battle_key(b["question"], b["model_a"], b["model_b"]): b for b in fresh}
        first = []
        for line, r in zip(order_from.lines, order_from.rows, strict=True):
            key = battle_key(r["question"], r["model_a"], r["model_b"])
            if key in by_key:
                by_key.pop(key)
                first.append(
                    {
                        "question": r["question"].strip(),
                        "model_a": r["model_a"].strip(),
                        "model_b": r["model_b"].strip(),
                    }
                )
            elif key not in seen:
                out.unavailable.append(line)
        fresh = first + [b for b in fresh if battle_key(**b) in by_key]
    out.battles = fresh
    return out
