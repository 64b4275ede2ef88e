"""Credentials go only where they were configured. A hostile `.env` in the current directory
(an untrusted checkout) never gets the user's API key: a listener on loopback records every
request's headers and must never see it, for `lmd score`, `lmd sql` and the daemon started
in that directory; the configured endpoint does get it. Generic names in the environment
(MODEL, SERVER_URL, ENSEMBLE ...) change nothing."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from tests.daemons import ROOT, free_port
from tests.fake_backend import FakeBackend

SENTINEL = "sk-SENTINEL-dotenv-3c5e7a9b1d"
GENERIC = {"SERVER_URL": "", "MODEL": "env-model", "ENSEMBLE": "t", "THINKING": "f"}


def headers_seen(listener: FakeBackend) -> list[str]:
    return [json.dumps(dict(r.headers.items())) for r in listener.requests]


def auth(recorded) -> str:
    return {k.lower(): v for k, v in recorded.headers.items()}.get("authorization", "")


@pytest.fixture
def evil():
    """The hostile checkout's listener: it answers like a model and records everything."""
    with FakeBackend() as b:
        b.handler = lambda body: "7"
        yield b


@pytest.fixture
def checkout(tmp_path, evil) -> Path:
    folder = tmp_path / "untrusted-checkout"
    folder.mkdir()
    (folder / ".env").write_text(f"SERVER_URL={evil.url}\nMODEL=evil-model\n")
    return folder


class Ran:
    """What one `lmd` command printed, and its exit code."""

    def __init__(self, result) -> None:
        self.returncode, self.stdout, self.stderr = result.exit_code, result.stdout, result.stderr


def lmd(home: Path, cwd: Path, *args: str, env: dict | None = None) -> Ran:
    """`lmd ARGS` in-process, from the directory `cwd`, with the sentinel key set."""
    from click.testing import CliRunner

    from daemon.cli import cli

    before = os.getcwd()
    os.chdir(cwd)
    try:
        result = CliRunner().invoke(
            cli,
            [*args, "--home", str(home)],
            env={"OPENAI_API_KEY": SENTINEL, **(env or {})},
            catch_exceptions=False,
        )
    finally:
        os.chdir(before)
    return Ran(result)


def company_db(folder: Path) -> Path:
    path = folder / "notes.db"
    with sqlite3.connect(path) as conn:
        conn.execute("CREATE TABLE notes (body TEXT)")
        conn.execute("INSERT INTO notes VALUES ('the invoice is $14,000')")
    return path


def test_cli_sends_the_key_only_to_the_configured_endpoint(home, backend, evil, checkout):
    backend.handler = lambda body: "9"
    db = company_db(checkout)
    query = "SELECT LM_SCORE(body, 'Is it over $5,000?') AS s FROM notes"
    # In the hostile checkout: the file's SERVER_URL gets the file's key (none), never ours.
    score = lmd(home, checkout, "score", "an invoice", "Is it over $5,000?")
    assert score.returncode == 0 and score.stdout == "7\n", score.stderr
    assert f"lmd: ./.env sets SERVER_URL={evil.url}." in score.stderr
    sql = lmd(home, checkout, "sql", str(db), query, "--json")
    assert sql.returncode == 0 and json.loads(sql.stdout) == [{"s": 7}], sql.stderr
    assert len(evil.requests) == 2
    assert all(auth(r) == "Bearer sk-no-key-needed" for r in evil.requests)
    assert [r.body["model"] for r in evil.requests] == ["evil-model", "evil-model"]
    # --no-dotenv, or another directory: the configured endpoint, with the key.
    score = lmd(home, checkout, "score", "an invoice", "Is it over $5,000?", "--no-dotenv")
    assert score.stdout == "9\n", score.stderr
    sql = lmd(home, checkout.parent, "sql", str(db), query, "--json", "--no-cache")
    assert json.loads(sql.stdout) == [{"s": 9}], sql.stderr
    assert [auth(r) for r in backend.requests] == [f"Bearer {SENTINEL}"] * 2
    assert [r.body["model"] for r in backend.requests] == ["fake-model"] * 2
    assert not [h for h in headers_seen(evil) if SENTINEL in h or SENTINEL[3:] in h]


def test_a_dotenv_key_goes_with_its_own_server_only(home, backend, evil, checkout):
    backend.handler = lambda body: "4"
    (checkout / ".env").write_text(f"SERVER_URL={evil.url}\nAPI_TOKEN=sk-the-files-own\n")
    done = lmd(home, checkout, "score", "x", "Is it?", "--no-cache")
    assert done.stdout == "7\n", done.stderr
    assert [auth(r) for r in evil.requests] == ["Bearer sk-the-files-own"]
    # API_TOKEN without SERVER_URL: ignored (it would go to an endpoint it was not set for).
    (checkout / ".env").write_text("API_TOKEN=sk-the-files-own\nTHINKING=f\n")
    done = lmd(home, checkout, "score", "x", "Is it?", "--no-cache")
    assert done.stdout == "4\n", done.stderr
    assert (
        "lmd: API_TOKEN in ./.env is ignored: it goes only to a SERVER_URL from the same file."
        in done.stderr
    )
    assert [auth(r) for r in backend.requests] == [f"Bearer {SENTINEL}"]
    assert backend.requests[0].body["continue_final_message"] is True  # THINKING=f applied
    assert len(evil.requests) == 1


def test_generic_names_in_the_environment_change_nothing(home, backend, evil, tmp_path):
    backend.handler = lambda body: "3"
    env = {**GENERIC, "SERVER_URL": evil.url, "API_TOKEN": "sk-env-token"}
    done = lmd(home, tmp_path, "score", "x", "Is it?", "--no-cache", env=env)
    assert done.stdout == "3\n", done.stderr
    [sent] = backend.requests
    assert sent.body["model"] == "fake-model" and auth(sent) == f"Bearer {SENTINEL}"
    assert "continue_final_message" not in sent.body  # THINKING=f ignored
    assert evil.requests == []
    # The LMD_ names are the way to change them from the environment.
    done = lmd(
        home, tmp_path, "score", "x", "Is it?", "--no-cache", env={"LMD_LM_SCORE_MODEL": "m2"}
    )
    assert done.stdout == "3\n" and backend.requests[-1].body["model"] == "m2"


def test_the_daemon_reads_no_dotenv_in_its_working_directory(home, backend, evil, checkout):
    """Started inside the hostile checkout, with generic names in its environment too."""
    backend.handler = lambda body: "8"
    (checkout / ".env").write_text(
        f"SERVER_URL={evil.url}\nAPI_TOKEN=sk-file\nMODEL=evil-model\nOPENAI_BASE_URL={evil.url}\n"
    )
    port = free_port()
    log = open(checkout.parent / "serve.log", "w+b")  # noqa: SIM115
    proc = subprocess.Popen(
        [sys.executable, "-m", "daemon.cli", "serve", "--home", str(home), "--bind", str(port)],
        cwd=checkout,
        stdout=log,
        stderr=subprocess.STDOUT,
        env={
            **os.environ,
            "PYTHONPATH": str(ROOT),
            "OPENAI_API_KEY": SENTINEL,
            **GENERIC,
            "SERVER_URL": evil.url,
            "LMD_TOKENIZER": "estimate",
        },
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.time() + 60
        while True:
            try:
                urllib.request.urlopen(url + "/healthz", timeout=1).close()
                break
            except OSError:
                if time.time() > deadline or proc.poll() is not None:
                    log.seek(0)
                    raise AssertionError(log.read().decode()) from None
                time.sleep(0.05)
        body = json.dumps({"contents": ["an invoice"], "question": "Is it big?"}).encode()
        req = urllib.request.Request(
            url + "/lm_score", data=body, headers={"Content-Type": "application/json"}
        )
        assert json.loads(urllib.request.urlopen(req, timeout=30).read())["score"] == 8
        assert urllib.request.urlopen(url + "/v1", data=b"dali hello", timeout=30).read()
    finally:
        proc.terminate()
        proc.wait(20)
        log.seek(0)
        output = log.read().decode()
        log.close()
    assert evil.requests == []
    assert [auth(r) for r in backend.requests] == [f"Bearer {SENTINEL}"] * 2
    assert backend.requests[0].body["model"] == "fake-model"
    assert SENTINEL not in output
