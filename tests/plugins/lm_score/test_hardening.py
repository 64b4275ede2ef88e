"""The LM_SCORE score parser fuzzed, and its benchmark CSV never clobbers a file."""

from __future__ import annotations

import re
import subprocess
import sys
import unicodedata

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from plugins.lm_score.parse import parse_score
from tests.daemons import ROOT

FUZZ = settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])


# A negation before a number makes it no score ("not a 7"): noise holds none (hypothesis once
# drew "NOT" before "I give it 0", which the parser rightly read as no score).
NEGATION = re.compile(r"\b(?:not|never|isn't|isnt|wasn't|can't|cannot|won't)\b", re.I)

PLAIN = st.text(
    alphabet=st.characters(blacklist_categories=("Nd", "No", "Cs")), max_size=60
).filter(
    lambda t: (
        "<think" not in t.lower()
        and "</think" not in t.lower()
        # "㏠" is a symbol, but NFKC (which the parser applies) turns it into "1日"
        and not any(c.isdigit() for c in unicodedata.normalize("NFKC", t))
        and not NEGATION.search(unicodedata.normalize("NFKC", t))
    )
)


@FUZZ
@given(st.text(max_size=300))
@example("<think>7</think>")
@example("score: 11")
@example("Score: 1e-05")  # regression: read as 1
@example("９/10")  # a full-width digit: NFKC makes it 9
def test_score_parser_never_raises_and_never_invents(reply):
    """Any text: None or an int 0-10 that is literally written in the (NFKC) reply."""
    score = parse_score(reply)
    assert score is None or (isinstance(score, int) and 0 <= score <= 10)
    if score is not None:
        digits = re.findall(r"\d+(?:\.\d+)?", unicodedata.normalize("NFKC", reply))
        near = {int(float(d) + 0.5) for d in digits if float(d) <= 10}
        assert score in near, (reply, score)


@FUZZ
@given(st.text(max_size=300))
@example('{"score": 7}')
@example("<think>3</think> Score: 8")
@example("Not 7, but 6")
def test_the_score_is_found_where_it_is_written(reply):
    """find_score (what the logprob method reads its token by) points at the very number
    parse_score read: the text there is that number."""
    from plugins.lm_score.parse import find_score

    text = unicodedata.normalize("NFKC", reply)
    found = find_score(text)
    assert (found[0] if found else None) == parse_score(reply)
    if found is not None and found[1] >= 0:
        value, start, end = found
        assert int(float(text[start:end]) + 0.5) == value, (reply, found)


@FUZZ
@given(
    st.integers(0, 10),
    st.sampled_from(
        [
            "{n}",
            "**{n}**",
            "{n}.",
            "Score: {n}",
            "score = {n}",
            "{n}/10",
            "{n} out of 10",
            "I give it {n}",
            "The score is {n}.",
        ]
    ),
    PLAIN,
)
def test_one_clean_number_is_read_as_written(n, shape, noise):
    """A reply with exactly one integer 0-10 (in any of the shapes models use) is read as it."""
    reply = (
        shape.format(n=n) if shape.startswith(("{n}", "**")) else noise + " " + shape.format(n=n)
    )
    assert parse_score(reply) == n, reply


@FUZZ
@given(st.integers(11, 999), PLAIN)
def test_a_number_out_of_range_is_no_score(n, noise):
    assert parse_score(f"{noise} Score: {n}") is None


@pytest.mark.parametrize("reply", ["Score: 1e-05", "5e1", "score is 2E+1"])
def test_score_in_exponent_form_is_no_score(reply):
    """Regression: the digits before the exponent were read ("1e-05" -> 1)."""
    assert parse_score(reply) is None


@FUZZ
@given(st.integers(0, 10), st.text(max_size=80).filter(lambda t: "think>" not in t.lower()))
def test_thinking_never_gives_the_score(n, thought):
    """A number only inside an unfinished <think> is not an answer; after </think> it is."""
    assert parse_score(f"<think>{thought} score: {n}") is None
    if not re.search(r"\d", unicodedata.normalize("NFKC", thought)):
        assert parse_score(f"<think>{thought} 3</think>\n{n}") == n


def test_lm_score_bench_csv_refuses_to_overwrite(tmp_path):
    out = tmp_path / "scores.csv"
    out.write_text("table,id\nold,1\n")
    cmd = [sys.executable, str(ROOT / "benchmarks" / "bench_lm_score.py"), "--company", "--fake"]
    r = subprocess.run([*cmd, "--csv", str(out)], capture_output=True, text=True, timeout=30)
    assert r.returncode == 2
    assert "scores.csv already exists; give another --csv, or add --force" in r.stderr
    assert out.read_text() == "table,id\nold,1\n"


def test_a_reply_that_only_starts_with_a_brace_is_read_as_words():
    """Hypothesis found "{ Score: 0" read as no score: only real JSON takes the JSON path."""
    assert parse_score("{ Score: 0") == 0
    assert parse_score('{"score": 7}') == 7
    assert parse_score('{"score": "seven"}') is None
