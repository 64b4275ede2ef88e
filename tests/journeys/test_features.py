"""The seed's features from the command line, with the daemon running on the embedded model:
LM_SCORE (alone, over HTTP, in SQL), SelectIT and the Elo arena on the shipped samples."""

from __future__ import annotations

import csv
import io
import json
import math
import re
import sqlite3

import pytest

from tests.daemons import ROOT

from .conftest import ALIAS, engine_processes, journey
from .test_first_run import names_the_embedded_backend, only_loopback

pytestmark = pytest.mark.slow  # the journeys tier: real daemons on the embedded model

SCORE = re.compile(r"(10|[0-9])")


def shipped(*patterns: str):
    """A sample file of the examples/ folder (issue 36 item 12: the docs' examples use them):
    the first that one of the patterns finds."""
    for pattern in patterns:
        found = sorted((ROOT / "examples").glob(pattern))
        if found:
            return found[0]
    raise AssertionError(f"no examples/{' or '.join(patterns)} ships with lmd")


@journey()
def test_score_through_the_running_daemon(person):
    """With the daemon running, `lmd score` uses its embedded model (no second model server,
    no hosted API); the daemon's own LM_SCORE reply and the cache name the model that
    answered; the same question again is a cache hit for that model."""
    calls = person.calls()
    ask = ["The invoice is for a laptop.", "Is this about a computer?"]
    ran = person.lmd("score", *ask)
    assert ran.returncode == 0, ran.stderr
    assert SCORE.fullmatch(ran.stdout.strip().splitlines()[-1]), ran.stdout
    assert names_the_embedded_backend(ran), ran
    only_loopback(calls.read())
    assert calls.chats() and {c["body"]["model"] for c in calls.chats()} == {ALIAS}
    assert engine_processes(person) == person.daemon.model_servers()  # no second server
    status, body = person.http("POST", "/lm_score", {"contents": ask[:1], "question": ask[1]})
    assert status == 200 and body["model"] == ALIAS, body
    ran = person.lmd("score", "--json", *ask)
    assert ran.returncode == 0, ran.stderr
    again = json.loads(ran.stdout)
    assert again["cached"] is True and again["model"] == ALIAS, again
    with person.db() as conn:
        models = {json.loads(r)["model"] for (r,) in conn.execute(
            "SELECT result FROM lm_score_cache")}  # fmt: skip
    assert models == {ALIAS}


@journey()
def test_sql_over_a_table_reports_every_row(person):
    """`lmd sql` with LM_SCORE over the user's table: every row scored by the embedded model,
    or a non-zero exit with one sentence counting the rows that were not, and `--errors`
    naming them; never exit 0 with a column that looks like data."""
    shop = person.mkdir("sql") / "shop.db"
    with sqlite3.connect(shop) as conn:
        conn.execute("CREATE TABLE invoices (id INTEGER PRIMARY KEY, product TEXT)")
        rows = [("laptop",), ("pears",), ("GPU server",)]
        conn.executemany("INSERT INTO invoices (product) VALUES (?)", rows)
    person.own(shop)
    calls = person.calls()
    query = "SELECT id, LM_SCORE(product, 'Is this a computer product?') AS s FROM invoices"
    ran = person.lmd("sql", shop, query, "--csv")
    only_loopback(calls.read())
    assert "id,s" in ran.stdout, ran
    table = list(csv.DictReader(io.StringIO(ran.stdout[ran.stdout.index("id,s") :])))
    assert [r["id"] for r in table] == ["1", "2", "3"], ran
    failed = [r["id"] for r in table if not SCORE.fullmatch(r["s"])]
    if not failed:
        assert ran.returncode == 0, ran
    else:
        assert ran.returncode != 0, ran
        assert re.search(rf"\b{len(failed)}\b", ran.stderr.strip().splitlines()[-1]), ran.stderr
        ran = person.lmd("sql", shop, query, "--csv", "--errors")
        for row in failed:
            assert re.search(rf"\b{row}\b", ran.stderr), ran.stderr


@journey()
def test_selectit_on_the_shipped_sample(person):
    """`lmd selectit` on (the first records of) the shipped Alpaca sample: scored through
    the embedded model's logprobs, one line per record; run again, it resumes (no model
    call)."""
    lines = shipped("alpaca*.jsonl", "*.jsonl").read_text().splitlines()[:3]
    data = person.write(person.base / "work" / "alpaca-3.jsonl", "\n".join(lines) + "\n")
    out = data.with_name("scores.jsonl")
    calls = person.calls()
    ran = person.lmd("selectit", data, "-o", out, "--no-progress")
    assert ran.returncode == 0, ran.stderr
    only_loopback(calls.read())
    made = calls.chats()
    assert made and all(c["status"] == 200 for c in made)
    assert all(c["body"].get("logprobs") for c in made)
    scores = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(scores) == 3 and all(math.isfinite(s["score"]) for s in scores), scores
    again = person.calls()
    assert person.lmd("selectit", data, "-o", out, "--no-progress").returncode == 0
    assert again.chats() == []  # resumed: every record was scored


@journey()
def test_elo_answer_judge_and_leaderboard_on_the_shipped_sample(person):
    """The Elo arena's flow for the embedded model (docs/elo.md) on (the first question of)
    the shipped Q&A sample: one hand-written answer column and the embedded model's own
    answer, arranged, judged and rated; every answer and verdict the model gives comes from
    the embedded model, which answers only under its own name. One battle: each verdict is
    up to 256 tokens of the one-thread model, and the flow is the same for six. The model's
    answer is narrowed to one sentence: `elo answer` sets no length, and the tiny model once
    wrote 2,011 tokens, a judge's prompt its 2,048-token context cannot hold."""
    with shipped("qa.csv").open(newline="") as f:
        header, first = list(csv.reader(f))[:2]  # the first question
    column = header.index("sample-brief")
    text = io.StringIO()
    csv.writer(text).writerows([[header[0], header[column]], [first[0], first[column]]])
    work = person.base / "work" / "elo"
    qa_file = person.write(work / "qa.csv", text.getvalue())
    answer = "The capital of France is Paris."
    # the rule matches the judge's request too, which has a schema: that one the model writes
    person.steer((first[0], {"text": answer}))
    calls = person.calls()
    refused = person.lmd("elo", "answer", qa_file, "-m", "gpt-4", "-o", qa_file)
    assert refused.returncode == 1 and refused.stderr.count("\n") == 1, refused
    model = "smollm2-135m-instruct"
    ran = person.lmd("elo", "answer", qa_file, "-m", model, "-o", qa_file)
    assert ran.returncode == 0, ran.stderr
    qa = list(csv.DictReader(qa_file.open()))
    assert len(qa) == 1 and qa[0][model] == answer, qa
    asked = [c for c in calls.chats() if not c["body"].get("response_format")]
    assert asked and all(c["steered"] for c in asked), asked
    ran = person.lmd("elo", "arrange", qa_file, "-o", work / "battles.csv")
    assert ran.returncode == 0, ran.stderr
    ran = person.lmd("elo", "judge", work / "battles.csv", "--qa", qa_file,
                     "-o", work / "judged.csv", "--one-order")  # fmt: skip
    only_loopback(calls.read())
    judged = list(csv.DictReader((work / "judged.csv").open()))
    assert len(judged) == 1, (ran, judged)  # two answers to the question: one pair
    assert {judged[0]["model_a"], judged[0]["model_b"]} == {"sample-brief", model}, judged
    winners = {"model_a", "model_b", "tie", "tie (bothbad)"}
    assert all(r["winner"] in winners for r in judged), judged
    if ran.returncode != 0:  # a verdict the judge could not give: counted in one sentence
        invalid = [r for r in judged if r["is_valid"] not in ("True", "true", "1")]
        assert invalid and re.search(rf"\b{len(invalid)}\b", ran.stderr), ran.stderr
    ran = person.lmd("elo", "leaderboard", work / "judged.csv")
    assert ran.returncode == 0 or ran.stderr.strip().count("\n") == 0, ran
    assert len(calls.chats()) >= 1 + 1  # the answer, the verdict (and any asked again)
