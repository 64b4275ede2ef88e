"""Load: concurrent clients on a few sessions against a real `lmd serve`, a backend with
latency and occasional errors; then an audit of the database against what clients saw.

Small here (it runs in `make test`); `make soak` runs benchmarks/bench_load.py bigger.
"""

from __future__ import annotations

import pytest
from reliability_helpers import audit, echo_handler, run_load, say


@pytest.mark.slow
def test_load_every_acknowledged_turn_is_stored_once_in_order(home, live, backend):
    backend.handler = echo_handler(error_rate=0.05)
    backend.latency = 0.005
    d = live()
    assert say(d.url, "warm", "warm up")[:2] == (200, "re warm up")
    result = run_load(d.url, clients=8, sessions=4, requests=160)
    figures = result.figures()
    print("load:", figures)
    checked = audit(home / "lmd.db", result)
    print("audit:", checked)
    assert figures["requests"] == 160
    # Every error is one the backend was told to make, answered with the backend sentence.
    assert set(figures["errors"]) <= {"http_502_backend"}
    assert figures["acknowledged"] + sum(figures["errors"].values()) == 160
    assert figures["acknowledged"] >= 120
    # Each request the daemon sent carried the session's history, newest last.
    assert all(b["messages"][-1]["role"] == "user" for b in backend.chat_requests)
    assert len(backend.chat_requests) == 161
    assert backend.max_active > 1  # the sessions really ran concurrently


def test_backend_client_is_imported_at_startup_not_on_the_first_request(home):
    """Imported lazily, openai took ~1 s on the first /v1, stalling every concurrent request."""
    import subprocess
    import sys

    from conftest import ROOT

    code = (
        "import sys; from starlette.testclient import TestClient; from daemon.app import "
        f"create_app; c = TestClient(create_app(home={str(home)!r})); "
        "before = 'openai' in sys.modules; c.__enter__(); "
        "print(before, 'openai' in sys.modules); c.__exit__(None, None, None)"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=30
    )
    assert out.stdout.split() == ["False", "True"], out.stderr


def mixed_handler(error_rate: float = 0.04, seed: int = 11):
    """dali: "re <words>"; marat: first `echo <tag>`, then, seeing its output, a final answer
    naming the tag; scripted 500s at `error_rate`."""
    import random
    import threading

    from conftest import Reply
    from marat_helpers import action, final

    rng, lock = random.Random(seed), threading.Lock()

    def handler(body: dict) -> Reply | str:
        with lock:
            if rng.random() < error_rate:
                return Reply("scripted failure", status=500)
        messages = body.get("messages") or []
        last = [m for m in messages if m.get("role") == "user"][-1]["content"]
        if last.startswith("Observation:"):
            tag = last.split("output:")[-1].split()[-1] if "output:" in last else last.split()[-1]
            return final(f"done {tag}")
        if body.get("stop"):  # marat asks with stop=["\nObservation:"]
            return action(f"echo {last.split()[0]}")
        return f"re {last}"

    return handler


@pytest.mark.slow
def test_mixed_load_dali_knob_and_marat(home, live, backend):
    """Three modes at once: dali replies, knob changes a setting, marat runs a read-only
    command and answers. Every acknowledged turn is stored exactly once with its reply after
    it; per session, order is kept; the setting ends at the last acknowledged value."""
    import sqlite3
    import threading
    import time

    from reliability_helpers import LoadResult, Sent

    backend.handler = mixed_handler()
    backend.latency = 0.005
    d = live()
    sessions = {"dali": ["d0", "d1"], "knob": ["k0"], "marat": ["m0", "m1"]}
    plan = []  # (kind, session, spoken text, stored text)
    for n in range(90):
        kind = ("dali", "knob", "marat")[n % 3]
        session = sessions[kind][n % len(sessions[kind])]
        if kind == "dali":
            plan.append((kind, session, f"dali u{n} from the load", f"u{n} from the load"))
        elif kind == "knob":
            plan.append((kind, session, f"knob set max thought loops to {n % 90 + 10}", None))
        else:
            plan.append((kind, session, f"marat m{n} please", f"m{n} please"))
    result, lock, todo = LoadResult(), threading.Lock(), iter(plan)
    kinds: dict[int, str] = {}

    def worker() -> None:
        while True:
            with lock:
                item = next(todo, None)
                if item is None:
                    return
                kind, session, spoken, _ = item
                s = Sent(session, spoken, time.monotonic())
                result.sent.append(s)
                kinds[id(s)] = kind
            s.status, s.reply, s.kind = say(d.url, session, spoken)
            s.acked_at = time.monotonic()

    started = time.monotonic()
    threads = [threading.Thread(target=worker) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    result.wall = time.monotonic() - started
    figures = result.figures()
    print("mixed load:", figures)
    assert figures["requests"] == 90 and set(figures["errors"]) <= {"http_502_backend"}
    conn = sqlite3.connect(f"file:{home / 'lmd.db'}?mode=ro", uri=True)
    rows = conn.execute("SELECT id, session, role, content FROM prompts ORDER BY id").fetchall()
    ran = [r[0] for r in conn.execute("SELECT command FROM marat_commands")]
    conn.close()
    stored = {p[2]: p[3] for p in plan}
    for s in result.sent:  # each acknowledged marat turn ran its command exactly once
        if kinds[id(s)] == "marat" and s.status == 200:
            assert ran.count(f"echo {s.text.split()[1]}") == 1, s.text
    marat_calls = [b for b in backend.chat_requests if b.get("stop")]
    assert any("Observation:" in m["content"] for b in marat_calls for m in b["messages"])
    problems = []
    for s in result.sent:
        kind = kinds[id(s)]
        text = stored[s.text] or s.text.split(" ", 1)[1]  # knob stores the words after "knob"
        mine = [r for r in rows if r[1] == s.session]
        users = [i for i, r in enumerate(mine) if r[2] == "user" and r[3] == text]
        if s.status and len(users) != 1:
            problems.append(f"{s.text!r} (HTTP {s.status}) stored {len(users)} times")
            continue
        if s.status != 200:
            continue
        tag = s.text.split()[1]
        want = {"dali": f"re {text}", "marat": f"done {tag}"}.get(kind)
        if kind == "knob":
            want = f"max thought loops is now {s.text.split()[-1]}."
        if s.reply != want:
            problems.append(f"{s.text!r} got {s.reply!r}, not {want!r}")
        replies = [i for i, r in enumerate(mine) if r[2] == "assistant" and r[3] == s.reply]
        if len(replies) != 1 or replies[0] < users[0]:
            problems.append(f"the reply to {s.text!r} is stored {len(replies)} times or before it")
            continue
        between = mine[users[0] + 1 : replies[0]]
        if any(r[2] == "user" and r[3] in stored.values() for r in between):
            problems.append(f"another utterance came between {s.text!r} and its reply")
        if kind == "marat" and not any("Observation:" in r[3] and tag in r[3] for r in between):
            problems.append(f"marat's command output for {s.text!r} is not stored before its reply")
    for session in {s.session for s in result.sent}:
        ids = {r[3]: r[0] for r in rows if r[1] == session and r[2] == "user"}
        mine = [s for s in result.sent if s.session == session and s.status]
        for a in (a for a in mine if a.status == 200):
            for b in mine:
                ta = stored[a.text] or a.text.split(" ", 1)[1]
                tb = stored[b.text] or b.text.split(" ", 1)[1]
                if b.sent_at > a.acked_at and ids[tb] < ids[ta]:
                    problems.append(f"{b.text!r} was stored before {a.text!r}")
    assert not problems, f"{len(problems)} problems, e.g.: " + "; ".join(problems[:5])
    knob_acked = sorted(
        (s for s in result.sent if kinds[id(s)] == "knob" and s.status == 200),
        key=lambda s: s.acked_at,
    )
    current = say(d.url, "k0", "knob show max thought loops")[1]
    assert current.startswith(f"max thought loops is {knob_acked[-1].text.split()[-1]}")
    counts = {k: sum(kinds[id(s)] == k and s.status == 200 for s in result.sent) for k in sessions}
    print("acknowledged by mode:", counts, "rows:", len(rows))
    assert min(counts.values()) >= 20
