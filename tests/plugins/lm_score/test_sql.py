"""LM_SCORE in SQL: register_lm_score, the collect-then-score strategy, `lmd sql` and
`lmd score`, on a generated database and on a copy of the original company.db."""

from __future__ import annotations

import csv
import io
import json
import logging
import shutil
import sqlite3

import pytest
from click.testing import CliRunner

from daemon.cli import cli
from plugins.lm_score.scorer import Scorer
from plugins.lm_score.sql import ScoreFailures, SqlScorer, register_lm_score
from tests.daemons import SHARED, configure
from tests.fake_backend import Reply

from .conftest import config

COMPANY_DB = SHARED / "data" / "lm_score" / "company.db"


def make_db(path, rows: int = 20):
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE items (id INTEGER PRIMARY KEY, name TEXT, kind TEXT, price REAL)")
    conn.executemany(
        "INSERT INTO items (name, kind, price) VALUES (?, ?, ?)",
        [(f"item {i}", "software" if i % 2 else "hardware", 10.0 * i) for i in range(rows)],
    )
    conn.commit()
    conn.close()
    return path


def software_judge(body):
    """10 for software items, 2 otherwise, from the prompt the backend receives."""
    prompt = body["messages"][0]["content"]
    if "Is it expensive?" in prompt:
        return Reply("9" if "190.0" in prompt else "1")
    return Reply("10" if "\nsoftware\n" in prompt else "2")


def prompts(backend):
    return [b["messages"][0]["content"] for b in backend.chat_requests]


@pytest.fixture
def db(tmp_path):
    return make_db(tmp_path / "items.db")


def sql_scorer(backend, **kw):
    return SqlScorer(Scorer(config(backend, **kw)))


def test_collect_then_score_runs_the_calls_concurrently(backend, db):
    backend.handler = software_judge
    backend.latency = 0.05
    handle = sql_scorer(backend, concurrency=8)
    conn = sqlite3.connect(db)
    columns, rows = handle.query(
        conn,
        "SELECT name FROM items WHERE LM_SCORE(name, kind, 'Is it software?') >= 7 ORDER BY id",
    )
    handle.close()
    assert columns == ["name"]
    assert [r[0] for r in rows] == [f"item {i}" for i in range(1, 20, 2)]
    assert len(backend.chat_requests) == 20  # each distinct tuple once
    assert len(set(prompts(backend))) == 20
    assert 2 <= backend.max_active <= 8


def test_waves_find_scores_only_needed_after_other_scores(backend, db):
    backend.handler = software_judge
    handle = sql_scorer(backend)
    conn = sqlite3.connect(db)
    _, rows = handle.query(
        conn,
        "SELECT id, CASE WHEN LM_SCORE(name, kind, 'Is it software?') > 5 "
        "THEN LM_SCORE(price, 'Is it expensive?') END FROM items ORDER BY id",
    )
    handle.close()
    assert rows[19] == (20, 9) and rows[1] == (2, 1) and rows[0] == (1, None)
    assert len(backend.chat_requests) == 30  # 20 + the 10 software prices; nothing twice


def test_an_update_is_applied_once(backend, db):
    backend.handler = software_judge
    handle = sql_scorer(backend)
    conn = sqlite3.connect(db, isolation_level=None)
    conn.execute("ALTER TABLE items ADD COLUMN score INTEGER")
    handle.query(conn, "UPDATE items SET score = LM_SCORE(name, kind, 'Is it software?')")
    handle.close()
    scores = [r[0] for r in conn.execute("SELECT score FROM items ORDER BY id")]
    assert scores == [2, 10] * 10
    assert len(backend.chat_requests) == 20


def test_register_lm_score_works_row_by_row_on_any_connection(backend, db):
    backend.handler = software_judge
    conn = sqlite3.connect(db)
    handle = register_lm_score(conn, Scorer(config(backend)))
    value = conn.execute("SELECT LM_SCORE('item 1', 'software', 'Is it software?')").fetchone()
    assert value == (10,)
    assert conn.execute("SELECT lm_score(name, kind, 'Is it software?') FROM items").fetchall()
    handle.close()
    assert len(backend.chat_requests) == 20  # the first tuple was known already


def test_a_failed_score_is_reported_with_the_rows_never_as_data(backend, db, caplog):
    backend.handler = lambda body: (
        Reply("I cannot answer") if "item 3\n" in body["messages"][0]["content"] else Reply("7")
    )
    handle = sql_scorer(backend)
    conn = sqlite3.connect(db)
    with caplog.at_level(logging.INFO, logger="lmd.lm_score"):
        with pytest.raises(ScoreFailures) as failed:
            handle.query(
                conn, "SELECT id, LM_SCORE(name, 'Is it?') FROM items WHERE id <= 5 ORDER BY id"
            )
    e = failed.value
    assert e.rows == [(1, 7), (2, 7), (3, 7), (4, None), (5, 7)]
    assert e.message == (
        "1 of 5 LM_SCORE values could not be scored; they are NULL in the result, and --errors "
        "lists them; the first: the model did not answer with a score from 0 to 10 (it said: "
        "'I cannot answer'); rephrase the question or try another model."
    )
    assert [args for args, _ in e.failures] == [("item 3", "Is it?")]
    assert "did not answer with a score" in e.failures[0][1]
    assert "is NULL: The model did not answer with a score" in caplog.text
    # the same handle asks the failed one again next time (a NULL is not remembered)
    backend.handler = lambda body: Reply("4")
    _, rows = handle.query(conn, "SELECT LM_SCORE(name, 'Is it?') FROM items WHERE id = 4")
    handle.close()
    assert rows == [(4,)]


def test_an_update_with_a_failed_score_changes_nothing(backend, db):
    backend.handler = lambda body: (
        Reply("no idea") if "item 3\n" in body["messages"][0]["content"] else Reply("7")
    )
    handle = sql_scorer(backend)
    conn = sqlite3.connect(db, isolation_level=None)
    conn.execute("ALTER TABLE items ADD COLUMN score INTEGER")
    with pytest.raises(ScoreFailures, match="the statement changed nothing"):
        handle.query(conn, "UPDATE items SET score = LM_SCORE(name, 'Is it?')")
    handle.close()
    assert conn.execute("SELECT count(*) FROM items WHERE score IS NOT NULL").fetchone() == (0,)
    assert not conn.in_transaction


def test_row_by_row_a_failed_score_fails_the_statement(backend, db):
    backend.handler = lambda body: Reply("no idea")
    conn = sqlite3.connect(db)
    handle = register_lm_score(conn, Scorer(config(backend)))
    with pytest.raises(sqlite3.OperationalError, match="user-defined function raised"):
        conn.execute("SELECT LM_SCORE('item 1', 'Is it?')").fetchall()
    handle.close()
    assert list(handle.failures.values())[0].startswith("The model did not answer with a score")


@pytest.mark.parametrize(
    "query, sentence",
    [
        ("SELEC name FROM items", "syntax error"),
        ("SELECT name FROM nowhere WHERE LM_SCORE(name, 'q?') > 5", "no table nowhere"),
        ("SELECT nope FROM items", "column that does not exist"),
        ("SELECT LM_SCORE('Is this a test?')", "at least two arguments"),
        ("SELECT LM_SCORE(name, '') FROM items", "question is empty"),
        ("SELECT LM_SCORE(name, 5) FROM items", "must be the question as text"),
        ("SELECT 1; SELECT 2", "one SQL statement at a time"),
    ],
)
def test_bad_queries_get_one_sentence(backend, db, query, sentence):
    from daemon.core.errors import LmdError

    handle = sql_scorer(backend)
    with pytest.raises(LmdError, match=sentence):
        handle.query(sqlite3.connect(db), query)
    handle.close()
    assert backend.requests == []


# -- the commands ------------------------------------------------------------------------
def lmd(*args):
    result = CliRunner().invoke(cli, [str(a) for a in args], catch_exceptions=False)
    return result


def test_lmd_sql_json_csv_and_cache(backend, db, home):
    backend.handler = software_judge
    query = "SELECT id, name FROM items WHERE LM_SCORE(name, kind, 'Is it software?') >= 7"
    out = lmd("sql", db, query, "--json", "--home", home)
    assert out.exit_code == 0, out.output
    data = json.loads(out.stdout)
    assert len(data) == 10 and data[0] == {"id": 2, "name": "item 1"}
    assert len(backend.chat_requests) == 20
    out = lmd("sql", db, query, "--csv", "--home", home)  # cached: no new calls
    assert list(csv.reader(io.StringIO(out.stdout)))[:2] == [["id", "name"], ["2", "item 1"]]
    assert len(backend.chat_requests) == 20
    out = lmd("sql", db, query, "--no-cache", "--home", home)
    assert out.stdout.splitlines()[:2] == ["id\tname", "2\titem 1"]
    assert len(backend.chat_requests) == 40


def test_lmd_sql_reports_bad_input(backend, db, home, tmp_path):
    out = lmd("sql", db, "SELECT * FROM missing", "--home", home)
    assert out.exit_code == 1 and "The database has no table missing" in out.stderr
    out = lmd("sql", tmp_path / "nope.db", "SELECT 1", "--home", home)
    assert out.exit_code == 1 and "There is no database file" in out.stderr
    out = lmd("sql", db, "SELECT 1", "--json", "--csv", "--home", home)
    assert out.exit_code == 1 and "Choose one of --json and --csv" in out.stderr
    assert not (tmp_path / "nope.db").exists()


def test_lmd_sql_says_how_many_scores_failed_and_exits_1(backend, db, home):
    backend.handler = lambda body: (
        Reply("no idea") if "item 1\n" in body["messages"][0]["content"] else Reply("8")
    )
    query = "SELECT id, LM_SCORE(name, 'Is it?') AS s FROM items WHERE id <= 3"
    out = lmd("sql", db, query, "--home", home)
    assert out.exit_code == 1
    assert out.stdout.splitlines() == ["id\ts", "1\t8", "2\tNULL", "3\t8"]
    last = out.stderr.splitlines()[-1]
    assert last.startswith(
        "1 of 3 LM_SCORE values could not be scored; they are NULL in the result, and --errors "
        "lists them; the first: the model did not answer"
    )
    assert "LM_SCORE('item 1'" not in out.stderr  # only on request
    out = lmd("sql", db, query, "--home", home, "--errors", "--json")
    assert out.exit_code == 1
    assert json.loads(out.stdout)[1] == {"id": 2, "s": None}
    listed = [line for line in out.stderr.splitlines() if line.startswith("LM_SCORE(")]
    assert listed == [
        "LM_SCORE('item 1', 'Is it?'): The model did not answer with a score from 0 to 10 "
        "(it said: 'no idea'); rephrase the question or try another model."
    ]


def test_lmd_sql_with_no_score_at_all_says_none_could_be(backend, db, home):
    configure(home, openai_chat_endpoint="http://127.0.0.1:9/v1", llm_max_retries=0)
    out = lmd("sql", db, "SELECT LM_SCORE(name, 'Is it?') FROM items LIMIT 2", "--home", home)
    assert out.exit_code == 1
    assert out.stdout.splitlines() == ["LM_SCORE(name, 'Is it?')", "NULL", "NULL"]
    assert out.stderr.splitlines()[-1].startswith(
        "None of the 2 LM_SCORE values could be scored; they are NULL in the result, and "
        "--errors lists them; the first: I could not reach the scoring model at "
        "http://127.0.0.1:9/v1"
    )


def test_lmd_score(backend, home):
    backend.queue("Score: 3", "**7**")
    out = lmd(
        "score", "We have a meeting today at 3:00", "Are we meeting today at 4:00?", "--home", home
    )
    assert out.exit_code == 0 and out.stdout == "3\n"
    assert "Content: \nWe have a meeting today at 3:00\n\n" in prompts(backend)[0]
    out = lmd("score", "x", "Is it?", "--json", "--home", home)
    data = json.loads(out.stdout)
    assert (data["score"], data["raw"], data["members"]) == (7, ["**7**"], 1)
    out = lmd("score", "Is it?", "--home", home)
    assert out.exit_code == 1 and "at least two arguments" in out.stderr


def test_lmd_score_uses_the_cache_and_no_cache(backend, home):
    backend.handler = lambda body: Reply("6")
    for flag in ([], [], ["--no-cache"]):
        out = lmd("score", "x", "Is it?", "--json", "--home", home, *flag)
        assert json.loads(out.stdout)["score"] == 6
    assert len(backend.chat_requests) == 2


def test_lmd_score_progress_bar_goes_to_stderr(backend, db, home):
    backend.handler = software_judge
    out = lmd("sql", db, "SELECT LM_SCORE(name, 'q?') FROM items", "--progress", "--home", home)
    assert out.exit_code == 0 and "LM_SCORE: 100%" in out.stderr and "20/20" in out.stderr


# -- the original benchmark database -----------------------------------------------------
@pytest.fixture
def company_db(tmp_path):
    if not COMPANY_DB.exists():
        pytest.skip("../shared/data/lm_score/company.db is absent (a user's checkout)")
    copy = tmp_path / "company.db"
    shutil.copy(COMPANY_DB, copy)
    return copy


def test_company_db_invoice_question(backend, company_db, home):
    configure(home, lm_score_thinking="f")
    seen = []

    def judge(body):
        prompt = body["messages"][0]["content"]
        seen.append(prompt)
        return Reply("9" if "software" in prompt.lower() else "1")

    backend.handler = judge
    out = lmd(
        "sql",
        company_db,
        "SELECT customer, amount FROM invoices WHERE LM_SCORE(customer, product, amount, "
        "description, 'Is this invoice for a software or technology product?') >= 7",
        "--json",
        "--home",
        home,
    )
    assert out.exit_code == 0, out.output
    rows = json.loads(out.stdout)
    assert {"customer": "Acme Corp", "amount": 1999.99} in rows
    assert len(seen) == 10
    acme = next(p for p in seen if "Acme Corp" in p)
    assert (
        "Content: \nAcme Corp\nSoftware License\n1999.99\n"
        "Annual enterprise software license renewal\n\n"
    ) in acme
    assert all(b["continue_final_message"] is True for b in backend.chat_requests)


def test_register_lm_score_defaults_to_the_daemon_settings_and_cache(backend, db, home):
    backend.handler = software_judge
    for _ in range(2):
        conn = sqlite3.connect(db)
        handle = register_lm_score(conn, home=home)
        _, rows = handle.query(conn, "SELECT LM_SCORE(name, kind, 'Is it software?') FROM items")
        handle.close()
        assert [r[0] for r in rows] == [2, 10] * 10
    assert len(backend.chat_requests) == 20  # the second pass came from the daemon's cache


def test_statements_without_lm_score_run_directly(backend, db, home):
    out = lmd("sql", db, "VACUUM", "--home", home)
    assert out.exit_code == 0, out.stderr
    out = lmd("sql", db, "SELECT count(*) AS n FROM items", "--json", "--home", home)
    assert json.loads(out.stdout) == [{"n": 20}]
    assert backend.requests == []
