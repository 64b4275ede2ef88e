"""daemon.backends.llm sends the chat body as given (no SDK transform: it cost ~0.3 ms per message).

These pin what the backend receives and what callers get back, for the arguments features use.
"""

from __future__ import annotations

import asyncio
import time

import pytest

from tests.fake_backend import Reply


def run(coro):
    return asyncio.run(coro)


async def with_llm(backend, fn, timeout: float = 10, retries: int = 0):
    from daemon.backends.llm import LLM

    llm = LLM(backend.url, "sk-test-key-123", timeout, retries, "fake-model")
    try:
        return await fn(llm)
    finally:
        await llm.close()


MESSAGES = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}] * 30


def test_complete_sends_every_argument_and_parses_logprobs(backend):
    import openai

    backend.queue(
        Reply("7", logprobs=[("7", -0.1, [("7", -0.1), ("8", -2.5)])], reasoning="thinking"),
        Reply("8", logprobs=[("8", -0.3, [("8", -0.3)])]),
    )
    response = run(
        with_llm(
            backend,
            lambda llm: llm.complete(
                MESSAGES,
                logprobs=True,
                top_logprobs=2,
                n=2,
                max_tokens=1,
                temperature=0,
                seed=openai.NOT_GIVEN,
                extra_body={"chat_template_kwargs": {"enable_thinking": False}},
                extra_headers={"X-Trace": "abc"},
            ),
        )
    )
    sent = backend.chat_requests[-1]
    assert sent == {
        "model": "fake-model",
        "messages": MESSAGES,
        "logprobs": True,
        "top_logprobs": 2,
        "n": 2,
        "max_tokens": 1,
        "temperature": 0,
        "chat_template_kwargs": {"enable_thinking": False},
    }
    headers = {k.lower(): v for k, v in backend.requests[-1].headers.items()}
    assert headers["x-trace"] == "abc" and headers["authorization"] == "Bearer sk-test-key-123"
    assert [c.message.content for c in response.choices] == ["7", "8"]
    top = response.choices[0].logprobs.content[0].top_logprobs
    assert [(t.token, t.logprob) for t in top] == [("7", -0.1), ("8", -2.5)]
    assert response.choices[0].message.model_extra["reasoning_content"] == "thinking"


def test_model_can_be_chosen_per_call(backend):
    text = run(with_llm(backend, lambda llm: llm.chat(MESSAGES[:1], model="other-model")))
    assert text == "ok" and backend.chat_requests[-1]["model"] == "other-model"


def test_stream_sends_stream_true_and_yields_the_words(backend):
    backend.queue(Reply("one two three"))

    async def collect(llm):
        return [c async for c in llm.stream(MESSAGES[:1], temperature=0.5)]

    assert run(with_llm(backend, collect)) == ["one ", "two ", "three"]
    assert backend.chat_requests[-1] == {
        "model": "fake-model",
        "messages": MESSAGES[:1],
        "temperature": 0.5,
        "stream": True,
        "stream_options": {"include_usage": True},  # the server's own usage, where it has one
    }


def test_per_call_timeout_is_honoured(backend):
    from daemon.core.errors import BackendError

    backend.queue(Reply("late", delay=2))
    started = time.monotonic()
    with pytest.raises(BackendError) as e:
        run(with_llm(backend, lambda llm: llm.chat(MESSAGES[:1], timeout=0.3)))
    assert e.value.status == 504 and time.monotonic() - started < 1.8


def test_retries_still_apply(backend):
    backend.queue(Reply("x", status=503), "after retry")
    text = run(with_llm(backend, lambda llm: llm.chat(MESSAGES[:1]), retries=1))
    assert text == "after retry" and len(backend.chat_requests) == 2
