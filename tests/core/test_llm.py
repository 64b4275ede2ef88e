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


def test_model_setting_changes_take_effect_without_restart(make_client, backend):
    client = make_client(token="llm-test-token")
    mine = {"Authorization": "Bearer llm-test-token"}  # which model answers is the user's alone
    assert client.put("/settings/openai_model", content="other-model", headers=mine).is_success
    client.post("/v1", content="dali hi")
    assert backend.chat_requests[-1]["model"] == "other-model"


# -- the server's own truths: usage, context windows, n, deadlines ----------------------------


def _run(coro):
    import asyncio

    return asyncio.run(coro)


async def _with_llm(url, fn, timeout: float = 10, model: str = "fake-model"):
    from daemon.backends.llm import LLM

    llm = LLM(url, "sk-test-key-123", timeout, 0, model)
    try:
        return await fn(llm)
    finally:
        await llm.close()


def test_a_stream_asks_for_the_server_s_usage_and_records_it(backend):
    from daemon.backends import accounting

    backend.queue(Reply("one two three"))

    async def go(llm):
        turn = accounting.begin_turn()
        said = [chunk async for chunk in llm.stream([{"role": "user", "content": "hi"}])]
        return said, turn

    said, turn = _run(_with_llm(backend.url, go))
    assert "".join(said) == "one two three"
    sent = backend.chat_requests[-1]
    assert sent["stream_options"] == {"include_usage": True}
    # the server's counts (the stand-in: a quarter of the body's JSON; one per chunk), not
    # lmd's estimate
    assert turn.measured and turn.completion_tokens == 3
    assert turn.prompt_tokens == len('[{"role": "user", "content": "hi"}]') // 4


def test_a_server_that_refuses_stream_options_is_asked_without_them(backend):
    backend.queue(
        Reply(status=400, body={"error": {"message": "Unrecognized request argument supplied: "
                                                     "stream_options"}}),
        Reply("fine"),
    )  # fmt: skip

    async def go(llm):
        return [c async for c in llm.stream([{"role": "user", "content": "hi"}])]

    assert "".join(_run(_with_llm(backend.url, go))) == "fine"
    first, second = backend.chat_requests[-2:]
    assert "stream_options" in first and "stream_options" not in second


def test_the_deadline_bounds_the_whole_stream_and_keeps_what_was_said(backend):
    """llm_timeout_secs bounds a streamed answer whole, as an answer not streamed: past it the
    stream stops, and what was said comes back on AnswerCut, for the caller to keep as cut."""
    from daemon.core.errors import AnswerCut

    backend.queue(Reply(chunks=["one ", "two ", "three ", "four ", "five"] * 20, chunk_delay=0.1))
    got: list[str] = []

    async def go(llm):
        async for chunk in llm.stream([{"role": "user", "content": "hi"}]):
            got.append(chunk)

    with pytest.raises(AnswerCut) as cut:
        _run(_with_llm(backend.url, go, timeout=0.6))
    assert got and cut.value.said == "".join(got)
    assert len(got) < 100  # stopped, not waited out
    assert "cut off after 0.6 seconds (llm_timeout_secs is 0.6)" in cut.value.message
    assert cut.value.status == 504


def test_a_stream_cut_by_the_server_keeps_what_was_said(backend):
    from daemon.core.errors import AnswerCut

    backend.queue(Reply("one two three four", truncate=2))
    got: list[str] = []

    async def go(llm):
        async for chunk in llm.stream([{"role": "user", "content": "hi"}]):
            got.append(chunk)

    with pytest.raises(AnswerCut) as cut:
        _run(_with_llm(backend.url, go))
    assert cut.value.said == "".join(got) == "one two "


@pytest.mark.parametrize(
    ("status", "body", "window", "asked"),
    [
        # llama.cpp's server, a request longer than a slot's window
        (400, {"error": {"code": 400, "type": "exceed_context_size_error",
                         "message": "request (3239 tokens) exceeds the available context size "
                                    "(2048 tokens), try increasing it",
                         "n_prompt_tokens": 3239, "n_ctx": 2048}}, 2048, 3239),
        (400, {"error": {"code": 400, "type": "exceed_context_size_error",
                         "message": "input (900 tokens) is larger than the max context size "
                                    "(512 tokens). skipping"}}, 512, 900),
        # slots sharing one cache filled it mid-answer
        (500, {"error": {"code": 500, "type": "server_error",
                         "message": "Context size has been exceeded."}}, None, None),
        # OpenAI, vLLM, llama-cpp-python
        (400, {"error": {"message": "This model's maximum context length is 512 tokens. However, "
                                    "you requested 3239 tokens", "code": "context_length_exceeded"
                         }}, 512, 3239),
    ],
)  # fmt: skip
def test_context_refusals_are_read_in_each_server_s_words(backend, status, body, window, asked):
    from daemon.backends.llm import LLM, learned_window

    backend.queue(Reply(status=status, body=body), Reply("shorter"))
    history = [{"role": "user" if i % 2 else "assistant", "content": f"turn {i} " * 20}
               for i in range(9)]  # fmt: skip

    async def go(llm):
        return await llm.chat(history)

    url = backend.url
    assert _run(_with_llm(url, go, model=f"m-{status}-{window}")) == "shorter"
    first, second = backend.chat_requests[-2:]
    assert len(second["messages"]) < len(first["messages"])
    # the window is learned for the backend and model: a client made with another timeout
    # (the daemon makes one per setting) knows it too
    assert learned_window(url, f"m-{status}-{window}") == window
    other = LLM(url, "k", 99, 3, f"m-{status}-{window}")
    assert other.context_window == window
    _run(other.close())


def test_a_server_error_that_is_no_overflow_is_not_taken_for_one(backend):
    backend.queue(Reply(status=500, body={"error": {"message": "Compute error."}}))

    async def go(llm):
        return await llm.chat([{"role": "user", "content": "hi"}])

    from daemon.core.errors import BackendError

    with pytest.raises(BackendError) as e:
        _run(_with_llm(backend.url, go))
    assert "HTTP 500" in e.value.message and len(backend.chat_requests) == 1


def test_n_above_the_server_s_slots_is_asked_as_several_requests(backend):
    """An ensemble's n=5 on a server that gives 2 choices a request: three requests at once
    (2, 2 and 1), their five choices joined in order, their usage added."""
    backend.queue(*(Reply(f"r{i}") for i in range(5)))

    async def go(llm):
        llm.max_n = 2
        return await llm.complete([{"role": "user", "content": "hi"}], n=5)

    response = _run(_with_llm(backend.url, go))
    assert sorted(b["n"] for b in backend.chat_requests) == [1, 2, 2]
    assert [c.index for c in response.choices] == [0, 1, 2, 3, 4]
    assert sorted(c.message.content for c in response.choices) == [f"r{i}" for i in range(5)]
    assert response.usage.completion_tokens == 5


def test_a_schema_answer_s_budget_gets_room_for_its_structure(backend):
    """The caller's max_tokens is for the values; the keys, braces and a grammar's whitespace
    get their own room (a character a token for the keys, as llama.cpp's grammar makes a small
    model write them)."""
    from daemon.backends.llm import with_schema_room

    schema = {"type": "object", "properties": {"score": {"type": "integer"}}}
    fmt = {"type": "json_schema", "json_schema": {"name": "s", "schema": schema}}
    assert with_schema_room({"max_tokens": 16, "response_format": fmt})["max_tokens"] == 41
    assert with_schema_room({"max_tokens": 16}) == {"max_tokens": 16}  # no schema: as given
    backend.queue(Reply('{"score": 7}'))

    backend.queue(Reply('{"score": 7}'))

    async def go(llm):
        asked = [{"role": "user", "content": "rate"}]
        await llm.chat(asked, max_tokens=16, response_format=fmt)  # a server that said no slots
        llm.schema_room = True  # as after a probe of a llama.cpp server (it says its slots)
        return await llm.chat(asked, max_tokens=16, response_format=fmt)

    assert _run(_with_llm(backend.url, go)) == '{"score": 7}'
    assert [b["max_tokens"] for b in backend.chat_requests[-2:]] == [16, 41]


def test_tools_that_do_not_fit_the_context_are_one_sentence(backend):
    """A tool list the server's context cannot hold with the conversation (500 MCP tools took
    28,535 tokens on llama-server): one sentence naming the tools, not a context dump."""
    overflow = {"error": {"code": 400, "type": "exceed_context_size_error",
                          "message": "request (28535 tokens) exceeds the available context "
                                     "size (8192 tokens), try increasing it",
                          "n_prompt_tokens": 28535, "n_ctx": 8192}}  # fmt: skip
    backend.queue(Reply(status=400, body=overflow))
    tools = [{"type": "function", "function": {"name": f"t{i}", "parameters": {}}}
             for i in range(3)]  # fmt: skip

    async def go(llm):
        return await llm.complete([{"role": "user", "content": "hi"}], tools=tools)

    from daemon.core.errors import BackendError

    with pytest.raises(BackendError) as e:
        _run(_with_llm(backend.url, go))
    assert e.value.message.startswith(
        "The 3 tools on offer do not fit in the model's context together with the conversation"
    )
    assert "28535" not in e.value.message
