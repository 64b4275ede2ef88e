"""Secrets across features: protected endpoints and path settings, no paths over HTTP where
none are taken, and the API key in a full live session of every feature."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys

import pytest

from tests.daemons import ROOT
from tests.plugins.selectit.conftest import alpaca, dist_reply


def test_elo_and_lm_score_routes_take_no_paths(make_client, backend):
    """Their options are names and numbers: a path is just text, never opened."""
    backend.handler = lambda body: "7"
    client = make_client()
    r = client.get("/elo/leaderboard", params={"anchor": "../../etc/passwd=1000"})
    assert r.status_code == 200 and "root:" not in r.text  # no battles: nothing to anchor
    r = client.post(
        "/lm_score", json={"contents": ["/etc/passwd"], "question": "Is it fine?", "cache": False}
    )
    assert r.status_code == 200 and r.json()["score"] == 7
    sent = json.dumps(backend.chat_requests)
    assert "/etc/passwd" in sent and "root:" not in sent  # the words went, not the file


def test_openai_chat_endpoint_is_protected(make_client, home, backend):
    """Regression: any local program could repoint the endpoint and receive the API key."""
    client = make_client()
    for name in ("openai_chat_endpoint", "lm_score_endpoint", "elo_models_file"):
        r = client.put(f"/settings/{name}", content="http://127.0.0.1:9/v1")
        assert r.status_code == 403, r.text
        assert f"The setting {name} is protected" in r.json()["error"]
        assert client.delete(f"/settings/{name}").status_code == 403
    row = next(
        s for s in client.get("/settings").json()["settings"] if s["name"] == "openai_chat_endpoint"
    )
    assert row["protected"] is True and row["value"] == backend.url
    secured = make_client(token="t" * 20)
    auth = {"Authorization": "Bearer " + "t" * 20}
    r = secured.put("/settings/openai_chat_endpoint", content=backend.url + "/", headers=auth)
    assert r.status_code == 200, r.text


def test_knob_cannot_repoint_the_endpoint(make_client, backend):
    client = make_client()
    r = client.post(
        "/v1", content="knob set openai_chat_endpoint to http://127.0.0.1:9/v1",
        headers={"Accept": "application/json"},
    )  # fmt: skip
    assert "protected" in r.text, r.text
    row = next(
        s for s in client.get("/settings").json()["settings"] if s["name"] == "openai_chat_endpoint"
    )
    assert row["value"] == backend.url


def test_service_install_writes_no_secret_anywhere(tmp_path):
    """The clients plugin writes only the unit; secrets stay in the 0600 env file the unit
    names (and the user creates)."""
    sentinel = "sk-SENTINEL-service-0123456789"
    env = {**os.environ, "OPENAI_API_KEY": sentinel, "LMD_TOKEN": sentinel + "tok"}
    target = tmp_path / "units"
    cmd = [sys.executable, "-m", "daemon.cli", "service", "install", "--platform", "linux"]
    r = subprocess.run([*cmd, "--dir", str(target), "--no-start"], capture_output=True,
                       text=True, timeout=60, env=env, cwd=ROOT)  # fmt: skip
    assert r.returncode == 0, r.stderr
    written = [p for p in target.rglob("*") if p.is_file()]
    assert written
    for p in written:
        assert sentinel not in p.read_text(), p
        assert not stat.S_IMODE(p.stat().st_mode) & 0o022  # not writable by others
    assert "EnvironmentFile=-%h/.config/lmd/env" in (target / "lmd.service").read_text()
    assert sentinel not in r.stdout + r.stderr
    assert json.dumps(sentinel) not in r.stdout


SENTINEL = "sk-SENTINEL-features-5e7d1c9a3b"


def test_api_key_never_leaks_across_all_features(home, backend, live, tmp_path):
    """marat, cobol, LM_SCORE, SelectIT, Elo, chat completions and propose in one live
    daemon with a sentinel key, DEBUG logs and a backend that echoes the key in its errors:
    the key is in no response, header, log line or CLI output."""
    import urllib.error
    import urllib.request

    from tests.daemons import configure
    from tests.fake_backend import Reply
    from tests.plugins.cobol.conftest import BUILD, FIX_ADD, make_repo
    from tests.plugins.marat.conftest import action, final

    def auth() -> str:
        return backend.requests[-1].headers.get("authorization", "")

    def echoing(body: dict) -> Reply | str:
        text = json.dumps(body)
        if "refuse" in text:
            return Reply(f"Incorrect API key provided: {auth()}", status=401)
        if "break" in text:
            return Reply(f"upstream failed for {auth()}", status=500)
        if body.get("logprobs"):
            return dist_reply({"4": 1.0})
        return "7"

    repo = make_repo(tmp_path / "project")
    configure(home, marat_approval="never", cobol_build_command=BUILD, llm_max_retries=0)
    backend.handler = echoing
    d = live(env={"OPENAI_API_KEY": SENTINEL, "LMD_LOG_LEVEL": "DEBUG"})
    seen: list[str] = []
    statuses: list[tuple[str, int]] = []

    def call(method, path, body=None, headers=None, expect=(200,)):
        data = body if isinstance(body, bytes | None) else json.dumps(body).encode()
        req = urllib.request.Request(d.url + path, data=data, method=method)
        for k, v in {"Accept": "application/json", **(headers or {})}.items():
            req.add_header(k, v)
        if not isinstance(body, bytes | None):
            req.add_header("Content-Type", "application/json")
        try:
            with urllib.request.urlopen(req, timeout=30) as r:
                status, text = r.status, json.dumps(dict(r.headers)) + r.read().decode()
        except urllib.error.HTTPError as e:
            status, text = e.code, json.dumps(dict(e.headers)) + e.read().decode()
        seen.append(text)
        statuses.append((path, status))
        assert status in expect, (method, path, status, text[-500:])
        return text

    # marat: one command run, then a backend echoing the key
    backend.handler = None
    backend.queue(action("ls"), final("Listed."))
    call("POST", "/v1", b"marat list the files", {"X-Session": "m", "X-Cwd": str(repo)})
    backend.handler = echoing
    call("POST", "/v1", b"marat please refuse", {"X-Session": "m2"}, expect=(200, 502))
    assert '"command":"ls"' in call("GET", "/marat/commands").replace(" ", "")
    # cobol: a focus, a rewrite applied, a failing backend
    cwd = {"X-Session": "c", "X-Cwd": str(repo)}
    call("POST", "/v1", b"cobol focus on calc.py lines 1 to 8", cwd)
    backend.handler = None
    backend.queue(FIX_ADD)
    call("POST", "/v1", b"cobol fix the add function", cwd, expect=(200, 400, 409, 422, 502))
    backend.handler = echoing
    call("POST", "/v1", b"cobol now break it", cwd, expect=(200, 400, 409, 422, 502))
    # LM_SCORE, SelectIT, Elo
    call("POST", "/lm_score", {"contents": ["a"], "question": "Is it fine?", "cache": False})
    call("POST", "/lm_score", {"prompt": "break it", "cache": False}, expect=(502, 422))
    call("POST", "/selectit", {"record": alpaca(1)[0], "details": True})
    call("POST", "/selectit", {"instruction": "break", "output": "x"}, expect=(200, 502))
    call("POST", "/elo/battles", {"battles": [{"model_a": "x", "model_b": "y", "winner": "tie"}]})
    call("GET", "/elo/leaderboard?bootstrap=0")
    call("GET", "/elo?bootstrap=0", headers={"Accept": "text/html"})
    # OpenAI-compatible chat, streamed and not, and a refused key; propose
    for stream in (False, True):
        for words in ("hello", "please refuse", "now break"):
            body = {"model": "lmd-dali", "stream": stream,
                    "messages": [{"role": "user", "content": words}]}  # fmt: skip
            session = {"X-Session": f"chat-{stream}-{words.split()[-1]}"}
            want = (200,) if words == "hello" else (502,)
            call("POST", "/v1/chat/completions", body, session, expect=want)
    call("GET", "/v1/models")
    call("POST", "/v1/propose", b"list files", {"Accept": "text/plain"})
    call("POST", "/v1/propose", b"please refuse", {"Accept": "text/plain"}, expect=(502,))
    call("GET", "/settings")
    call("GET", "/history?limit=1000")
    # the key really went out on every call, and the echoing errors really happened
    assert backend.requests and all(
        r.headers.get("authorization") == f"Bearer {SENTINEL}" for r in backend.requests
    )
    assert sum(s >= 500 for _, s in statuses) >= 5, statuses
    env = {**os.environ, "OPENAI_API_KEY": SENTINEL, "LMD_HOME": str(home)}
    for args in (["history", "--json", "--limit", "1000"], ["settings", "list", "--json"],
                 ["marat", "commands", "--json"], ["elo", "leaderboard", "-h"]):  # fmt: skip
        out = subprocess.run([sys.executable, "-m", "daemon.cli", *args], capture_output=True,
                             text=True, env=env, cwd=ROOT, timeout=30)  # fmt: skip
        seen.append(out.stdout + out.stderr)
    d.stop()
    seen.append(d.output())
    assert "DEBUG" in d.output() or "debug" in d.output().lower()
    leaks = [s for s in seen if SENTINEL in s or SENTINEL[3:] in s]
    assert not leaks, leaks[0][:2000]
    assert "[redacted]" in "".join(seen)


@pytest.mark.parametrize("name", ["selectit_rp_file", "marat_start_dir"])
def test_path_settings_are_protected_over_http(make_client, name, tmp_path):
    open_client = make_client()
    r = open_client.put(f"/settings/{name}", content=str(tmp_path))
    assert r.status_code == 403 and f"{name} is protected" in r.json()["error"]
    guarded = make_client(token="tok")
    r = guarded.put(
        f"/settings/{name}", content=str(tmp_path), headers={"Authorization": "Bearer tok"}
    )
    assert r.status_code == 200 and r.json()["value"] == str(tmp_path)
