"""A client that goes away cancels its answer, on the real embedded model (llama-cpp-python's
server with SmolLM2): the connection closed mid-answer or while the model still reads the
prompt stops the turn, the server goes quiet instead of generating on, what was said is kept as
cut, and the session's next turn is answered (one that needs no model: the server's being free
is shown by its CPU time, which stops growing)."""

from __future__ import annotations

import socket
import sqlite3

import pytest

from tests.core.test_real_backend import idle
from tests.daemons import LiveDaemon, configure, say, wait_for
from tests.real_model import configure_real_home

STORY = "dali Write a very long story about a lighthouse keeper and the sea, with many details."


@pytest.fixture
def daemon(real_model, tmp_path):
    home = configure_real_home(tmp_path / "h", real_model, reply_max_tokens=400)
    configure(home, llm_timeout_secs=600)  # only the client's leaving ends these answers early
    d = LiveDaemon(home, {"LMD_TOKENIZER": "estimate", "OPENAI_API_KEY": real_model.key})
    yield d
    d.stop()


def rows(d: LiveDaemon, session: str) -> list[tuple]:
    conn = sqlite3.connect(d.home / "lmd.db")
    try:
        return conn.execute(
            "SELECT role, status, content FROM prompts WHERE session = ? ORDER BY id", [session]
        ).fetchall()
    finally:
        conn.close()


def send(d: LiveDaemon, session: str, accept: str) -> socket.socket:
    s = socket.create_connection(("127.0.0.1", d.port), timeout=120)
    body = STORY.encode()
    s.sendall(
        f"POST /v1 HTTP/1.1\r\nHost: 127.0.0.1\r\nAccept: {accept}\r\nX-Session: {session}\r\n"
        f"Content-Length: {len(body)}\r\n\r\n".encode()
        + body
    )
    return s


def test_leaving_mid_answer_on_the_real_model(daemon, real_model):
    s = send(daemon, "mid", "text/event-stream")
    got = b""
    while got.count(b'data: "') < 3:  # three chunks of the story heard
        got += s.recv(4096)
    s.close()
    # a bound, not a speed: on a loaded machine the next token (where lmd hears the
    # disconnect at the latest) may be long in coming
    assert wait_for(lambda: len(rows(daemon, "mid")) == 2, 240), rows(daemon, "mid")
    user, reply = rows(daemon, "mid")
    assert user[:2] == ("user", "ok") and reply[:2] == ("assistant", "cut") and reply[2]
    # the server stops generating (its CPU time stops growing) within a few tokens' time
    assert wait_for(lambda: idle(real_model.proc.pid), 30, interval=0.1)
    assert say(daemon.url, "mid", "dali", timeout=60)[:2] == (200, "Switched to dali mode.")


def test_leaving_before_the_first_word_on_the_real_model(daemon, real_model):
    from daemon.core.store import Store

    # some 500 tokens of digits before the question: seconds of reading for this CPU
    store = Store(daemon.home / "lmd.db")
    numbers = " ".join(str(3000000 + i) for i in range(60))
    store.add_prompt("early", "user", numbers, tokens=500, karma=1000)
    store.close()
    s = send(daemon, "early", "text/plain")
    assert wait_for(lambda: not idle(real_model.proc.pid), 60)  # the model is at work
    s.close()
    assert wait_for(lambda: len(rows(daemon, "early")) == 3, 240), rows(daemon, "early")
    _, user, said = rows(daemon, "early")
    assert user[:2] == ("user", "failed")
    assert said[0] == "error" and said[2].startswith("The client closed the connection")
    assert wait_for(lambda: idle(real_model.proc.pid), 30, interval=0.1)
    assert say(daemon.url, "early", "dali", timeout=60)[:2] == (200, "Switched to dali mode.")
