"""The judge's verdict under a JSON schema where the server has one (the seed's text format
everywhere else), on the stand-in backend and on the real model."""

from __future__ import annotations

import json

import pytest

from plugins.elo.judge import VERDICT_SCHEMA, justification, parse_scores, verdict
from tests.real_model import configure_real_home

from .conftest import lmd, read_csv, write_csv


@pytest.mark.parametrize(
    ("response", "scores", "why"),
    [
        ('{"score_of_model_1": 1, "score_of_model_2": 0, "brief_explanation": "A is right."}',
         (1.0, 0.0), "A is right."),
        ('{"score_of_model_1": 0.5, "score_of_model_2": 0.5, "brief_explanation": "Same \\"x\\""',
         (0.5, 0.5), 'Same "x"'),  # cut at max_tokens: the scores still read
        ('{"score_of_model_1": 0.25, "score_of_model_2": 1, "brief_explanation": ""}', None, ""),
        ('{"brief_explanation": "no scores"}', None, "no scores"),
    ],
)  # fmt: skip
def test_a_verdict_held_to_the_schema_reads_by_name(response, scores, why):
    assert parse_scores(response) == scores
    assert justification(response) == why


def judge_one_file(tmp_path, home, rows, *flags):
    battles = write_csv(
        tmp_path / "battles.csv",
        ["question", "model_a", "model_b", "answer_a", "answer_b"],
        rows,
    )
    out = tmp_path / "judged.csv"
    result = lmd(home, "elo", "judge", str(battles), "-o", str(out), *flags)
    assert result.exit_code == 0, result.output
    return read_csv(out)


def test_a_server_with_schemas_gets_the_schema_and_the_seeds_prompt(tmp_path, home, backend):
    backend.capabilities.update(json_schema=True, schema_format="json_schema")
    backend.handler = lambda body: json.dumps(
        {"score_of_model_1": 0, "score_of_model_2": 1, "brief_explanation": "B is better."}
    )
    rows = judge_one_file(tmp_path, home, [["What is 2+2?", "m1", "m2", "5", "4"]], "--one-order")
    assert rows[0]["winner"] == "model_b" and rows[0]["is_valid"] == "true"
    assert rows[0]["gpt_4_justification"] == "B is better."
    sent = backend.chat_requests[-1]
    assert sent["response_format"]["json_schema"]["schema"] == VERDICT_SCHEMA
    assert "Score of Model 1: <score>" in sent["messages"][0]["content"]  # the seed's prompt


def test_a_text_only_server_keeps_the_seeds_format(tmp_path, home, backend):
    backend.handler = lambda body: "Score of Model 1: 1\nScore of Model 2: 0\nBrief Explanation: A."
    rows = judge_one_file(tmp_path, home, [["What is 2+2?", "m1", "m2", "4", "5"]])
    assert verdict(rows[0]["gpt_4_response"])[0] == "model_a"
    assert "response_format" not in backend.chat_requests[-1]


@pytest.mark.slow
def test_the_real_model_gives_a_usable_verdict_for_every_battle(real_model, tmp_path, monkeypatch):
    home = configure_real_home(tmp_path / "h", real_model)
    monkeypatch.setenv("OPENAI_API_KEY", real_model.key)
    rows = judge_one_file(
        tmp_path,
        home,
        [
            ["What is 2+2?", "m1", "m2", "4", "5"],
            ["Name a fruit.", "m1", "m3", "An apple.", "A car."],
            ["Say hi.", "m2", "m3", "Hi!", "Hello there!"],
        ],
        "--one-order",  # both orders on this model: test_judge_checks' real-model test
    )
    assert len(rows) == 3
    for row in rows:  # well formed; whether the tiny judge is right is not tested
        assert row["is_valid"] == "true", row["gpt_4_response"]
        assert row["winner"] in ("model_a", "model_b", "tie", "tie (bothbad)")
