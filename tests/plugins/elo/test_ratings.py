"""Rating math: hand-computed values, properties, bootstraps, the judge's score parser."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from daemon.core.errors import LmdError
from plugins.elo.judge import justification, parse_scores, verdict
from plugins.elo.ratings import (
    Battles,
    Cells,
    EloParams,
    PairwiseRatingEntity,
    anchor,
    bradley_terry,
    bt_bootstrap,
    bt_gradient,
    compiled_loop,
    matrices,
    online_elo,
    online_elo_bootstrap,
    online_elo_rounds,
    resample_counts,
    summarise,
)
from plugins.elo.winners import normalise_winner

WINNER = st.sampled_from(["model_a", "model_b", "tie", "tie (bothbad)"])


def battles_of(rows) -> Battles:
    return Battles.from_rows(rows)


# -- hand-computed values ---------------------------------------------------------------------
def test_entity_battle_by_hand():
    table: dict[str, float] = {}
    pair = PairwiseRatingEntity("a", "b", table)
    assert pair.battle("model_a") == (1002.0, 998.0)  # e = 0.5, K = 4
    e_a = 1 / (1 + 10 ** ((998 - 1002) / 400))  # 0.50575...
    ra, rb = pair.battle("model_b")
    assert ra == pytest.approx(1002 - 4 * e_a) and rb == pytest.approx(998 + 4 * e_a)
    assert ra == pytest.approx(999.976975, abs=1e-6)  # 10^-0.01 = 0.977237
    # a tie between equals changes nothing; the entity shares the table with other pairs
    other = PairwiseRatingEntity("c", "d", table)
    assert other.battle("tie (bothbad)") == (1000.0, 1000.0)
    assert set(table) == {"a", "b", "c", "d"}
    with pytest.raises(LmdError, match="cannot battle itself"):
        PairwiseRatingEntity("a", "a", table)
    with pytest.raises(LmdError, match="Unknown winner 'c'"):
        pair.battle("c")


def test_online_elo_matches_the_entity_and_options():
    rows = [("a", "b", "model_a"), ("b", "c", "tie"), ("c", "a", "model_a"), ("a", "b", "tie")]
    table: dict[str, float] = {}
    p = EloParams(k=32, scale=200, base=math.e, initial=1500)
    for a, b, w in rows:
        PairwiseRatingEntity(a, b, table, p).battle(w)
    got = online_elo(battles_of(rows), p)
    assert got.tolist() == pytest.approx([table["a"], table["b"], table["c"]])


def test_bradley_terry_by_hand():
    # A beats B 3 times, B beats A once: odds 3, so the gap is 400·log10(3) = 190.85
    r = bradley_terry(battles_of([("a", "b", "model_a")] * 3 + [("b", "a", "model_a")]))
    assert r[0] - r[1] == pytest.approx(400 * math.log10(3), abs=1e-3)
    assert r.mean() == pytest.approx(1000)
    # ties count half a win each: 2 wins + 2 ties = 3 : 1 again
    r2 = bradley_terry(
        battles_of([("a", "b", "model_a")] * 2 + [("a", "b", "tie"), ("b", "a", "tie (bothbad)")])
    )
    assert r2 == pytest.approx(r, abs=1e-6)
    # a balanced cycle: everyone equal
    cycle = [("a", "b", "model_a")] * 2 + [("b", "a", "model_a")]
    cycle += [("b", "c", "model_a")] * 2 + [("c", "b", "model_a")]
    cycle += [("c", "a", "model_a")] * 2 + [("a", "c", "model_a")]
    assert bradley_terry(battles_of(cycle)) == pytest.approx([1000, 1000, 1000], abs=1e-6)


def test_bradley_terry_three_models_by_hand():
    # a–b 2:1 and b–c 2:1, no a–c games: chain of odds 2 and 2, so gaps of 400·log10(2)
    rows = [("a", "b", "model_a")] * 2 + [("a", "b", "model_b")]
    rows += [("b", "c", "model_a")] * 2 + [("b", "c", "model_b")]
    r = bradley_terry(battles_of(rows))
    gap = 400 * math.log10(2)
    assert r == pytest.approx([1000 + gap, 1000, 1000 - gap], abs=1e-3)


def test_bradley_terry_stays_finite_for_an_unbeaten_model():
    r = bradley_terry(battles_of([("a", "b", "model_a")] * 5))
    assert np.isfinite(r).all() and r[0] > r[1] + 1000


def test_summary_ranks_and_anchor():
    samples = np.array([[10.0, 9.0, 0.0], [12.0, 13.0, 1.0], [11.0, 11.0, 2.0]])
    s = summarise(samples, ["a", "b", "c"])
    assert s.median == {"a": 11.0, "b": 11.0, "c": 1.0}
    # a and b overlap (both rank 1); c's upper end is below both lower ends: 1 + 2
    assert s.rank == {"a": 1, "b": 1, "c": 3}
    lo, hi = s.ci["a"]
    assert lo == pytest.approx(10.05) and hi == pytest.approx(11.95)
    assert anchor(np.array([1.0, 2.0]), ["x", "y"], "y", 10).tolist() == [9.0, 10.0]
    assert anchor(samples, ["a", "b", "c"], "c", 0)[:, 2].tolist() == [0, 0, 0]


def test_matrices_by_hand():
    b = battles_of([("x", "y", "model_a"), ("y", "x", "tie"), ("x", "z", "model_b")])
    ratings = np.array([1100.0, 1000.0, 900.0])
    m = matrices(b, ratings)
    assert m["battles"].tolist() == [[0, 2, 1], [2, 0, 0], [1, 0, 0]]
    assert m["win_rate"][0, 1] == 0.75 and m["win_rate"][1, 0] == 0.25
    assert m["win_rate"][0, 2] == 0.0 and math.isnan(m["win_rate"][1, 2])
    assert m["predicted"][0, 1] == pytest.approx(1 / (1 + 10 ** (-100 / 400)))
    assert m["predicted"][0, 1] + m["predicted"][1, 0] == pytest.approx(1)


def test_winner_labels():
    assert normalise_winner("tie(all bad)") == "tie (bothbad)"
    assert normalise_winner("tie(all_bad)") == "tie (bothbad)"
    assert normalise_winner(" Model_A ") == "model_a"
    assert normalise_winner("tie (bothbad)") == "tie (bothbad)"
    assert normalise_winner("draw") is None and normalise_winner("") is None


# -- properties ---------------------------------------------------------------------------------
battle_rows = st.lists(
    st.tuples(st.integers(0, 4), st.integers(1, 4), WINNER), min_size=1, max_size=60
).map(lambda rows: [(f"m{a}", f"m{(a + d) % 5}", w) for a, d, w in rows])


@settings(max_examples=60, deadline=None)
@given(battle_rows, st.floats(0.5, 64))
def test_online_elo_is_zero_sum(rows, k):
    r = online_elo(battles_of(rows), EloParams(k=k))
    assert r.sum() == pytest.approx(1000 * len(r), abs=1e-6)


@settings(max_examples=60, deadline=None)
@given(battle_rows)
def test_bt_gradient_is_zero_at_the_estimate(rows):
    b = battles_of(rows)
    r = bradley_terry(b)
    assert np.abs(bt_gradient(r, Cells.from_battles(b))).max() < 1e-6


@settings(max_examples=60, deadline=None)
@given(battle_rows)
def test_mirrored_battles_leave_ratings_unchanged(rows):
    b = battles_of(rows)
    assert bradley_terry(b.mirrored()) == pytest.approx(bradley_terry(b), abs=1e-6)
    assert online_elo(b.mirrored()) == pytest.approx(online_elo(b), abs=1e-9)


@settings(max_examples=30, deadline=None)
@given(battle_rows, st.integers(0, 2**31))
def test_bootstrap_rounds_are_online_elo_on_resamples(rows, seed):
    b = battles_of(rows)
    rng = np.random.default_rng(seed)
    orders = rng.integers(0, len(b), size=(len(b), 4))
    state = online_elo_rounds(b, orders)
    got = 1000 + state.reshape(4, len(b.models)) / (math.log(10) / 400 / 2)
    for r in range(4):
        sample = Battles(b.models, b.a[orders[:, r]], b.b[orders[:, r]], b.s[orders[:, r]])
        assert got[r] == pytest.approx(online_elo(sample), abs=1e-3)


# -- bootstraps ---------------------------------------------------------------------------------
def synthetic(n: int = 3000, m: int = 6, seed: int = 0) -> Battles:
    rng = np.random.default_rng(seed)
    strength = np.linspace(-1, 1, m)
    a = rng.integers(0, m, n)
    b = (a + 1 + rng.integers(0, m - 1, n)) % m
    p = 1 / (1 + np.exp(strength[b] - strength[a]))
    u = rng.random(n)
    s = np.where(u < 0.1, 0.5, np.where(u < 0.1 + 0.9 * p, 1.0, 0.0))
    return Battles([f"m{i}" for i in range(m)], a, b, s)


def test_bt_bootstrap_is_seeded_and_centred_on_the_estimate():
    b = synthetic()
    one = bt_bootstrap(b, 300, seed=7)
    assert np.array_equal(one, bt_bootstrap(b, 300, seed=7))
    assert not np.array_equal(one, bt_bootstrap(b, 300, seed=8))
    point = bradley_terry(b)
    s = summarise(one, b.models)
    for k, m in enumerate(b.models):
        lo, hi = s.ci[m]
        assert lo < point[k] < hi
        assert abs(s.median[m] - point[k]) < 0.25 * (hi - lo)
    assert [s.rank[m] for m in b.models] == [6, 5, 4, 3, 2, 1]
    # each round is a real fit: the gradient of its own counts is ~0 (checked on one round)
    rng = np.random.default_rng(7)
    cells = Cells.from_battles(b)
    counts = resample_counts(rng, cells.counts.ravel(), 1).reshape(-1, 3)
    refit = Cells(cells.models, cells.i, cells.j, counts)
    assert np.abs(bt_gradient(one[0], refit)).max() < 1e-3


def test_bt_bootstrap_normal_draws_match_exact_ones(monkeypatch):
    import plugins.elo.ratings as ratings

    b = synthetic(20000, 8, seed=3)
    exact = summarise(bt_bootstrap(b, 400, seed=1), b.models)
    monkeypatch.setattr(ratings, "EXACT_DRAW_LIMIT", 0)
    normal = summarise(bt_bootstrap(b, 400, seed=1), b.models)
    for m in b.models:
        width = exact.ci[m][1] - exact.ci[m][0]
        assert normal.ci[m][1] - normal.ci[m][0] == pytest.approx(width, rel=0.2)


def test_resampled_counts_keep_the_total():
    rng = np.random.default_rng(0)
    counts = np.array([5.0, 0.0, 40.0, 3.0, 100.0])
    exact = resample_counts(rng, counts, 2000)
    assert (exact.sum(axis=1) == counts.sum()).all()
    assert (exact[:, 1] == 0).all()
    assert exact.mean(axis=0) == pytest.approx(counts, abs=1.0)
    # the normal law is for big cells (millions of battles); there the total is kept too
    big = counts * 100
    normal = resample_counts(rng, big, 2000, exact=False)
    assert normal.sum(axis=1) == pytest.approx(np.full(2000, big.sum()), rel=1e-5)
    assert normal.mean(axis=0) == pytest.approx(big, abs=5.0)
    assert normal.std(axis=0)[4] == pytest.approx(exact.std(axis=0)[4] * 10, rel=0.1)


def test_online_bootstrap_is_seeded_and_plausible():
    b = synthetic(2000, 4)
    one = online_elo_bootstrap(b, 200, seed=3)
    assert one.shape == (200, 4)
    assert np.array_equal(one, online_elo_bootstrap(b, 200, seed=3))
    assert one.sum(axis=1) == pytest.approx(np.full(200, 4000), abs=0.1)  # zero-sum per round
    med = np.median(one, axis=0)
    assert list(np.argsort(med)) == [0, 1, 2, 3]


def test_online_bootstrap_chunks_are_one_side_by_side_run():
    # The bootstrap draws and rates 64-step chunks reusing scratch arrays (the last chunk is
    # shorter); the result must be exactly one online_elo_rounds pass over all the draws.
    b = synthetic(300, 5)
    rounds = 1000
    rng = np.random.default_rng(11)
    sizes = [64, 64, 64, 64, 44]
    orders = np.concatenate([rng.integers(0, 300, size=(k, rounds), dtype=np.int32) for k in sizes])
    state = online_elo_rounds(b, orders)
    want = 1000 + state.reshape(rounds, 5).astype(np.float64) / (math.log(10) / 400 / 2)
    assert np.array_equal(online_elo_bootstrap(b, rounds, seed=11, compiled=False), want)


# -- the compiled loop (plugins/elo/_online.c) ----------------------------------------------
MASK = 2**64 - 1


def splitmix64(state: int) -> tuple[int, int]:
    state = (state + 0x9E3779B97F4A7C15) & MASK
    z = state
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK
    return state, z ^ (z >> 31)


def lemire_below(state: int, n: int) -> tuple[int, int]:
    """Lemire's exact bounded draw, written from the paper, to check the C one against."""
    state, x = splitmix64(state)
    m = x * n
    if m & MASK < n:
        threshold = (2**64 - n) % n
        while m & MASK < threshold:
            state, x = splitmix64(state)
            m = x * n
    return state, m >> 64


def test_make_test_runs_with_the_compiled_loop_built():
    # the install builds it (optional only for machines without a C compiler)
    assert compiled_loop() is not None


def test_the_compiled_bootstrap_is_online_elo_on_its_own_draws():
    b = synthetic(300, 5, seed=2)
    got = online_elo_bootstrap(b, 3, seed=5)
    seeds = np.random.default_rng(5).integers(0, 2**64, size=3, dtype=np.uint64)
    for r, seed in enumerate(seeds.tolist()):
        state, picks = seed, []
        for _ in range(len(b)):
            state, k = lemire_below(state, len(b))
            picks.append(k)
        sample = Battles(b.models, b.a[picks], b.b[picks], b.s[picks])
        assert got[r] == pytest.approx(online_elo(sample), abs=0.05)  # float32 inside


def test_the_compiled_and_numpy_loops_give_the_same_statistic():
    b = synthetic(3000, 6, seed=4)
    fast = summarise(online_elo_bootstrap(b, 400, seed=1), b.models)
    slow = summarise(online_elo_bootstrap(b, 400, seed=1, compiled=False), b.models)
    for m in b.models:
        width = slow.ci[m][1] - slow.ci[m][0]
        assert fast.median[m] == pytest.approx(slow.median[m], abs=0.15 * width)
        assert fast.ci[m][1] - fast.ci[m][0] == pytest.approx(width, rel=0.2)
    assert fast.rank == slow.rank


def test_the_compiled_loop_refuses_bad_arrays_instead_of_writing_out_of_bounds():
    fast = compiled_loop()
    state = np.zeros(2 * 3, dtype=np.float32)
    a, b = np.array([0, 1], dtype=np.int32), np.array([1, 3], dtype=np.int32)
    s = np.ones(2, dtype=np.float32)
    seeds = np.arange(2, dtype=np.uint64)
    with pytest.raises(IndexError, match="out of range"):
        fast.bootstrap(state, a, b, s, seeds, 0.01, 3)
    with pytest.raises(ValueError, match="mismatched"):
        fast.bootstrap(state, a, b[:1], s, seeds, 0.01, 3)
    with pytest.raises(ValueError, match="mismatched"):
        fast.bootstrap(np.zeros(5, dtype=np.float32), a, a, s, seeds, 0.01, 3)
    with pytest.raises(TypeError, match="'f'"):
        fast.bootstrap(state.astype(np.float64), a, a, s, seeds, 0.01, 3)
    with pytest.raises(ValueError, match="read-only"):
        ro = state.copy()
        ro.setflags(write=False)
        fast.bootstrap(ro, a, a, s, seeds, 0.01, 3)
    assert not state.any()  # nothing was written by any refused call
    # no battles, or no rounds: nothing to do, nothing written
    fast.bootstrap(np.zeros(0, dtype=np.float32), a, a, s, seeds[:0], 0.01, 3)
    empty = np.zeros(0, dtype=np.int32)
    fast.bootstrap(state, empty, empty, s[:0], seeds, 0.01, 3)
    assert not state.any()


def test_asking_for_the_compiled_loop_where_it_was_not_built_says_so(monkeypatch):
    import plugins.elo.ratings as ratings

    monkeypatch.setattr(ratings, "compiled_loop", lambda: None)
    with pytest.raises(RuntimeError, match="not built"):
        online_elo_bootstrap(synthetic(50, 3), 2, compiled=True)
    assert online_elo_bootstrap(synthetic(50, 3), 2).shape == (2, 3)  # numpy loop instead


def test_side_by_side_rounds_refuse_orders_outside_the_battles():
    b = synthetic(50, 3)
    with pytest.raises(IndexError, match="50 battles"):
        online_elo_rounds(b, np.full((3, 2), 50))
    with pytest.raises(IndexError):
        online_elo_rounds(b, np.full((3, 2), -51))


# -- the judge's reply --------------------------------------------------------------------------
@pytest.mark.parametrize(
    "reply, winner",
    [
        ("Score of Model 1: 1\nScore of Model 2: 0\nBrief Explanation: A is right.", "model_a"),
        ("Score of Model 1: 0\nScore of Model 2: 1", "model_b"),
        ("**Score of Model 1:** 0.5\n**Score of Model 2:** 0.5", "tie"),
        ("score of model 1 = 0\nscore of model 2 = 0\nBoth repeat the question.", "tie (bothbad)"),
        ("Score of Model 1: 0.7\nScore of Model 2: 0.3", None),
        ("Score of Model 1: 1", None),
        ("I prefer the first answer.", None),
        ("", None),
    ],
)
def test_verdicts(reply, winner):
    got, _, valid = verdict(reply)
    assert got == winner and valid == (winner is not None)


def test_justification():
    assert justification("Score of Model 1: 1\nScore of Model 2: 0\nBrief Explanation: Because.")
    assert (
        justification("Score of Model 1: 1\nScore of Model 2: 0\nBrief Explanation: Because.")
        == "Because."
    )
    assert justification("Score of Model 1: 1\nScore of Model 2: 0\nA is better.") == "A is better."
    assert parse_scores("Score of Model 1: .5 Score of Model 2: .5") == (0.5, 0.5)


def test_gpt_4_completion_in_the_spec_shape(backend, home, monkeypatch):
    from plugins.elo.backends import Endpoint
    from plugins.elo.judge import GPT4_PROMPT, gpt_4_completion
    from tests.fake_backend import Reply

    backend.queue(Reply("Score of Model 1: 0\nScore of Model 2: 0\nBrief Explanation: echo."))
    judge = Endpoint("gpt-4", backend.url, "gpt-4-0613", retries=0)
    response = gpt_4_completion(
        GPT4_PROMPT, question="Why?", model1_answer="Why?", model2_answer="Because.", judge=judge
    )
    assert verdict(response)[0] == "tie (bothbad)"
    body = backend.chat_requests[-1]
    assert body["model"] == "gpt-4-0613" and body["temperature"] == 0
    text = body["messages"][0]["content"]
    assert "Model 1's Answer:\nWhy?\n\nModel 2's Answer:\nBecause." in text
    # without a judge: elo_judge_model (empty: the backend's own model) on lmd's backend
    monkeypatch.setenv("LMD_HOME", str(home))
    backend.queue(Reply("Score of Model 1: 1\nScore of Model 2: 0"))
    response = gpt_4_completion(GPT4_PROMPT, "Q?", "right", "wrong")
    assert verdict(response)[0] == "model_a"
    assert backend.chat_requests[-1]["model"] == "fake-model"
