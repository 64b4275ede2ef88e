"""Karma: the seed's formula with hand-computed numbers, selection, and properties."""

from dataclasses import dataclass

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from daemon.core import karma
from daemon.core.core_settings import CORE_SETTINGS

P = karma.Params(xi=10.0, phi=0.01, tau=300.0, zeta=3.0)
NOW = 1_000_000.0


@dataclass
class Q:
    karma: float
    tokens: int
    created_at: float


def test_params_from_settings_use_the_seed_defaults():
    defaults = {s.name: s.default for s in CORE_SETTINGS}
    assert karma.Params.from_settings(defaults) == P


def test_score_by_hand():
    # 10 * 1000 * min(1, 1/(0.01*50)) * min(1, 1/(300*2)) * min(1, 1/(3*2)) = 10000/600/6
    assert karma.score(1000, 50, 2.0, 2, P) == pytest.approx(10000 / 3600)
    # 10 * 500 * 1/(0.01*400) * 1/(300*1) * 1/(3*1) = 5000 / 4 / 300 / 3
    assert karma.score(500, 400, 1.0, 1, P) == pytest.approx(5000 / 3600)
    # zero denominators (no tokens, age 0, newest) give factor 1
    assert karma.score(1000, 0, 0.0, 0, P) == 10000
    # tiny amounts never raise a factor above 1
    assert karma.score(1000, 10, 0.001, 0, P) == 10000


def test_scores_count_minutes_and_distance_from_the_newest():
    prompts = [Q(1000, 50, NOW - 120), Q(500, 400, NOW - 60), Q(1000, 10, NOW)]
    s = karma.scores(prompts, P, NOW)
    assert s == pytest.approx([10000 / 3600, 5000 / 3600, 10000])


def test_select_drops_lowest_scores_until_within_budget():
    prompts = [Q(1000, 50, NOW - 120), Q(500, 400, NOW - 60), Q(1000, 10, NOW)]
    assert karma.select(prompts, P, NOW, 10_000, 0.00001) == prompts
    # 460 tokens > 100: the 400-token decorative prompt scores lowest and goes first
    assert karma.select(prompts, P, NOW, 100, 0.00001) == [prompts[0], prompts[2]]
    # 60 > 59: the next lowest goes too; the newest always stays
    assert karma.select(prompts, P, NOW, 59, 0.00001) == [prompts[2]]
    assert karma.select(prompts, P, NOW, 1, 0.00001) == [prompts[2]]


def test_select_drops_scores_under_the_minimum():
    prompts = [Q(1000, 50, NOW - 120), Q(500, 400, NOW - 60), Q(1000, 10, NOW)]
    assert karma.select(prompts, P, NOW, 10_000, 2.0) == [prompts[0], prompts[2]]
    assert karma.select(prompts, P, NOW, 10_000, 10_000) == [prompts[2]]


def test_select_keeps_chronological_order_and_breaks_ties_by_dropping_older():
    prompts = [Q(1000, 10, NOW), Q(1000, 10, NOW), Q(1000, 10, NOW), Q(1000, 10, NOW)]
    # equal age; distance makes older prompts score lower; budget for 3
    chosen = karma.select(prompts, P, NOW, 30, 0)
    assert chosen == prompts[1:]


def test_karma_kinds_map_to_settings():
    s = {s.name: s.default for s in CORE_SETTINGS}
    assert karma.karma_for("operative", s) == 25000
    assert karma.karma_for("contextual", s) == 2500
    assert karma.karma_for("instructive", s) == 10000
    assert karma.karma_for("default", s) == 1000
    assert karma.karma_for("decorative", s) == 500
    assert karma.karma_for("none", s) == 0


def test_the_seeds_order_of_kinds_holds_with_the_defaults():
    """operative > instructive > default > decorative (the daemon seed's karma section), with
    lmd's contextual between instructive and default and none at the bottom."""
    s = {spec.name: spec.default for spec in CORE_SETTINGS}
    points = [karma.karma_for(kind, s) for kind in karma.KINDS]
    assert karma.KINDS == (
        "operative",
        "instructive",
        "contextual",
        "default",
        "decorative",
        "none",
    )
    assert points == sorted(points, reverse=True) and len(set(points)) == len(points)
    # and each kind follows its own setting
    assert karma.karma_for("operative", {**s, "operative_karma": 7}) == 7


def test_select_of_nothing_is_nothing():
    assert karma.select([], P, NOW, 100, 0) == []


prompt_lists = st.lists(
    st.builds(
        Q,
        karma=st.sampled_from([0, 500, 1000, 2500, 10000]),
        tokens=st.integers(0, 3000),
        created_at=st.floats(NOW - 86400 * 30, NOW),
    ),
    min_size=1,
    max_size=60,
)


@settings(max_examples=300, deadline=None)
@given(prompt_lists, st.integers(1, 8000), st.floats(0, 5))
def test_never_over_budget_unless_only_the_newest_remains(prompts, budget, min_score):
    chosen = karma.select(prompts, P, NOW, budget, min_score)
    assert chosen[-1] is prompts[-1]
    assert sum(q.tokens for q in chosen) <= budget or chosen == [prompts[-1]]
    # chronological: a subsequence of the input
    positions = [next(i for i, q in enumerate(prompts) if q is c) for c in chosen]
    assert positions == sorted(positions)


@settings(max_examples=300, deadline=None)
@given(
    st.floats(0, 1e5),
    st.integers(0, 5000),
    st.floats(0, 1e5),
    st.integers(0, 100),
    st.sampled_from(["phi", "tau", "zeta"]),
    st.floats(0, 100),
    st.floats(0, 100),
)
def test_raising_a_discount_never_raises_a_score(k, tokens, age, dist, which, low, extra):
    lo = karma.Params(**{**P.__dict__, which: low})
    hi = karma.Params(**{**P.__dict__, which: low + extra})
    assert karma.score(k, tokens, age, dist, hi) <= karma.score(k, tokens, age, dist, lo) + 1e-9
