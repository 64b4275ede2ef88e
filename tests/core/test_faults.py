"""Faults: the backend failing every way it can, the database locked, the disk full.

For each: the client gets one clear sentence (or a retried success), the daemon keeps serving,
nothing stored is lost or duplicated.
"""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from tests.daemons import IN_PROCESS, configure
from tests.fake_backend import Reply

HEADERS = {"Accept": "application/json"}


def rows(home: Path, session: str = "default") -> list[tuple]:
    conn = sqlite3.connect(home / "lmd.db")
    found = conn.execute(
        "SELECT role, status, content FROM prompts WHERE session = ? ORDER BY id", [session]
    ).fetchall()
    conn.close()
    return found


def assert_failed_turn(home: Path, utterance: str, sentence: str) -> None:
    """The utterance is stored once, marked failed, followed by the error sentence."""
    assert rows(home) == [("user", "failed", utterance), ("error", "error", sentence)]


def assert_keeps_serving(client, backend) -> None:
    backend.queue("still here")
    r = client.post("/v1", content="dali are you there", headers=HEADERS)
    assert r.status_code == 200 and r.json()["reply"] == "still here"


@pytest.mark.parametrize(
    ("reply", "status", "sentence"),
    [
        (
            Reply("boom", status=500),
            502,
            "The language model failed with HTTP 500; try again later.",
        ),
        (
            Reply("slow down", status=429, headers={"Retry-After": "0"}),
            502,
            "The language model is rate limiting us; wait a moment and try again.",
        ),
        (
            Reply(body=b"{this is not json", status=200),
            502,
            "The language model sent something I could not read",
        ),
        (
            Reply(body="<html>Bad gateway</html>", status=200),
            502,
            "The language model sent something I could not read",
        ),
        (Reply(reset=True), 502, "I could not reach the language model at"),
        (
            Reply(body={"id": "x", "object": "chat.completion", "model": "m", "choices": []}),
            502,
            "The language model sent an empty answer; try again.",
        ),
        (
            Reply("bad key", status=401),
            502,
            "The language model refused the API key; set OPENAI_API_KEY to a valid key.",
        ),
        (
            Reply("no such model", status=404),
            502,
            "The backend does not serve the model 'fake-model' or this API",
        ),
        (Reply(body=b"", status=200), 502, "The language model sent something I could not read"),
    ],
    ids=["500", "429", "garbage-json", "html", "reset", "no-choices", "401", "404", "empty"],
)
def test_backend_failure_gives_one_sentence_and_loses_nothing(
    make_client, backend, home, reply, status, sentence
):
    client = make_client()
    # dali streams: a 200 that is no stream of words is asked once more without streaming
    # (llama-cpp-python tells a context overflow so); a server sending garbage sends it again
    twice = reply.status == 200 and not reply.reset
    backend.queue(*[reply] * (2 if twice else 1))
    r = client.post("/v1", content="dali hello there", headers=HEADERS)
    assert r.status_code == status
    body = r.json()
    assert body["error"].startswith(sentence) and body["kind"] == "backend"
    assert "\n" not in body["error"]
    # The request the backend saw carried the utterance (not a mangled one).
    assert backend.chat_requests[-1]["messages"][-1] == {"role": "user", "content": "hello there"}
    assert_failed_turn(home, "hello there", body["error"])
    # Plain-text clients (voice) get the same sentence, alone.
    backend.queue(*[reply] * (2 if twice else 1))
    r = client.post("/v1", content="dali again")
    assert r.status_code == status and r.text.startswith(sentence) and r.text.count("\n") == 1
    assert_keeps_serving(client, backend)


@pytest.mark.parametrize(
    "reply",
    [Reply("boom", status=500), Reply("wait", status=429, headers={"Retry-After": "1"})],
    ids=["500", "429-retry-after"],
)
def test_retried_success_stores_the_turn_once(make_client, backend, home, reply):
    client = make_client(llm_max_retries=1)
    backend.queue(reply, "second time lucky")
    started = time.monotonic()
    r = client.post("/v1", content="dali hello", headers=HEADERS)
    took = time.monotonic() - started
    assert r.status_code == 200 and r.json()["reply"] == "second time lucky"
    assert len(backend.chat_requests) == 2
    assert backend.chat_requests[0] == backend.chat_requests[1]  # the same request, retried
    if "Retry-After" in reply.headers:
        assert took >= 0.9, "Retry-After: 1 was not honoured"
    assert rows(home) == [("user", "ok", "hello"), ("assistant", "ok", "second time lucky")]


def test_stall_gives_504_within_the_timeout(make_client, backend, home):
    """A backend that stalls (the 60 s case, scaled down) gets the 504 sentence in time."""
    client = make_client(llm_timeout_secs=0.5)
    backend.queue(Reply("too late", delay=3))
    started = time.monotonic()
    r = client.post("/v1", content="dali are you stuck", headers=HEADERS)
    took = time.monotonic() - started
    assert r.status_code == 504
    assert r.json()["error"] == (
        "The language model did not answer: I waited 0.5 seconds (llm_timeout_secs is 0.5) "
        "and cancelled the request; try again, or raise llm_timeout_secs."
    )
    assert took < 2.5
    assert_failed_turn(home, "are you stuck", r.json()["error"])
    assert_keeps_serving(client, backend)


def test_truncated_stream_is_an_error_not_a_short_reply(make_client, backend, home):
    client = make_client()
    backend.queue(Reply("one two three four five", truncate=2))
    r = client.post("/v1", content="dali tell me", headers={"Accept": "text/event-stream"})
    assert r.status_code == 200
    events = r.text.split("\n\n")
    assert 'data: "one "' in events and 'data: "two "' in events
    assert any(e.startswith("event: error") and "cut off" in e for e in events)
    assert events[-2] == "data: [DONE]"
    # Not stored as a complete answer: what was said is kept, marked cut, then the failure.
    assert rows(home) == [
        ("user", "ok", "tell me"),
        ("assistant", "cut", "one two "),
        (
            "error",
            "error",
            "The language model's answer was cut off before it finished; try again.",
        ),
    ]
    # A complete stream still works.
    backend.queue(Reply("all of it"))
    r = client.post("/v1", content="dali again", headers={"Accept": "text/event-stream"})
    assert 'data: "all "' in r.text and "event: error" not in r.text
    assert r.text.endswith("data: [DONE]\n\n")


def _hold_lock(db: Path, secs: float) -> subprocess.Popen:
    """Another process holding an exclusive write lock on the database for `secs`."""
    code = textwrap.dedent(
        f"""
        import sqlite3, sys, time
        conn = sqlite3.connect({str(db)!r}, isolation_level=None)
        conn.execute("BEGIN EXCLUSIVE")
        conn.execute("INSERT INTO settings (name, value) VALUES ('lock_probe', 'x')")
        print("locked", flush=True)
        time.sleep({secs})
        conn.execute("ROLLBACK")
        """
    )
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "locked"
    return proc


def test_database_locked_for_a_while_waits_then_succeeds(make_client, backend, home):
    client = make_client()
    holder = _hold_lock(home / "lmd.db", 1.5)
    started = time.monotonic()
    backend.queue("patience pays")
    r = client.post("/v1", content="dali wait for it", headers=HEADERS)
    took = time.monotonic() - started
    holder.wait(10)
    assert r.status_code == 200 and r.json()["reply"] == "patience pays"
    assert took >= 1.0, "the write did not wait for the lock"
    assert rows(home) == [("user", "ok", "wait for it"), ("assistant", "ok", "patience pays")]


def test_database_lock_stalls_only_the_writes_not_the_daemon(home, live, backend):
    """While another program holds the lock, reads and /healthz answer at once; the turn
    waiting to be written completes when the lock goes."""
    import threading
    import urllib.request

    from tests.daemons import say

    d = live()
    assert say(d.url, "a", "dali warm up")[0] == 200
    holder = _hold_lock(home / "lmd.db", 3)
    started = time.monotonic()
    box: dict = {}
    writer = threading.Thread(target=lambda: box.setdefault("r", say(d.url, "a", "dali wait")))
    writer.start()
    time.sleep(0.3)  # the turn is now waiting for the lock
    timings = {}
    for path in ("/healthz", "/settings", "/history?limit=5", "/settings/max_tokens"):
        t = time.monotonic()
        with urllib.request.urlopen(d.url + path, timeout=10) as r:
            assert r.status == 200
        timings[path] = time.monotonic() - t
    waited_for_reads = time.monotonic() - started
    writer.join(15)
    holder.wait(10)
    assert box["r"][0] == 200
    assert waited_for_reads < 2.5, timings  # all answered while the lock was still held
    assert time.monotonic() - started >= 2.9  # the write really waited for the lock
    assert [r[2] for r in rows(home, "a")] == ["warm up", "ok", "wait", "ok"]


def test_database_locked_too_long_gives_503_sentence(make_client, backend, home):
    client = make_client()
    # Scaled down: the daemon waits 30 s for a lock; here 0.2 s.
    client.app.daemon.store.db.execute("PRAGMA busy_timeout=200")
    holder = _hold_lock(home / "lmd.db", 2)
    r = client.post("/v1", content="dali locked out", headers=HEADERS)
    assert r.status_code == 503
    assert r.json()["error"] == (
        "The database is locked by another program; try again in a moment."
    )
    r = client.post("/v1", content="dali locked out")  # voice clients hear the same sentence
    assert r.status_code == 503 and r.text.startswith("The database is locked")
    assert backend.chat_requests == []  # nothing reached the model for an unsaved utterance
    holder.wait(10)
    assert_keeps_serving(client, backend)
    assert rows(home)[-2:] == [("user", "ok", "are you there"), ("assistant", "ok", "still here")]


FULL = (
    "The disk holding the database is full, so nothing could be saved; free some space and "
    "try again."
)


def test_disk_full_simulated_gives_507_sentence(make_client, backend, home):
    """SQLite's own limit on pages stands in for a full disk (works without root)."""
    client = make_client()
    backend.queue("first")
    assert client.post("/v1", content="dali before the disk fills").status_code == 200
    db = client.app.daemon.store.db
    pages = db.execute("PRAGMA page_count").fetchone()[0]
    db.execute(f"PRAGMA max_page_count={pages}")
    r = client.post("/v1", content="dali " + "a long utterance " * 2000, headers=HEADERS)
    assert r.status_code == 507 and r.json()["error"] == FULL
    db.execute("PRAGMA max_page_count=1073741823")
    assert_keeps_serving(client, backend)
    assert [x[2] for x in rows(home) if x[0] == "user"] == [
        "before the disk fills",
        "are you there",
    ]
    assert client.app.daemon.store.integrity() == "ok"


def _mount_tmpfs(path: Path, size: str) -> bool:
    path.mkdir(parents=True, exist_ok=True)
    try:
        done = subprocess.run(
            ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)],
            capture_output=True,
            timeout=10,
        )
    except (OSError, subprocess.TimeoutExpired):
        return False
    return done.returncode == 0


def test_disk_full_on_a_real_small_tmpfs(tmp_path, backend):
    """A real full filesystem (needs root for mount; skipped otherwise)."""
    from starlette.testclient import TestClient

    from daemon.http.app import create_app

    mnt = tmp_path / "small"
    if not _mount_tmpfs(mnt, "4m"):  # the database and its WAL need some 1.5 MB to start
        pytest.skip("cannot mount a tmpfs here (not root); the simulated disk-full test covers it")
    try:
        home = mnt / "home"
        configure(home, openai_chat_endpoint=backend.url, openai_model="m", llm_max_retries=0)
        with TestClient(
            create_app(home=home, peer_check=IN_PROCESS), base_url="http://127.0.0.1:8420"
        ) as client:
            backend.queue("stored")
            assert client.post("/v1", content="dali kept safe").status_code == 200
            filler = mnt / "filler"
            fd = os.open(filler, os.O_CREAT | os.O_WRONLY)
            try:  # fill the disk to the last byte
                while os.write(fd, b"\0" * 4096):
                    pass
            except OSError:
                pass
            finally:
                os.close(fd)
            r = client.post("/v1", content="dali " + "x" * 200_000, headers=HEADERS)
            assert r.status_code == 507 and r.json()["error"] == FULL
            filler.unlink()
            backend.queue("room again")
            r = client.post("/v1", content="dali is there room", headers=HEADERS)
            assert r.status_code == 200 and r.json()["reply"] == "room again"
            assert client.app.daemon.store.integrity() == "ok"
        users = [x[2] for x in rows(home) if x[0] == "user"]
        assert users == ["kept safe", "is there room"]
    finally:
        subprocess.run(["umount", "-l", str(mnt)], capture_output=True, timeout=10)
