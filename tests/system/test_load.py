"""Load: concurrent clients on a few sessions against a real `lmd serve`, a backend with
latency and occasional errors; then an audit of the database against what clients saw.

Small here (it runs in `make test`); `make soak` runs benchmarks/bench_load.py bigger.
"""

from __future__ import annotations

import pytest

from tests.daemons import configure, say
from tests.system.load import (
    audit,
    audit_mixed,
    echo_handler,
    mixed_handler,
    run_load,
    run_mixed,
)


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


def test_backend_client_is_imported_by_startup_not_on_the_first_request(home):
    """openai takes ~1 s to import; on the first /v1 it stalled every concurrent request."""
    import subprocess
    import sys

    from tests.daemons import ROOT

    code = (
        "import sys; from starlette.testclient import TestClient; from daemon.http.app import "
        f"create_app; c = TestClient(create_app(home={str(home)!r})); "
        "c.__enter__(); print('openai' in sys.modules); c.__exit__(None, None, None)"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=30
    )
    assert out.stdout.split() == ["True"], out.stderr  # started, and no request made yet


@pytest.mark.slow
def test_mixed_load_dali_knob_and_marat(home, live, backend, tmp_path):
    """Three modes at once: dali replies, knob changes a setting, marat runs a read-only
    command and answers. Every acknowledged turn is stored exactly once with its reply after
    it (marat's command output between them); per session, order is kept; each acknowledged
    marat command ran once; the setting ends at the last acknowledged value."""
    backend.handler = mixed_handler()
    backend.latency = 0.005
    # marat starts where the sandbox may go (as root it runs as nobody, whom /root refuses)
    configure(home, marat_start_dir=str(tmp_path))
    d = live()
    run = run_mixed(d.url, requests=90, clients=6)
    figures = run.result.figures()
    print("mixed load:", figures)
    assert figures["requests"] == 90 and set(figures["errors"]) <= {"http_502_backend"}
    checked = audit_mixed(home / "lmd.db", run)
    print("mixed audit:", checked)
    marat_calls = [b for b in backend.chat_requests if b.get("stop")]
    assert any("Observation:" in m["content"] for b in marat_calls for m in b["messages"])
    knob_acked = sorted(
        (s for s in run.result.acked if run.kinds[id(s)] == "knob"), key=lambda s: s.acked_at
    )
    current = say(d.url, "k0", "knob show max tokens")[1]
    assert current.startswith(f"max tokens is {knob_acked[-1].text.split()[-1]}")
    assert min(checked["acknowledged_by_mode"].values()) >= 20
