"""SelectIT never passes off the neutral 3.0 as a rating: a whitespace first token is stepped
over, a sample the model will not rate is recorded as unrated with its reason, the run goes on
and finishes, and the summary, the file and POST /selectit say how each score came about. On
the stand-in backend (exact cases) and on the real model (both APIs, k=1 and k=5)."""

from __future__ import annotations

import json
import math
import re

import pytest

from tests.fake_backend import Reply
from tests.real_model import configure_real_home

from .conftest import alpaca, read_jsonl, run_cli, write_jsonl


def two_positions(first: str, second: dict[str, float]) -> Reply:
    """A space (or newline) first, the rating at the next position."""
    top = [(tok, math.log(p)) for tok, p in second.items()]
    best = max(second, key=second.get)
    return Reply(
        first + best,
        logprobs=[
            (first, math.log(0.9), [(first, math.log(0.9)), ("The", math.log(0.05))]),
            (best, math.log(second[best]), top),
        ],
    )


@pytest.mark.parametrize("api", ["completions", "chat"])
@pytest.mark.parametrize("blank", [" ", "\n", "\u0120"])
def test_a_whitespace_first_token_is_stepped_over(home, backend, tmp_path, api, blank):
    backend.handler = lambda body: two_positions(blank, {"5": 0.5, "4": 0.5})
    data = write_jsonl(tmp_path / "a.jsonl", alpaca(2))
    out = tmp_path / "s.jsonl"
    r = run_cli(home, data, "-o", out, "--api", api, "--k", 1)
    assert r.exit_code == 0, r.stderr
    assert [row["score"] for row in read_jsonl(out)] == [4.5, 4.5]  # not 3.0
    assert "0 measured, 2 bounded" in r.stderr and "0 unrated (no score)" in r.stderr


def test_end_of_sequence_first_is_unrated_and_the_k5_run_finishes(home, backend, tmp_path):
    """The model ends at once for one sample (an empty answer, no logprobs): that sample is
    unrated with its reason; the other samples are scored; a resume does not stop there."""

    def handler(body):
        prompt = body.get("prompt") or body["messages"][-1]["content"]
        if "Do task 2." in prompt:
            return Reply("", finish_reason="stop")  # EOS first: no token, no logprobs
        return Reply("5", logprobs=[("5", math.log(0.8), [("5", math.log(0.8)),
                                                         ("4", math.log(0.2))])])  # fmt: skip

    backend.handler = handler
    data = write_jsonl(tmp_path / "a.jsonl", alpaca(3))
    out = tmp_path / "s.jsonl"
    r = run_cli(home, data, "-o", out, "--k", 5)
    assert r.exit_code == 0, r.stderr
    rows = {row["id"]: row for row in read_jsonl(out)}
    assert rows[2]["score"] is None
    assert rows[2]["unrated"][0].startswith("the model ended its answer at once")
    assert len(rows[2]["unrated"]) == 5
    assert rows[1]["score"] == pytest.approx(4.8) and rows[3]["score"] == pytest.approx(4.8)
    assert "0 measured, 2 bounded" in r.stderr and "1 unrated (no score)" in r.stderr
    asked = len(backend.requests)
    again = run_cli(home, data, "-o", out, "--k", 5)  # resumes: nothing left to do
    assert again.exit_code == 0 and len(backend.requests) == asked


def test_a_run_the_model_rated_nothing_of_says_so_and_fails(home, backend, tmp_path):
    backend.handler = lambda body: Reply(
        "The", logprobs=[("The", math.log(0.9), [("The", math.log(0.9)), ("A", -3.0)])]
    )
    data = write_jsonl(tmp_path / "a.jsonl", alpaca(3))
    out = tmp_path / "s.jsonl"
    r = run_cli(home, data, "-o", out)
    assert r.exit_code == 1
    assert "The model rated none of the 3 samples" in r.stderr
    assert all(row["score"] is None for row in read_jsonl(out))  # kept, without a score


def test_the_route_counts_how_each_score_came_about(client, backend):
    def handler(body):
        if "Do task 2." in body["prompt"]:
            return Reply("", finish_reason="stop")
        return Reply("5", logprobs=[("5", math.log(0.8), [("5", math.log(0.8))])])

    backend.handler = handler
    r = client.post("/selectit", json={"records": alpaca(3), "k": 1})
    body = r.json()
    assert r.status_code == 200, r.text
    assert (body["measured"], body["bounded"], body["unrated"]) == (0, 2, 1)
    assert body["results"][1]["score"] is None and body["results"][1]["unrated"]


@pytest.fixture(scope="module")
def real_home(real_model, tmp_path_factory):
    home = configure_real_home(tmp_path_factory.mktemp("selectit") / "h", real_model)
    return home


@pytest.mark.slow
@pytest.mark.parametrize(("api", "k"), [("completions", 1), ("chat", 1), ("completions", 5)])
def test_the_real_model_on_both_apis(real_home, real_model, tmp_path, monkeypatch, api, k):
    """Every row is a measured or bounded score in 1-5, or unrated with a reason; never the
    neutral 3.0 for a prompt the model did not rate; the summary's counts add up."""
    monkeypatch.setenv("OPENAI_API_KEY", real_model.key)
    records = [
        {"instruction": "Name a colour.", "output": "Blue."},
        {"instruction": "Add 2 and 2.", "output": "4"},
        {"instruction": "Say hi.", "output": ""},  # missing output: the spec's 3.0
    ]
    data = write_jsonl(tmp_path / "a.jsonl", records)
    out = tmp_path / "s.jsonl"
    r = run_cli(real_home, data, "-o", out, "--api", api, "--k", k, "--details")
    rows = read_jsonl(out)
    assert len(rows) == 3
    for row in rows[:2]:
        if row["score"] is None:
            assert row["unrated"] and r.exit_code in (0, 1)
        else:
            assert 1.0 <= row["score"] <= 5.0 and r.exit_code == 0, r.stderr
            assert len(row["token_scores"]) == k
    assert rows[2]["score"] == 3.0 and rows[2].get("missing_fields")
    found = re.search(
        r"of the scores (\d+) measured, (\d+) bounded .*?, (\d+) from fewer prompts .*? and "
        r"(\d+) unrated \(no score\)",
        r.stderr,
    )
    assert found, r.stderr
    assert sum(map(int, found.groups())) == 2  # every rated-or-not sample is accounted for
    print(api, k, json.dumps([row["score"] for row in rows]))
