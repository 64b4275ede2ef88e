"""No silently wrong turn, on the stand-in backend (exact cases): a reply cut by the length
limit is said to be cut, the backend's finish_reason and usage pass through, roles alternate,
a context overflow is trimmed and retried once, an empty stream is asked again, a timeout says
how long the user waited. The same behaviours on the real model: test_real_backend.py."""

from __future__ import annotations

import json

import pytest

from daemon.backends.llm import alternate_roles, context_overflow
from daemon.core.turn import EMPTY_CUT_SENTENCE, EMPTY_SENTENCE, LENGTH_NOTE
from tests.daemons import configure
from tests.fake_backend import Reply

JSON = {"Accept": "application/json"}
LLAMA_CPP = "the request exceeds the available context size, try increasing it"
OPENAI = (
    "This model's maximum context length is 512 tokens. However, you requested 3239 tokens "
    "(3229 in the messages, 10 in the completion). Please reduce the length of the messages."
)


def overflow(message: str) -> Reply:
    body = {"error": {"message": message, "type": "invalid_request_error", "code": None}}
    return Reply(status=400, body=body)


def history(client) -> list[dict]:
    return client.get("/history").json()["prompts"]


def test_a_reply_cut_by_length_is_said_and_stored_as_cut(client, backend):
    backend.queue(Reply("Once upon a time there", finish_reason="length"))
    r = client.post("/v1", content="dali tell me a story", headers=JSON)
    assert r.status_code == 200
    data = r.json()
    assert data["reply"] == "Once upon a time there" + LENGTH_NOTE
    assert data["finish_reason"] == "length"
    reply = history(client)[-1]
    assert reply["status"] == "cut" and reply["content"].endswith(LENGTH_NOTE)
    # a whole answer says nothing of the kind
    backend.queue("The end.")
    r = client.post("/v1", content="dali and then?", headers=JSON)
    assert r.json()["reply"] == "The end." and "finish_reason" not in r.json()


@pytest.mark.parametrize(
    ("finish", "said"), [("stop", EMPTY_SENTENCE), ("length", EMPTY_CUT_SENTENCE)]
)
def test_an_answer_without_a_word_is_said_not_silent(client, backend, finish, said):
    """End of sequence first, or the whole limit spent on hidden reasoning: an empty reply
    would be silence to a voice user. It is a failure that says so, and leaves the context."""
    backend.queue(Reply("", finish_reason=finish))
    r = client.post("/v1", content="dali hello", headers=JSON)
    assert r.status_code == 502 and r.json()["error"] == said
    assert [p["status"] for p in history(client)[-2:]] == ["failed", "error"]
    backend.queue("hi")
    assert client.post("/v1", content="dali again").text == "hi\n"
    assert backend.chat_requests[-1]["messages"] == [{"role": "user", "content": "again"}]
    # the OpenAI endpoint passes the backend's empty answer through as it came
    backend.queue(Reply("", finish_reason=finish))
    r = client.post(
        "/v1/chat/completions",
        json={"model": "lmd", "messages": [{"role": "user", "content": "x"}]},
    )
    choice = r.json()["choices"][0]
    assert r.status_code == 200 and choice["message"]["content"] == ""
    assert choice["finish_reason"] == finish


def test_the_openai_endpoint_passes_finish_reason_and_counts_the_whole_context(client, backend):
    backend.queue("first answer", "second answer")
    client.post("/v1", content="dali " + "an earlier question " * 30)
    client.post("/v1", content="dali another earlier question")
    backend.queue(Reply("Once upon", finish_reason="length"))
    r = client.post(
        "/v1/chat/completions",
        json={"model": "lmd", "messages": [{"role": "user", "content": "go on"}]},
    )
    done = r.json()
    assert done["choices"][0]["finish_reason"] == "length"
    assert done["choices"][0]["message"]["content"] == "Once upon"  # no spoken note here
    sent = backend.chat_requests[-1]["messages"]
    assert len(sent) == 5  # the history went to the backend, not only "go on"
    # the usage is the server's own (streamed, it was asked for with include_usage): the
    # stand-in counts a quarter of the messages' JSON and a token a chunk
    assert backend.chat_requests[-1]["stream_options"] == {"include_usage": True}
    assert done["usage"]["prompt_tokens"] == len(json.dumps(sent)) // 4 > 100
    assert done["usage"]["completion_tokens"] == 2


def test_a_non_streamed_call_reports_the_backends_own_usage(make_client, backend):
    """marat asks without streaming: the backend's own counts come through as they were."""
    client = make_client()
    backend.queue("Thought: done.\nFinal Thought: nothing to run.")
    r = client.post(
        "/v1/chat/completions",
        json={"model": "lmd-marat", "messages": [{"role": "user", "content": "hello"}]},
    )
    sent = backend.requests[-1].body
    expected = len(json.dumps(sent["messages"])) // 4  # how the stand-in counts
    assert r.json()["usage"]["prompt_tokens"] == expected


def test_the_stream_ends_with_the_real_finish_reason(client, backend):
    backend.queue(Reply("a b c", finish_reason="length"))
    r = client.post(
        "/v1/chat/completions",
        json={"model": "lmd", "stream": True, "messages": [{"role": "user", "content": "x"}]},
    )
    events = [json.loads(e[6:]) for e in r.text.split("\n\n") if e.startswith("data: {")]
    assert events[-1]["choices"][0]["finish_reason"] == "length"


def test_roles_alternate_in_what_the_backend_receives(client, backend):
    from daemon.core.store import Store

    # karma pruning can leave neighbours of one role; here they are stored so on purpose
    backend.queue("a1", "a2")
    client.post("/v1", content="dali q1")
    client.post("/v1", content="dali q2")
    store = Store(client.app.daemon.store.path)
    store.add_prompt("default", "assistant", "a3", tokens=1, karma=1000, kind="default")
    store.close()
    backend.queue("ok")
    client.post("/v1", content="dali q3")
    roles = [m["role"] for m in backend.chat_requests[-1]["messages"]]
    assert roles == ["user", "assistant", "user", "assistant", "user"]
    assert backend.chat_requests[-1]["messages"][3]["content"] == "a2\n\na3"


def test_alternate_roles_keeps_tool_messages_apart():
    call = {"role": "assistant", "content": None, "tool_calls": [{"id": "1"}]}
    msgs = [
        {"role": "system", "content": "s"},
        {"role": "user", "content": "a"},
        {"role": "user", "content": "b"},
        call,
        {"role": "tool", "tool_call_id": "1", "content": "out"},
        {"role": "tool", "tool_call_id": "2", "content": "out2"},
        {"role": "assistant", "content": "x"},
    ]
    out = alternate_roles(msgs)
    assert out[1] == {"role": "user", "content": "a\n\nb"}
    assert out[2:] == msgs[3:]


@pytest.mark.parametrize("wording", [LLAMA_CPP, OPENAI])
def test_a_context_overflow_is_trimmed_and_tried_once_more(client, backend, wording):
    for i in range(6):
        backend.queue(f"answer {i}")
        client.post("/v1", content=f"dali question {i}")
    backend.queue(overflow(wording), "fits now")
    r = client.post("/v1", content="dali last question", headers=JSON)
    assert r.status_code == 200 and r.json()["reply"] == "fits now"
    full, trimmed = backend.chat_requests[-2:]
    assert len(trimmed["messages"]) < len(full["messages"])
    assert trimmed["messages"][-1] == {"role": "user", "content": "last question"}
    assert trimmed["messages"] == full["messages"][-len(trimmed["messages"]) :]


def test_an_overflow_that_trimming_cannot_cure_is_named(client, backend):
    backend.queue(overflow(OPENAI))
    r = client.post("/v1", content="dali " + "1234567 " * 100, headers=JSON)
    assert r.status_code == 502
    said = r.json()["error"]
    assert "too long for the model's context (it holds 512 tokens)" in said
    assert "HTTP 400" not in said
    # the session is not stuck: the failed turn is out of the next context
    backend.queue("hello")
    assert client.post("/v1", content="dali hi").text == "hello\n"
    assert backend.chat_requests[-1]["messages"] == [{"role": "user", "content": "hi"}]


def test_overflow_wordings_are_recognised_and_others_are_not():
    class E(Exception):
        def __init__(self, message, status=400, code=None):
            self.message, self.status_code, self.code, self.body = message, status, code, None

    assert context_overflow(E(OPENAI)) == (512, 3239)
    assert context_overflow(E(LLAMA_CPP)) == (None, None)
    assert context_overflow(E("x", code="context_length_exceeded")) == (None, None)
    assert context_overflow(E("Requested tokens (3287) exceed context window of 2048")) == (
        2048,
        3287,
    )
    assert context_overflow(E("model not found")) is None
    assert context_overflow(E(OPENAI, status=500)) is None


def test_an_empty_stream_is_asked_again_without_streaming(client, backend):
    """llama-cpp-python answers a streamed context overflow with an empty 200 stream."""
    backend.queue(Reply(chunks=[], finish_reason=None, truncate=0), overflow(OPENAI))
    r = client.post("/v1", content="dali hi", headers=JSON)
    assert r.status_code == 502 and "too long for the model's context" in r.json()["error"]
    assert "cut off" not in r.json()["error"]
    assert [b.get("stream") for b in backend.chat_requests] == [True, None]


def test_a_timeout_says_how_long_the_user_waited(make_client, backend):
    client = make_client(llm_timeout_secs=0.3, llm_max_retries=2)
    backend.queue(Reply(delay=1.0), Reply(delay=1.0), Reply(delay=1.0))
    r = client.post("/v1", content="dali hi", headers=JSON)
    assert r.status_code == 504
    said = r.json()["error"]
    assert "I waited 0.3 seconds (llm_timeout_secs is 0.3) and cancelled the request" in said
    assert len(backend.chat_requests) == 1  # no retry piled up behind the first


def test_reply_max_tokens_reaches_the_backend(make_client, backend):
    client = make_client(reply_max_tokens=48)
    client.post("/v1", content="dali hi")
    assert backend.chat_requests[-1]["max_tokens"] == 48


def test_the_context_budget_learns_the_servers_window(make_client, backend, home):
    configure(home, max_tokens=100000)
    client = make_client()
    for i in range(4):
        backend.queue(f"answer {i}")
        client.post("/v1", content=f"dali {'word ' * 150}{i}")
    backend.queue(overflow(OPENAI), "fits")
    client.post("/v1", content="dali now")
    daemon = client.app.daemon
    assert daemon.history_budget(daemon.settings()) == 384  # 3/4 of the 512 it said
    backend.queue("again")
    client.post("/v1", content="dali more")
    from daemon.backends import tokens

    sent = backend.chat_requests[-1]["messages"]
    assert sum(tokens.count(m["content"]) for m in sent) <= 384  # budgeted before sending
    assert any("word" in m["content"] for m in backend.chat_requests[-3]["messages"])
