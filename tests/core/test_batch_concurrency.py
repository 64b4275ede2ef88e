"""Batch jobs use the parallelism the backend has (daemon.api.batch_concurrency): LM_SCORE's
rows and ensemble members, SelectIT's samples, the arena's answers and verdicts keep several
requests in flight at once, as many as the backend serves (4 until the probe learns the
server's slots; the batch_concurrency setting overrides), with the same results in the same
order as one at a time.

The stand-in holds each request until as many as expected are in flight together (or all of
them have come), so the count it saw at once is what lmd sent, on a busy machine too."""

from __future__ import annotations

import json
import math
import re
import threading

import pytest

from daemon.backends.concurrency import DEFAULT_CONCURRENCY as UNLEARNT
from tests.daemons import configure, lmd_in_process
from tests.fake_backend import Reply

ROWS = 10


def holding(backend, together: int, total: int, reply):
    """A handler answering `reply(body)` once `together` requests are in flight at once, or
    all `total` have come (the last wave may be smaller)."""
    cond = threading.Condition()
    seen = [0]

    def handler(body):
        with cond:
            seen[0] += 1
            cond.notify_all()
            cond.wait_for(lambda: backend.active >= together or seen[0] >= total, timeout=60)
        return reply(body)

    return handler


def by_row(body) -> Reply:
    """A score that depends on the row: row 3 -> 3, row 12 -> 2."""
    prompt = body["messages"][0]["content"]
    return Reply(str(int(re.search(r"row (\d+)", prompt)[1]) % 10))


def rows_db(tmp_path):
    import sqlite3

    path = tmp_path / "rows.db"
    with sqlite3.connect(path) as db:
        db.execute("CREATE TABLE t (id INTEGER PRIMARY KEY, body TEXT)")
        db.executemany("INSERT INTO t (body) VALUES (?)", [(f"row {i}",) for i in range(ROWS)])
    return path


QUERY = "SELECT id, LM_SCORE(body, 'Is it a row?') AS s FROM t ORDER BY id"


def test_lm_score_rows_go_out_as_many_at_once_as_the_backend_serves(backend, home, tmp_path):
    db = rows_db(tmp_path)
    backend.handler = holding(backend, UNLEARNT, ROWS, by_row)
    ran = lmd_in_process("sql", str(db), QUERY, "--json", "--no-cache", "--home", str(home))
    assert ran.returncode == 0, ran.stderr
    assert backend.max_active == UNLEARNT  # not one at a time, not all ten
    together = json.loads(ran.stdout)
    # one at a time: the same scores, in the same order
    configure(home, batch_concurrency=1)
    backend.reset()
    backend.handler = by_row
    ran = lmd_in_process("sql", str(db), QUERY, "--json", "--no-cache", "--home", str(home))
    assert backend.max_active == 1
    assert json.loads(ran.stdout) == together == [{"id": i + 1, "s": i % 10} for i in range(ROWS)]


def test_the_batch_concurrency_setting_and_lm_score_concurrency_set_the_number(
    backend, home, tmp_path
):
    db = rows_db(tmp_path)
    for settings, expected in (({"batch_concurrency": 2}, 2), ({"lm_score_concurrency": 3}, 3)):
        configure(home, **settings)
        backend.reset()
        backend.handler = holding(backend, expected, ROWS, by_row)
        ran = lmd_in_process("sql", str(db), QUERY, "--no-cache", "--home", str(home))
        assert ran.returncode == 0, ran.stderr
        assert backend.max_active == expected


def test_an_ensemble_larger_than_the_slots_still_scores(backend, home):
    """n=5 on a server with fewer slots is refused (a 4-slot llama.cpp server answers 400):
    the members go out one request each, four at once, and the JSON schema stays."""
    configure(home, lm_score_ensemble=True, lm_score_ensemble_size=5)
    backend.capabilities = {**backend.capabilities, "json_schema": True}
    backend.reject_n = True
    scores = iter([7, 8, 7, 9, 7])
    lock = threading.Lock()

    def member(body):
        with lock:
            return Reply(json.dumps({"score": next(scores)}))

    backend.handler = holding(backend, UNLEARNT, 5, member)  # the refused n=5 never gets here
    ran = lmd_in_process("score", "x", "Is it?", "--json", "--no-cache", "--home", str(home))
    assert ran.returncode == 0, ran.stderr
    result = json.loads(ran.stdout)
    assert (result["score"], result["members"], sorted(result["scores"])) == (7, 5, [7, 7, 7, 8, 9])
    bodies = backend.chat_requests
    assert bodies[0]["n"] == 5 and all("n" not in b for b in bodies[1:])
    assert all("response_format" in b for b in bodies)  # the n refusal is not the schema's
    assert backend.max_active == UNLEARNT


def rating(body) -> Reply:
    """SelectIT's rating: task i rates i % 5 + 1 with probability 0.96, the others 0.01."""
    value = int(re.search(r"Do task (\d+)\.", body["prompt"])[1]) % 5 + 1
    top = [(str(r), math.log(0.96 if r == value else 0.01)) for r in range(1, 6)]
    return Reply(str(value), logprobs=[(str(value), math.log(0.96), top)])


def test_selectit_rates_several_samples_at_once_and_keeps_their_order(backend, home, tmp_path):
    data = tmp_path / "data.jsonl"
    records = [{"instruction": f"Do task {i}.", "output": f"Done {i}."} for i in range(ROWS)]
    data.write_text("".join(json.dumps(r) + "\n" for r in records))
    backend.handler = holding(backend, UNLEARNT, ROWS, rating)
    out = tmp_path / "scores.jsonl"
    ran = lmd_in_process("selectit", str(data), "-o", str(out), "--home", str(home))
    assert ran.returncode == 0, ran.stderr
    assert backend.max_active == UNLEARNT
    scored = [json.loads(line) for line in out.read_text().splitlines()]
    assert [s["id"] for s in scored] == list(range(1, ROWS + 1))  # the dataset's order
    expected = [0.96 * (i % 5 + 1) + 0.01 * (15 - (i % 5 + 1)) for i in range(ROWS)]
    assert [s["score"] for s in scored] == pytest.approx(expected)


def test_the_arena_answers_and_judges_several_at_once(backend, home, tmp_path):
    questions = tmp_path / "questions.csv"
    questions.write_text("question\n" + "".join(f"Question {i}?\n" for i in range(6)))
    qa = tmp_path / "qa.csv"
    answer = lambda body: Reply("Answer to " + body["messages"][-1]["content"])  # noqa: E731
    backend.handler = holding(backend, UNLEARNT, 6, answer)
    ran = lmd_in_process("elo", "answer", str(questions), "-m", "fake-model", "-o", str(qa),
                         "--home", str(home))  # fmt: skip
    assert ran.returncode == 0, ran.stderr
    assert backend.max_active == UNLEARNT
    text = qa.read_text()
    assert all(f"Answer to Question {i}?" in text for i in range(6))
    # a second model's answers, then every pair judged in both orders: 12 verdicts
    backend.reset()
    backend.handler = lambda body: Reply("Other " + body["messages"][-1]["content"])
    ran = lmd_in_process("elo", "answer", str(qa), "-m", "other", "-o", str(qa),
                         "--home", str(home))  # fmt: skip
    assert ran.returncode == 0, ran.stderr
    battles = tmp_path / "battles.csv"
    lmd_in_process("elo", "arrange", str(qa), "-o", str(battles))
    backend.reset()
    verdict = "Score of Model 1: 1\nScore of Model 2: 0\nBrief Explanation: first."
    backend.handler = holding(backend, UNLEARNT, 12, lambda body: Reply(verdict))
    judged = tmp_path / "judged.csv"
    ran = lmd_in_process("elo", "judge", str(battles), "--qa", str(qa), "-o", str(judged),
                         "--home", str(home))  # fmt: skip
    assert ran.returncode == 0, ran.stderr
    assert backend.max_active == UNLEARNT
    assert "judged 6 battles in both orders (12 verdicts) (0 without a usable verdict)" in (
        ran.stderr
    )
