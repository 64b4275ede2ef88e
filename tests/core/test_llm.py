"""The backend client: endpoint forms, standard OpenAI variables, retries."""

import pytest

from daemon.backends.llm import api_key, base_url, endpoint_from
from tests.fake_backend import Reply


@pytest.mark.parametrize(
    ("given", "url"),
    [
        ("http://127.0.0.1:8000/v1", "http://127.0.0.1:8000/v1"),
        ("http://127.0.0.1:8000/v1/", "http://127.0.0.1:8000/v1"),
        ("https://api.openai.com/v1/chat/completions", "https://api.openai.com/v1"),
        ("http://localhost:11434/v1/chat/completions/", "http://localhost:11434/v1"),
    ],
)
def test_base_url_accepts_base_or_full_endpoint(given, url):
    assert base_url(given) == url


def test_endpoint_precedence():
    s = {"openai_chat_endpoint": "http://table:1/v1/chat/completions"}
    assert endpoint_from(s, {}) == "http://table:1/v1"
    assert endpoint_from(s, {"OPENAI_BASE_URL": "http://std:2/v1"}) == "http://std:2/v1"
    # LMD_OPENAI_CHAT_ENDPOINT is already the value in `s` when set (env overrides the table)
    assert (
        endpoint_from(s, {"OPENAI_BASE_URL": "http://std:2/v1", "LMD_OPENAI_CHAT_ENDPOINT": "x"})
        == "http://table:1/v1"
    )


def test_api_key_from_openai_api_key():
    assert api_key({"OPENAI_API_KEY": "sk-abc"}) == "sk-abc"
    assert api_key({}) == "sk-no-key-needed"


def test_openai_variables_reach_the_backend(make_client, backend, monkeypatch, home):
    from tests.daemons import configure

    configure(home, openai_chat_endpoint="http://127.0.0.1:9/v1")  # wrong on purpose
    monkeypatch.setenv("OPENAI_BASE_URL", backend.url)
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-123")
    client = make_client()
    assert client.post("/v1", content="dali hi").text == "ok\n"
    rec = backend.requests[-1]
    assert rec.headers["Authorization"] == "Bearer sk-test-123"
    assert "sk-test-123" not in client.get("/settings").text


def test_retries_follow_llm_max_retries(make_client, backend):
    client = make_client(llm_max_retries=2)
    backend.queue(Reply(status=500), Reply(status=503, headers={"Retry-After": "0"}), "third")
    r = client.post("/v1", content="dali hi")
    assert r.text == "third\n" and len(backend.chat_requests) == 3


def test_model_setting_changes_take_effect_without_restart(client, backend):
    client.put("/settings/openai_model", content="other-model")
    client.post("/v1", content="dali hi")
    assert backend.chat_requests[-1]["model"] == "other-model"
