"""A fresh machine: no key, no backend, no daemon yet; what a new user types first."""

from __future__ import annotations

import json
import re
import sqlite3
from urllib.parse import urlsplit

import pytest

from tests.daemons import free_port, wait_for

from .conftest import ALIAS, CHEAP, engine_processes, journey, one, said_first

pytestmark = pytest.mark.slow  # the journeys tier: real daemons on the embedded model

LOOPBACK = {"127.0.0.1", "localhost", "::1"}


def only_loopback(calls: list[dict]) -> None:
    """No command ever contacts a hosted API unless the user configured one (issue 36)."""
    hosts = {urlsplit(c["url"]).hostname for c in calls if not c.get("uds")}
    assert hosts <= LOOPBACK, f"lmd asked {hosts - LOOPBACK} with no backend configured"


def names_the_embedded_backend(ran) -> bool:
    """Each command's first line of output names the backend (issue 36 item 1)."""
    first = [text.splitlines()[0] for text in (ran.stdout, ran.stderr) if text.strip()]
    return any("embedded" in line.lower() or ALIAS in line for line in first)


@journey()
def test_fresh_home_no_key_score_then_sql(newcomer):
    """No daemon running: `lmd score` and `lmd sql` each start the embedded model for
    themselves and stop it after; nothing goes to a hosted API; the score is cached under the
    model that answered; `lmd sql` never passes a row it could not score as data."""
    p = newcomer
    ran = p.lmd("backend", "--which")
    assert ran.returncode == 0 and ran.stdout.strip() == "embedded", ran
    p.configure(**CHEAP)
    calls = p.calls()
    ran = p.lmd("score", "The invoice is for a laptop.", "Is this about a computer?")
    assert ran.returncode == 0, ran.stderr
    assert re.fullmatch(r"(10|[0-9])", ran.stdout.strip().splitlines()[-1]), ran.stdout
    assert names_the_embedded_backend(ran), ran
    made = calls.chats()
    only_loopback(made)
    assert made and all(c["ended"] and c["status"] == 200 for c in made), made
    assert {c["body"]["model"] for c in made} == {ALIAS}
    # the server started for the command stopped with it
    assert wait_for(lambda: not engine_processes(p), 20), engine_processes(p)
    with sqlite3.connect(p.lmd_home / "lmd.db") as conn:
        cached = [json.loads(r) for (r,) in conn.execute("SELECT result FROM lm_score_cache")]
    assert [c["model"] for c in cached] == [ALIAS], cached

    # lmd sql over the user's own table, no daemon either
    shop = p.base / "shop.db"
    with sqlite3.connect(shop) as conn:
        conn.execute("CREATE TABLE invoices (id INTEGER PRIMARY KEY, product TEXT)")
        conn.executemany("INSERT INTO invoices (product) VALUES (?)", [("laptop",), ("pears",)])
    p.own(shop)
    query = "SELECT id, LM_SCORE(product, 'Is this a computer product?') AS s FROM invoices"
    ran = p.lmd("sql", shop, query, "--csv")
    assert names_the_embedded_backend(ran), ran
    rows = [line.split(",") for line in ran.stdout.strip().splitlines()[-2:]]
    scored = [s for _, s in rows if re.fullmatch(r"(10|[0-9])", s)]
    if len(scored) == 2:
        assert ran.returncode == 0, ran.stderr
    else:  # a row it could not score: said with the count, never exit 0 (issue 36 item 2)
        assert ran.returncode != 0, ran
        assert re.search(rf"\b{2 - len(scored)}\b", ran.stderr), ran.stderr
    only_loopback(calls.chats())


@journey()
def test_fresh_home_doctor_serve_then_first_words(newcomer):
    """`lmd doctor` before anything runs, then `lmd serve` and the README's first line: the
    embedded model answers, is probed once, and everything said is stored."""
    p = newcomer
    ran = p.lmd("doctor", "--offline")
    assert f"backend: The embedded model {ALIAS}" in ran.stdout, ran
    for name, value in CHEAP.items():
        assert p.lmd("settings", "set", name, value).returncode == 0
    calls = p.calls()
    d = p.start_daemon()
    try:
        ran = p.lmd("say", "-s", "first", "dali", "hello")
        assert ran.returncode == 0 and ran.stdout.strip(), ran
        start = d.output()
        assert f"lmd backend: the embedded model {ALIAS}" in start
        assert "no backend is configured" in start
        made = calls.read()
        only_loopback(made)
        assert any(c["probe"] for c in made)  # a fresh home probes the server once
        turn = one(calls.chats(), "model call")
        assert turn["body"]["model"] == ALIAS and turn["body"]["max_tokens"] == 48
        assert turn["ended"] and turn["status"] == 200
        assert "hello" in turn["body"]["messages"][-1]["content"]
        ran = p.lmd("history", "--json", "-s", "first")
        assert ran.returncode == 0, ran
        rows = json.loads(ran.stdout)
        said = [(r["role"], r["mode"]) for r in sorted(rows, key=lambda r: r["id"])]
        assert said == [("user", "dali"), ("assistant", "dali")], rows
        replies = [r["content"] for r in rows if r["role"] == "assistant"]
        assert len(replies) == 1 and said_first(replies[0], turn), (replies, turn["content"])
        ran = p.lmd("doctor")
        assert ran.returncode == 0, ran.stdout + ran.stderr
        one(d.model_servers(), "embedded model server")
        assert "Traceback" not in d.output()
    finally:
        p.stop_daemon()
    assert wait_for(lambda: not engine_processes(p), 20)


@journey()
def test_a_home_lmd_cannot_make(newcomer):
    """LMD_HOME names a place lmd cannot make its home (a name under a file, a folder of
    another user): every command, the daemon too, says so in one sentence naming the place
    and what to do, and exits; no traceback."""
    p = newcomer
    notes = p.write(p.base / "notes.txt", "my notes\n")
    places = [notes / "lmd"]
    if p.unix is not None:  # root may write anywhere; an ordinary user not in root's folder
        theirs = p.base / "roots"
        theirs.mkdir(mode=0o755)  # root's
        places.append(theirs / "lmd")
    for place in places:
        env = {"LMD_HOME": str(place)}
        for args in (
            ["settings", "set", "reply_max_tokens", "48"],
            ["score", "The invoice is for a laptop.", "Is this about a computer?"],
            ["history"],
            ["serve", "--bind", f"127.0.0.1:{free_port()}"],
        ):
            ran = p.lmd(*args, env=env, timeout=60)
            said = ran.stderr.strip().splitlines()
            assert ran.returncode != 0 and ran.stdout == "", (args, ran)
            assert "Traceback" not in ran.stderr and said, (args, ran)
            assert str(place) in said[-1] and "LMD_HOME" in said[-1], (args, ran)
        assert not place.exists()
