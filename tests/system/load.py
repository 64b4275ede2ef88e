"""The load driver of the reliability suite: many clients against a live daemon, then an audit
of the database (every acknowledged utterance stored once, in order).

Used by tests/system/test_load.py, tests/system/test_crash.py and benchmarks/bench_load.py.
"""

from __future__ import annotations

import random
import sqlite3
import sys
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from tests.daemons import say
from tests.fake_backend import Reply

# -- a backend that echoes which utterance it answers ------------------------------------------


def echo_handler(error_rate: float = 0.0, seed: int = 7):
    """Reply "re <tag>" to the newest user message; fail with 500 at `error_rate`."""
    rng = random.Random(seed)
    lock = threading.Lock()

    def handler(body: dict) -> Reply:
        users = [m for m in body.get("messages") or [] if m.get("role") == "user"]
        if not users:
            return Reply("no user message", status=400)
        # the newest utterance: a turn cut by a crash left a user message before it, which
        # the next turn's context merges with it (roles alternate)
        last = users[-1]["content"].split("\n\n")[-1]
        with lock:
            fail = rng.random() < error_rate
        if fail:
            return Reply("scripted failure", status=500)
        return Reply(f"re {last}")

    return handler


# -- the load driver -----------------------------------------------------------------------------
@dataclass
class Sent:
    session: str
    text: str
    sent_at: float
    acked_at: float = 0.0
    status: int = 0  # 0: no HTTP answer (connection refused or cut)
    reply: str = ""
    kind: str = ""


@dataclass
class LoadResult:
    sent: list[Sent] = field(default_factory=list)
    wall: float = 0.0

    @property
    def acked(self) -> list[Sent]:
        return [s for s in self.sent if s.status == 200]

    def errors(self) -> Counter:
        return Counter(s.kind for s in self.sent if s.status != 200)

    def latencies(self) -> list[float]:
        return sorted(s.acked_at - s.sent_at for s in self.sent if s.status)

    def figures(self) -> dict:
        lat = self.latencies()

        def pct(p: float) -> float:
            return lat[min(len(lat) - 1, int(p * len(lat)))] * 1000 if lat else 0.0

        return {
            "requests": len(self.sent),
            "acknowledged": len(self.acked),
            "wall_secs": round(self.wall, 2),
            "req_per_sec": round(len(self.sent) / self.wall, 1) if self.wall else 0.0,
            "p50_ms": round(pct(0.50), 1),
            "p95_ms": round(pct(0.95), 1),
            "p99_ms": round(pct(0.99), 1),
            "errors": dict(self.errors()),
        }


def run_load(
    url: str,
    clients: int,
    sessions: int,
    requests: int,
    stop: threading.Event | None = None,
    prefix: str = "u",
) -> LoadResult:
    """`clients` threads send `requests` utterances in all, spread over `sessions` sessions.

    Each utterance is unique ("<prefix>-<n> ...") so the audit can find it in the database.
    """
    result = LoadResult()
    counter = iter(range(requests))
    lock = threading.Lock()

    def worker(w: int) -> None:
        while stop is None or not stop.is_set():
            with lock:
                n = next(counter, None)
            if n is None:
                return
            session = f"load{n % sessions}"
            s = Sent(session, f"{prefix}-{n} from client {w}", time.monotonic())
            with lock:
                result.sent.append(s)
            s.status, s.reply, s.kind = say(url, session, s.text)
            s.acked_at = time.monotonic()
            if stop is not None and not s.status:
                return  # the daemon is gone (a crash test): stop rather than spin

    start = time.monotonic()
    threads = [threading.Thread(target=worker, args=(w,), daemon=True) for w in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    result.wall = time.monotonic() - start
    return result


class BackgroundLoad:
    """Endless load in a thread until `finish()`: for killing the daemon mid-run."""

    def __init__(self, url: str, clients: int, sessions: int, prefix: str) -> None:
        self.stop = threading.Event()
        self.result = LoadResult()

        def go() -> None:
            self.result = run_load(url, clients, sessions, 10**6, self.stop, prefix)

        self.thread = threading.Thread(target=go, daemon=True)
        self.thread.start()

    def finish(self, timeout: float = 60) -> LoadResult:
        self.stop.set()
        self.thread.join(timeout)
        return self.result


def audit(db_path: Path, result: LoadResult, replies_expected: bool = True) -> dict:
    """Check the database against what the clients saw; return counts, raise AssertionError.

    - every acknowledged utterance is stored exactly once, and (when `replies_expected`) its
      reply "re <utterance>" exactly once, right after it in its session;
    - every utterance that got an HTTP error answer is stored once too (nothing lost);
    - per session, an utterance acknowledged before another was sent is stored before it.
    """
    conn = sqlite3.connect(f"file:{db_path}?mode=ro", uri=True)
    rows = conn.execute("SELECT id, session, role, content, status FROM prompts").fetchall()
    conn.close()
    by_content = Counter((r[1], r[2], r[3]) for r in rows)
    by_session: dict[str, list[tuple]] = {}
    for r in sorted(rows):
        by_session.setdefault(r[1], []).append(r)
    user_id = {(r[1], r[3]): r[0] for r in rows if r[2] == "user"}
    problems = []
    for s in result.sent:
        n = by_content[(s.session, "user", s.text)]
        if s.status and n != 1:  # an HTTP answer came: the utterance must be there once
            problems.append(f"{s.text!r} (HTTP {s.status}) stored {n} times")
        if not s.status and n > 1:
            problems.append(f"{s.text!r} (no answer) stored {n} times")
        if s.status == 200 and replies_expected:
            if s.reply != f"re {s.text}":
                problems.append(f"{s.text!r} got the reply {s.reply!r}")
            if by_content[(s.session, "assistant", f"re {s.text}")] != 1:
                problems.append(f"the reply to {s.text!r} is not stored exactly once")
            else:
                seq = by_session[s.session]
                i = next(k for k, r in enumerate(seq) if r[2] == "user" and r[3] == s.text)
                nxt = seq[i + 1] if i + 1 < len(seq) else None
                if not nxt or nxt[2] != "assistant" or nxt[3] != f"re {s.text}":
                    problems.append(f"the reply to {s.text!r} does not follow it")
    # order: within a session, acknowledged-before-sent implies stored-before
    acked = sorted((s for s in result.acked), key=lambda s: s.acked_at)
    for session in {s.session for s in acked}:
        mine = [s for s in result.sent if s.session == session and s.status]
        for a in mine:
            if a.status != 200:
                continue
            for b in mine:
                if (
                    b.sent_at > a.acked_at
                    and user_id[(session, b.text)] < user_id[(session, a.text)]
                ):
                    problems.append(f"{b.text!r} was stored before {a.text!r}")
    assert not problems, f"{len(problems)} problems, e.g.: " + "; ".join(problems[:5])
    return {"rows": len(rows), "sessions": len(by_session)}


# -- mixed load: dali, knob and marat at once ---------------------------------------------------
def mixed_handler(error_rate: float = 0.04, seed: int = 11):
    """dali: "re <words>"; marat: first `echo <tag>`, then, seeing its output, a final answer
    naming the tag; scripted 500s at `error_rate`."""
    from tests.plugins.marat.conftest import action, final

    rng, lock = random.Random(seed), threading.Lock()

    def handler(body: dict) -> Reply | str:
        with lock:
            if rng.random() < error_rate:
                return Reply("scripted failure", status=500)
        users = [m for m in body.get("messages") or [] if m.get("role") == "user"]
        last = users[-1]["content"].split("\n\n")[-1]  # merged neighbours: the newest
        if last.startswith("Observation:"):
            return final(f"done {last.split()[-1]}")
        if body.get("stop"):  # marat asks with stop=["\nObservation:"]
            return action(f"echo {last.split()[0]}")
        return f"re {last}"

    return handler


@dataclass
class MixedRun:
    result: LoadResult
    kinds: dict  # id(Sent) -> "dali" | "knob" | "marat"
    stored: dict  # spoken text -> the utterance as stored


def run_mixed(url: str, requests: int, clients: int, prefix: str = "") -> MixedRun:
    """`requests` utterances, a third each to dali (2 sessions), knob (1) and marat (2)."""
    plan = []
    for n in range(requests):
        kind = ("dali", "knob", "marat")[n % 3]
        if kind == "dali":
            plan.append((kind, f"d{n % 2}", f"dali {prefix}u{n} from the load"))
        elif kind == "knob":
            plan.append((kind, "k0", f"knob set max tokens to {1000 + n}"))
        else:
            plan.append((kind, f"m{n % 2}", f"marat {prefix}m{n} please"))
    run = MixedRun(LoadResult(), {}, {t: t.split(" ", 1)[1] for _, _, t in plan})
    todo, lock = iter(plan), threading.Lock()

    def worker() -> None:
        while True:
            with lock:
                item = next(todo, None)
                if item is None:
                    return
                kind, session, spoken = item
                s = Sent(session, spoken, time.monotonic())
                run.result.sent.append(s)
                run.kinds[id(s)] = kind
            s.status, s.reply, s.kind = say(url, session, spoken)
            s.acked_at = time.monotonic()

    started = time.monotonic()
    threads = [threading.Thread(target=worker, daemon=True) for _ in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(300)
    run.result.wall = time.monotonic() - started
    return run


def audit_mixed(db_path: Path, run: MixedRun) -> dict:
    """Every answered utterance stored once; every acknowledged one with its expected reply
    once, after it, no other utterance between (marat's command output between them); per
    session order kept; each acknowledged marat command ran once."""
    conn = sqlite3.connect(f"file:{db_path}?mode=ro", uri=True)
    rows = conn.execute("SELECT id, session, role, content FROM prompts ORDER BY id").fetchall()
    ran = Counter(r[0] for r in conn.execute("SELECT command FROM marat_commands"))
    conn.close()
    utterances = set(run.stored.values())
    by_session: dict[str, list[tuple]] = {}
    for r in rows:
        by_session.setdefault(r[1], []).append(r)
    problems = []
    for s in run.result.sent:
        kind, text = run.kinds[id(s)], run.stored[s.text]
        mine = by_session.get(s.session, [])
        users = [i for i, r in enumerate(mine) if r[2] == "user" and r[3] == text]
        if s.status and len(users) != 1:
            problems.append(f"{s.text!r} (HTTP {s.status}) stored {len(users)} times")
            continue
        if s.status != 200:
            continue
        tag = s.text.split()[1]
        want = {
            "dali": f"re {text}",
            "marat": f"done {tag}",
            "knob": f"max tokens is now {s.text.split()[-1]}.",
        }[kind]
        if s.reply != want:
            problems.append(f"{s.text!r} got {s.reply!r}, not {want!r}")
        replies = [i for i, r in enumerate(mine) if r[2] == "assistant" and r[3] == s.reply]
        if len(replies) != 1 or replies[0] < users[0]:
            problems.append(f"the reply to {s.text!r} is stored {len(replies)} times or before")
            continue
        between = mine[users[0] + 1 : replies[0]]
        if any(r[2] == "user" and r[3] in utterances for r in between):
            problems.append(f"another utterance came between {s.text!r} and its reply")
        if kind == "marat":
            if not any(r[3].startswith("Observation:") and tag in r[3] for r in between):
                problems.append(f"the command output for {s.text!r} is not before its reply")
            if ran[f"echo {tag}"] != 1:
                problems.append(f"the command of {s.text!r} ran {ran[f'echo {tag}']} times")
    for session, mine in by_session.items():
        ids = {r[3]: r[0] for r in mine if r[2] == "user"}
        sent = [s for s in run.result.sent if s.session == session and s.status]
        for a in (a for a in sent if a.status == 200):
            for b in sent:
                if b.sent_at > a.acked_at and ids[run.stored[b.text]] < ids[run.stored[a.text]]:
                    problems.append(f"{b.text!r} was stored before {a.text!r}")
    assert not problems, f"{len(problems)} problems, e.g.: " + "; ".join(problems[:5])
    by_mode = Counter(run.kinds[id(s)] for s in run.result.acked)
    return {"rows": len(rows), "acknowledged_by_mode": dict(by_mode)}


def log_line(*parts: object) -> None:
    print(*parts, file=sys.stderr, flush=True)
