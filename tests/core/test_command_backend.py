"""One backend for every command (daemon.api.command_backend): the configured server, else the
running daemon's embedded model through the daemon, else an embedded server run for the
command; never a hosted API nobody configured. Real processes: the stand-in for a configured
server, the bundled model for the embedded one."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from daemon.backends.embedded import bundled_model_path
from daemon.backends.for_commands import NOT_INSTALLED, embedded_identity
from tests.daemons import ROOT, LiveDaemon, configure, free_port, lmd_in_process

BIN = Path(sys.executable).parent
ALIAS = "smollm2-135m-instruct"
SMALL = {"embedded_context": 2048, "embedded_threads": 1}  # quick to start


def nobody_listens() -> str:
    """A daemon URL where no daemon runs (the default one may be a developer's)."""
    return f"http://127.0.0.1:{free_port()}"


def embedded_home(tmp_path: Path) -> Path:
    home = tmp_path / "lmd-home"
    configure(home, **SMALL)
    return home


def lmd(*args: str, env: dict) -> subprocess.CompletedProcess:
    """The installed `lmd`, as a user runs it."""
    return subprocess.run(
        [str(BIN / "lmd"), *args],
        env={**os.environ, "LMD_TOKENIZER": "estimate", **env},
        capture_output=True,
        text=True,
        timeout=600,
        cwd=ROOT,
    )


def test_a_configured_backend_is_asked_and_named_on_the_first_line(backend, home):
    backend.handler = lambda body: "7"
    ran = lmd_in_process("score", "x", "Is it?", "--home", str(home))
    assert ran.returncode == 0, ran.stderr
    assert ran.stderr.splitlines()[0] == (
        f"lmd: asking {backend.url}, model fake-model (openai_chat_endpoint is set)."
    )
    assert [b["model"] for b in backend.chat_requests] == ["fake-model"]


def test_no_backend_and_no_engine_is_one_sentence(tmp_path, monkeypatch):
    """Nothing configured, and neither a daemon nor the embedded model to run: one sentence
    saying what to install or configure; no request leaves the machine."""
    import daemon.backends.embedded as embedded

    monkeypatch.setattr(embedded, "engine_missing", lambda: "llama-cpp-python is missing")
    monkeypatch.setattr(embedded, "bundled_model_path", lambda: None)
    home = embedded_home(tmp_path)
    for args in (["score", "x", "Is it?"], ["sql", str(tmp_path / "x.db"), "SELECT 1"]):
        if args[0] == "sql":
            import sqlite3

            sqlite3.connect(tmp_path / "x.db").close()
        ran = lmd_in_process(*args, "--home", str(home), env={"LMD_URL": nobody_listens()})
        assert ran.returncode == 1
        assert ran.stderr.strip() == NOT_INSTALLED


def test_a_model_file_that_is_not_there_is_its_own_sentence(tmp_path):
    home = embedded_home(tmp_path)
    model = tmp_path / "missing.gguf"
    model.write_bytes(b"GGUF")
    configure(home, embedded_model_path=str(model))
    model.unlink()  # the file went after it was set
    ran = lmd_in_process("score", "x", "Is it?", "--home", str(home),
                         env={"LMD_URL": nobody_listens()})  # fmt: skip
    assert ran.returncode == 1
    assert len(ran.stderr.strip().splitlines()) == 1  # one sentence, from the settings' check
    assert f"the model file {model} does not exist; set embedded_model_path" in ran.stderr


def test_the_embedded_identity_is_the_file_not_its_name(tmp_path):
    a = tmp_path / "a.gguf"
    a.write_bytes(b"GGUF" + bytes(range(256)) * 10_000)
    b = tmp_path / "b.gguf"
    b.write_bytes(a.read_bytes())
    assert embedded_identity(a) == embedded_identity(b)  # the same bytes, another place
    c = tmp_path / "c.gguf"
    c.write_bytes(a.read_bytes()[:-1] + b"\0")  # the last weight differs
    assert embedded_identity(c) != embedded_identity(a)
    assert embedded_identity(c).startswith(f"embedded:{c.stat().st_size}:")


# -- the real embedded model -------------------------------------------------------------------
@pytest.mark.slow
def test_with_nothing_configured_a_command_runs_the_embedded_model_and_stops_it(tmp_path):
    """A fresh home, no key, no daemon: `lmd score` asks the embedded model, run for the
    command and stopped after it (its folder gone); the reply names the model that answered,
    and the second time the score comes from the cache without starting the model."""
    assert bundled_model_path() is not None, "make test installs the embedded extra"
    home = embedded_home(tmp_path)
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    env = {"LMD_URL": nobody_listens(), "TMPDIR": str(scratch)}
    ran = lmd("score", "This is a test", "Is this a test?", "--json", "--home", str(home), env=env)
    assert ran.returncode in (0, 1), ran.stderr
    first = ran.stderr.splitlines()[0]
    assert first == (
        f"lmd: asking the embedded model {ALIAS}, run for the command as needed (no backend "
        "is configured; `lmd serve` keeps it running between commands)."
    )
    assert list(scratch.iterdir()) == []  # the server stopped and its folder went with it
    if ran.returncode == 1:  # the tiny model gave no score: said, never made up
        assert "did not answer with a score" in ran.stderr
        return
    result = json.loads(ran.stdout)
    assert result["model"] == ALIAS and not result["cached"]
    again = lmd("score", "This is a test", "Is this a test?", "--json", "--home", str(home),
                env=env)  # fmt: skip
    assert json.loads(again.stdout)["cached"] is True
    assert json.loads(again.stdout)["score"] == result["score"]


def tasks_done(daemon_url: str) -> int:
    """How many requests the daemon's embedded server has taken (its slots' last task ids,
    read through the daemon's relay: llama-server numbers its tasks in order)."""
    with urllib.request.urlopen(daemon_url + "/backend/embedded/slots", timeout=60) as r:
        slots = json.loads(r.read())
    return max(slot.get("id_task", -1) for slot in slots)


def post_json(url: str, body: dict) -> dict:
    req = urllib.request.Request(
        url, json.dumps(body).encode(), {"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(req, timeout=300) as r:
        return json.loads(r.read())


@pytest.mark.slow
def test_a_running_daemon_s_embedded_model_answers_commands_through_the_daemon(tmp_path):
    """With `lmd serve` running on the embedded model, a command asks that model through the
    daemon (no second server), and scores the daemon cached are the same model's: served."""
    home = embedded_home(tmp_path)
    d = LiveDaemon(home, {"LMD_TOKENIZER": "estimate"})
    try:
        served = json.loads(urllib.request.urlopen(d.url + "/backend/embedded").read())
        assert served["model"] == ALIAS
        assert served["identity"] == embedded_identity(bundled_model_path())
        said = post_json(d.url + "/lm_score", {"contents": ["A test."], "question": "Is it?"})
        assert said["model"] == ALIAS  # not openai_model: the model that answered
        before = tasks_done(d.url)
        env = {"LMD_URL": d.url}
        ran = lmd_in_process("score", "A test.", "Is it?", "--json", "--home", str(home), env=env)
        assert ran.stderr.splitlines()[0] == (
            f"lmd: asking the embedded model {ALIAS} through the daemon at {d.url} (no "
            "backend is configured)."
        )
        assert json.loads(ran.stdout)["cached"] is True  # the daemon's score: the same model
        ran = lmd_in_process(
            "score", "Another test.", "Is it one?", "--no-cache", "--json", "--home", str(home),
            env=env,
        )  # fmt: skip
        assert ran.returncode in (0, 1), ran.stderr
        if ran.returncode == 0:
            assert json.loads(ran.stdout)["model"] == ALIAS
        # the request reached the daemon's own server, through its relay
        assert tasks_done(d.url) > before
        # a streamed answer comes through as it is made, to its end
        from daemon.api import command_backend, open_daemon_state

        _, store, settings = open_daemon_state(home)
        store.close()
        with command_backend(settings, say=lambda line: None, daemon=d.url) as lmd:
            assert lmd.kind == "daemon"

            async def streamed() -> list[str]:
                llm = lmd.client()
                try:
                    ask = [{"role": "user", "content": "Count to five."}]
                    return [piece async for piece in llm.stream(ask, max_tokens=8)]
                finally:
                    await llm.close()

            import asyncio

            pieces = asyncio.run(streamed())
        assert len(pieces) > 1 and "".join(pieces).strip()
    finally:
        d.stop()
        d.log.close()


def test_the_relay_refuses_when_the_daemon_has_another_backend(backend, home):
    """A daemon on a configured server has no embedded model to lend: 404 with a sentence,
    and a command then asks its own configured backend."""
    d = LiveDaemon(home, {"LMD_TOKENIZER": "estimate"})
    try:
        with pytest.raises(urllib.error.HTTPError) as e:
            urllib.request.urlopen(d.url + "/backend/embedded")
        assert e.value.code == 404
        assert "not the embedded model" in json.loads(e.value.read())["error"]
    finally:
        d.stop()
        d.log.close()


def test_old_cache_rows_without_a_model_identity_are_not_served(backend, home):
    """A database written by an older lmd keyed scores by the configured endpoint and model,
    whatever answered (the embedded SmolLM2's score was served as gpt-4.1-mini's): such rows
    go, and the model is asked."""
    import hashlib
    import sqlite3

    from plugins.lm_score.prompt import prompt_for

    prompt = prompt_for(["x", "Is it?"])
    old_config = {
        "constrain": True, "endpoint": backend.url, "ensemble": False, "max_tokens": 0,
        "method": "text", "model": "fake-model", "thinking": True,
    }  # fmt: skip
    blob = json.dumps({"v": 1, "config": old_config, "prompt": prompt}, sort_keys=True)
    key = hashlib.sha256(blob.encode()).hexdigest()
    db = sqlite3.connect(home / "lmd.db")
    with db:  # as an older lmd left it: its table, its row, no identity migration yet
        db.execute("DELETE FROM _lmd_migrations WHERE name = 'lm_score:cache_identity'")
        db.execute("DROP TABLE lm_score_cache")
        db.execute(
            "CREATE TABLE lm_score_cache (key TEXT PRIMARY KEY, score INTEGER NOT NULL, "
            "result TEXT NOT NULL, created_at REAL NOT NULL)"
        )
        result = {"score": 3, "scores": [3], "members": 1, "requested": 1, "method": "text",
                  "model": "fake-model", "raw": ["3"], "retries": 0, "failures": []}  # fmt: skip
        db.execute("INSERT INTO lm_score_cache VALUES (?, 3, ?, 0)", [key, json.dumps(result)])
    db.close()
    backend.handler = lambda body: "9"
    ran = lmd_in_process("score", "x", "Is it?", "--json", "--home", str(home))
    assert ran.returncode == 0, ran.stderr
    assert (json.loads(ran.stdout)["score"], json.loads(ran.stdout)["cached"]) == (9, False)
    assert len(backend.chat_requests) == 1
    db = sqlite3.connect(home / "lmd.db")
    rows = db.execute("SELECT identity, score FROM lm_score_cache").fetchall()
    db.close()
    assert rows == [(backend.url, 9)]


def test_on_the_embedded_model_a_command_never_files_its_answers_under_another_name(tmp_path):
    """The embedded model answers whatever model id is sent: asked for another model by
    name, a command refuses in one sentence before any request, rather than write SmolLM2's
    answers, verdicts or ratings under that name."""
    home = embedded_home(tmp_path)
    (tmp_path / "questions.csv").write_text("question\nWhat is 2 + 2?\n")
    (tmp_path / "data.jsonl").write_text('{"instruction": "Add 2 and 2.", "output": "4"}\n')
    env = {"LMD_URL": nobody_listens()}
    ran = lmd_in_process("elo", "answer", str(tmp_path / "questions.csv"), "-m", "vicuna-13b",
                         "-o", str(tmp_path / "qa.csv"), "--home", str(home), env=env)  # fmt: skip
    assert ran.returncode == 1
    assert ran.stderr.strip().startswith("The model vicuna-13b is not in the models file ")
    assert ran.stderr.strip().endswith(
        f", and the embedded model answers only as {ALIAS}: name {ALIAS}, or add vicuna-13b "
        "with its server to the models file (docs/elo.md)."
    )
    assert not (tmp_path / "qa.csv").exists()
    ran = lmd_in_process("selectit", str(tmp_path / "data.jsonl"), "--model", "gpt-4",
                         "--home", str(home), env=env)  # fmt: skip
    assert ran.returncode == 1
    assert ran.stderr.strip() == (
        f"The embedded model {ALIAS} answers here, not gpt-4: drop --model (or selectit_model), "
        "or configure a server that serves gpt-4."
    )


def test_a_plugins_command_asks_the_same_backend_through_the_public_api(backend, home):
    """A third-party command uses daemon.api.command_backend as the built-in ones do."""
    import asyncio

    import click
    from click.testing import CliRunner

    from daemon.api import command_backend, open_daemon_state

    @click.command()
    def ask() -> None:
        _, store, settings = open_daemon_state(home)
        store.close()
        with command_backend(settings) as lmd:

            async def go() -> str:
                llm = lmd.client()
                try:
                    return await llm.chat([{"role": "user", "content": "Say hello."}])
                finally:
                    await llm.close()

            click.echo(asyncio.run(go()))

    backend.handler = lambda body: "hello"
    done = CliRunner().invoke(ask, catch_exceptions=False)
    assert done.stderr == (
        f"lmd: asking {backend.url}, model fake-model (openai_chat_endpoint is set).\n"
    )
    assert done.stdout == "hello\n"
    assert backend.chat_requests[-1]["model"] == "fake-model"
