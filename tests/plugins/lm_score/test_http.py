"""POST /lm_score in-process and through a live daemon, and plugins.lm_score.client.LM_SCORE."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.daemons import ROOT, configure
from tests.fake_backend import Reply

from .conftest import GOLDEN_INVOICE_PROMPT

INVOICE = {
    "contents": ["Weekly invoice 12/12/2022", "$14,000"],
    "question": "Is my invoice greater than $5,000?",
}


def test_post_lm_score_sends_the_spec_prompt(client, backend):
    backend.queue("Score: 10")
    r = client.post("/lm_score", json=INVOICE)
    assert r.status_code == 200, r.text
    data = r.json()
    assert data["score"] == 10 and data["scores"] == [10] and data["members"] == 1
    assert data["method"] == "text" and data["model"] == "fake-model"
    assert backend.chat_requests[-1]["messages"] == [
        {"role": "user", "content": GOLDEN_INVOICE_PROMPT}
    ]


def test_post_a_ready_prompt_as_the_spec_server_does(client, backend):
    backend.queue("3")
    r = client.post("/lm_score", json={"prompt": "My own prompt.\nScore:"})
    assert r.json()["score"] == 3
    assert backend.chat_requests[-1]["messages"][0]["content"] == "My own prompt.\nScore:"


def test_settings_shape_the_request(make_client, backend):
    client = make_client(
        lm_score_ensemble="t", lm_score_thinking="f", lm_score_aggregation="avg",
        lm_score_model="scorer-model", lm_score_ensemble_size=3,
    )  # fmt: skip
    backend.queue("6", "7", "9")
    data = client.post("/lm_score", json=INVOICE).json()
    assert data["score"] == 7 and data["aggregation"] == "avg" and data["members"] == 3
    body = backend.chat_requests[-1]
    assert body["model"] == "scorer-model" and body["n"] == 3
    assert body["continue_final_message"] is True and body["add_generation_prompt"] is False


def test_the_cache_answers_repeats_unless_told_not_to(client, backend):
    backend.handler = lambda body: Reply("8")
    assert client.post("/lm_score", json=INVOICE).json()["cached"] is False
    assert client.post("/lm_score", json=INVOICE).json()["cached"] is True
    assert len(backend.chat_requests) == 1
    assert client.post("/lm_score", json={**INVOICE, "cache": False}).json()["cached"] is False
    assert len(backend.chat_requests) == 2


@pytest.mark.parametrize(
    "body, status, sentence",
    [
        ({"contents": [], "question": "Is it?"}, 400, "at least two arguments"),
        ({"contents": ["x"], "question": ""}, 400, "question is empty"),
        ({"contents": ["x"]}, 400, 'needs a "question"'),
        ({"question": "Is it?"}, 400, '"contents", a list of texts'),
        ({"contents": ["x"], "question": 3}, 400, "must be the question as text"),
        ({"prompt": ""}, 400, '"prompt" must be the full prompt text'),
        (["x", "Is it?"], 400, "Send a JSON object"),
        ({"contents": ["x"], "question": "Is it?", "cache": "no"}, 400, '"cache" must be'),
    ],
)
def test_bad_bodies_get_one_sentence(client, backend, body, status, sentence):
    r = client.post("/lm_score", json=body)
    assert r.status_code == status
    assert sentence in r.json()["error"]
    assert backend.requests == []


def test_body_that_is_not_json(client):
    r = client.post("/lm_score", content=b"{not json", headers={"content-type": "application/json"})
    assert r.status_code == 400 and "not valid JSON" in r.json()["error"]


def test_question_over_the_body_limit_is_413(make_client, backend):
    client = make_client(max_body_bytes=2048)
    r = client.post("/lm_score", json={"contents": ["x"], "question": "Is it " * 1000 + "?"})
    assert r.status_code == 413 and "larger than 2048 bytes" in r.json()["error"]
    assert backend.requests == []


def test_huge_contents_are_413_by_token_count(make_client, backend):
    client = make_client(lm_score_max_prompt_tokens=500)
    r = client.post("/lm_score", json={"contents": ["lorem ipsum " * 400], "question": "Is it?"})
    assert r.status_code == 413
    assert "more than the scoring budget of 500 (lm_score_max_prompt_tokens)" in r.json()["error"]
    assert backend.requests == []


def test_a_model_that_cannot_answer_is_422_with_the_raw_reply(client, backend):
    backend.handler = lambda body: Reply("I cannot answer that question.")
    r = client.post("/lm_score", json=INVOICE)
    assert r.status_code == 422
    data = r.json()
    assert "did not answer with a score from 0 to 10" in data["error"]
    assert "I cannot answer that question." in data["error"]
    assert data["detail"]["raw"] == ["I cannot answer that question."]
    assert len(backend.chat_requests) == 2


def test_backend_429_is_429(client, backend):
    backend.handler = lambda body: Reply("slow down", status=429)
    r = client.post("/lm_score", json=INVOICE)
    assert r.status_code == 429 and "rate limiting" in r.json()["error"]


def test_importing_the_client_stays_light():
    code = (
        "import sys, plugins.lm_score.client as c; assert callable(c.LM_SCORE);"
        "heavy = [m for m in ('openai', 'numpy', 'starlette', 'tiktoken', 'httpx', 'tqdm')"
        " if m in sys.modules]; print(heavy)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"


def test_live_daemon_route_and_LM_SCORE(live, backend, home):  # noqa: N802
    import urllib.request

    from plugins.lm_score.client import LM_SCORE, ClientError

    configure(home, lm_score_ensemble="t", lm_score_ensemble_size=3)
    backend.handler = lambda body: Reply("10") if "Is this a test?" in str(body) else Reply("3")
    d = live()
    req = urllib.request.Request(
        d.url + "/lm_score",
        data=json.dumps(INVOICE).encode(),
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(req, timeout=10) as resp:
        data = json.loads(resp.read())
    assert data["score"] == 3 and data["members"] == 3
    assert LM_SCORE("This is a test", "Is this a test?", url=d.url) == 10
    assert LM_SCORE(b"bytes", 14000.0, None, "Is this a test?", url=d.url) == 10
    sent = backend.chat_requests[-1]["messages"][0]["content"]
    assert "Content: \nbytes\n14000.0\n\n\nProvide" in sent
    assert all(b["n"] == 3 for b in backend.chat_requests)
    with pytest.raises(ClientError, match="at least two arguments") as err:
        LM_SCORE("Is this a test?", url=d.url)
    assert err.value.status == 400
    # lmd score --daemon goes through the same route.
    from click.testing import CliRunner

    from daemon.cli import cli

    out = CliRunner().invoke(cli, ["score", "--daemon", "--url", d.url, "x", "Is this a test?"])
    assert out.exit_code == 0 and out.stdout == "10\n"
    assert out.stderr == f"lmd: asking the daemon at {d.url} (its backend scores).\n"
    out = CliRunner().invoke(cli, ["score", "--daemon", "--url", d.url, "", "   "])
    assert out.exit_code == 1 and "The question is empty" in out.stderr


def test_lmd_env_names_send_scoring_to_a_separate_backend(make_client, backend, monkeypatch):
    """The daemon reads no .env and ignores generic names (SERVER_URL, MODEL, API_TOKEN ...):
    LMD_LM_SCORE_* choose another scoring backend, which gets OPENAI_API_KEY as configured."""
    from tests.fake_backend import FakeBackend

    with FakeBackend() as scoring, FakeBackend() as generic:
        scoring.queue("9")
        monkeypatch.setenv("SERVER_URL", generic.url)  # ignored
        monkeypatch.setenv("API_TOKEN", "sk-generic")  # ignored
        monkeypatch.setenv("MODEL", "generic-model")  # ignored
        monkeypatch.setenv("LMD_LM_SCORE_ENDPOINT", scoring.url)
        monkeypatch.setenv("LMD_LM_SCORE_MODEL", "qwen3-scorer")
        monkeypatch.setenv("LMD_LM_SCORE_THINKING", "f")
        monkeypatch.setenv("OPENAI_API_KEY", "sk-configured")
        client = make_client()
        r = client.post("/lm_score", json=INVOICE)
        assert r.status_code == 200 and r.json()["score"] == 9
        assert r.json()["model"] == "qwen3-scorer"
        [sent] = scoring.requests
        headers = {k.lower(): v for k, v in sent.headers.items()}
        assert headers["authorization"] == "Bearer sk-configured"
        assert sent.body["model"] == "qwen3-scorer" and sent.body["continue_final_message"]
        assert backend.requests == [] and generic.requests == []


@pytest.mark.parametrize(
    "where,names",
    [
        ("dotenv", "SERVER_URL in the .env file"),  # `lmd score` (the daemon reads no .env)
        ("table", "lm_score_endpoint"),
        ("lmd-env", "LMD_LM_SCORE_ENDPOINT"),
    ],
)
def test_an_unreachable_scoring_backend_is_named_by_what_set_it(
    make_client, backend, monkeypatch, tmp_path, where, names
):
    """Issue 14: with SERVER_URL unreachable the error named openai_chat_endpoint."""
    from tests.daemons import closed_port

    down = f"http://127.0.0.1:{closed_port()}/v1"  # nothing listens there
    monkeypatch.chdir(tmp_path)
    settings = {}
    expected = (
        f"I could not reach the scoring model at {down}; check that it is running and that "
        f"{names} is right."
    )
    if where == "dotenv":
        from click.testing import CliRunner

        from daemon.cli import cli

        (tmp_path / ".env").write_text(f"SERVER_URL={down}\n")
        home = make_client().app.daemon.home
        done = CliRunner().invoke(cli, ["score", "x", "Is it?", "--home", str(home)])
        assert done.exit_code == 1 and done.stderr.endswith(expected + "\n")
        assert backend.requests == []
        return
    elif where == "table":
        settings["lm_score_endpoint"] = down
    else:
        monkeypatch.setenv("LMD_LM_SCORE_ENDPOINT", down)
    client = make_client(**settings)
    r = client.post("/lm_score", json=INVOICE)
    assert r.status_code == 502
    assert r.json()["error"] == expected
    assert "openai_chat_endpoint" not in r.text and backend.requests == []


def test_an_unreachable_daemon_backend_is_still_openai_chat_endpoint(make_client, backend):
    from tests.daemons import closed_port

    down = f"http://127.0.0.1:{closed_port()}/v1"
    client = make_client(openai_chat_endpoint=down)
    r = client.post("/lm_score", json=INVOICE)
    assert r.status_code == 502 and r.json()["error"].endswith(
        "check that it is running and that openai_chat_endpoint is right."
    )
