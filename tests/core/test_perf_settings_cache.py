"""The settings table is cached per connection; every kind of change must still be seen at once."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from daemon.core.store import Store
from tests.daemons import ROOT


def lmd(*args: str, home: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "daemon.cli", *args, "--home", str(home)],
        capture_output=True,
        text=True,
        cwd=ROOT,
    )


def test_another_connection_s_write_is_seen(tmp_path):
    daemon_side = Store(tmp_path / "lmd.db")
    daemon_side.migrate()
    cli_side = Store(tmp_path / "lmd.db")
    first = daemon_side.stored_settings()
    assert first["max_tokens"] == "3500"
    assert daemon_side.stored_settings() is first  # unchanged table: no re-read
    cli_side.set_setting("max_tokens", "1234")
    assert daemon_side.stored_settings()["max_tokens"] == "1234"
    with cli_side.transaction() as db:  # a raw edit inside a transaction, as a tool might do
        db.execute("UPDATE settings SET value = '77' WHERE name = 'max_tokens'")
    assert daemon_side.stored_settings()["max_tokens"] == "77"
    cli_side.close()
    daemon_side.close()


def test_own_writes_are_seen_and_old_snapshots_do_not_change(tmp_path):
    store = Store(tmp_path / "lmd.db")
    store.migrate()
    before = store.stored_settings()
    store.set_setting("max_tokens", "999")
    assert store.stored_settings()["max_tokens"] == "999"
    assert before["max_tokens"] == "3500"  # a snapshot in use by a request stays as it was
    with pytest.raises(TypeError):
        before["max_tokens"] = "1"  # type: ignore[index]  # read-only: the cache is shared
    store.close()


def test_cli_settings_set_reaches_a_running_daemon(client, backend, home):
    """`lmd settings set` in another process takes effect on the next request, no restart."""
    client.post("/v1", content="dali hi")
    assert backend.chat_requests[-1]["model"] == "fake-model"
    done = lmd("settings", "set", "openai_model", "other-model", home=home)
    assert done.returncode == 0, done.stderr
    client.post("/v1", content="dali again")
    assert backend.chat_requests[-1]["model"] == "other-model"
    assert client.get("/settings/openai_model").json()["value"] == "other-model"
    done = lmd("settings", "reset", "openai_model", home=home)
    assert done.returncode == 0, done.stderr
    client.post("/v1", content="dali once more")
    assert backend.chat_requests[-1]["model"] == "gpt-4.1-mini"


def test_cli_settings_set_reaches_a_live_daemon(live, backend, home):
    """The same against a real `lmd serve` process."""
    import httpx

    daemon = live()
    with httpx.Client(base_url=daemon.url) as http:
        assert http.post("/v1", content="dali hi").status_code == 200
        done = lmd("settings", "set", "max_body_bytes", "64", home=home)
        assert done.returncode == 0, done.stderr
        r = http.post("/v1", content="dali " + "x" * 100)
        assert r.status_code == 413 and "larger than 64 bytes" in r.text
    assert len(backend.chat_requests) == 1
