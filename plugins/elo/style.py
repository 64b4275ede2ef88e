"""Style control: Bradley–Terry with the answers' length and markdown as covariates.

LLM judges (and people) prefer longer, more formatted answers. FastChat's rating code
(`compute_style_control`, LMArena's "style control") fits a contextual Bradley–Terry model:
the log-odds that A beats B are  ln(base)·(θ_A − θ_B) + Σ_f β_f·x_f,  where x_f compares the
two answers on a style feature f. The θ are then the ratings with style held equal, and the β
say how much style alone moves a verdict. This module fits the same model, with the same
features, normalisation and ridge as FastChat, by Newton's method in numpy.

Features (FastChat's STYLE_CONTROL_ELEMENTS_V1), each per answer:
  length   tokens of the answer (here: words and punctuation marks, an offline stand-in for
           a tokenizer; the feature is a ratio, so the unit hardly matters)
  headers  markdown header lines (# to ######), code blocks left out
  lists    ordered and unordered list items (nested ones too), code blocks left out
  bold     **bold** and __bold__ spans, code blocks left out
For each battle x_f = (a_f − b_f) / (a_f + b_f + 1), then standardised over the battles
(mean 0, standard deviation 1), so β_f is in log-odds per standard deviation.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from daemon.api import LmdError, plural

from .ratings import EloParams

FEATURES = ("length", "headers", "lists", "bold")
# FastChat's conv_metadata names, accepted as columns when a file has no answers.
STYLE_COLUMNS = {
    "length": ("sum_assistant_a_tokens", "sum_assistant_b_tokens"),
    "headers": ("header_count_a", "header_count_b"),
    "lists": ("list_count_a", "list_count_b"),
    "bold": ("bold_count_a", "bold_count_b"),
}
# FastChat's ridge (its `reg`): a penalty of reg/2·‖params‖² on ratings and coefficients.
REG = 0.5

_CODE = re.compile(r"```([^`]*)```")
_TOKEN = re.compile(r"\w+|[^\w\s]")
_HEADER = re.compile(r"^#{1,6}\s", re.M)
_ORDERED = re.compile(r"^\s*\d+\.\s", re.M)
_UNORDERED = re.compile(r"^\s*[-*+]\s", re.M)
_BOLD = (re.compile(r"\*\*[^*\n]+\*\*"), re.compile(r"__[^_\n]+__"))


def style_of(answer: str) -> tuple[int, int, int, int]:
    """(length, headers, lists, bold) of one answer, counted as FastChat counts them."""
    text = answer or ""
    length = len(_TOKEN.findall(text))
    prose = _CODE.sub("", text)
    return (
        length,
        len(_HEADER.findall(prose)),
        len(_ORDERED.findall(prose)) + len(_UNORDERED.findall(prose)),
        sum(len(p.findall(prose)) for p in _BOLD),
    )


def _count(value: Any, column: str, line: int) -> float:
    """A style column's cell: a number, or FastChat's JSON object of counts (summed)."""
    text = str(value).strip()
    try:
        if text.startswith("{"):
            parsed = json.loads(text)
            number = float(sum(float(v) for v in parsed.values()))
        else:
            number = float(text)
    except (ValueError, TypeError, AttributeError):
        number = math.nan
    if not math.isfinite(number) or number < 0:
        raise LmdError(
            f"The style column {column} has {text!r} in battle {line}; give a count (0 or "
            "more) or a JSON object of counts."
        )
    return number


def style_counts(rows: list[dict], source: str = "the battles") -> Any:
    """Per battle the four features of answer A and of answer B, shape (battles, 2, 4):
    computed from answer_a/answer_b where every battle has them, else read from the style
    columns; without either, one sentence says what is missing."""
    out = np.zeros((len(rows), 2, len(FEATURES)))
    if rows and all((r.get("answer_a") or r.get("answer_b")) for r in rows):
        for n, r in enumerate(rows):
            out[n, 0] = style_of(r.get("answer_a") or "")
            out[n, 1] = style_of(r.get("answer_b") or "")
        return out
    needed = [c for pair in STYLE_COLUMNS.values() for c in pair]
    present = set().union(*(r.keys() for r in rows[:1])) if rows else set()
    missing = [c for c in needed if c not in present]
    if missing:
        without = sum(1 for r in rows if not (r.get("answer_a") or r.get("answer_b")))
        raise LmdError(
            f"Style control needs the answers (answer_a, answer_b) or the style columns "
            f"({', '.join(needed)}); {source} "
            + (
                f"has {plural(without, 'battle')} without answers and lacks "
                if without < len(rows)
                else "has no answers and lacks "
            )
            + f"{', '.join(missing)}."
        )
    for n, r in enumerate(rows):
        for f, (col_a, col_b) in enumerate(STYLE_COLUMNS.values()):
            out[n, 0, f] = _count(r[col_a], col_a, n + 1)
            out[n, 1, f] = _count(r[col_b], col_b, n + 1)
    return out


@dataclass
class StyleFeatures:
    """The standardised feature matrix and what was left out of it."""

    x: Any  # (battles, kept features)
    kept: list[str]
    constant: list[str] = field(default_factory=list)  # no variation: no coefficient


def features_of(counts: Any) -> StyleFeatures:
    """FastChat's normalisation: (a − b)/(a + b + 1), standardised over battles. A feature
    that does not vary (no answer has a header, say) is left out: its coefficient is 0."""
    a, b = counts[:, 0, :], counts[:, 1, :]
    diff = (a - b) / (a + b + 1.0)
    mean, std = diff.mean(axis=0), diff.std(axis=0)
    keep = std > 1e-12
    x = (diff[:, keep] - mean[keep]) / std[keep]
    kept = [f for f, k in zip(FEATURES, keep, strict=True) if k]
    return StyleFeatures(x, kept, [f for f in FEATURES if f not in kept])


@dataclass
class StyleFit:
    """Ratings with style held equal, the style coefficients, and their bootstrap."""

    models: list[str]
    ratings: Any  # Elo scale
    coefficients: dict[str, float]  # log-odds per standard deviation of each feature
    features: StyleFeatures
    samples: Any = None  # (rounds, models) ratings
    coefficient_samples: Any = None  # (rounds, kept features)
    notes: list[str] = field(default_factory=list)


def _design(battles: Any, feats: StyleFeatures, alpha: float) -> Any:
    """The dense design matrix: α(e_A − e_B) for the models, then the features."""
    m, n = len(battles.models), len(battles)
    x = np.zeros((n, m + feats.x.shape[1]))
    rows = np.arange(n)
    x[rows, battles.a] = alpha
    x[rows, battles.b] = -alpha
    x[:, m:] = feats.x
    return x


def _newton(x: Any, y: Any, w: Any, start: Any, reg: float, tol: float = 1e-10) -> Any:
    """Ridge-penalised weighted logistic regression without intercept, by Newton's method."""
    params = start.copy()
    eye = reg * np.eye(x.shape[1])
    for _ in range(100):
        p = 1.0 / (1.0 + np.exp(-(x @ params)))
        grad = x.T @ (w * (y - p)) - reg * params
        hess = (x * (w * p * (1.0 - p))[:, None]).T @ x + eye
        step = np.linalg.solve(hess, grad)
        biggest = float(np.abs(step).max()) if step.size else 0.0
        if biggest > 4.0:  # far from the optimum a full step can overshoot
            step *= 4.0 / biggest
        params += step
        if biggest < tol:
            break
    return params


def style_control(
    battles: Any,
    counts: Any,
    params: Any = None,
    rounds: int = 0,
    seed: int | None = None,
    reg: float = REG,
    tol: float = 1e-4,
) -> StyleFit:
    """Fit the style-controlled Bradley–Terry model; with `rounds`, bootstrap it.

    Each bootstrap round resamples the battles (counts per battle from a uniform draw of
    n indices, as FastChat's `np.random.randint` resample), keeps FastChat's
    standardisation of the whole file, starts at the point estimate and takes Newton steps
    with the point estimate's Hessian, all rounds at once as matrix products in float32,
    until its steps are below `tol` (in units of log_base odds: 1e-4 is 0.04 rating points)
    or stop shrinking at float32's floor; the rare round that has not settled in 30 steps
    finishes in float64 with its own Hessian.
    """
    p = params or EloParams()
    alpha = math.log(p.base)
    feats = features_of(counts)
    m = len(battles.models)
    x = _design(battles, feats, alpha)
    y = battles.s.astype(np.float64)
    ones = np.ones(len(battles))
    point = _newton(x, y, ones, np.zeros(x.shape[1]), reg)
    fit = StyleFit(
        list(battles.models),
        p.initial + p.scale * point[:m],
        {f: float(c) for f, c in zip(feats.kept, point[m:], strict=True)},
        feats,
    )
    for f in feats.constant:
        fit.coefficients[f] = 0.0
    fit.notes += identifiability_notes(battles)
    if feats.constant:
        fit.notes.append(
            f"No battle's answers differ in {' or '.join(feats.constant)}, so style control "
            "has nothing to weigh there (coefficient 0)."
        )
    if rounds:
        samples = _bootstrap(x, y, point, reg, rounds, seed, tol)
        fit.samples = p.initial + p.scale * samples[:, :m]
        fit.coefficient_samples = samples[:, m:]
    return fit


def _bootstrap(
    x: Any, y: Any, point: Any, reg: float, rounds: int, seed: int | None, tol: float
) -> Any:
    n, k = x.shape
    rng = np.random.default_rng(seed)
    p0 = 1.0 / (1.0 + np.exp(-(x @ point)))
    hess0 = (x * (p0 * (1.0 - p0))[:, None]).T @ x + reg * np.eye(k)
    solve0 = np.linalg.inv(hess0)  # symmetric: step = grad @ solve0
    # y − p = (y − ½) − ½·tanh(logit/2): one tanh per cell instead of exp, add and divide
    x32 = x.astype(np.float32)
    half_xt32 = np.ascontiguousarray(0.5 * x.T, dtype=np.float32)
    centred = (y - 0.5).astype(np.float32)
    out = np.empty((rounds, k))
    # ~4 million (round, battle) cells at a time: big enough for numpy, small for memory
    chunk = max(1, min(rounds, 4_000_000 // max(n, 1)))
    for start in range(0, rounds, chunk):
        r = min(rounds, start + chunk) - start
        drawn = rng.integers(0, n, size=(r, n))
        drawn += (np.arange(r) * n)[:, None]
        weights = np.bincount(drawn.ravel(), minlength=r * n).reshape(r, n).astype(np.float32)
        del drawn
        fixed = weights * centred  # w·(y − ½)
        half_w = weights * np.float32(0.5)
        theta = np.tile(point, (r, 1))
        before = np.full(r, np.inf)
        settled = np.zeros(r, dtype=bool)
        for _ in range(30):
            h = theta.astype(np.float32) @ half_xt32
            np.tanh(h, out=h)
            h *= half_w
            np.subtract(fixed, h, out=h)  # the weighted residuals w·(y − p)
            grad = (h @ x32).astype(np.float64) - reg * theta
            step = grad @ solve0
            theta += step
            biggest = np.abs(step).max(axis=1)
            # float32 sums leave steps of ~1e-5 that no further step removes: a round whose
            # step stopped shrinking is as settled as float32 gets
            settled |= (biggest <= tol) | ((biggest > 0.5 * before) & (biggest < 10 * tol))
            if settled.all():
                break
            before = biggest
        for row in np.flatnonzero(~settled):  # rare: a resample far from the data
            theta[row] = _newton(x, y, weights[row].astype(np.float64), theta[row], reg)
        out[start : start + r] = theta
    return out


def identifiability_notes(battles: Any) -> list[str]:
    """Sentences naming ratings the battles cannot pin down: groups of models no battle
    connects, and models that won (or lost) every battle they fought."""
    m = len(battles.models)
    parent = list(range(m))

    def root(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    for a, b in {(int(a), int(b)) for a, b in zip(battles.a, battles.b, strict=True)}:
        parent[root(a)] = root(b)
    groups: dict[int, list[str]] = {}
    for i, name in enumerate(battles.models):
        groups.setdefault(root(i), []).append(name)
    notes = []
    if len(groups) > 1:
        shown = "; ".join(", ".join(sorted(g)) for g in sorted(groups.values(), key=min))
        notes.append(
            f"The ratings are not identifiable across {len(groups)} groups of models that no "
            f"battle connects ({shown}): compare ratings only within a group."
        )
    score = np.bincount(battles.a, battles.s, m) + np.bincount(battles.b, 1.0 - battles.s, m)
    games = battles.counts()
    perfect = [battles.models[i] for i in range(m) if games[i] and score[i] == games[i]]
    hopeless = [battles.models[i] for i in range(m) if games[i] and score[i] == 0]
    for names, what, side in ((perfect, "won", "above"), (hopeless, "lost", "below")):
        if names:
            one = len(names) == 1
            notes.append(
                f"{', '.join(sorted(names))} {what} every battle, so "
                f"{'its rating is' if one else 'their ratings are'} not identifiable (only the "
                f"ridge bounds {'it' if one else 'them'} from {side})."
            )
    return notes
