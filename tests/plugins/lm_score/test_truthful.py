"""LM_SCORE never passes off an echo, a range or a negation as a score; --no-cache stores the
fresh score; a server that ignores the assistant prefill is detected, not blamed on the model."""

from __future__ import annotations

import sqlite3

import pytest

from plugins.lm_score.parse import parse_score
from plugins.lm_score.scorer import NoScore
from tests.daemons import lmd_in_process
from tests.fake_backend import Reply

from .conftest import run_score

# What a real SmolLM2-135M-Instruct answered on llama-cpp-python, and what lmd made of it
# before: every one of them looked like a score and was not.
REAL_NON_ANSWERS = [
    "No, 7-9 is definitely not a score to provide.",  # was 7
    "The score is 7-9.",  # was 7
    "A score of 0 to 15 is not a possible answer.",  # was 0
    "- 10 = strongly yes, definitely true",  # the rubric, echoed: was 10
    "10 = strongly yes, definitely true\n7-9 = probably yes, likely true",
    "It is not 7.",
    "The score is between 3 and 5.",
    "Score: 12",
]


@pytest.mark.parametrize("reply", REAL_NON_ANSWERS)
def test_echoes_ranges_and_negations_are_no_score(reply):
    assert parse_score(reply) is None


@pytest.mark.parametrize(
    ("reply", "score"),
    [
        ("7", 7),
        ("Score: 8", 8),
        ("**9**", 9),
        ("I'd say 6/10.", 6),
        ("No, the score is 2.", 2),  # "No" answers the question; the score stands
        ("Score: 9\n- 10 = strongly yes, definitely true", 9),  # the echo is not the answer
        ("It is not 7, it is 3.", 3),
        ('{"score": 4}', 4),  # a constrained answer (a JSON schema)
    ],
)
def test_real_answers_still_parse(reply, score):
    assert parse_score(reply) == score


def test_an_echo_is_retried_then_reported_never_scored(backend):
    backend.queue("- 10 = strongly yes, definitely true", "The score is 7-9.")
    with pytest.raises(NoScore) as e:
        run_score(backend, ["an email", "Is it about billing?"])
    assert "did not answer with a score from 0 to 10" in e.value.message
    assert e.value.detail["raw"] == ["The score is 7-9."]  # the retry's words are reported
    assert len(backend.chat_requests) == 2  # asked once more, then reported


def test_the_sql_function_selects_no_row_on_an_echo(backend, home, tmp_path):
    db = tmp_path / "mail.db"
    with sqlite3.connect(db) as conn:
        conn.execute("CREATE TABLE emails (body TEXT)")
        conn.executemany("INSERT INTO emails VALUES (?)", [("meet at 3",), ("meet at 4",)])
    backend.handler = lambda body: Reply("- 10 = strongly yes, definitely true")
    query = "SELECT body FROM emails WHERE LM_SCORE(body, 'Is the meeting at 3:00?') >= 7"
    ran = lmd_in_process("sql", str(db), query, "--json", "--home", str(home), "--no-dotenv")
    assert ran.returncode == 1, ran.stderr  # scores failed: said, never passed off as data
    assert ran.stdout.strip() == "[]"  # no row is selected because of an echo
    assert "did not answer with a score" in ran.stderr


@pytest.mark.parametrize("command", ["score", "sql"])
def test_no_cache_stores_the_fresh_score(backend, home, tmp_path, command):
    db = tmp_path / "t.db"
    with sqlite3.connect(db) as conn:
        conn.execute("CREATE TABLE t (body TEXT)")
        conn.execute("INSERT INTO t VALUES ('an invoice')")

    def run(*flags: str) -> str:
        if command == "score":
            args = ["score", "an invoice", "Is it an invoice?"]
        else:
            args = ["sql", str(db), "SELECT LM_SCORE(body, 'Is it an invoice?') FROM t"]
        ran = lmd_in_process(*args, *flags, "--home", str(home), "--no-dotenv")
        assert ran.returncode == 0, ran.stderr
        return ran.stdout.strip()

    backend.queue("7")
    assert run().endswith("7")
    backend.queue("3")
    assert run("--no-cache").endswith("3")  # asked again
    asked = len(backend.chat_requests)
    assert run().endswith("3")  # the fresh score was stored
    assert len(backend.chat_requests) == asked


def test_a_server_that_ignores_the_prefill_is_detected(backend):
    backend.capabilities["prefill"] = False
    backend.queue("8")
    result, _ = run_score(
        backend, ["an email", "Is it spam?"], thinking=False, thinking_strategy="prefill"
    )
    assert result.score == 8
    assert "server ignores continue_final_message" in result.fallback
    sent = backend.chat_requests[-1]
    assert [m["role"] for m in sent["messages"]] == ["user"]  # no prefill sent
    assert "continue_final_message" not in sent
    # with "both", the template kwargs still go
    backend.queue("8")
    run_score(backend, ["an email", "Is it spam?"], thinking=False, thinking_strategy="both")
    assert backend.chat_requests[-1]["chat_template_kwargs"] == {"enable_thinking": False}
    assert [m["role"] for m in backend.chat_requests[-1]["messages"]] == ["user"]


def test_no_score_names_the_missing_server_feature_not_the_model(backend):
    backend.capabilities["prefill"] = False
    backend.queue("<think>hmm", "<think>still")
    with pytest.raises(NoScore) as e:
        run_score(backend, ["an email", "Is it spam?"], thinking=False, thinking_strategy="prefill")
    said = e.value.message
    assert "does not honour continue_final_message" in said and "rephrase" not in said


def test_a_server_that_honours_the_prefill_gets_it(backend):
    backend.queue("8")
    run_score(backend, ["an email", "Is it spam?"], thinking=False, thinking_strategy="prefill")
    sent = backend.chat_requests[-1]
    assert sent["messages"][-1]["role"] == "assistant" and sent["continue_final_message"]


def test_a_server_with_schemas_is_asked_for_the_score_under_one(backend):
    from plugins.lm_score.scorer import SCORE_SCHEMA

    from .conftest import GOLDEN_INVOICE_PROMPT

    backend.capabilities.update(json_schema=True, schema_format="json_object")
    backend.queue('{"score": 9}')
    parts = ["Weekly invoice 12/12/2022", "$14,000", "Is my invoice greater than $5,000?"]
    result, _ = run_score(backend, parts)
    assert result.score == 9 and result.raw == ['{"score": 9}']
    sent = backend.chat_requests[-1]
    assert sent["response_format"] == {"type": "json_object", "schema": SCORE_SCHEMA}
    assert sent["messages"] == [{"role": "user", "content": GOLDEN_INVOICE_PROMPT}]  # verbatim
    assert sent["max_tokens"] >= 16


def test_openais_shape_and_a_refusal_that_falls_back_to_words(backend):
    backend.capabilities.update(json_schema=True, schema_format="json_schema")
    backend.queue(Reply("response_format is not supported", status=400), "7", "6")

    async def go():
        from plugins.lm_score.scorer import Scorer

        from .conftest import config

        scorer = Scorer(config(backend))
        try:
            first = await scorer.score(["a", "Is it?"])
            second = await scorer.score(["b", "Is it?"])
            return first, second
        finally:
            await scorer.close()

    import asyncio

    first, second = asyncio.run(go())
    assert (first.score, second.score) == (7, 6)
    bodies = backend.chat_requests
    assert bodies[0]["response_format"]["type"] == "json_schema"
    assert "response_format" not in bodies[1] and "response_format" not in bodies[2]  # kept


def test_lm_score_constrain_false_asks_in_words(backend):
    backend.capabilities.update(json_schema=True, schema_format="json_object")
    backend.queue("5")
    run_score(backend, ["a", "Is it?"], constrain=False)
    assert "response_format" not in backend.chat_requests[-1]
