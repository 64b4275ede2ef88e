"""Crash safety: kill -9 of `lmd serve` in the middle of a load run, restart, check."""

from __future__ import annotations

import sqlite3
import time

import pytest

from tests.daemons import say
from tests.system.load import BackgroundLoad, LoadResult, audit, echo_handler


def integrity(db) -> str:
    conn = sqlite3.connect(db)
    try:
        return conn.execute("PRAGMA integrity_check").fetchone()[0]
    finally:
        conn.close()


@pytest.mark.slow
def test_kill_9_mid_load_loses_no_acknowledged_turn(home, live, backend):
    backend.handler = echo_handler()
    backend.latency = 0.003
    everything = LoadResult()
    loops = 3
    for loop in range(loops):
        d = live()
        load = BackgroundLoad(d.url, clients=6, sessions=3, prefix=f"crash{loop}")
        # Kill once a good number of turns were acknowledged: mid-flight, not at an edge.
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and len(backend.chat_requests) < (loop + 1) * 40:
            time.sleep(0.01)
        d.proc.kill()
        d.proc.wait(5)
        result = load.finish()
        everything.sent += result.sent
        assert result.acked, "nothing was acknowledged before the kill"
        assert any(not s.status for s in result.sent), "the kill cut no request"
        assert integrity(home / "lmd.db") == "ok"
        checked = audit(home / "lmd.db", everything)
        print(
            f"crash loop {loop}: {len(result.acked)} acknowledged, "
            f"{sum(1 for s in result.sent if not s.status)} cut; audit {checked}"
        )
    # After the last crash the daemon starts and serves again.
    d = live()
    backend.handler = None
    backend.queue("back again")
    assert say(d.url, "load0", "dali are you back")[:2] == (200, "back again")
