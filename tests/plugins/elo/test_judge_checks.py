"""Both orders by default, style control, the judge-family warning and `lmd elo agreement`:
on the stand-in backend (its request bodies checked), the shared arena file and the real model.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from plugins.elo.checks import cohen_kappa, family, family_warning
from plugins.elo.judge import combined_verdict
from plugins.elo.ratings import Battles
from plugins.elo.style import features_of, style_control, style_of
from tests.daemons import SHARED
from tests.fake_backend import Reply
from tests.real_model import configure_real_home

from .conftest import (
    ANSWER_1,
    JUDGE,
    answer_text,
    arena_handler,
    is_judge_request,
    lmd,
    models_file,
    read_csv,
    write_csv,
)

MODELS = ["alpha-7b", "beta-13b", "gamma-70b"]
QUESTIONS = ["What is CUDA?", "Why is the sky blue?", "Fuji vs. Nikon, which is better?"]
ARENA = SHARED / "data" / "arena" / "arena_2023_english_singleturn_battles.csv"


def ok(result) -> str:
    assert result.exit_code == 0, result.output
    return result.stdout


@pytest.fixture
def battles(tmp_path, home, backend):
    """9 arranged battles with answers (3 questions x 3 pairs) and the models file."""
    backend.handler = arena_handler()
    models_file(home / "elo_models.yaml", backend, [*MODELS, "delta-1t"])
    rows = []
    for q in QUESTIONS:
        for i, a in enumerate(MODELS):
            for b in MODELS[i + 1 :]:
                rows.append([q, a, b, answer_text(f"{a}-id", q), answer_text(f"{b}-id", q)])
    return write_csv(
        tmp_path / "battles.csv", ["question", "model_a", "model_b", "answer_a", "answer_b"], rows
    )


def judge(home, battles, out, *extra):
    return lmd(home, "elo", "judge", str(battles), "--judge-model", JUDGE, "-o", str(out), *extra)


def first_shown(body: dict) -> str:
    """Which model's answer the judge saw as Model 1."""
    return ANSWER_1.search(body["messages"][0]["content"]).group(1).split("-id answers")[0]


# -- both orders ----------------------------------------------------------------------------
def test_each_battle_is_judged_in_both_orders_and_both_verdicts_kept(battles, home, backend):
    backend.handler = arena_handler(first_position_bias=True)
    out = battles.parent / "judged.csv"
    result = judge(home, battles, out)
    assert result.exit_code == 0, result.output
    calls = [b for b in backend.chat_requests if is_judge_request(b)]
    assert len(calls) == 18
    seen = {}
    for body in calls:  # every battle went once with A first and once with B first
        text = body["messages"][0]["content"]
        question = next(q for q in QUESTIONS if q in text)
        seen.setdefault(question, []).append(first_shown(body))
    assert all(sorted(firsts) == sorted(MODELS * 2) for firsts in seen.values())
    rows = read_csv(out)
    assert len(rows) == 9
    for r in rows:
        assert r["gpt_4_response"] and r["gpt_4_response_ba"]
        if "gamma-70b" in (r["model_a"], r["model_b"]):
            # the judge picks Model 1 whenever gamma is there: the orders disagree -> tie
            assert {r["winner_ab"], r["winner_ba"]} == {"model_a", "model_b"}
            assert r["winner"] == "tie" and r["is_valid"] == "true"
        else:  # alpha vs beta: beta wins in both orders
            assert r["winner_ab"] == r["winner_ba"] == r["winner"] == "model_b"
    # the figures `ablation` gives: 3 of 9 agree; position 1 won 15 of 18 decisive verdicts
    assert "the two orders agree on 33.3% of 9 battles" in result.stderr
    assert "the answer shown first won 83.3% of 18 decisive verdicts" in result.stderr
    assert "judge-model judged 9 battles in both orders (18 verdicts" in result.stderr
    # resumable: nothing is asked again
    backend.clear()
    ok(judge(home, battles, out))
    assert [b for b in backend.chat_requests if is_judge_request(b)] == []
    # ablation of a file judged in both orders reads its figures from the file
    both = battles.parent / "both.csv"
    result = lmd(home, "elo", "ablation", str(out), "--json", "--consistent-out", str(both))
    report = json.loads(ok(result))[JUDGE]
    assert "was judged in both orders" in result.stderr
    assert report["agreement"] == pytest.approx(3 / 9)
    assert report["first_position_wins"] == pytest.approx(15 / 18)
    assert backend.chat_requests == []
    assert len(read_csv(both)) == 3


def test_one_order_asks_once_per_battle_and_writes_no_reversed_verdict(battles, home, backend):
    out = battles.parent / "judged.csv"
    ok(judge(home, battles, out, "--one-order"))
    assert len([b for b in backend.chat_requests if is_judge_request(b)]) == 9
    assert all(first_shown(b) != "gamma-70b" for b in backend.chat_requests)
    rows = read_csv(out)
    assert "winner_ba" not in rows[0] and {r["is_valid"] for r in rows} == {"true"}
    # run again in both orders on the same output: only the swapped order is asked
    backend.clear()
    result = judge(home, battles, out)
    assert result.exit_code == 0, result.output
    calls = [b for b in backend.chat_requests if is_judge_request(b)]
    assert len(calls) == 9 and all(first_shown(b) != "alpha-7b" for b in calls)
    assert all(r["winner_ba"] == r["winner_ab"] == r["winner"] for r in read_csv(out))


def test_a_judge_inconsistent_every_time_gives_ties_only(battles, home, backend):
    backend.handler = lambda body: "Score of Model 1: 1\nScore of Model 2: 0\nBrief Explanation: A."
    out = battles.parent / "judged.csv"
    result = judge(home, battles, out)
    assert result.exit_code == 0, result.output
    rows = read_csv(out)
    assert {r["winner"] for r in rows} == {"tie"}
    assert "agree on 0.0% of 9 battles" in result.stderr
    assert "the answer shown first won 100.0% of 18 decisive verdicts" in result.stderr
    board = json.loads(ok(lmd(home, "elo", "leaderboard", str(out), "--json")))
    assert all(r == pytest.approx(1000.0) for r in board["ratings"].values())


def test_a_failed_order_is_kept_half_and_finished_on_the_next_run(battles, home, backend):
    good = arena_handler()

    def flaky(body):  # the swapped order of every battle with alpha fails
        text = body["messages"][0]["content"]
        if first_shown(body) != "alpha-7b" and "alpha-7b-id" in text:
            return Reply("down", status=500)
        return good(body)

    backend.handler = flaky
    out = battles.parent / "judged.csv"
    result = judge(home, battles, out)
    assert result.exit_code == 1
    assert "6 battles were not judged" in result.stderr
    rows = read_csv(out)
    half = [r for r in rows if not r["gpt_4_response_ba"]]
    assert len(half) == 6 and {r["is_valid"] for r in half} == {"false"}
    assert {r["winner"] for r in half} == {""}
    backend.handler = good
    backend.clear()
    ok(judge(home, battles, out))
    calls = [b for b in backend.chat_requests if is_judge_request(b)]
    assert len(calls) == 6 and {first_shown(b) for b in calls} == {"beta-13b", "gamma-70b"}
    assert {r["is_valid"] for r in read_csv(out)} == {"true"}


def test_both_orders_shard_and_merge_like_the_single_run(battles, home, backend):
    single = battles.parent / "single.csv"
    ok(judge(home, battles, single))
    parts = []
    for i in (1, 2):
        part = battles.parent / f"part{i}.csv"
        ok(judge(home, battles, part, "--shard", f"{i}/2"))
        parts.append(str(part))
    merged = battles.parent / "merged.csv"
    ok(lmd(home, "elo", "merge", str(merged), *parts))
    keep = ("question", "model_a", "model_b", "winner", "winner_ab", "winner_ba")
    project = lambda rows: sorted(tuple(r[c] for c in keep) for r in rows)  # noqa: E731
    assert project(read_csv(merged)) == project(read_csv(single))
    assert json.loads((battles.parent / "part1.csv.shard.json").read_text())["run"]["orders"] == 2


@pytest.mark.parametrize(
    ("ab", "ba", "both"),
    [
        ("model_a", "model_a", "model_a"),
        ("model_a", "model_b", "tie"),
        ("model_a", "tie", "tie"),
        ("tie", "tie (bothbad)", "tie"),
        ("tie (bothbad)", "tie (bothbad)", "tie (bothbad)"),
        (None, "model_b", "model_b"),
        (None, None, None),
    ],
)
def test_two_verdicts_combine_as_arena_hard_auto_scores_them(ab, ba, both):
    assert combined_verdict(ab, ba) == both


# -- the judge's family -----------------------------------------------------------------------
@pytest.mark.parametrize(
    ("name", "fam"),
    [
        ("gpt-4o-mini", "gpt"),
        ("gpt4all-13b-snoozy", "gpt4all"),
        ("Qwen2.5-7B-Instruct", "qwen"),
        ("meta-llama/Llama-3-8B", "llama"),
        ("claude-instant-v1", "claude"),
        ("vicuna-13b", "vicuna"),
        ("mixtral-8x7b", "mistral"),
    ],
)
def test_model_families(name, fam):
    assert family(name) == fam


def test_a_judge_of_a_contestants_family_is_named_in_the_summary(battles, home, backend):
    out = battles.parent / "judged.csv"
    result = lmd(home, "elo", "judge", str(battles), "--judge-model", "gamma-70b", "-o", str(out))
    assert result.exit_code == 0, result.output
    assert (
        "Warning: the judge gamma-70b is of the gamma family, as is gamma-70b among the "
        "contestants" in result.stderr
    )
    board = lmd(home, "elo", "leaderboard", str(out))
    assert "the judge gamma-70b is of the gamma family" in board.stderr
    page = battles.parent / "page.html"
    ok(lmd(home, "elo", "report", str(out), "-o", str(page)))
    assert "the judge gamma-70b is of the gamma family" in page.read_text()
    assert family_warning(["judge-model"], MODELS) is None


# -- agreement with people --------------------------------------------------------------------
def test_agreement_with_human_labels(tmp_path, home):
    header = ["question", "model_a", "model_b", "winner", "judge"]
    judged = write_csv(
        tmp_path / "judged.csv",
        header,
        [
            ["q1", "x", "y", "model_a", "llm"],
            ["q2", "x", "y", "model_b", "llm"],
            ["q3", "y", "x", "tie", "llm"],
            ["q4", "x", "z", "model_a", "llm"],
            ["q5", "z", "y", "model_a", "llm"],  # no human label
        ],
    )
    human = write_csv(
        tmp_path / "human.csv",
        header,
        [
            ["q1", "y", "x", "model_b", "ann"],  # the same verdict, the other orientation
            ["q2", "x", "y", "model_a", "ann"],
            ["q3", "x", "y", "tie (bothbad)", "ann"],
            ["q4", "x", "z", "model_a", "ann"],
            ["q6", "y", "z", "model_a", "ann"],
        ],
    )
    out = json.loads(ok(lmd(home, "elo", "agreement", str(judged), str(human), "--json")))
    assert out["battles"] == 4 and out["agreement"] == pytest.approx(0.75)
    # classes x-wins / y-wins / tie: judge (A, B, T, A), people (A, A, T, A)
    assert out["kappa"] == pytest.approx(
        cohen_kappa([("a", "a"), ("b", "a"), ("t", "t"), ("a", "a")], ("a", "b", "t"))
    )
    assert out["decisive"] == 3 and out["agreement_decisive"] == pytest.approx(2 / 3)
    assert out["kappa_decisive"] == pytest.approx(0.0)
    assert out["models"] == 3
    text = ok(lmd(home, "elo", "agreement", str(judged), str(human)))
    assert "Per battle (4 battles in both files): agreement 75.0%" in text
    assert "Per model (3 models rated in both): Spearman" in text


def test_agreement_kappa_is_undefined_for_one_class(tmp_path, home):
    rows = [["q1", "x", "y", "tie"], ["q2", "x", "y", "tie"]]
    a = write_csv(tmp_path / "a.csv", ["question", "model_a", "model_b", "winner"], rows)
    result = lmd(home, "elo", "agreement", str(a), str(a), "--json")
    out = json.loads(ok(result))
    assert out["agreement"] == 1.0 and out["kappa"] is None
    assert "Cohen's kappa is undefined" in result.stderr


@pytest.mark.skipif(not ARENA.exists(), reason="needs ../shared/data/arena (the workplace data)")
def test_agreement_on_the_shared_arena_file_compares_ratings(tmp_path, home):
    # A "judge" that saw every other human battle: no questions to match battles by, so
    # the ratings are compared.
    lines = ARENA.read_text(encoding="utf-8").splitlines()
    half = tmp_path / "half.csv"
    half.write_text("\n".join([lines[0], *lines[1::2]]) + "\n", encoding="utf-8")
    result = lmd(home, "elo", "agreement", str(half), str(ARENA), "--json")
    out = json.loads(ok(result))
    assert out["battles"] == 0 and out["models"] == 20
    assert out["spearman"] > 0.9 and out["pair_order"] > 0.85
    assert "have no questions to match battles by" in result.stderr


# -- style control ----------------------------------------------------------------------------
def test_style_counts_follow_fastchat_and_survive_pathological_markdown():
    assert style_of("# T\n## U\n- a\n  - b\n1. c\n**x** __y__\n```\n# not\n- no\n```") == (
        style_of("# T\n## U\n- a\n  - b\n1. c\n**x** __y__\n```\n# not\n- no\n```")[0],
        2,
        3,
        2,
    )
    assert style_of("") == (0, 0, 0, 0)
    many = style_of("# h\n" * 10_000)
    assert many[1] == 10_000
    nested = "\n".join("  " * d + "- item" for d in range(200))
    assert style_of(nested)[2] == 200


def style_file(path, rows):
    return write_csv(
        path, ["question", "model_a", "model_b", "winner", "answer_a", "answer_b"], rows
    )


def test_style_control_discounts_length(tmp_path, home):
    # "long" mostly answers at greater length, and the longer answer wins 80% of the time
    # whoever gave it: plain BT credits "long", style control gives the credit to length
    rng = np.random.default_rng(3)
    rows = []
    for n in range(400):
        a, b = ("long", "short") if n % 2 else ("short", "long")
        longer = rng.random() < 0.8
        la = 60 if (a == "long") == longer else 10
        lb = 70 - la
        pa = 0.8 if la > lb else 0.2
        winner = "model_a" if rng.random() < pa else "model_b"
        rows.append([f"q{n}", a, b, winner, "word " * la, "word " * lb])
    f = style_file(tmp_path / "s.csv", rows)
    plain = json.loads(ok(lmd(home, "elo", "leaderboard", str(f), "--json")))
    result = lmd(
        home, "elo", "leaderboard", str(f), "--style-control", "--bootstrap", "100", "--seed", "1"
    )
    text = ok(result)
    assert "Bradley–Terry with style control" in text and "length" in text
    board = json.loads(ok(lmd(home, "elo", "leaderboard", str(f), "--style-control", "--json")))
    style = board["style_control"]
    assert style["coefficients"]["length"] > 0.5
    # no markdown anywhere: those features do not vary and get no weight
    assert style["coefficients"]["headers"] == 0.0
    assert any(
        "No battle's answers differ in headers or lists or bold" in n for n in board["notes"]
    )
    gap_plain = abs(plain["ratings"]["long"] - plain["ratings"]["short"])
    gap_style = abs(board["ratings"]["long"] - board["ratings"]["short"])
    assert gap_style < gap_plain


def test_style_control_without_answers_or_columns_says_what_is_missing(tmp_path, home):
    f = write_csv(tmp_path / "b.csv", ["model_a", "model_b", "winner"], [["x", "y", "model_a"]])
    result = lmd(home, "elo", "leaderboard", str(f), "--style-control")
    assert result.exit_code == 1
    assert result.stderr.strip() == (
        f"Style control needs the answers (answer_a, answer_b) or the style columns "
        f"(sum_assistant_a_tokens, sum_assistant_b_tokens, header_count_a, header_count_b, "
        f"list_count_a, list_count_b, bold_count_a, bold_count_b); {f} has no answers and lacks "
        "sum_assistant_a_tokens, sum_assistant_b_tokens, header_count_a, header_count_b, "
        "list_count_a, list_count_b, bold_count_a, bold_count_b."
    )
    online = lmd(home, "elo", "leaderboard", str(f), "--style-control", "--method", "online")
    assert online.exit_code == 1
    assert "Style control is a Bradley–Terry fit; use it with --method bt" in online.stderr


def test_style_control_reads_fastchat_style_columns(tmp_path, home):
    cols = ["model_a", "model_b", "winner", "sum_assistant_a_tokens", "sum_assistant_b_tokens",
            "header_count_a", "header_count_b", "list_count_a", "list_count_b", "bold_count_a",
            "bold_count_b"]  # fmt: skip
    rows = [
        ["x", "y", "model_a", 100, 50, '{"h1": 1, "h2": 2}', 0, 3, 1, 0, 1],
        ["y", "x", "model_b", 20, 80, 0, 1, 0, 2, 1, 0],
        ["x", "y", "tie", 30, 30, 1, 1, 0, 0, 0, 0],
        ["y", "x", "model_a", 90, 10, 2, 0, 1, 0, 0, 2],
    ]
    f = write_csv(tmp_path / "c.csv", cols, rows)
    board = json.loads(ok(lmd(home, "elo", "leaderboard", str(f), "--style-control", "--json")))
    assert set(board["style_control"]["coefficients"]) == {"length", "headers", "lists", "bold"}
    rows[1][3] = "lots"
    f = write_csv(tmp_path / "d.csv", cols, rows)
    result = lmd(home, "elo", "leaderboard", str(f), "--style-control")
    assert result.exit_code == 1
    assert "The style column sum_assistant_a_tokens has 'lots' in battle 2" in result.stderr


def test_style_control_on_pathological_answers_and_ties_only(tmp_path, home):
    headers = "# h\n" * 10_000
    nested = "\n".join("  " * d + "- item" for d in range(300))
    rows = [
        ["q1", "x", "y", "tie", headers, ""],
        ["q2", "y", "z", "tie", nested, "**b** " * 500],
        ["q3", "z", "x", "tie", "", headers],
        ["q4", "x", "z", "tie (bothbad)", "plain", nested],
    ]
    f = style_file(tmp_path / "p.csv", rows)
    board = json.loads(
        ok(lmd(home, "elo", "leaderboard", str(f), "--style-control", "--bootstrap", "50",
               "--seed", "2", "--json"))
    )  # fmt: skip
    # ties only: nothing separates the models, and style explains nothing either
    assert all(abs(r - 1000) < 1e-6 for r in board["ratings"].values())
    assert all(abs(c) < 1e-6 for c in board["style_control"]["coefficients"].values())


def test_ratings_that_are_not_identifiable_are_named(tmp_path, home):
    # x and y only ever meet each other; z and w too: two groups no battle connects
    rows = [["x", "y", "model_a"], ["y", "x", "tie"], ["z", "w", "model_b"], ["w", "z", "tie"]]
    f = write_csv(tmp_path / "g.csv", ["model_a", "model_b", "winner"], rows)
    result = lmd(home, "elo", "leaderboard", str(f))
    assert result.exit_code == 0
    assert (
        "The ratings are not identifiable across 2 groups of models that no battle connects "
        "(w, z; x, y): compare ratings only within a group." in result.stderr
    )
    rows = [["x", "y", "model_a"], ["x", "z", "model_a"], ["y", "z", "tie"]]
    f = write_csv(tmp_path / "h.csv", ["model_a", "model_b", "winner"], rows)
    result = lmd(home, "elo", "leaderboard", str(f), "--json")
    assert "x won every battle, so its rating is not identifiable" in result.stderr
    assert json.loads(result.stdout)["notes"]


def test_style_fit_is_the_ridge_logistic_optimum():
    """The Newton fit solves FastChat's objective: its gradient vanishes at the answer."""
    rng = np.random.default_rng(0)
    n, m = 3000, 5
    a = rng.integers(0, m, n)
    b = (a + 1 + rng.integers(0, m - 1, n)) % m
    s = rng.choice([0.0, 0.5, 1.0], n)
    battles = Battles([f"m{i}" for i in range(m)], a, b, s)
    counts = rng.poisson(3.0, (n, 2, 4)).astype(float)
    fit = style_control(battles, counts)
    feats = features_of(counts)
    alpha = np.log(10)
    theta = (fit.ratings - 1000) / 400
    beta = np.array([fit.coefficients[f] for f in feats.kept])
    p = 1 / (1 + np.exp(-(alpha * (theta[a] - theta[b]) + feats.x @ beta)))
    resid = s - p
    grad_models = alpha * (np.bincount(a, resid, m) - np.bincount(b, resid, m)) - 0.5 * theta
    grad_feats = feats.x.T @ resid - 0.5 * beta
    assert np.abs(grad_models).max() < 1e-8 and np.abs(grad_feats).max() < 1e-8
    boot = style_control(battles, counts, rounds=200, seed=1)
    lo, hi = np.percentile(boot.samples, [2.5, 97.5], axis=0)
    assert np.all(lo < fit.ratings) and np.all(fit.ratings < hi)


# -- the daemon -------------------------------------------------------------------------------
def test_the_leaderboard_route_does_style_control(client):
    battles = [
        {"model_a": "x", "model_b": "y", "winner": "model_a", "question": f"q{i}",
         "answer_a": "# T\n- a\n" + "w " * (i + 5), "answer_b": "short"}
        for i in range(6)
    ] + [{"model_a": "y", "model_b": "x", "winner": "tie", "question": "z",
          "answer_a": "**b** text", "answer_b": "text"}]  # fmt: skip
    assert client.post("/elo/battles", json=battles).status_code == 200
    board = client.get("/elo/leaderboard?style=1&bootstrap=20&seed=1").json()
    assert set(board["style_control"]["coefficients"]) == {"length", "headers", "lists", "bold"}
    assert "ci" in board["style_control"] and "ci" in board
    assert "Style coefficients" in client.get("/elo?style=1").text
    assert client.post("/elo/battles", json=[{"model_a": "z", "model_b": "x", "winner": "tie"}])
    r = client.get("/elo/leaderboard?style=1")
    assert r.status_code == 400 and "has 1 battle without answers" in r.json()["error"]
    assert client.get("/elo/leaderboard?style=maybe").status_code == 400


# -- the real model -------------------------------------------------------------------------
@pytest.mark.slow
def test_the_real_model_judges_a_battle_in_both_orders(real_model, tmp_path, monkeypatch):
    # real_model, not small_model: the judge prompt alone is near small_model's 256 tokens
    home = configure_real_home(tmp_path / "h", real_model)
    monkeypatch.setenv("OPENAI_API_KEY", real_model.key)
    battles = write_csv(
        tmp_path / "battles.csv",
        ["question", "model_a", "model_b", "answer_a", "answer_b"],
        [["What is 2+2?", "m1", "m2", "4", "5"]],
    )
    out = tmp_path / "judged.csv"
    result = lmd(home, "elo", "judge", str(battles), "-o", str(out))
    assert result.exit_code == 0, result.output
    (row,) = read_csv(out)
    assert row["gpt_4_response"] and row["gpt_4_response_ba"]
    # held to the verdict schema, both orders give a verdict; whether they agree is the
    # tiny judge's business, the combination is ours
    assert row["winner_ab"] and row["winner_ba"], (row["gpt_4_response"], row["gpt_4_response_ba"])
    assert row["winner"] == combined_verdict(row["winner_ab"], row["winner_ba"])
    assert "the two orders agree on" in result.stderr
