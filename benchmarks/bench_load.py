"""Load and crash soak of a real `lmd serve` against the fake backend.

Prints: requests, acknowledged, p50/p95/p99 latency, errors by kind, the ratio of p50 under
load to p50 of one client alone (measured in the same run), and the database audit (every
acknowledged utterance and reply stored exactly once, per-session order kept). With
--crash-loops N it then kills the daemon with SIGKILL mid-load N times, restarting it each
time, and checks integrity and the audit after each. Then (--mixed N) a run mixing dali,
knob setting changes and marat running a read-only command, audited the same way.

    .venv/bin/python benchmarks/bench_load.py                       # small, < 1 minute
    .venv/bin/python benchmarks/bench_load.py --requests 5000 --clients 32 --sessions 16 \
        --crash-loops 10                                            # what `make soak` runs
"""

from __future__ import annotations

import argparse
import os
import sqlite3
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # the tests package: the stand-in backend and the harness

from tests.daemons import LiveDaemon, configure  # noqa: E402
from tests.fake_backend import FakeBackend  # noqa: E402
from tests.system.load import (  # noqa: E402
    BackgroundLoad,
    LoadResult,
    audit,
    audit_mixed,
    echo_handler,
    mixed_handler,
    run_load,
    run_mixed,
)


def start(home: Path) -> LiveDaemon:
    for name in [n for n in os.environ if n.startswith(("LMD_", "OPENAI_"))]:
        del os.environ[name]
    return LiveDaemon(home, {"LMD_TOKENIZER": "estimate"})


def show(title: str, figures: dict) -> None:
    errors = ", ".join(f"{k} {v}" for k, v in sorted(figures["errors"].items())) or "none"
    print(
        f"{title}: {figures['requests']} requests, {figures['acknowledged']} acknowledged in "
        f"{figures['wall_secs']} s ({figures['req_per_sec']}/s); latency p50 "
        f"{figures['p50_ms']} ms, p95 {figures['p95_ms']} ms, p99 {figures['p99_ms']} ms; "
        f"errors: {errors}",
        flush=True,
    )


def integrity(db: Path) -> str:
    conn = sqlite3.connect(db)
    try:
        return conn.execute("PRAGMA integrity_check").fetchone()[0]
    finally:
        conn.close()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--clients", type=int, default=16)
    ap.add_argument("--sessions", type=int, default=8)
    ap.add_argument("--requests", type=int, default=600)
    ap.add_argument("--error-rate", type=float, default=0.03)
    ap.add_argument("--latency", type=float, default=0.01, help="backend seconds per call")
    ap.add_argument("--crash-loops", type=int, default=0)
    ap.add_argument(
        "--mixed", type=int, default=150, help="requests of the dali+knob+marat run (0: none)"
    )
    args = ap.parse_args()

    backend = FakeBackend().start()
    backend.handler = echo_handler(error_rate=args.error_rate)
    backend.latency = args.latency
    with tempfile.TemporaryDirectory() as tmp:
        home = Path(tmp) / "home"
        configure(
            home,
            openai_chat_endpoint=backend.url,
            openai_model="fake-model",
            llm_max_retries=0,
            llm_timeout_secs=30,
        )
        d = start(home)
        try:
            warm = run_load(d.url, clients=1, sessions=1, requests=5, prefix="warm")
            alone = run_load(d.url, clients=1, sessions=1, requests=50, prefix="alone")
            show("one client alone", alone.figures())
            loaded = run_load(d.url, args.clients, args.sessions, args.requests)
            figures = loaded.figures()
            show(f"{args.clients} clients on {args.sessions} sessions", figures)
            base = alone.figures()["p50_ms"] or 1.0
            print(f"p50 under load / p50 alone: {figures['p50_ms'] / base:.2f}x")
            everything = LoadResult(sent=warm.sent + alone.sent + loaded.sent)
            print("audit:", audit(home / "lmd.db", everything), "ok", flush=True)
        finally:
            d.stop()
            d.log.close()

        for loop in range(args.crash_loops):
            d = start(home)
            load = BackgroundLoad(d.url, args.clients, args.sessions, f"crash{loop}")
            # Kill mid-flight, after a varying number of answered calls.
            target = len(backend.chat_requests) + 20 + (loop % 4) * 30
            deadline = time.monotonic() + 30
            while len(backend.chat_requests) < target and time.monotonic() < deadline:
                time.sleep(0.005)
            d.proc.kill()
            d.proc.wait(10)
            result = load.finish()
            d.log.close()
            everything.sent += result.sent
            cut = sum(1 for s in result.sent if not s.status)
            ok = integrity(home / "lmd.db")
            checked = audit(home / "lmd.db", everything)
            print(
                f"crash {loop + 1}: {len(result.acked)} acknowledged before kill -9, {cut} cut; "
                f"integrity {ok}; audit {checked} ok",
                flush=True,
            )
            if ok != "ok":
                return 1
        if args.mixed:
            backend.handler = mixed_handler(error_rate=args.error_rate)
            home = Path(tmp) / "mixed"
            configure(home, openai_chat_endpoint=backend.url, llm_max_retries=0)
            d = start(home)
            try:
                run = run_mixed(d.url, args.mixed, args.clients)
                show(f"dali+knob+marat, {args.clients} clients on 5 sessions", run.result.figures())
                print("mixed audit:", audit_mixed(home / "lmd.db", run), "ok", flush=True)
            finally:
                d.stop()
                d.log.close()
    backend.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
