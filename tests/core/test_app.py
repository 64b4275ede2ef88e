"""POST /v1 in-process: reply formats, sessions, directives, storage, and bad input."""

import json
import threading
import time

import pytest

from tests.daemons import configure
from tests.fake_backend import Reply

JSON = {"Accept": "application/json"}


def stored(client, session=None):
    params = {"limit": 100, **({"session": session} if session else {})}
    return client.get("/history", params=params).json()["prompts"]


def test_plain_text_reply_and_what_the_backend_received(client, backend):
    backend.queue("Rayleigh scattering.")
    r = client.post("/v1", content="dali summarise why the sky is blue in one line")
    assert r.status_code == 200
    assert r.headers["content-type"].startswith("text/plain")
    assert r.text == "Rayleigh scattering.\n"
    body = backend.chat_requests[-1]
    assert body["model"] == "fake-model"
    # dali: history plus the instruction, the directive removed, no system decorators
    assert body["messages"] == [
        {"role": "user", "content": "summarise why the sky is blue in one line"}
    ]


def test_json_reply_carries_mode_session_ids_and_pending(client, backend):
    backend.queue("hi there")
    r = client.post("/v1", content="dali hello", headers={**JSON, "X-Session": "kitchen"})
    data = r.json()
    assert data["mode"] == "dali" and data["reply"] == "hi there"
    assert data["session"] == "kitchen" and data["pending"] is None
    rows = stored(client, "kitchen")
    assert [row["id"] for row in rows] == [data["prompt_ids"]["user"], data["prompt_ids"]["reply"]]
    assert [(row["role"], row["content"]) for row in rows] == [
        ("user", "hello"),
        ("assistant", "hi there"),
    ]


def test_history_follows_the_session_and_comes_back_to_the_model(client, backend):
    backend.queue("Blue light scatters more.", "You asked why the sky is blue.")
    client.post("/v1", content="dali why is the sky blue")
    client.post("/v1", content="dali what did I just ask you?")
    assert backend.chat_requests[-1]["messages"] == [
        {"role": "user", "content": "why is the sky blue"},
        {"role": "assistant", "content": "Blue light scatters more."},
        {"role": "user", "content": "what did I just ask you?"},
    ]
    # another session does not see it
    client.post("/v1", content="dali hi", headers={"X-Session": "other"})
    assert backend.chat_requests[-1]["messages"] == [{"role": "user", "content": "hi"}]


def test_session_from_query_and_json_body(client, backend):
    r = client.post("/v1?session=q1", content="hello", headers=JSON)
    assert r.json()["session"] == "q1"
    r = client.post("/v1", json={"input": "dali hello", "session": "j1"}, headers=JSON)
    assert r.json()["session"] == "j1" and r.json()["mode"] == "dali"
    assert backend.chat_requests[-1]["messages"][-1] == {"role": "user", "content": "hello"}


def test_server_sent_events_stream_chunks_and_end_with_done(client, backend):
    backend.queue(Reply("one two three"))
    with client.stream(
        "POST", "/v1", content="dali count", headers={"Accept": "text/event-stream"}
    ) as r:
        assert r.headers["content-type"].startswith("text/event-stream")
        raw = "".join(r.iter_text())
    events = [e for e in raw.split("\n\n") if e]
    data = [json.loads(e[6:]) for e in events if e.startswith("data: ") and e != "data: [DONE]"]
    assert "".join(data) == "one two three" and len(data) == 3
    assert events[-1] == "data: [DONE]"
    outcome = next(e for e in events if e.startswith("event: outcome"))
    assert json.loads(outcome.split("data: ", 1)[1])["reply"] == "one two three"
    assert backend.chat_requests[-1]["stream"] is True
    assert stored(client)[-1]["content"] == "one two three"


def test_a_directive_alone_switches_mode_and_later_utterances_follow_it(make_client, backend):
    from tests.daemons import echo_plugin_manager

    client = make_client(pm=echo_plugin_manager())
    backend.handler = lambda body: body["messages"][-1]["content"]  # the model says it back
    r = client.post("/v1", content="Echo.", headers=JSON)
    assert r.json()["reply"] == "Switched to echo mode." and r.json()["mode"] == "echo"
    r = client.post("/v1", content="say this back", headers=JSON)
    assert r.json()["mode"] == "echo" and r.json()["reply"] == "echo: say this back"
    # a directive word later in the sentence is content
    r = client.post("/v1", content="paint it like dali", headers=JSON)
    assert r.json()["mode"] == "echo" and r.json()["reply"] == "echo: paint it like dali"
    said = [b["messages"][-1]["content"] for b in backend.chat_requests]
    assert said == ["say this back", "paint it like dali"]  # the directive alone asked nothing


def test_idle_session_falls_back_to_default_prompt(make_client, backend, home):
    from tests.daemons import echo_plugin_manager

    client = make_client(pm=echo_plugin_manager())
    client.post("/v1", content="echo hi")
    configure(home, end_session_after_idle_secs=0)
    r = client.post("/v1", content="hello again", headers=JSON)
    assert r.json()["mode"] == "dali"
    configure(home, end_session_after_idle_secs=300, default_prompt="echo")
    r = client.post("/v1", content="hello", headers={**JSON, "X-Session": "new"})
    assert r.json()["mode"] == "echo"


def test_unknown_default_mode_is_explained(make_client):
    client = make_client(default_prompt="nosuchmode")
    r = client.post("/v1", content="hello")
    assert r.status_code == 503
    assert r.text.startswith("The setting default_prompt names the mode 'nosuchmode', which is")
    assert "dali" in r.text and "lmd settings set default_prompt" in r.text


# -- bad input ------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("body", "headers", "status", "words"),
    [
        (b"\xff\xfe dali hi", {}, 400, "not valid UTF-8"),
        (b"", {}, 400, "empty"),
        (b"   \n\t ", {}, 400, "empty"),
        (b"dali \x00 hi", {}, 400, "NUL"),
        (b"{not json", {"content-type": "application/json"}, 400, "not valid JSON"),
        (b'{"text": "hi"}', {"content-type": "application/json"}, 400, '"input" string'),
        (b'["hi"]', {"content-type": "application/json"}, 400, '"input" string'),
        (b"hi", {"X-Session": "bad name!"}, 400, "session name"),
        (b"hi", {"X-Cwd": "relative/dir"}, 400, "absolute path"),
    ],
)
def test_bad_input_gets_one_clear_sentence(client, backend, body, headers, status, words):
    r = client.post("/v1", content=body, headers=headers)
    assert r.status_code == status
    assert words in r.text
    assert r.text.count(".") <= 3 and r.text.endswith("\n")
    assert backend.requests == []  # nothing reached the model
    r = client.post("/v1", content=body, headers={**headers, **JSON})
    assert r.json()["error"] and r.json()["status"] == status


def test_body_over_the_limit_is_413_without_reading_it_all(make_client, backend):
    client = make_client(max_body_bytes=1024)
    r = client.post("/v1", content=b"a" * 2048)
    assert r.status_code == 413 and "max_body_bytes" in r.text

    def chunks():  # no content-length: refused while streaming in
        for _ in range(100):
            yield b"a" * 512

    r = client.post("/v1", content=chunks())
    assert r.status_code == 413
    assert backend.requests == []


@pytest.mark.parametrize(
    ("reply", "status", "words"),
    [
        (Reply("boom", status=500), 502, "failed with HTTP 500"),
        (Reply("slow down", status=429), 502, "rate limiting"),
        (Reply("bad key", status=401), 502, "OPENAI_API_KEY"),
        (Reply("no model", status=404), 502, "openai_model"),
        (Reply(body=b"this is not json"), 502, "could not read"),
        (Reply(delay=2.0), 504, "I waited 0.5 seconds (llm_timeout_secs is 0.5)"),
    ],
)
def test_backend_failures_are_sentences_and_lose_nothing(
    make_client, backend, reply, status, words
):
    # 0.5 s only where the timeout is the point: the first turn of a worker (its client and
    # the capability probe made first) took longer under load and read as a 504
    client = make_client(llm_timeout_secs=0.5 if reply.delay else 30)
    # dali streams; a 200 stream that ends without a word is asked once more without
    # streaming (how llama-cpp-python tells a context overflow): garbage comes twice
    backend.queue(*[reply] * (2 if reply.body is not None else 1))
    r = client.post("/v1", content="dali are you there", headers=JSON)
    assert r.status_code == status
    assert words in r.json()["error"] and r.json()["kind"] == "backend"
    rows = stored(client)
    assert rows[0]["content"] == "are you there" and rows[0]["status"] == "failed"
    assert rows[1]["role"] == "error" and words in rows[1]["content"]
    # the daemon keeps serving, and the failed turn stays out of the next context
    backend.queue("yes")
    assert client.post("/v1", content="dali again").text == "yes\n"
    assert backend.chat_requests[-1]["messages"] == [{"role": "user", "content": "again"}]


def test_backend_down_is_a_502_sentence(make_client, backend):
    backend.stop()
    client = make_client()
    r = client.post("/v1", content="dali hi")
    assert r.status_code == 502 and "could not reach the language model" in r.text
    assert stored(client)[0]["content"] == "hi"


def test_the_user_turn_is_stored_before_the_model_answers(client, backend):
    seen = {}

    def handler(body):
        seen["rows"] = stored(client)  # look at the database while the model "thinks"
        return Reply("done")

    backend.handler = handler
    r = client.post("/v1", content="dali store me first")
    assert r.text == "done\n"
    assert [row["content"] for row in seen["rows"]] == ["store me first"]


def test_same_session_is_serialised_other_sessions_run_in_parallel(client, backend):
    backend.latency = 0.3
    results = []

    def send(session):
        t = time.monotonic()
        client.post("/v1", content="dali hi", headers={"X-Session": session})
        results.append((session, time.monotonic() - t))

    start = time.monotonic()
    threads = [threading.Thread(target=send, args=(s,)) for s in ("a", "b", "c", "d")]
    [t.start() for t in threads]
    [t.join() for t in threads]
    parallel = time.monotonic() - start
    assert backend.max_active >= 2  # different sessions overlapped at the backend
    backend.max_active = 0
    start = time.monotonic()
    threads = [threading.Thread(target=send, args=("same",)) for _ in range(3)]
    [t.start() for t in threads]
    [t.join() for t in threads]
    assert backend.max_active == 1  # one session: one call at a time
    assert time.monotonic() - start >= 0.85
    assert parallel < 1.2
    rows = stored(client, "same")
    assert [r["role"] for r in rows] == ["user", "assistant"] * 3


def test_concurrent_writers_never_lose_a_row(client, backend):
    def send(i):
        client.post("/v1", content=f"dali message {i}", headers={"X-Session": f"s{i % 5}"})

    threads = [threading.Thread(target=send, args=(i,)) for i in range(40)]
    [t.start() for t in threads]
    [t.join() for t in threads]
    contents = [
        r["content"]
        for r in client.get("/history", params={"limit": 1000}).json()["prompts"]
        if r["role"] == "user"
    ]
    assert sorted(contents) == sorted(f"message {i}" for i in range(40))


def test_healthz_does_not_touch_the_backend(client, backend):
    r = client.get("/healthz")
    assert r.status_code == 200 and r.json()["ok"] is True and "dali" in r.json()["modes"]
    assert backend.requests == []


def test_promote_makes_a_prompt_operative(client, backend):
    client.post("/v1", content="dali remember my projects live in ~/code")
    first = stored(client)[0]
    r = client.post(f"/history/{first['id']}/promote")
    assert r.status_code == 200 and r.json()["karma"] == 25000  # operative_karma
    assert stored(client)[0]["kind"] == "operative"
    assert client.post("/history/999/promote").status_code == 404


def test_token_guards_every_route_but_healthz(make_client, backend):
    client = make_client(token="s3cret", peer=False)  # the kernel vouches for nobody here
    assert client.get("/healthz").status_code == 200
    for method, path in [
        ("post", "/v1"),
        ("get", "/settings"),
        ("get", "/history"),
        ("put", "/settings/max_tokens"),
    ]:
        r = getattr(client, method)(path)
        assert r.status_code == 401 and "token" in r.text, path
        r = client.request(method, path, headers={"Authorization": "Bearer wrong"})
        assert r.status_code == 401
    r = client.post("/v1", content="dali hi", headers={"Authorization": "Bearer s3cret"})
    assert r.status_code == 200


def test_foreign_host_and_origin_are_refused_on_loopback(client):
    assert client.get("/settings", headers={"Host": "evil.example:8420"}).status_code == 403
    r = client.get("/settings", headers={"Origin": "http://evil.example"})
    assert r.status_code == 403 and "other web pages" in r.json()["error"]
    # Another port on loopback is another origin (a dev server's page): refused too.
    assert client.get("/settings", headers={"Origin": "http://localhost:3000"}).status_code == 403
    assert client.get("/settings", headers={"Origin": "http://localhost:8420"}).status_code == 200


def test_plain_replies_drop_markdown_fences_unless_raw_is_asked(client, backend):
    reply = "Run this:\n```bash\nls -la\n```\nDone."
    backend.queue(reply, reply, reply)
    assert client.post("/v1", content="dali how").text == "Run this:\nls -la\nDone.\n"
    assert client.post("/v1?raw=1", content="dali how").text == reply + "\n"
    r = client.post("/v1", content="dali how", headers=JSON)
    assert r.json()["reply"] == reply  # JSON clients get the reply as written
