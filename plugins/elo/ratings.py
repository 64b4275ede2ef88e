"""Ratings from pairwise battles: online Elo, Bradley–Terry, bootstrap intervals, matrices.

Battles arrive as integer arrays (`Battles`): index of model A, index of model B and the
score of A (1 win, 0 loss, 0.5 either kind of tie — the Chatbot Arena convention).
Everything heavy is numpy; the winner labels (winners.py) need none of it.

Bradley–Terry only needs the counts per (pair, outcome) cell, so the fit and its bootstrap
work on a few hundred cells instead of every battle; bootstrap counts are multinomial
draws over those cells, and each round's fit starts from the point estimate.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from daemon.api import LmdError

from .winners import SCORE_OF_A, score_of

# A ridge this small moves real ratings by far less than 0.01 points, yet keeps the
# maximum-likelihood estimate finite when a model won (or lost) every battle it fought.
RIDGE = 1e-6


@dataclass
class EloParams:
    """The Elo scale: K factor, rating units per factor `base` of odds, starting rating."""

    k: float = 4.0
    scale: float = 400.0
    base: float = 10.0
    initial: float = 1000.0

    @property
    def per_logit(self) -> float:
        """Rating points per natural-log unit of odds (400/ln 10 ≈ 173.7 by default)."""
        return self.scale / math.log(self.base)


class PairwiseRatingEntity:
    """One pairing of two rated players, in the spec's shape: `entity.battle(winner)`.

    Ratings live in a shared dict so many entities (pairs) update one table:

        table = {}
        PairwiseRatingEntity("vicuna-13b", "koala-13b", table).battle("model_a")
    """

    def __init__(
        self,
        model_a: str,
        model_b: str,
        ratings: dict[str, float] | None = None,
        params: EloParams | None = None,
    ) -> None:
        if model_a == model_b:
            raise LmdError(f"A model cannot battle itself ({model_a}); pick two different models.")
        self.model_a, self.model_b = model_a, model_b
        self.params = params or EloParams()
        self.ratings = ratings if ratings is not None else {}
        for m in (model_a, model_b):
            self.ratings.setdefault(m, self.params.initial)

    def expected(self) -> float:
        """Expected score of model A against model B."""
        p = self.params
        ra, rb = self.ratings[self.model_a], self.ratings[self.model_b]
        return 1.0 / (1.0 + p.base ** ((rb - ra) / p.scale))

    def battle(self, winner: str) -> tuple[float, float]:
        """Apply one result ('model_a', 'model_b', 'tie', 'tie (bothbad)'); new (r_a, r_b)."""
        s_a = score_of(winner)
        e_a = self.expected()
        e_b = 1.0 - e_a
        k = self.params.k
        self.ratings[self.model_a] += k * (s_a - e_a)
        self.ratings[self.model_b] += k * (1.0 - s_a - e_b)
        return self.ratings[self.model_a], self.ratings[self.model_b]


@dataclass
class Battles:
    """Battles as arrays: model indices `a`, `b` and A's score `s` (1, 0 or 0.5)."""

    models: list[str]
    a: Any
    b: Any
    s: Any
    bothbad: Any = None  # bool array: the tie was a 'both bad' one

    @classmethod
    def from_rows(cls, rows: Iterable[tuple[str, str, str]]) -> Battles:
        """From (model_a, model_b, winner) triples with canonical winners."""
        index: dict[str, int] = {}
        a, b, s, bad = [], [], [], []
        for model_a, model_b, winner in rows:
            a.append(index.setdefault(model_a, len(index)))
            b.append(index.setdefault(model_b, len(index)))
            s.append(SCORE_OF_A[winner])
            bad.append(winner == "tie (bothbad)")
        return cls(
            list(index),
            np.asarray(a, dtype=np.int64),
            np.asarray(b, dtype=np.int64),
            np.asarray(s, dtype=np.float64),
            np.asarray(bad, dtype=bool),
        )

    def __len__(self) -> int:
        return len(self.a)

    def counts(self) -> Any:
        """Battles fought per model."""
        m = len(self.models)
        return np.bincount(self.a, minlength=m) + np.bincount(self.b, minlength=m)

    def mirrored(self) -> Battles:
        """The same battles with A and B swapped and winners mirrored."""
        bad = None if self.bothbad is None else self.bothbad.copy()
        return Battles(list(self.models), self.b.copy(), self.a.copy(), 1.0 - self.s, bad)


# -- online Elo ---------------------------------------------------------------------------
def online_elo(battles: Battles, params: EloParams | None = None) -> Any:
    """Ratings after one pass in file order (a plain loop over Python floats is fastest)."""
    p = params or EloParams()
    ratings = [p.initial] * len(battles.models)
    k, base, scale = p.k, p.base, p.scale
    for ia, ib, s in zip(battles.a.tolist(), battles.b.tolist(), battles.s.tolist(), strict=True):
        ra, rb = ratings[ia], ratings[ib]
        delta = k * (s - 1.0 / (1.0 + base ** ((rb - ra) / scale)))
        ratings[ia] = ra + delta
        ratings[ib] = rb - delta  # K(1 - s_a - e_b) = -K(s_a - e_a): Elo is zero-sum
    return np.asarray(ratings)


def online_elo_history(
    battles: Battles, params: EloParams | None = None, points: int = 100
) -> tuple[list[int], Any]:
    """Ratings after every len/points battles (for the 'ratings over battles' plot)."""
    p = params or EloParams()
    n = len(battles)
    marks = sorted({max(1, round(n * (i + 1) / points)) for i in range(points)}) if n else []
    ratings = [p.initial] * len(battles.models)
    out, want = [], iter(marks)
    nxt = next(want, None)
    a, b, s = battles.a.tolist(), battles.b.tolist(), battles.s.tolist()
    for t in range(n):
        ra, rb = ratings[a[t]], ratings[b[t]]
        delta = p.k * (s[t] - 1.0 / (1.0 + p.base ** ((rb - ra) / p.scale)))
        ratings[a[t]] = ra + delta
        ratings[b[t]] = rb - delta
        if t + 1 == nxt:
            out.append(list(ratings))
            nxt = next(want, None)
    return marks, np.asarray(out).reshape(len(marks), len(battles.models))


def online_elo_bootstrap(
    battles: Battles,
    rounds: int,
    params: EloParams | None = None,
    seed: int | None = None,
    compiled: bool | None = None,
) -> Any:
    """R rounds of online Elo on battles resampled with replacement, shape (R, models).

    Each round sees len(battles) battles drawn uniformly with replacement, in draw order.
    The compiled loop (plugins/elo/_online.c) runs when it was built, unless `compiled` is
    False; it draws with its own generator per round, so a seed gives the same result on one
    build every time, but not the numpy loop's numbers (both are the same statistic).
    """
    n = len(battles)
    rng = np.random.default_rng(seed)
    fast = compiled_loop() if compiled in (None, True) else None
    if compiled and fast is None:
        raise RuntimeError("the compiled online-Elo loop was not built with this install")
    if fast is not None:
        prepared = _RoundsPrep.of(battles, params)
        state = np.zeros(rounds * prepared.m, dtype=np.float32)
        seeds = rng.integers(0, 2**64, size=rounds, dtype=np.uint64)
        fast.bootstrap(
            state,
            battles.a.astype(np.int32),
            battles.b.astype(np.int32),
            prepared.two_s_minus_1,
            seeds,
            float(prepared.half_k),
            prepared.m,
        )
        return _rounds_to_points(state, prepared.m, rounds, params)
    # Small chunks keep the index arrays in cache (fresh big arrays cost page faults):
    # about 64 steps of 1,000 rounds measured fastest.
    chunk = max(1, min(n, 64_000 // max(rounds, 1)))
    prepared = _RoundsPrep.of(battles, params)
    state = None
    for start in range(0, n, chunk):
        size = min(n, start + chunk) - start
        draws = rng.integers(0, n, size=(size, rounds), dtype=np.int32)
        state = prepared.run(draws, state)
    return _rounds_to_points(state, len(battles.models), rounds, params)


def compiled_loop() -> Any:
    """The compiled online-Elo module, or None where the install could not build it (no C
    compiler) or runs from a zip (lmd.pyz)."""
    try:
        from plugins.elo import _online  # compiled at install time, where a compiler was
    except ImportError:
        return None
    return _online


def online_elo_rounds(
    battles: Battles, orders: Any, params: EloParams | None = None, state: Any = None
) -> Any:
    """Online Elo for R rounds side by side; round r sees battles[orders[:, r]] in order.

    One pass over battle positions, each step updating all R rounds at once with a handful
    of numpy calls. Ratings are kept relative to the start and in half-log-odds units, so
    the expected score is 0.5 + 0.5·tanh(r_a − r_b) and the update is
    (K/2)·(2s − 1 − tanh(r_a − r_b)); float32 is plenty for that and twice as fast.
    Returns the internal state; `_rounds_to_points` turns it into ratings.
    """
    n = len(battles)
    if orders.size and (np.min(orders) < -n or np.max(orders) >= n):
        raise IndexError(f"orders must index the {n} battles")
    return _RoundsPrep.of(battles, params).run(orders, state)


@dataclass
class _RoundsPrep:
    """Per-battle arrays for `online_elo_rounds`, computed once per bootstrap, not per chunk."""

    m: int
    a_idx: Any  # intp: numpy converts any other index type on every take and put,
    b_idx: Any  # which cost more than the gather (a put of 2,000 values: 12 µs, not 5)
    two_s_minus_1: Any
    half_k: Any
    # Scratch arrays reused from chunk to chunk: fresh ones of a megabyte cost page faults
    # that, in a fresh process, took longer than filling them.
    scratch: dict = field(default_factory=dict)

    @classmethod
    def of(cls, battles: Battles, params: EloParams | None) -> _RoundsPrep:
        p = params or EloParams()
        c = math.log(p.base) / p.scale / 2.0  # rating points -> half log-odds
        return cls(
            len(battles.models),
            battles.a.astype(np.intp),
            battles.b.astype(np.intp),
            (2.0 * battles.s - 1.0).astype(np.float32),
            np.float32(p.k * c / 2.0),
        )

    def buffers(self, steps: int, rounds: int) -> tuple[Any, Any, Any]:
        """(pair, gathered, score) scratch arrays of at least `steps` rows, sliced to fit."""
        got = self.scratch.get(rounds)
        if got is None or len(got[0]) < steps:
            got = (
                np.empty((steps, 2 * rounds), dtype=np.intp),
                np.empty((steps, rounds), dtype=np.intp),
                np.empty((steps, rounds), dtype=np.float32),
            )
            self.scratch[rounds] = got
        return got[0][:steps], got[1][:steps], got[2][:steps]

    def run(self, orders: Any, state: Any) -> Any:
        m, half_k = self.m, self.half_k
        steps, rounds = orders.shape
        f32 = np.float32
        ratings = np.zeros(rounds * m, dtype=f32) if state is None else state
        offsets = np.arange(rounds, dtype=np.intp) * m
        th = np.empty(rounds, dtype=f32)
        # K/2 as an array: numpy's array-by-array multiply takes half the time of array by
        # scalar at this size (1.5 µs against 3 for 1,000 values: no scalar conversion)
        half_ks = np.full(rounds, half_k, dtype=f32)
        # pair[t] holds the flat index of A's rating in every round, then B's: one take
        # and one put per step, with A's and B's values as two contiguous views of one array.
        # Gathers given `out` use mode "wrap": "raise" would copy; `orders` are in range.
        pair, gathered, score = self.buffers(steps, rounds)
        self.a_idx.take(orders, None, gathered, "wrap")
        np.add(gathered, offsets, pair[:, :rounds])
        self.b_idx.take(orders, None, gathered, "wrap")
        np.add(gathered, offsets, pair[:, rounds:])
        self.two_s_minus_1.take(orders, None, score, "wrap")
        # numpy's per-call cost dominates at this size: bind everything to locals and pass
        # `out` positionally to shave the attribute lookups and keyword parsing.
        take, sub, add, mul, tanh = (
            ratings.take,
            np.subtract,
            np.add,
            np.multiply,
            np.tanh,
        )
        # one buffer for every step: take(..., out, "wrap") writes into it directly (the
        # default "raise" mode copies when given `out`); the indices are all in range
        r = np.empty(2 * rounds, dtype=f32)
        ra, rb = r[:rounds], r[rounds:]
        for t in range(steps):
            idx = pair[t]
            take(idx, None, r, "wrap")
            sub(ra, rb, th)
            tanh(th, th)
            sub(score[t], th, th)
            mul(th, half_ks, th)
            add(ra, th, ra)
            sub(rb, th, rb)
            ratings[idx] = r
        return ratings


def _rounds_to_points(state: Any, m: int, rounds: int, params: EloParams | None) -> Any:
    p = params or EloParams()
    c = math.log(p.base) / p.scale / 2.0
    if state is None:
        return np.full((rounds, m), p.initial)
    return p.initial + state.reshape(rounds, m).astype(np.float64) / c


# -- Bradley–Terry ------------------------------------------------------------------------
@dataclass
class Cells:
    """Battle counts per (unordered pair, outcome): i won, j won, tie (i < j)."""

    models: list[str]
    i: Any
    j: Any
    counts: Any  # shape (pairs, 3): i wins, j wins, ties (both kinds)

    @classmethod
    def from_battles(cls, battles: Battles) -> Cells:
        m = len(battles.models)
        # One pass over the battles: counts per (A, B, A's score 0 / 0.5 / 1); the rest
        # works on the small m×m×3 array.
        outcome = (battles.s * 2.0).astype(np.int64)
        key = (battles.a * m + battles.b) * 3 + outcome
        c = np.bincount(key, minlength=m * m * 3).reshape(m, m, 3)
        i, j = np.triu_indices(m, 1)
        counts = np.stack(
            [
                c[i, j, 2] + c[j, i, 0],  # i won
                c[i, j, 0] + c[j, i, 2],  # j won
                c[i, j, 1] + c[j, i, 1],  # tie
            ],
            axis=1,
        )
        keep = counts.sum(axis=1) > 0
        return cls(list(battles.models), i[keep], j[keep], counts[keep].astype(np.float64))

    def wins(self, counts: Any = None) -> tuple[Any, Any]:
        """(wins of i counting ties as half, games) per pair; `counts` may be (R, pairs, 3)."""
        c = self.counts if counts is None else counts
        return c[..., 0] + 0.5 * c[..., 2], c.sum(axis=-1)


def _bt_gradient_hessian(theta: Any, cells: Cells, w: Any, n: Any) -> tuple[Any, Any]:
    """Gradient and Hessian of the ridge-penalised BT log-likelihood (natural-log units)."""
    m = len(cells.models)
    prob = 1.0 / (1.0 + np.exp(theta[cells.j] - theta[cells.i]))
    resid = w - n * prob
    grad = np.bincount(cells.i, resid, m) - np.bincount(cells.j, resid, m) - RIDGE * theta
    h = n * prob * (1.0 - prob)
    hess = np.bincount(cells.i * m + cells.j, h, m * m).reshape(m, m)
    hess += hess.T
    hess[np.diag_indices(m)] = -hess.sum(axis=1) - RIDGE
    return grad, hess


def bt_gradient(theta_points: Any, cells: Cells, params: EloParams | None = None) -> Any:
    """Gradient of the BT log-likelihood at ratings given in rating points (for tests)."""
    p = params or EloParams()

    theta = (np.asarray(theta_points, dtype=float) - p.initial) / p.per_logit
    w, n = cells.wins()
    return _bt_gradient_hessian(theta, cells, w, n)[0]


def _newton_solve_matrix(hess: Any) -> Any:
    """-(H)^-1 made regular along the all-ones direction, where the likelihood is flat."""
    m = hess.shape[0]
    scale = max(1.0, float(-np.diag(hess).mean()))
    return np.linalg.inv(-hess + scale * np.ones((m, m)) / m)


def bradley_terry_logits(cells: Cells, tol: float = 1e-10, max_iter: int = 100) -> Any:
    """Maximum-likelihood strengths in natural-log-odds units, centred at 0 (Newton)."""
    m = len(cells.models)
    theta = np.zeros(m)
    w, n = cells.wins()
    for _ in range(max_iter):
        grad, hess = _bt_gradient_hessian(theta, cells, w, n)
        step = _newton_solve_matrix(hess) @ grad
        # Far from the optimum a full Newton step can overshoot; cap it at 4 log-odds.
        biggest = np.abs(step).max() if m else 0.0
        if biggest > 4.0:
            step *= 4.0 / biggest
        theta += step
        theta -= theta.mean()
        if biggest < tol:
            break
    return theta


def bradley_terry(battles: Battles, params: EloParams | None = None) -> Any:
    """Bradley–Terry ratings on the Elo scale, mean = params.initial."""
    p = params or EloParams()
    return p.initial + p.per_logit * bradley_terry_logits(Cells.from_battles(battles))


EXACT_DRAW_LIMIT = 20_000_000  # cells × rounds beyond which counts come from the normal law


def bt_bootstrap(
    battles: Battles,
    rounds: int,
    params: EloParams | None = None,
    seed: int | None = None,
    tol: float = 1e-5,
) -> Any:
    """R rounds of BT on resampled cell counts, shape (R, models).

    Counts are exact multinomial draws over the (pair, outcome) cells; when cells × rounds
    passes EXACT_DRAW_LIMIT (millions of battles over hundreds of models) they come from
    the normal law with the multinomial's mean and covariance instead, since one binomial
    per cell and round would dominate the time. Each round starts at the point estimate and
    takes Newton steps with the point estimate's Hessian (resampled data curve almost the
    same); the few rounds that do not settle in 30 steps finish with their own Hessian.
    """
    p = params or EloParams()
    cells = Cells.from_battles(battles)
    m = len(cells.models)
    rng = np.random.default_rng(seed)
    theta0 = bradley_terry_logits(cells)
    w0, n0 = cells.wins()
    _, hess0 = _bt_gradient_hessian(theta0, cells, w0, n0)
    solve0 = _newton_solve_matrix(hess0)
    flat = cells.counts.ravel()
    exact = flat.size * rounds <= EXACT_DRAW_LIMIT
    out = np.empty((rounds, m))
    pairs = cells.i.size
    chunk = max(1, min(rounds, 1_000_000 // max(pairs, 1)))
    for start in range(0, rounds, chunk):
        r = min(rounds, start + chunk) - start
        counts = resample_counts(rng, flat, r, exact).reshape(r, -1, 3)
        w, n = cells.wins(counts)
        # Probabilities and residuals in float32: their rounding error moves a Newton
        # step by ~1e-8 log-odds, far below `tol`, and exp runs twice as fast.
        w32, n32 = w.astype(np.float32), n.astype(np.float32)
        theta = np.tile(theta0, (r, 1))
        row_offsets = (np.arange(r) * m)[:, None]
        flat_i = (row_offsets + cells.i).ravel()
        flat_j = (row_offsets + cells.j).ravel()
        settled = False
        for _ in range(30):
            t32 = theta.astype(np.float32)
            prob = t32[:, cells.j]
            prob -= t32[:, cells.i]
            np.exp(prob, out=prob)
            prob += 1.0
            np.reciprocal(prob, out=prob)
            prob *= n32
            resid = np.subtract(w32, prob, out=prob).ravel()
            grad = np.bincount(flat_i, resid, r * m) - np.bincount(flat_j, resid, r * m)
            grad = grad.reshape(r, m) - RIDGE * theta
            step = grad @ solve0
            theta += step
            biggest = np.abs(step).max(axis=1)
            if biggest.max() <= tol:
                settled = True
                break
        if not settled:  # rare: a resample far from the data (a pair drawn many times)
            for row in np.flatnonzero(biggest > tol):
                theta[row] = _newton_from(theta[row], cells, w[row], n[row], tol)
        theta -= theta.mean(axis=1, keepdims=True)
        out[start : start + r] = theta
    return p.initial + p.per_logit * out


def resample_counts(rng: Any, counts: Any, rounds: int, exact: bool = True) -> Any:
    """`rounds` bootstrap resamples of cell counts, shape (rounds, cells).

    exact: multinomial with the same total. Otherwise c + sqrt(c)·z − c·Σ(sqrt(c)·z)/N,
    which has the multinomial's mean, covariance diag(c) − c·cᵀ/N and exact total.
    """
    total = counts.sum()
    if exact:
        return rng.multinomial(int(total), counts / total, size=rounds).astype(np.float64)
    dev = rng.standard_normal((rounds, counts.size), dtype=np.float32)
    dev *= np.sqrt(counts).astype(np.float32)
    dev -= dev.sum(axis=1, keepdims=True, dtype=np.float64).astype(np.float32) * (
        counts / total
    ).astype(np.float32)
    dev += counts.astype(np.float32)
    return np.maximum(dev, 0.0, out=dev)


def _newton_from(theta: Any, cells: Cells, w: Any, n: Any, tol: float) -> Any:
    for _ in range(100):
        grad, hess = _bt_gradient_hessian(theta, cells, w, n)
        step = _newton_solve_matrix(hess) @ grad
        biggest = np.abs(step).max()
        if biggest > 4.0:
            step *= 4.0 / biggest
        theta = theta + step
        if biggest < tol:
            break
    return theta


# -- anchoring, summaries, matrices ------------------------------------------------------
def anchor(ratings: Any, models: Sequence[str], model: str, value: float) -> Any:
    """Shift ratings (1-D or per round 2-D) so `model` has `value`."""
    if model not in models:
        raise LmdError(
            f"The anchor model {model} has no battles here; pick one of: "
            + ", ".join(sorted(models))
            + "."
        )
    i = list(models).index(model)
    if ratings.ndim == 1:
        return ratings - ratings[i] + value
    return ratings - ratings[:, i : i + 1] + value


@dataclass
class Summary:
    """Bootstrap summary per model: median, 95% interval and rank."""

    median: dict[str, float] = field(default_factory=dict)
    ci: dict[str, list[float]] = field(default_factory=dict)
    rank: dict[str, int] = field(default_factory=dict)


def summarise(samples: Any, models: Sequence[str]) -> Summary:
    """Median, 2.5–97.5% interval, and rank = 1 + models whose low end beats our high end."""
    med = np.median(samples, axis=0)
    lo, hi = np.percentile(samples, [2.5, 97.5], axis=0)
    out = Summary()
    for k, name in enumerate(models):
        out.median[name] = float(med[k])
        out.ci[name] = [float(lo[k]), float(hi[k])]
        out.rank[name] = 1 + int(np.sum(lo > hi[k]))
    return out


def matrices(battles: Battles, ratings: Any, params: EloParams | None = None) -> dict[str, Any]:
    """Win rate (ties half), battle counts and predicted win rate, each (models, models)."""
    p = params or EloParams()
    m = len(battles.models)
    games = np.zeros((m, m))
    wins = np.zeros((m, m))
    np.add.at(games, (battles.a, battles.b), 1.0)
    np.add.at(wins, (battles.a, battles.b), battles.s)
    np.add.at(wins, (battles.b, battles.a), 1.0 - battles.s)
    games = games + games.T
    with np.errstate(invalid="ignore", divide="ignore"):
        rate = np.where(games > 0, wins / np.where(games > 0, games, 1), np.nan)
    diff = ratings[None, :] - ratings[:, None]
    predicted = 1.0 / (1.0 + p.base ** (diff / p.scale))
    np.fill_diagonal(predicted, np.nan)
    return {"win_rate": rate, "battles": games, "predicted": predicted}
