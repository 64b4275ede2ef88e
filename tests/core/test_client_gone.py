"""A client that goes away cancels its answer: the HTTP connection closed (before the model's
first word, or mid-answer; plain, streamed, the OpenAI endpoint) or Ctrl-C on `lmd say` stops
the turn in the daemon, which closes its request to the backend (the stand-in records it), keeps
what was said as cut, and lets the next turn in that session go at once.

"At once" is proven without a clock: the abandoned answer would take ten minutes (the stand-in
waits 600 seconds, or until lmd closes the request), so a next turn that is answered at all was
not queued behind it.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import sqlite3
import subprocess
import sys

import pytest

from tests.daemons import ROOT, configure, say, wait_for
from tests.fake_backend import Reply

FOREVER = 600.0  # the stand-in's "model" reads the prompt this long, unless lmd hangs up


@pytest.fixture
def home(home):
    """lmd's own deadline for the model farther off than FOREVER: only a client that left
    can end these answers early."""
    configure(home, llm_timeout_secs=3600)
    return home


def rows(home, session: str) -> list[tuple]:
    conn = sqlite3.connect(home / "lmd.db")
    try:
        return conn.execute(
            "SELECT role, status, content, meta FROM prompts WHERE session = ? ORDER BY id",
            [session],
        ).fetchall()
    finally:
        conn.close()


def post_and_leave(backend, port: int, body: bytes, headers: str, until=None, path="/v1"):
    """POST on a raw socket; close it once `until(received)` holds (None: as soon as the
    backend has the request: the "model" is still reading the prompt)."""
    s = socket.create_connection(("127.0.0.1", port), timeout=30)
    s.sendall(
        f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n{headers}Content-Length: {len(body)}"
        "\r\n\r\n".encode()
        + body
    )
    got = b""
    if until is None:
        assert wait_for(lambda: len(backend.chat_requests) == 1, 30)
    while until is not None and not until(got):
        got += s.recv(4096)
    s.close()


def next_turn_answers(d, backend, session: str) -> None:
    """The session is free: a new turn there is answered (not queued behind the other)."""
    backend.queue("still here")
    status, reply, _ = say(d.url, session, "dali are you there", timeout=60)
    assert (status, reply) == (200, "still here")


@pytest.mark.parametrize(
    "headers",
    ["", "Accept: application/json\r\n", "Accept: text/event-stream\r\n"],
    ids=["plain", "json", "sse"],
)
def test_leaving_before_the_first_word_stops_the_turn(home, live, backend, headers):
    """Mid-prefill (the model still reading the prompt): the daemon closes its request, says
    in the history that the client left, and serves the session's next turn at once."""
    d = live()
    backend.queue(Reply("never said", delay=FOREVER))
    post_and_leave(backend, d.port, b"dali tell me a long story", headers + "X-Session: gone\r\n")
    assert backend.client_closed.wait(30), "lmd did not close its request to the backend"
    assert backend.closed[0]["messages"][-1]["content"] == "tell me a long story"
    assert wait_for(lambda: len(rows(home, "gone")) == 2, 10), rows(home, "gone")
    user, error = rows(home, "gone")
    assert user[:3] == ("user", "failed", "tell me a long story")  # out of later contexts
    assert error[:3] == (
        "error",
        "error",
        "The client closed the connection before the answer began, so I stopped it.",
    )
    next_turn_answers(d, backend, "gone")


def test_leaving_mid_answer_keeps_what_was_said_as_cut(home, live, backend):
    """Mid-stream: the words the client heard are stored, marked cut by the client, and the
    backend's stream is closed (it would have gone on for ten minutes)."""
    d = live()
    backend.queue(Reply("one two three", chunk_delay=FOREVER))
    post_and_leave(
        backend,
        d.port,
        b"dali count slowly",
        "Accept: text/event-stream\r\nX-Session: mid\r\n",
        until=lambda got: b'data: "one "' in got,
    )
    assert backend.client_closed.wait(30), "lmd did not close its request to the backend"
    assert wait_for(lambda: len(rows(home, "mid")) == 2, 10), rows(home, "mid")
    user, reply = rows(home, "mid")
    assert user[:3] == ("user", "ok", "count slowly")
    assert reply[:3] == ("assistant", "cut", "one ")
    assert json.loads(reply[3]) == {"cut_by": "client"}
    next_turn_answers(d, backend, "mid")
    # the cut words are in the next turn's context, as said; the cut is no failure
    sent = backend.chat_requests[-1]["messages"]
    assert {"role": "assistant", "content": "one "} in sent


@pytest.mark.parametrize("stream", [False, True])
def test_the_openai_endpoint_stops_too(home, live, backend, stream):
    d = live()
    backend.queue(Reply("never said", delay=FOREVER))
    body = json.dumps(
        {
            "model": "lmd-dali",
            "messages": [{"role": "user", "content": "tell me a story"}],
            "stream": stream,
            "user": "editor",
        }
    ).encode()
    post_and_leave(
        backend, d.port, body, "Content-Type: application/json\r\n", path="/v1/chat/completions"
    )
    assert backend.client_closed.wait(30), "lmd did not close its request to the backend"
    assert wait_for(lambda: len(rows(home, "editor")) == 2, 10)
    assert rows(home, "editor")[0][:2] == ("user", "failed")
    next_turn_answers(d, backend, "editor")


def test_ctrl_c_on_lmd_say_stops_the_answer(home, live, backend):
    """Ctrl-C (SIGINT) on `lmd say`: one sentence, exit status 130, and the daemon stops."""
    d = live()
    backend.queue(Reply("never said", delay=FOREVER))
    say_proc = subprocess.Popen(
        [sys.executable, "-m", "daemon.cli", "say", "--session", "ctrl-c", "dali", "go on"],
        env={**os.environ, "LMD_URL": d.url, "LMD_HOME": str(home)},
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert wait_for(lambda: len(backend.chat_requests) == 1, 30)
        say_proc.send_signal(signal.SIGINT)
        out, err = say_proc.communicate(timeout=120)  # a bound: a loaded machine is slow
    finally:
        if say_proc.poll() is None:
            say_proc.kill()
    assert (say_proc.returncode, out, err) == (130, "", "Stopped: lmd stops that answer too.\n")
    assert backend.client_closed.wait(30), "lmd did not close its request to the backend"
    assert wait_for(lambda: len(rows(home, "ctrl-c")) == 2, 10)
    assert [r[:2] for r in rows(home, "ctrl-c")] == [("user", "failed"), ("error", "error")]
    assert rows(home, "ctrl-c")[1][2].startswith("The client closed the connection")
    next_turn_answers(d, backend, "ctrl-c")


def test_leaving_while_a_command_runs_stops_it_and_the_audit_keeps_it(
    home, live, backend, tmp_path
):
    """marat was running a command (approved: marat_approval never) when the client left: the
    command's processes end, the audit row says it was stopped, and the session goes on."""
    from tests.daemons import processes_with

    configure(home, marat_approval="never", marat_start_dir=str(tmp_path))
    d = live()
    marker = "600.4242"
    backend.queue(f"Thought: wait.\nAction:\n```bash\nsleep {marker}\n```")
    s = socket.create_connection(("127.0.0.1", d.port), timeout=30)
    body = b"marat wait a while"
    s.sendall(
        b"POST /v1 HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Session: cmd\r\n"
        b"Content-Length: %d\r\n\r\n%s" % (len(body), body)
    )
    assert wait_for(lambda: processes_with(marker), 30)
    s.close()
    assert wait_for(lambda: not processes_with(marker), 30), processes_with(marker)
    conn = sqlite3.connect(home / "lmd.db")
    try:
        audit = conn.execute(
            "SELECT command, exit_code, output, approval FROM marat_commands WHERE session = ?",
            ["cmd"],
        ).fetchall()
    finally:
        conn.close()
    assert audit == [
        (
            f"sleep {marker}",
            None,
            "(stopped while it ran: the client went away, so the answer was cancelled)",
            "never",
        )
    ]
    next_turn_answers(d, backend, "cmd")
