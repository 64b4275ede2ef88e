"""The SQLite store: a real file, WAL, migrations as functions, no lost rows."""

import multiprocessing
import sqlite3

import pytest

from daemon.core.store import Session, Store


def test_wal_and_migrations_apply_once(tmp_path):
    store = Store(tmp_path / "lmd.db")
    first = store.migrate()
    assert "core:m001_prompts" in first
    assert store.migrate() == []  # idempotent on every open
    calls = []
    extra = [
        (
            "plugin:m001_things",
            lambda db: calls.append(db.execute("CREATE TABLE things (id INTEGER PRIMARY KEY)")),
        )
    ]
    assert store.migrate(extra) == ["plugin:m001_things"]
    assert store.migrate(extra) == [] and len(calls) == 1
    assert store.db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert {"prompts", "sessions", "settings", "things"} <= set(store.db.table_names())


def test_a_failing_migration_is_rolled_back_and_not_recorded(tmp_path):
    store = Store(tmp_path / "lmd.db")
    store.migrate()

    def broken(db):
        db.execute("CREATE TABLE half (id INTEGER)")
        raise RuntimeError("boom")

    try:
        store.migrate([("p:broken", broken)])
    except RuntimeError:
        pass
    assert "half" not in store.db.table_names()
    assert store.migrate([("p:ok", lambda db: None)]) == ["p:ok"]


def test_prompts_and_sessions_round_trip(tmp_path):
    store = Store(tmp_path / "lmd.db")
    store.migrate()
    a = store.add_prompt("s", "user", "hello", tokens=2, karma=1000, mode="dali")
    store.add_prompt("s", "error", "it failed", tokens=2, karma=0, status="error")
    b = store.add_prompt("s", "assistant", "hi", tokens=1, karma=500, kind="decorative")
    store.add_prompt("t", "user", "other", tokens=1, karma=1000)
    assert [p.id for p in store.recent("s", 10)] == [a, b]  # errors never enter a context
    assert [p.id for p in store.recent("s", 1)] == [b]
    assert len(store.history("s")) == 3
    store.set_karma([a], "operative", 2500)
    assert store.prompt(a).kind == "operative" and store.prompt(a).karma == 2500
    s = store.session("s")
    s.mode, s.cwd, s.pending, s.state = "marat", "/tmp", {"mode": "marat"}, {"marat": {"x": 1}}
    s.last_active = 5.0
    store.save_session(s)
    again = store.session("s")
    assert again == Session(
        "s", "marat", "/tmp", {"mode": "marat"}, {"marat": {"x": 1}}, 5.0, again.created_at
    )
    assert store.integrity() == "ok"


def _writer(path, n, tag):
    store = Store(path)
    for i in range(n):
        store.add_prompt(tag, "user", f"{tag}-{i}", tokens=1, karma=1)


def test_concurrent_processes_never_lose_a_row(tmp_path):
    path = tmp_path / "lmd.db"
    Store(path).migrate()
    procs = [multiprocessing.Process(target=_writer, args=(path, 200, f"w{k}")) for k in range(4)]
    [p.start() for p in procs]
    [p.join() for p in procs]
    conn = sqlite3.connect(path)
    assert conn.execute("SELECT count(*) FROM prompts").fetchone()[0] == 800
    for k in range(4):
        rows = [
            r[0]
            for r in conn.execute(
                "SELECT content FROM prompts WHERE session = ? ORDER BY id", [f"w{k}"]
            )
        ]
        assert rows == [f"w{k}-{i}" for i in range(200)]


def test_prompts_promoted_before_operative_karma_are_raised_to_it(tmp_path):
    """A database from before operative_karma: promoted prompts hold contextual_karma (2500),
    below instructive_karma. The migration raises them; a row worth more keeps its points."""
    path = tmp_path / "lmd.db"
    old = sqlite3.connect(path)
    old.executescript(
        """CREATE TABLE _lmd_migrations (name TEXT PRIMARY KEY, applied_at REAL);
        INSERT INTO _lmd_migrations VALUES ('core:m001_prompts', 0), ('core:m002_sessions', 0);
        CREATE TABLE prompts (id INTEGER PRIMARY KEY, session TEXT NOT NULL, role TEXT NOT NULL,
            content TEXT NOT NULL, tokens INTEGER NOT NULL, karma REAL NOT NULL,
            kind TEXT NOT NULL DEFAULT 'default', mode TEXT, created_at REAL NOT NULL,
            status TEXT NOT NULL DEFAULT 'ok', meta TEXT NOT NULL DEFAULT '{}');
        CREATE TABLE sessions (name TEXT PRIMARY KEY, mode TEXT, cwd TEXT, pending TEXT,
            state TEXT NOT NULL DEFAULT '{}', last_active REAL NOT NULL DEFAULT 0,
            created_at REAL NOT NULL DEFAULT 0);
        CREATE TABLE settings (name TEXT PRIMARY KEY, value TEXT NOT NULL);
        INSERT INTO prompts (session, role, content, tokens, karma, kind, created_at) VALUES
            ('s', 'user', 'promoted', 1, 2500, 'operative', 0),
            ('s', 'user', 'promoted by a generous user', 1, 90000, 'operative', 0),
            ('s', 'user', 'a done task', 1, 2500, 'contextual', 0),
            ('s', 'user', 'ordinary', 1, 1000, 'default', 0);"""
    )
    old.close()
    store = Store(path)
    assert store.migrate()[0] == "core:m003_operative_karma"
    rows = [(p.content, p.kind, p.karma) for p in store.history("s")]
    assert rows == [
        ("promoted", "operative", 25000),
        ("promoted by a generous user", "operative", 90000),
        ("a done task", "contextual", 2500),
        ("ordinary", "default", 1000),
    ]
    assert store.stored_settings()["operative_karma"] == "25000"


def test_close_waits_for_a_write_in_another_thread(tmp_path):
    """A worker thread's write (a cancelled probe's save goes on in its thread) finishes
    before the connection closes; closing under it crashed the process. A write after the
    close fails with an error, never a crash."""
    import sqlite3
    import threading

    store = Store(tmp_path / "lmd.db")
    store.migrate()
    inside, go_on, closed = threading.Event(), threading.Event(), threading.Event()

    def writer():
        with store.lock:
            inside.set()
            go_on.wait(10)
            store.save_capabilities("http://x/v1", "m", "{}")

    def closer():
        store.close()
        closed.set()

    t1 = threading.Thread(target=writer)
    t1.start()
    assert inside.wait(10)
    t2 = threading.Thread(target=closer)
    t2.start()
    assert not closed.wait(0.2)  # close waits for the write under way
    go_on.set()
    t1.join(10)
    assert closed.wait(10)
    t2.join(10)
    check = sqlite3.connect(tmp_path / "lmd.db")
    assert check.execute("SELECT model FROM backend_capabilities").fetchall() == [("m",)]
    with pytest.raises(sqlite3.ProgrammingError):
        store.save_capabilities("http://x/v1", "m2", "{}")
