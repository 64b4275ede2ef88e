"""Karma: the seed's score formula and the choice of history that goes into the context.

    s_i = (xi k_i) * min(1, 1/(phi |i|)) * min(1, 1/(tau t_i)) * min(1, 1/(zeta (n - i)))

k_i is the prompt's karma, |i| its length in tokens, t_i its age in minutes and n - i its
distance, in prompts, from the newest one considered. A zero denominator gives factor 1.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

# Karma kinds, most important first, each with the setting that holds its points. The seed's
# four are operative (the user promoted it), instructive (the system considers it crucial),
# default and decorative (corrections, help, format hints). lmd adds "contextual", between
# instructive and default, for what finished work leaves behind (a done task's instruction
# and answer, an applied change), and "none" for what must never be sent (settings talk).
KIND_SETTINGS = {
    "operative": "operative_karma",
    "instructive": "instructive_karma",
    "contextual": "contextual_karma",
    "default": "default_karma",
    "decorative": "decorative_karma",
}
KINDS = (*KIND_SETTINGS, "none")


class Scorable(Protocol):
    karma: float
    tokens: int
    created_at: float


@dataclass(frozen=True)
class Params:
    """The four discounts and the multiplier, read from settings."""

    xi: float = 10.0
    phi: float = 0.01
    tau: float = 300.0
    zeta: float = 3.0

    @classmethod
    def from_settings(cls, s: Mapping[str, Any] | Any) -> Params:
        return cls(
            xi=s["karma_multiplier"],
            phi=s["len_discount"],
            tau=s["expiring_created_at_discount"],
            zeta=s["expiring_id_discount"],
        )


def karma_for(kind: str, settings: Mapping[str, Any] | Any) -> int:
    """The karma points a prompt of this kind gets now (an unknown kind counts as default)."""
    if kind == "none":
        return 0
    return settings[KIND_SETTINGS.get(kind, "default_karma")]


def _factor(discount: float, amount: float) -> float:
    denominator = discount * amount
    return 1.0 if denominator <= 0 else min(1.0, 1.0 / denominator)


def score(karma: float, tokens: int, age_minutes: float, distance: int, p: Params) -> float:
    """The seed's formula for one prompt."""
    return (
        p.xi
        * karma
        * _factor(p.phi, tokens)
        * _factor(p.tau, max(age_minutes, 0.0))
        * _factor(p.zeta, distance)
    )


def scores(prompts: Sequence[Scorable], p: Params, now: float) -> list[float]:
    """Scores of prompts given oldest first; the last one is the newest (distance 0)."""
    n = len(prompts) - 1
    return [
        score(q.karma, q.tokens, (now - q.created_at) / 60.0, n - i, p)
        for i, q in enumerate(prompts)
    ]


def prompt_rows(prompts: list, settings: Mapping[str, Any] | Any, now: float) -> list[dict]:
    """Prompts as rows (`lmd history`, GET /history), with the karma score each would get now
    (distance counted within the list)."""
    now_scores = scores(prompts, Params.from_settings(settings), now)
    return [
        {
            "id": q.id,
            "session": q.session,
            "role": q.role,
            "mode": q.mode,
            "kind": q.kind,
            "karma": q.karma,
            "tokens": q.tokens,
            "score": s,
            "status": q.status,
            "created_at": q.created_at,
            "content": q.content,
        }
        for q, s in zip(prompts, now_scores, strict=True)
    ]


def select(
    prompts: Sequence[Scorable],
    p: Params,
    now: float,
    max_tokens: int,
    min_score: float,
) -> list:
    """The prompts to send, oldest first.

    Drop those scoring under min_score, then the lowest scores (older first on ties) until
    the total fits max_tokens. The newest prompt is always kept, even alone over budget.
    """
    if not prompts:
        return []
    s = scores(prompts, p, now)
    newest = len(prompts) - 1
    keep = [i for i in range(newest) if s[i] >= min_score]
    total = prompts[newest].tokens + sum(prompts[i].tokens for i in keep)
    if total > max_tokens:
        dropped = set()
        for i in sorted(keep, key=lambda i: (s[i], i)):
            if total <= max_tokens:
                break
            dropped.add(i)
            total -= prompts[i].tokens
        keep = [i for i in keep if i not in dropped]
    keep.append(newest)
    return [prompts[i] for i in keep]
