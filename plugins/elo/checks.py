"""Checks on the judge: its model family among the contestants, and its agreement with
people (per battle: agreement and Cohen's kappa; per model: the ratings' rank order)."""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .arrange import battle_key

# Name starts that mark a family, longest first where one is the start of another
# ("gpt4all" is Nomic's, not OpenAI's). A name with none of them is its own family: its
# leading run of letters ("vicuna-13b" -> "vicuna").
FAMILIES = [
    ("gpt4all", "gpt4all"),
    ("chatgpt", "gpt"),
    ("gpt", "gpt"),
    ("o1", "gpt"),
    ("o3", "gpt"),
    ("o4", "gpt"),
    ("claude", "claude"),
    ("gemini", "gemini"),
    ("gemma", "gemini"),
    ("palm", "gemini"),
    ("bard", "gemini"),
    ("llama", "llama"),
    ("codellama", "llama"),
    ("mixtral", "mistral"),
    ("mistral", "mistral"),
    ("ministral", "mistral"),
    ("codestral", "mistral"),
    ("qwq", "qwen"),
    ("qwen", "qwen"),
    ("deepseek", "deepseek"),
    ("smollm", "smollm"),
    ("phi", "phi"),
    ("command", "command"),
    ("yi", "yi"),
]


def family(name: str) -> str:
    """The model family a name belongs to: 'gpt-4o-mini' -> 'gpt', 'Qwen2.5-7B' -> 'qwen',
    'meta-llama/Llama-3-8B' -> 'llama' (the organisation part is ignored)."""
    base = name.strip().lower().rsplit("/", 1)[-1]
    base = re.sub(r"^(models?|hf|org)[-_:.]", "", base)
    for start, fam in FAMILIES:
        if base.startswith(start) and not base[len(start) : len(start) + 1].isalpha():
            return fam
        if base.startswith(start) and start in ("gpt", "llama", "qwen", "claude", "gemini"):
            return fam  # 'gpt4o', 'llama3', 'qwen2' and the like, written together
    found = re.match(r"[a-z]+", base)
    return found.group(0) if found else base


def family_warning(judges: Iterable[str], contestants: Iterable[str]) -> str | None:
    """One sentence when a judge belongs to a contestant's model family, else None."""
    players = sorted(set(contestants))
    for judge in sorted(set(judges)):
        fam = family(judge)
        kin = [m for m in players if family(m) == fam]
        if kin:
            shown = ", ".join(kin[:3]) + (f" and {len(kin) - 3} more" if len(kin) > 3 else "")
            verb = "is" if len(kin) == 1 else "are"
            return (
                f"Warning: the judge {judge} is of the {fam} family, as {verb} "
                f"{shown} among the contestants; a judge tends to favour its own family, so "
                "read those ratings with care or judge with a model of another family."
            )
    return None


# -- agreement with people ------------------------------------------------------------------
CLASSES = ("model_a", "model_b", "tie")


def outcome(winner: str) -> str:
    """model_a, model_b or tie (both tie kinds are one class here)."""
    return "tie" if winner.startswith("tie") else winner


def cohen_kappa(pairs: list[tuple[str, str]], classes: tuple[str, ...]) -> float | None:
    """Cohen's kappa of two raters' labels; None when chance agreement is total (one class)."""
    n = len(pairs)
    if not n:
        return None
    observed = sum(x == y for x, y in pairs) / n
    chance = sum(
        (sum(x == c for x, _ in pairs) / n) * (sum(y == c for _, y in pairs) / n) for c in classes
    )
    if chance >= 1.0:
        return None
    return (observed - chance) / (1.0 - chance)


@dataclass
class Agreement:
    """A judge against people, per battle and per model."""

    battles: int = 0  # battles judged by both
    agreement: float | None = None
    kappa: float | None = None
    decisive: int = 0  # battles both called for one side
    agreement_decisive: float | None = None
    kappa_decisive: float | None = None
    confusion: dict[str, dict[str, int]] = field(default_factory=dict)
    models: int = 0  # models rated on both sides
    spearman: float | None = None
    pair_order: float | None = None  # share of model pairs both ratings put in one order
    notes: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {k: v for k, v in self.__dict__.items()}


def battle_agreement(judged: list[dict], human: list[dict]) -> Agreement:
    """Per-battle agreement of `judged` with `human`, matching battles by question and pair
    of models (either orientation; a human row's verdict is turned to the judge's)."""
    people: dict[tuple, str] = {}
    for r in human:
        if not (r.get("question") or "").strip():
            continue  # without its question a battle cannot be matched
        key = battle_key(r.get("question", ""), r["model_a"], r["model_b"])
        winner = outcome(r["winner"])
        people.setdefault(key, _orient(winner, r["model_a"], key))
    out = Agreement()
    pairs = []
    for r in judged:
        if not (r.get("question") or "").strip():
            continue
        key = battle_key(r.get("question", ""), r["model_a"], r["model_b"])
        if key not in people:
            continue
        pairs.append((_orient(outcome(r["winner"]), r["model_a"], key), people[key]))
    out.battles = len(pairs)
    out.confusion = {x: {y: sum(p == (x, y) for p in pairs) for y in CLASSES} for x in CLASSES}
    if pairs:
        out.agreement = sum(x == y for x, y in pairs) / len(pairs)
        out.kappa = cohen_kappa(pairs, CLASSES)
    decisive = [(x, y) for x, y in pairs if x != "tie" and y != "tie"]
    out.decisive = len(decisive)
    if decisive:
        out.agreement_decisive = sum(x == y for x, y in decisive) / len(decisive)
        out.kappa_decisive = cohen_kappa(decisive, CLASSES[:2])
    return out


def _orient(winner: str, model_a: str, key: tuple) -> str:
    """A verdict in the key's orientation (its pair's first model as model_a)."""
    first = min(key[1])
    if winner == "tie" or model_a == first:
        return winner
    return "model_b" if winner == "model_a" else "model_a"


def rating_agreement(
    judged_ratings: dict[str, float], human_ratings: dict[str, float], into: Agreement
) -> Agreement:
    """Spearman's rank correlation and pair-order agreement over the models both rate."""
    common = sorted(set(judged_ratings) & set(human_ratings))
    into.models = len(common)
    if len(common) < 2:
        return into
    x = np.array([judged_ratings[m] for m in common])
    y = np.array([human_ratings[m] for m in common])
    rx, ry = _ranks(x), _ranks(y)
    if rx.std() > 0 and ry.std() > 0:
        into.spearman = float(np.corrcoef(rx, ry)[0, 1])
    i, j = np.triu_indices(len(common), 1)
    into.pair_order = float(np.mean(np.sign(x[i] - x[j]) == np.sign(y[i] - y[j])))
    return into


def _ranks(values: Any) -> Any:
    """Ranks with ties sharing their mean rank (as Spearman's coefficient wants)."""
    order = np.argsort(values, kind="stable")
    ranks = np.empty(len(values))
    ranks[order] = np.arange(len(values), dtype=float)
    for v in np.unique(values):
        same = values == v
        ranks[same] = ranks[same].mean()
    return ranks
