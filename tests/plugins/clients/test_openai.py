"""The OpenAI-compatible endpoint: the official openai client against a live daemon, and every
malformed body answered with an OpenAI-style 400."""

from __future__ import annotations

import json
import signal
import threading
import urllib.error
import urllib.request

import openai
import pytest

from daemon.core.errors import LmdError
from daemon.core.modes import Mode
from daemon.hookspecs import hookimpl
from daemon.http.reply import SHUTDOWN_SENTENCE
from daemon.plugins import load_plugins
from tests.daemons import configure, wait_for
from tests.fake_backend import Reply


def user(text: str) -> list[dict]:
    return [{"role": "user", "content": text}]


@pytest.fixture
def backend(shared_backend):
    """One backend, reset for each test, behind the module's one live daemon."""
    return shared_backend


@pytest.fixture
def oai(shared_daemon):
    """An openai client pointed at the module's live lmd (no retries, so failures show at
    once); the tests that use it only talk to it, each in its own session."""
    return openai.OpenAI(
        base_url=shared_daemon.url + "/v1", api_key="anything", max_retries=0, timeout=20
    )


def test_official_client_non_streaming(oai, backend):
    backend.queue("Paris is the capital of France.")
    done = oai.chat.completions.create(
        model="lmd",
        messages=[
            {"role": "system", "content": "You are an editor plugin."},
            {"role": "user", "content": "an earlier question"},
            {"role": "assistant", "content": "an earlier answer"},
            {"role": "user", "content": "What is the capital of France?"},
        ],
        user="editor",
    )
    assert done.choices[0].message.content == "Paris is the capital of France."
    assert done.choices[0].finish_reason == "stop"
    assert done.object == "chat.completion"
    assert done.model == "lmd"
    assert done.usage.total_tokens == done.usage.prompt_tokens + done.usage.completion_tokens
    sent = backend.chat_requests[-1]
    # Only the last user message is the utterance; lmd's own history replaces the rest.
    assert sent["messages"][-1] == {"role": "user", "content": "What is the capital of France?"}
    assert all("earlier" not in m["content"] for m in sent["messages"])
    # dali streams from the backend even for a whole reply (a timeout then stops the server)
    assert sent["stream"] is True
    extra = done.model_extra["lmd"]
    assert extra["session"] == "editor" and extra["mode"] == "dali"


def test_official_client_streaming(oai, backend):
    backend.queue(Reply("one two three four", chunk_delay=0.01))
    stream = oai.chat.completions.create(
        model="lmd-dali",
        messages=user("count to four"),
        stream=True,
        stream_options={"include_usage": True},
    )
    chunks = list(stream)
    texts = [c.choices[0].delta.content for c in chunks if c.choices and c.choices[0].delta.content]
    assert "".join(texts) == "one two three four"
    assert len(texts) >= 4  # it really streamed, word by word
    assert chunks[0].choices[0].delta.role == "assistant"
    finals = [c for c in chunks if c.choices and c.choices[0].finish_reason]
    assert finals[-1].choices[0].finish_reason == "stop"
    assert chunks[-1].usage is not None and chunks[-1].usage.completion_tokens > 0
    sent = backend.chat_requests[-1]
    assert sent["stream"] is True
    assert sent["messages"][-1]["content"] == "count to four"


def test_session_from_user_field_and_header(oai, backend):
    backend.queue("first answer", "second answer", "other answer")
    oai.chat.completions.create(model="lmd", messages=user("the secret word is ostrich"), user="s1")
    oai.chat.completions.create(model="lmd", messages=user("which word?"), user="s1")
    history = [m["content"] for m in backend.chat_requests[-1]["messages"]]
    assert "the secret word is ostrich" in history and "first answer" in history
    # The X-Session header wins over `user`: a different session has no such history.
    oai.chat.completions.create(
        model="lmd",
        messages=user("which word?"),
        user="s1",
        extra_headers={"X-Session": "elsewhere"},
    )
    history = [m["content"] for m in backend.chat_requests[-1]["messages"]]
    assert "the secret word is ostrich" not in history


def test_models_lists_lmd_and_modes(oai):
    ids = [m.id for m in oai.models.list()]
    assert ids[0] == "lmd" and "lmd-dali" in ids
    assert oai.models.retrieve("lmd-dali").id == "lmd-dali"
    with pytest.raises(openai.NotFoundError) as e:
        oai.models.retrieve("lmd-nosuchmode")
    assert "lmd-dali" in e.value.message


def test_x_cwd_sets_the_session_directory(client, backend, tmp_path):
    backend.queue("ok")
    r = client.post(
        "/v1/chat/completions",
        json={"messages": user("where am I")},
        headers={"X-Cwd": str(tmp_path), "X-Session": "cwd-s"},
    )
    assert r.status_code == 200
    assert client.app.daemon.store.session("cwd-s").cwd == str(tmp_path)
    r = client.post(
        "/v1/chat/completions", json={"messages": user("x")}, headers={"X-Cwd": "rel/dir"}
    )
    assert r.status_code == 400 and r.json()["error"]["param"] == "X-Cwd"
    r = client.post(
        "/v1/chat/completions", json={"messages": user("x")}, headers={"X-Session": "a b"}
    )
    assert r.status_code == 400 and r.json()["error"]["param"] == "X-Session"
    assert backend.chat_requests[-1]["messages"][-1]["content"] == "where am I"


@pytest.mark.parametrize("cwd", ["/tmp\x00/etc", "\x00", "relative\x00/dir"])
def test_x_cwd_with_a_nul_is_refused_with_a_sentence(client, backend, cwd):
    """The same check as /v1's: a NUL never reaches the session (or, later, a command)."""
    r = client.post(
        "/v1/chat/completions",
        json={"messages": user("x")},
        headers={"X-Cwd": cwd, "X-Session": "nul-cwd"},
    )
    assert r.status_code == 400
    assert r.json()["error"] == {
        "message": "The X-Cwd header must be an absolute path.",
        "type": "invalid_request_error",
        "param": "X-Cwd",
        "code": None,
    }
    assert backend.chat_requests == []
    assert client.app.daemon.store.session("nul-cwd").cwd in (None, "")


def test_shutdown_cuts_a_plain_chat_completion_with_a_sentence(home, backend, live):
    """A non-streamed /v1/chat/completions turn is in flight like one on /v1: when shutdown's
    grace runs out both are cut, and each client hears the shutdown sentence in its format."""
    configure(home, shutdown_grace_secs=1)
    d = live()
    backend.handler = lambda body: Reply("too late", delay=8)
    results: dict = {}

    def post(name: str, path: str, body: bytes) -> None:
        req = urllib.request.Request(
            d.url + path,
            data=body,
            headers={"Accept": "application/json", "Content-Type": "application/json"},
            method="POST",
        )
        try:
            with urllib.request.urlopen(req, timeout=30) as r:
                results[name] = (r.status, json.loads(r.read()))
        except urllib.error.HTTPError as e:
            results[name] = (e.code, json.loads(e.read()))

    chat = json.dumps({"model": "lmd", "messages": user("take your time"), "user": "c"})
    plain = json.dumps({"input": "dali take yours too", "session": "p"})
    threads = [
        threading.Thread(target=post, args=("chat", "/v1/chat/completions", chat.encode())),
        threading.Thread(target=post, args=("v1", "/v1", plain.encode())),
    ]
    for t in threads:
        t.start()
    assert wait_for(lambda: len(backend.chat_requests) == 2, 10)
    d.proc.send_signal(signal.SIGTERM)
    assert d.proc.wait(15) == 0, d.output()
    for t in threads:
        t.join(15)
    assert results["chat"] == (
        503,
        {
            "error": {
                "message": SHUTDOWN_SENTENCE,
                "type": "server_error",
                "param": None,
                "code": None,
            }
        },
    )
    assert results["v1"] == (503, {"error": SHUTDOWN_SENTENCE, "kind": "error", "status": 503})


def test_unknown_model_is_not_found(oai, backend):
    with pytest.raises(openai.NotFoundError) as e:
        oai.chat.completions.create(model="gpt-4o", messages=user("hi"))
    assert "lmd-dali" in e.value.message and e.value.code == "model_not_found"
    assert backend.chat_requests == []


def test_bad_body_through_official_client(oai, backend):
    with pytest.raises(openai.BadRequestError) as e:
        oai.chat.completions.create(
            model="lmd",
            messages=[
                {
                    "role": "user",
                    "content": [{"type": "image_url", "image_url": {"url": "http://x/a.png"}}],
                }
            ],
        )
    assert "image" in e.value.message and e.value.body["param"] == "messages[0].content"
    assert backend.chat_requests == []


def test_backend_failure_is_an_openai_error(oai, backend):
    backend.queue(Reply("boom", status=500))
    with pytest.raises(openai.APIStatusError) as e:
        oai.chat.completions.create(model="lmd", messages=user("hello"))
    assert e.value.status_code == 502
    assert "HTTP 500" in e.value.message
    backend.queue(Reply("boom", status=500))
    with pytest.raises(openai.APIStatusError) as e:  # streaming: the status comes first too
        list(oai.chat.completions.create(model="lmd", messages=user("hello"), stream=True))
    assert e.value.status_code == 502


def test_token_is_the_api_key(live, backend):
    """Where the kernel cannot vouch for the client (bound beyond loopback, macOS), the token
    is the API key."""
    d = live(env={"LMD_TOKEN": "a-long-secret-token-1234"}, args=["--no-peer-auth"])
    good = openai.OpenAI(base_url=d.url + "/v1", api_key="a-long-secret-token-1234", max_retries=0)
    backend.queue("fine")
    assert good.chat.completions.create(model="lmd", messages=user("hi")).choices[0].message
    bad = openai.OpenAI(base_url=d.url + "/v1", api_key="wrong", max_retries=0)
    with pytest.raises(openai.AuthenticationError):
        bad.chat.completions.create(model="lmd", messages=user("hi"))


# -- mode selection, in-process with a throwaway mode ---------------------------------------
class EchoPlugin:
    @hookimpl
    def register_modes(self, register):
        async def respond(ctx):
            yield f"echo: {ctx.text}"

        register(Mode("echo", respond))


@pytest.fixture
def echo_client(make_client):
    pm = load_plugins()
    pm.register(EchoPlugin(), name="echo-test")
    return make_client(pm=pm)


def test_model_name_picks_the_mode(echo_client, backend):
    r = echo_client.post(
        "/v1/chat/completions", json={"model": "lmd-echo", "messages": user("hello")}
    )
    assert r.status_code == 200, r.text
    assert r.json()["choices"][0]["message"]["content"] == "echo: hello"
    assert r.json()["lmd"]["mode"] == "echo"
    assert backend.chat_requests == []
    # A directive in the words still wins over the model's mode, as on /v1.
    backend.queue("from dali")
    r = echo_client.post(
        "/v1/chat/completions", json={"model": "lmd-echo", "messages": user("dali, hi there")}
    )
    assert r.json()["choices"][0]["message"]["content"] == "from dali"
    assert backend.chat_requests[-1]["messages"][-1]["content"] == "hi there"


def test_speak_header_strips_markdown(echo_client, backend):
    backend.queue("## Steps\n- run `make`\n- **then** test")
    r = echo_client.post(
        "/v1/chat/completions", json={"messages": user("how?")}, headers={"X-Speak": "1"}
    )
    assert r.json()["choices"][0]["message"]["content"] == "Steps\nrun make\nthen test"


# -- every malformed body: an OpenAI-style 400 and no backend call --------------------------
IMAGE = {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}}
BAD_BODIES = [
    ("not json", "{nope", None),
    ("array body", [1, 2], None),
    ("missing messages", {"model": "lmd"}, "messages"),
    ("empty messages", {"messages": []}, "messages"),
    ("messages a string", {"messages": "hello"}, "messages"),
    ("message not an object", {"messages": ["hello"]}, "messages[0]"),
    ("wrong role", {"messages": [{"role": "robot", "content": "hi"}]}, "messages[0].role"),
    ("missing role", {"messages": [{"content": "hi"}]}, "messages[0].role"),
    ("number content", {"messages": [{"role": "user", "content": 42}]}, "messages[0].content"),
    (
        "object content",
        {"messages": [{"role": "user", "content": {"t": 1}}]},
        "messages[0].content",
    ),
    ("null user content", {"messages": [{"role": "user", "content": None}]}, "messages[0].content"),
    ("image part", {"messages": [{"role": "user", "content": [IMAGE]}]}, "messages[0].content"),
    (
        "text and image parts",
        {"messages": [{"role": "user", "content": [{"type": "text", "text": "see"}, IMAGE]}]},
        "messages[0].content",
    ),
    (
        "audio part",
        {"messages": [{"role": "user", "content": [{"type": "input_audio", "input_audio": {}}]}]},
        "messages[0].content",
    ),
    (
        "bad part",
        {"messages": [{"role": "user", "content": [{"text": "x"}]}]},
        "messages[0].content",
    ),
    (
        "last message not user",
        {"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}]},
        "messages[1].role",
    ),
    ("empty utterance", {"messages": user("   ")}, "messages[0].content"),
    ("NUL in utterance", {"messages": user("a\x00b")}, "messages[0].content"),
    ("negative max_tokens", {"messages": user("hi"), "max_tokens": -1}, "max_tokens"),
    ("zero max_tokens", {"messages": user("hi"), "max_tokens": 0}, "max_tokens"),
    ("absurd max_tokens", {"messages": user("hi"), "max_tokens": 10**12}, "max_tokens"),
    ("string max_tokens", {"messages": user("hi"), "max_tokens": "100"}, "max_tokens"),
    ("float max_tokens", {"messages": user("hi"), "max_tokens": 1.5}, "max_tokens"),
    ("bool max_tokens", {"messages": user("hi"), "max_tokens": True}, "max_tokens"),
    (
        "absurd max_completion_tokens",
        {"messages": user("hi"), "max_completion_tokens": 10**9},
        "max_completion_tokens",
    ),
    (
        "tools",
        {"messages": user("hi"), "tools": [{"type": "function", "function": {"name": "f"}}]},
        "tools",
    ),
    ("logprobs", {"messages": user("hi"), "logprobs": True}, "logprobs"),
    ("json mode", {"messages": user("hi"), "response_format": {"type": "json_object"}}, None),
    ("unknown parameter", {"messages": user("hi"), "frobnicate": 1}, "frobnicate"),
    ("n of two", {"messages": user("hi"), "n": 2}, "n"),
    ("stream not bool", {"messages": user("hi"), "stream": "yes"}, "stream"),
    ("stream_options not object", {"messages": user("hi"), "stream_options": 3}, None),
    ("model not a string", {"model": 42, "messages": user("hi")}, "model"),
    ("user not a string", {"messages": user("hi"), "user": 7}, "user"),
    ("user not a session name", {"messages": user("hi"), "user": "my kitchen!"}, "user"),
]


@pytest.mark.parametrize("name,body,param", BAD_BODIES, ids=[b[0] for b in BAD_BODIES])
def test_bad_bodies_get_openai_400(client, backend, name, body, param):
    raw = body if isinstance(body, str) else json.dumps(body)
    r = client.post(
        "/v1/chat/completions", content=raw, headers={"Content-Type": "application/json"}
    )
    assert r.status_code == 400, r.text
    err = r.json()["error"]
    assert set(err) == {"message", "type", "param", "code"}
    assert err["type"] == "invalid_request_error"
    assert err["message"].endswith(".") and len(err["message"]) < 300
    if param is not None:
        assert err["param"] == param
    assert backend.chat_requests == []


def test_service_survives_bad_bodies(client, backend):
    for _, body, _ in BAD_BODIES:
        client.post("/v1/chat/completions", content=json.dumps(body))
    backend.queue("still here")
    r = client.post("/v1/chat/completions", json={"messages": user("are you ok?")})
    assert r.json()["choices"][0]["message"]["content"] == "still here"


def test_oversized_body_is_413_in_openai_shape(make_client, backend):
    c = make_client(max_body_bytes=200)
    r = c.post("/v1/chat/completions", json={"messages": user("x" * 500)})
    assert r.status_code == 413
    assert "max_body_bytes" in r.json()["error"]["message"]


class FailingPlugin:
    @hookimpl
    def register_modes(self, register):
        async def respond(ctx):
            yield "partial "
            raise LmdError("The tool broke halfway; try again.")

        register(Mode("halfway", respond))


def test_failure_mid_stream_is_an_error_event(make_client, backend):
    pm = load_plugins()
    pm.register(FailingPlugin(), name="halfway-test")
    c = make_client(pm=pm)
    body = {"model": "lmd-halfway", "messages": user("go"), "stream": True}
    with c.stream("POST", "/v1/chat/completions", json=body) as r:
        assert r.status_code == 200  # the first chunk was already on its way
        events = [line[6:] for line in r.iter_lines() if line.startswith("data: ")]
    assert json.loads(events[0])["choices"][0]["delta"]["content"] == "partial "
    assert json.loads(events[-2]) == {
        "error": {
            "message": "The tool broke halfway; try again.",
            "type": "invalid_request_error",
            "param": None,
            "code": None,
        }
    }
    assert events[-1] == "[DONE]"


def test_harmless_editor_fields_are_accepted(client, backend):
    backend.queue("fine")
    body = {
        "model": "lmd",
        "messages": [{"role": "system", "content": [{"type": "text", "text": "be brief"}]}]
        + user("hi"),
        "temperature": 0.2,
        "max_tokens": 4096,
        "stream": False,
        "tool_choice": "auto",
        "response_format": {"type": "text"},
        "prompt_cache_key": "abc",
        "parallel_tool_calls": False,
    }
    r = client.post("/v1/chat/completions", json=body)
    assert r.status_code == 200, r.text
    sent = backend.chat_requests[-1]
    assert sent["messages"][-1]["content"] == "hi"
    assert "temperature" not in sent and "max_tokens" not in sent  # the mode decides
