"""The Elo judge parser fuzzed; Elo outputs never clobber a file."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from plugins.elo.judge import parse_scores, verdict

from .conftest import lmd, write_csv

FUZZ = settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@FUZZ
@given(st.text(max_size=300))
@example("Score of Model 1: 1e9\nScore of Model 2: 0")
def test_judge_parser_never_raises_and_only_known_verdicts(response):
    winner, why, valid = verdict(response)
    assert isinstance(why, str)
    assert valid == (winner is not None)
    assert winner in (None, "model_a", "model_b", "tie", "tie (bothbad)")
    scores = parse_scores(response)
    if valid:
        assert scores is not None
        assert all(
            str(s).rstrip("0").rstrip(".") in response or f"{s:g}" in response for s in scores
        )


SCORES = {(1, 0): "model_a", (0, 1): "model_b", (0.5, 0.5): "tie", (0, 0): "tie (bothbad)"}


@FUZZ
@given(
    st.sampled_from(sorted(SCORES)),
    st.sampled_from(
        [
            "Score of Model {i}: {s}",
            "**Score of Model {i}:** {s}",
            "score of model{i} = {s}",
            "SCORE OF MODEL {i}:{s}",
        ]
    ),
    st.from_regex(r"[A-Za-z][A-Za-z ,.;!?()0-9]{0,50}", fullmatch=True),
    st.booleans(),
)
def test_judge_reads_the_scores_it_was_given(pair, line, why, model_2_first):
    lines = [line.format(i=1, s=pair[0]), line.format(i=2, s=pair[1])]
    if model_2_first:
        lines.reverse()
    text = "\n".join(lines) + "\nBrief Explanation: " + why
    winner, justification, valid = verdict(text)
    assert valid and winner == SCORES[pair], text
    assert justification == why.strip()


@FUZZ
@given(st.floats(0, 1).filter(lambda x: x not in (0, 0.5, 1)), st.sampled_from([0, 1, 0.5]))
@example(1e-05, 0)  # regression: "1e-05" was read as 1, a made-up win for model 1
def test_judge_scores_outside_the_table_are_invalid(a, b):
    winner, _, valid = verdict(f"Score of Model 1: {a}\nScore of Model 2: {b}")
    assert winner is None and not valid


@pytest.mark.parametrize("written", ["1e-05", "1/2", "0.5e1", "1.0.0", "10"])
def test_judge_never_reads_part_of_a_number(written):
    """Regression: the score was the longest leading run of digits ("1/2" -> 1)."""
    winner, _, valid = verdict(f"Score of Model 1: {written}\nScore of Model 2: 0")
    assert winner is None and not valid
    assert verdict("Score of Model 1: 1.\nScore of Model 2: 0.")[0] == "model_a"


def test_judge_with_one_score_missing_is_invalid():
    winner, why, valid = verdict("Score of Model 1: 1\nModel 2 was worse.")
    assert (winner, valid) == (None, False) and why == "Model 2 was worse."


@pytest.fixture
def battles(tmp_path):
    return write_csv(
        tmp_path / "battles.csv",
        ["model_a", "model_b", "winner"],
        [["x", "y", "model_a"], ["y", "z", "model_b"], ["x", "z", "tie"]],
    )


@pytest.mark.parametrize(
    "command",
    [
        ["elo", "leaderboard", "{battles}", "-o", "{out}"],
        ["elo", "report", "{battles}", "-o", "{out}"],
        ["elo", "matrix", "{battles}", "-o", "{out}"],
        ["elo", "arrange", "{qa}", "-o", "{out}"],
        ["elo", "convert", "{qa}", "{out}"],
    ],
    ids=["leaderboard", "report", "matrix", "arrange", "convert"],
)
def test_elo_outputs_refuse_to_overwrite_without_force(tmp_path, home, battles, command):
    qa = write_csv(tmp_path / "qa.csv", ["question", "m1", "m2"], [["Why?", "a", "b"]])
    out = tmp_path / "precious.csv"
    out.write_text("a day of work\n")
    args = [a.format(battles=battles, out=out, qa=qa) for a in command]
    r = lmd(home, *args)
    assert r.exit_code == 1, r.output
    assert "precious.csv already exists and would be overwritten" in r.stderr
    assert "--force" in r.stderr and "Traceback" not in r.output
    assert out.read_text() == "a day of work\n"
    r = lmd(home, *args, "--force")
    assert r.exit_code == 0, r.output
    assert out.read_text() != "a day of work\n"
    fresh = tmp_path / "fresh.csv"  # a new file needs no flag
    r = lmd(home, *[a.replace(str(out), str(fresh)) for a in args])
    assert r.exit_code == 0 and fresh.stat().st_size > 0


def test_elo_ablation_consistent_out_refuses_to_overwrite(tmp_path, home, battles):
    out = tmp_path / "kept.csv"
    out.write_text("mine\n")
    r = lmd(home, "elo", "ablation", str(battles), "--consistent-out", str(out))
    assert r.exit_code == 1 and "kept.csv already exists" in r.stderr
    assert out.read_text() == "mine\n"
