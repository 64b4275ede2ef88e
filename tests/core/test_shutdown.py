"""Graceful shutdown: SIGTERM with a plain, a streaming and a command request in flight."""

from __future__ import annotations

import json
import signal
import threading
import time
import urllib.request

from tests.daemons import (
    COMMAND_MODE,
    configure,
    group_alive,
    install_plugin,
    plugin_env,
    say,
    wait_for,
)
from tests.fake_backend import Reply

# The command's process group (the reaper that ends its tree leads it, not bash itself).
PGID = "ps -o pgid= -p $$ | tr -d ' '"


def _stream(url: str, session: str, text: str, out: dict) -> None:
    req = urllib.request.Request(
        url + "/v1",
        data=text.encode(),
        headers={"X-Session": session, "Accept": "text/event-stream"},
        method="POST",
    )
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            out["status"] = r.status
            out["body"] = r.read().decode()
    except OSError as e:
        out["error"] = str(e)


def test_sigterm_finishes_in_flight_work_and_kills_the_command_group(home, backend, live, tmp_path):
    """Plain and streaming replies finish within the grace; the command is cut, its whole
    process group killed; exit code 0; every utterance stored."""
    configure(home, shutdown_grace_secs=2)
    site = tmp_path / "site"
    install_plugin(site, "lmd_test_runcmd", COMMAND_MODE)
    d = live(env=plugin_env(site))
    pgid_file = tmp_path / "pgid"
    # The plain request's backend answers after 0.8 s; the stream sends 5 chunks 0.15 s apart.
    # (dali streams from the backend either way; the plain client gets the joined reply)
    backend.handler = lambda body: (
        Reply("slow but complete", delay=0.8)
        if body["messages"][-1]["content"] == "take your time"
        else Reply("streamed words arrive one by one ", chunk_delay=0.15)
    )
    results: dict = {}
    stream_out: dict = {}
    threads = [
        threading.Thread(
            target=lambda: results.__setitem__("plain", say(d.url, "plain", "dali take your time"))
        ),
        threading.Thread(target=_stream, args=(d.url, "stream", "dali stream please", stream_out)),
        threading.Thread(
            target=lambda: results.__setitem__(
                "cmd",
                say(d.url, "cmd", f"runcmd {PGID} > {pgid_file}; sleep 60 & sleep 60; echo done"),
            )
        ),
    ]
    for t in threads:
        t.start()
    assert wait_for(lambda: pgid_file.exists() and pgid_file.read_text().strip(), 10)
    assert wait_for(lambda: len(backend.chat_requests) >= 2, 10)
    pgid = int(pgid_file.read_text())
    assert group_alive(pgid)
    started = time.monotonic()
    d.proc.send_signal(signal.SIGTERM)
    code = d.proc.wait(15)
    took = time.monotonic() - started
    for t in threads:
        t.join(15)
    print("shutdown took", round(took, 2), "s; the cut request got", results["cmd"][:1])
    assert code == 0, d.output()
    assert took < 2 + 6, f"shutdown took {took:.1f} s with a 2 s grace"
    assert results["plain"][:2] == (200, "slow but complete")
    assert stream_out.get("status") == 200 and "data: [DONE]" in stream_out["body"]
    chunks = [
        json.loads(line[6:])
        for line in stream_out["body"].splitlines()
        if line.startswith("data: ") and line != "data: [DONE]"
    ]
    assert "".join(c for c in chunks if isinstance(c, str)) == "streamed words arrive one by one "
    # Cut by the grace period, not finished, and told so in a sentence.
    assert results["cmd"][0] == 503
    assert json.loads(results["cmd"][1])["error"] == (
        "lmd is shutting down and stopped this request; say it again once it is back."
    )
    assert wait_for(lambda: not group_alive(pgid), 3), "the command's process group survived"
    assert "lmd stopped." in d.output()
    # Every utterance was stored before the daemon went down.
    import sqlite3

    conn = sqlite3.connect(home / "lmd.db")
    users = {r[0] for r in conn.execute("SELECT content FROM prompts WHERE role = 'user'")}
    conn.close()
    assert {"take your time", "stream please"} <= users
    assert any(u.startswith(PGID) for u in users)
    # The cut command's turn is marked as such, not left looking unanswered.
    conn = sqlite3.connect(home / "lmd.db")
    rows = conn.execute(
        "SELECT role, status, content FROM prompts WHERE session = 'cmd' ORDER BY id"
    ).fetchall()
    conn.close()
    assert [(r[0], r[1]) for r in rows] == [("user", "failed"), ("error", "error")]
    assert rows[1][2].startswith("The daemon stopped before this was finished")


def _processes_running(marker: str) -> list[int]:
    """Live processes whose command line contains `marker` (zombies are gone already)."""
    from pathlib import Path

    found = []
    for proc in Path("/proc").glob("[0-9]*"):
        try:
            cmdline = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode()
            state = (proc / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if marker in cmdline and state != "Z":
            found.append(int(proc.name))
    return found


def test_sigterm_while_marat_runs_a_real_command(home, backend, live, tmp_path):
    """The marat mode itself running `sleep` (in the background too): SIGTERM gives exit 0
    within the grace, the command's process group is killed, nothing is left running."""
    from tests.plugins.marat.conftest import action

    configure(home, shutdown_grace_secs=2, marat_approval="never", marat_command_timeout_secs=60)
    d = live()
    pgid_file = tmp_path / "pgid"
    marker = "31.4159"  # a sleep length no other process on the machine uses
    backend.queue(action(f"{PGID} > {pgid_file}; sleep {marker} & sleep {marker}; echo done"))
    result: dict = {}
    t = threading.Thread(target=lambda: result.update(r=say(d.url, "m", "marat wait a while")))
    t.start()
    assert wait_for(lambda: pgid_file.exists() and pgid_file.read_text().strip(), 10)
    pgid = int(pgid_file.read_text())
    # bash itself and its two sleeps
    assert wait_for(lambda: len(_processes_running(marker)) >= 3, 5), _processes_running(marker)
    assert group_alive(pgid)
    started = time.monotonic()
    d.proc.send_signal(signal.SIGTERM)
    code = d.proc.wait(15)
    took = time.monotonic() - started
    t.join(15)
    print("marat shutdown took", round(took, 2), "s; the client got", result["r"][:2])
    assert code == 0, d.output()
    assert took < 2 + 3, f"shutdown took {took:.1f} s with a 2 s grace"
    assert result["r"][0] == 503
    assert "shutting down" in result["r"][1]
    assert wait_for(lambda: not group_alive(pgid), 3), "the command's process group survived"
    assert wait_for(lambda: not _processes_running(marker), 3), "orphan sleep processes"
    # the model was asked once, with the utterance; the command never finished
    assert len(backend.chat_requests) == 1
    assert "wait a while" in json.dumps(backend.chat_requests[0]["messages"])
