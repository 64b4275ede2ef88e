"""daemon/backends/prepared_body.py: prepared bodies send what `create` sends, fail the same way.

Each case runs twice against the real fake backend: once the lean way (the body encoded by
lmd, the first try made by lmd, any failure handed to the SDK's `client.post`), once
through the SDK's `create` (the same LLM with its endpoints switched off); the bodies,
headers, results and error sentences must agree. The whole module runs twice: the first try
over h11 (daemon/backends/lean_http.py: plain-http endpoints and Unix sockets), and over
httpx2 (https endpoints, and clients with event hooks).
"""

from __future__ import annotations

import asyncio
import gzip
import json

import pytest

from daemon.backends.llm import LLM
from daemon.core.errors import BackendError
from tests.fake_backend import Reply

HISTORY = [
    {"role": "system", "content": "Be brief."},
    {"role": "user", "content": 'Grüße, 世界 — "quoted" \\ and\nnewlines'},
    {"role": "assistant", "content": "ok"},
    {"role": "user", "content": "again"},
]


FIRST_TRY = {"by": "h11"}


@pytest.fixture(autouse=True, params=["h11", "httpx2"])
def first_try(request):
    """Which client makes the lean way's first try in this run of the module."""
    FIRST_TRY["by"] = request.param
    yield request.param
    FIRST_TRY["by"] = "h11"


def lmd_llm(url: str, key: str, timeout: float, retries: int) -> LLM:
    llm = LLM(url, key, timeout, retries, "fake-model")
    assert llm._chat is not None and llm._completions is not None
    assert llm._chat.lean is not None  # the fake backend is a plain-http endpoint
    if FIRST_TRY["by"] == "httpx2":
        llm._chat.lean = llm._completions.lean = None
    return llm


def make_llm(backend, fast: bool, retries: int = 0, timeout: float = 5.0) -> LLM:
    llm = lmd_llm(backend.url, "sk-fast", timeout, retries)
    if not fast:
        llm._chat = None
    return llm


def run_both(backend, call, replies=(), **llm_kw):
    """Run `call(llm)` through both paths; return [(result or error, recorded requests)] x2."""
    out = []
    for fast in (True, False):
        backend.clear()
        backend.queue(*replies)

        async def go(fast=fast):
            llm = make_llm(backend, fast, **llm_kw)
            try:
                return await call(llm)
            except BackendError as e:
                return e
            finally:
                await llm.close()

        result = asyncio.run(go())
        out.append((result, list(backend.requests)))
    return out


def test_prepared_bodies_are_on_for_this_sdk(backend):
    llm = make_llm(backend, fast=True)
    assert llm._chat is not None
    asyncio.run(llm.close())


@pytest.mark.parametrize(
    "kwargs",
    [
        {},
        {"stop": ["\nObservation:"]},
        {"temperature": 0.0, "max_tokens": 4, "logprobs": True, "top_logprobs": 5},
        {"n": 3, "temperature": 0.7, "model": "other-model"},
        {"extra_body": {"chat_template_kwargs": {"enable_thinking": False}, "top_k": 3}},
        {"temperature": None, "seed": 7, "response_format": {"type": "json_object"}},
    ],
)
def test_bodies_and_results_match_the_sdk(backend, kwargs):
    reply = Reply("7", logprobs=[("7", -0.1, [("7", -0.1), ("8", -2.5)])])
    (fast, fast_reqs), (sdk, sdk_reqs) = run_both(
        backend, lambda llm: llm.complete(list(HISTORY), **kwargs), replies=[reply]
    )
    assert len(fast_reqs) == len(sdk_reqs) == 1
    assert fast_reqs[0].path == sdk_reqs[0].path == "/v1/chat/completions"
    assert fast_reqs[0].body == sdk_reqs[0].body
    assert fast_reqs[0].body["messages"] == HISTORY
    if "extra_body" in kwargs:
        assert fast_reqs[0].body["chat_template_kwargs"] == {"enable_thinking": False}
    assert type(fast) is type(sdk)
    same = {"created"}  # the fake stamps the time
    assert fast.model_dump(exclude=same) == sdk.model_dump(exclude=same)
    assert fast.choices[0].message.content == "7"


def test_headers_match_the_sdk(backend):
    (_, fast_reqs), (_, sdk_reqs) = run_both(backend, lambda llm: llm.chat(HISTORY))
    fast = {k.lower(): v for k, v in fast_reqs[0].headers.items()}
    sdk = {k.lower(): v for k, v in sdk_reqs[0].headers.items()}
    assert fast["authorization"] == "Bearer sk-fast"
    ignore = {"content-length", "host"}
    assert {k: v for k, v in fast.items() if k not in ignore} == {
        k: v for k, v in sdk.items() if k not in ignore
    }


@pytest.mark.parametrize(
    "reply",
    [
        Reply("boom", status=500),
        Reply("slow down", status=429),
        Reply("bad key", status=401),
        Reply("no model", status=404),
        Reply("n is not supported", status=400),
        Reply(body=b"this is not json"),
        Reply(body=b'{"choices": []}'),
        Reply(body=b"[1, 2]"),
        Reply(body="plain words", headers={"Content-Type": "text/plain"}),
        # a compressed refusal, handed to the SDK after the first try decoded it
        Reply(
            status=503,
            body=gzip.compress(b'{"error": {"message": "zipped", "type": "overloaded"}}'),
            headers={"Content-Encoding": "gzip", "Content-Type": "application/json"},
        ),
    ],
)
def test_failures_match_the_sdk(backend, reply):
    async def call(llm):
        return await llm.complete(HISTORY)

    (fast, fast_reqs), (sdk, sdk_reqs) = run_both(backend, call, replies=[reply])
    assert len(fast_reqs) == len(sdk_reqs) == 1
    assert type(fast) is type(sdk)
    if isinstance(sdk, BackendError):
        assert (fast.message, fast.status, fast.detail) == (sdk.message, sdk.status, sdk.detail)
        # lm_score reads the SDK exception behind the sentence (its type and status code)
        assert type(fast.__cause__) is type(sdk.__cause__)
        assert getattr(fast.__cause__, "status_code", None) == getattr(
            sdk.__cause__, "status_code", None
        )
    elif hasattr(sdk, "model_dump"):
        assert fast.model_dump() == sdk.model_dump()
    else:
        assert fast == sdk


def test_retries_follow_the_sdk_policy(backend):
    fails = [
        Reply(status=500, headers={"retry-after-ms": "10"}),
        Reply(status=429, headers={"retry-after-ms": "10"}),
    ]
    (fast, fast_reqs), (sdk, sdk_reqs) = run_both(
        backend, lambda llm: llm.chat(HISTORY), replies=[*fails, "third"], retries=2
    )
    assert fast == sdk == "third"
    assert len(fast_reqs) == len(sdk_reqs) == 3
    assert [r.headers["x-stainless-retry-count"] for r in fast_reqs] == ["0", "1", "2"]
    assert fast_reqs[2].body == sdk_reqs[2].body
    # a refusal that is not worth retrying is not retried
    (fast, fast_reqs), (sdk, sdk_reqs) = run_both(
        backend, lambda llm: llm.chat(HISTORY), replies=[Reply(status=400)], retries=2
    )
    assert len(fast_reqs) == len(sdk_reqs) == 1
    assert fast.message == sdk.message
    # the server may say not to retry
    no = Reply(status=500, headers={"x-should-retry": "false"})
    (fast, fast_reqs), (sdk, sdk_reqs) = run_both(
        backend, lambda llm: llm.chat(HISTORY), replies=[no], retries=2
    )
    assert len(fast_reqs) == len(sdk_reqs) == 1


def test_a_timeout_is_the_same_sentence(backend):
    (fast, fast_reqs), (sdk, _) = run_both(
        backend, lambda llm: llm.chat(HISTORY), replies=[Reply(delay=0.6)], timeout=0.2
    )
    assert isinstance(fast, BackendError) and fast.status == 504
    assert fast.message == sdk.message and "I waited 0.2 seconds" in fast.message
    assert type(fast.__cause__) is type(sdk.__cause__)


def test_an_unreachable_backend_is_the_same_sentence(backend):
    url = backend.url
    backend.stop()
    results = []
    for fast in (True, False):

        async def go(fast=fast):
            llm = lmd_llm(url, "k", 2, 0)
            if not fast:
                llm._chat = None
            try:
                await llm.chat(HISTORY)
            except BackendError as e:
                return e
            finally:
                await llm.close()

        results.append(asyncio.run(go()))
    fast, sdk = results
    assert "could not reach the language model" in fast.message
    assert fast.message == sdk.message and type(fast.__cause__) is type(sdk.__cause__)


def test_unusual_calls_go_through_the_sdk(backend):
    async def call():
        llm = make_llm(backend, fast=True)
        try:
            # extra headers and a per-call timeout are the SDK's business
            text = await llm.chat(HISTORY, extra_headers={"X-Trace": "abc"}, timeout=3)
            assert llm._chat.body(HISTORY, {"model": "m", "extra_headers": {}}) is None
            assert llm._chat.body(HISTORY, {"model": "m", "no_such_parameter": 1}) is None
            assert llm._chat.body(HISTORY, {"model": "m", "temperature": float("nan")}) is None
            return text
        finally:
            await llm.close()

    backend.queue("via sdk")
    assert asyncio.run(call()) == "via sdk"
    rec = backend.requests[-1]
    assert rec.headers["X-Trace"] == "abc"
    assert rec.body == {"messages": HISTORY, "model": "fake-model"}


def test_an_unknown_parameter_is_refused_as_the_sdk_refuses_it(backend):
    async def call(llm):
        return await llm.chat(HISTORY, no_such_parameter=1)

    (fast, fast_reqs), (sdk, _) = run_both(backend, call)
    assert isinstance(fast, BackendError) and fast.message == sdk.message
    assert fast_reqs == []


# -- streams ----------------------------------------------------------------------------------
async def collect(llm: LLM, **kwargs) -> list[str]:
    return [piece async for piece in llm.stream(HISTORY, **kwargs)]


SSE = {"Content-Type": "text/event-stream"}


def sse(*events: dict | str) -> bytes:
    lines = [e if isinstance(e, str) else json.dumps(e) for e in events]
    return "".join(f"data: {line}\n\n" for line in lines).encode()


def delta(text: str) -> dict:
    return {
        "id": "c",
        "object": "chat.completion.chunk",
        "created": 1,
        "model": "m",
        "choices": [{"index": 0, "delta": {"content": text}, "finish_reason": None}],
    }


@pytest.mark.parametrize(
    ("reply", "kwargs"),
    [
        (Reply("one two three four"), {}),
        (Reply("one two three four"), {"temperature": 0.2, "stop": ["x"]}),
        (Reply("one two three four", truncate=2), {}),
        (Reply(chunks=["Grüße ", "世界", "\n", ""]), {}),
        (Reply(body=sse(delta("a"), delta("b"), "[DONE]", delta("after")), headers=SSE), {}),
        # a server that ignores stream=true and answers JSON
        (Reply(body={"id": "c", "object": "chat.completion", "choices": []}), {}),
    ],
)
def test_streams_match_the_sdk(backend, reply, kwargs):
    (fast, fast_reqs), (sdk, sdk_reqs) = run_both(
        backend, lambda llm: collect(llm, **kwargs), replies=[reply]
    )
    if isinstance(sdk, BackendError):  # a stream without finish_reason counts as cut off
        assert isinstance(fast, BackendError) and fast.message == sdk.message
        assert "cut off" in fast.message
    else:
        assert fast == sdk and fast  # the same pieces, and some
    assert fast_reqs[0].body == sdk_reqs[0].body
    assert fast_reqs[0].body["stream"] is True and fast_reqs[0].body["messages"] == HISTORY


@pytest.mark.parametrize(
    "reply",
    [
        Reply("boom", status=500),
        Reply("slow down", status=429),
        Reply(body=sse(delta("a"), {"error": {"message": "overloaded"}}), headers=SSE),
        Reply(body=sse(delta("a"), {"error": "bare"}), headers=SSE),
        Reply(body=sse(delta("a"), "not json"), headers=SSE),
    ],
)
def test_stream_failures_match_the_sdk(backend, reply):
    (fast, fast_reqs), (sdk, sdk_reqs) = run_both(backend, collect, replies=[reply])
    assert len(fast_reqs) == len(sdk_reqs) == 1
    assert isinstance(fast, BackendError) and isinstance(sdk, BackendError)
    assert (fast.message, fast.status, fast.detail) == (sdk.message, sdk.status, sdk.detail)
    assert type(fast.__cause__) is type(sdk.__cause__)


# -- legacy completions (SelectIT's base-model ratings) ------------------------------------------
PROMPT = 'Rate this: Grüße, 世界 — "quoted" \\ and\nnewlines\nRating:'


def test_prepared_completion_bodies_are_on_for_this_sdk(backend):
    llm = make_llm(backend, fast=True)
    assert llm._completions is not None
    assert llm._completions.path == "/completions"
    assert llm._chat.path == "/chat/completions"
    selectit = {"model": "m", "max_tokens": 1, "temperature": 0, "logprobs": 20}
    assert json.loads(llm._completions.body(PROMPT, selectit)) == {
        **selectit,
        "prompt": PROMPT,
    }
    asyncio.run(llm.close())


def completions_both(backend, call, replies=()):
    """Like run_both, but the SDK run switches off the completions fast path."""
    out = []
    for fast in (True, False):
        backend.clear()
        backend.queue(*replies)

        async def go(fast=fast):
            llm = make_llm(backend, fast=True)
            if not fast:
                llm._completions = None
            try:
                return await call(llm)
            except BackendError as e:
                return e
            finally:
                await llm.close()

        out.append((asyncio.run(go()), list(backend.requests)))
    return out


@pytest.mark.parametrize(
    "kwargs",
    [
        {},
        {"max_tokens": 1, "temperature": 0, "logprobs": 5},  # SelectIT's call
        {"max_tokens": 1, "temperature": 0, "logprobs": 20, "model": "other-model"},
        {"stop": ["\n"], "echo": False, "seed": 7, "n": 2},
        {"extra_body": {"top_k": 3}, "temperature": None},
    ],
)
def test_completion_bodies_and_results_match_the_sdk(backend, kwargs):
    top = [("4", -0.5), (" 5", -1.0)]
    reply = Reply("4", logprobs=[("4", -0.5, top)])
    (fast, fast_reqs), (sdk, sdk_reqs) = completions_both(
        backend, lambda llm: llm.completion(PROMPT, **kwargs), replies=[reply]
    )
    assert len(fast_reqs) == len(sdk_reqs) == 1
    assert fast_reqs[0].path == sdk_reqs[0].path == "/v1/completions"
    assert fast_reqs[0].body == sdk_reqs[0].body
    assert fast_reqs[0].body["prompt"] == PROMPT
    if "extra_body" in kwargs:
        assert fast_reqs[0].body["top_k"] == 3
    fast_h = {k.lower(): v for k, v in fast_reqs[0].headers.items()}
    sdk_h = {k.lower(): v for k, v in sdk_reqs[0].headers.items()}
    ignore = {"content-length", "host"}
    assert {k: v for k, v in fast_h.items() if k not in ignore} == {
        k: v for k, v in sdk_h.items() if k not in ignore
    }
    assert type(fast) is type(sdk) and type(fast).__name__ == "Completion"
    same = {"created"}
    assert fast.model_dump(exclude=same) == sdk.model_dump(exclude=same)
    assert fast.choices[0].text == "4"
    if "logprobs" in kwargs:
        assert fast.choices[0].logprobs.top_logprobs[0] == {"4": -0.5, " 5": -1.0}


@pytest.mark.parametrize(
    "reply",
    [
        Reply("boom", status=500),
        Reply("bad key", status=401),
        Reply("no model", status=404),
        Reply("logprobs must be at most 5", status=400),
        Reply(body=b"this is not json"),
        Reply(body=b'{"choices": []}'),
        Reply(body="plain words", headers={"Content-Type": "text/plain"}),
    ],
)
def test_completion_failures_match_the_sdk(backend, reply):
    (fast, fast_reqs), (sdk, sdk_reqs) = completions_both(
        backend, lambda llm: llm.completion(PROMPT, max_tokens=1), replies=[reply]
    )
    assert len(fast_reqs) == len(sdk_reqs) == 1
    assert type(fast) is type(sdk)
    if isinstance(sdk, BackendError):
        assert (fast.message, fast.status, fast.detail) == (sdk.message, sdk.status, sdk.detail)
        assert type(fast.__cause__) is type(sdk.__cause__)
    elif hasattr(sdk, "model_dump"):
        assert fast.model_dump() == sdk.model_dump()
    else:
        assert fast == sdk


def test_unusual_completions_go_through_the_sdk(backend):
    async def call():
        llm = make_llm(backend, fast=True)
        try:
            fast = llm._completions
            assert fast.body(PROMPT, {"model": "m", "stream": True}) is None
            assert fast.body(PROMPT, {"model": "m"}, stream=True) is None
            assert fast.body(PROMPT, {"model": "m", "messages": []}) is None  # a chat argument
            assert fast.body(PROMPT, {"model": "m", "extra_query": {"a": "b"}}) is None
            return await llm.completion(PROMPT, extra_headers={"X-Trace": "abc"})
        finally:
            await llm.close()

    backend.queue("via sdk")
    result = asyncio.run(call())
    assert result.choices[0].text == "via sdk"
    rec = backend.requests[-1]
    assert rec.headers["X-Trace"] == "abc"
    assert rec.body == {"prompt": PROMPT, "model": "fake-model"}


def test_an_unknown_completion_parameter_is_refused_as_the_sdk_refuses_it(backend):
    (fast, fast_reqs), (sdk, _) = completions_both(
        backend, lambda llm: llm.completion(PROMPT, no_such_parameter=1)
    )
    assert isinstance(fast, BackendError) and fast.message == sdk.message
    assert fast_reqs == []
