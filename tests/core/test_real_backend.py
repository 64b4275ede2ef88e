"""The real-model tier for the core's turns: a live daemon on llama.cpp's llama-server with the
bundled SmolLM2-135M-Instruct (the `real_model` fixture). Protocol properties and lmd's
handling only, never the tiny model's answer quality."""

from __future__ import annotations

import json
import threading
import urllib.request
from pathlib import Path

import pytest

from daemon.backends.tokens import estimate
from daemon.core.turn import LENGTH_NOTE
from tests.daemons import LiveDaemon, configure, say, wait_for
from tests.real_model import configure_real_home

pytestmark = pytest.mark.slow
JSON = {"Accept": "application/json"}
CT = {"Content-Type": "application/json"}


@pytest.fixture(scope="module")
def daemon(real_model, tmp_path_factory):
    home = configure_real_home(
        tmp_path_factory.mktemp("real") / "lmd-home", real_model, reply_max_tokens=24
    )
    d = LiveDaemon(home, {"LMD_TOKENIZER": "estimate", "OPENAI_API_KEY": real_model.key})
    yield d
    d.stop()


def post(url: str, body: bytes, headers: dict, timeout: float = 120) -> tuple[int, bytes]:
    req = urllib.request.Request(url, body, headers, method="POST")
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


def test_dali_plain_json_and_sse(daemon):
    status, text = post(daemon.url + "/v1", b"dali Say hello.", {"X-Session": "p"})
    assert status == 200 and text.strip()
    status, body = post(daemon.url + "/v1", b"dali Tell a long story.", {"X-Session": "j", **JSON})
    data = json.loads(body)
    assert status == 200 and data["mode"] == "dali" and data["reply"].strip()
    # 24 tokens of a long story: the server said "length"; the reply says it was cut, and the
    # history keeps it marked as cut
    assert data["finish_reason"] == "length" and data["reply"].endswith(LENGTH_NOTE)
    with urllib.request.urlopen(daemon.url + "/history?session=j", timeout=30) as r:
        stored = json.loads(r.read())["prompts"][-1]
    assert stored["role"] == "assistant" and stored["status"] == "cut"
    assert stored["content"].endswith(LENGTH_NOTE)
    status, body = post(
        daemon.url + "/v1",
        b"dali Count to three.",
        {"X-Session": "s", "Accept": "text/event-stream"},
    )
    events = body.decode().split("\n\n")
    assert status == 200 and events[-2] == "data: [DONE]"
    assert any(e.startswith("data: ") and e != "data: [DONE]" for e in events)


def test_a_long_digit_heavy_history_near_the_context_limit_never_sticks(small_model, tmp_path):
    """Numbers cost a token a digit in this tokenizer (the old estimate said a quarter of
    that): a history over the server's context must still be answered, turn after turn."""
    home = configure_real_home(tmp_path / "h", small_model, reply_max_tokens=8)
    from daemon.core.store import Store

    store = Store(home / "lmd.db")
    numbers = " ".join(str(1000000 + i) for i in range(12))  # ~96 real tokens
    for i in range(6):  # ~600 tokens of history against a 256-token context
        for role, text in (("user", f"note {i}: {numbers}"), ("assistant", f"noted {i}")):
            store.add_prompt("digits", role, text, tokens=estimate(text), karma=1000)
    store.close()
    d = LiveDaemon(home, {"LMD_TOKENIZER": "estimate", "OPENAI_API_KEY": small_model.key})
    try:
        for turn in range(2):
            status, reply, _ = say(d.url, "digits", f"dali What was note {turn}?", timeout=180)
            assert status == 200, reply
        # the window is the server's own word (GET /props): budgeted from the first turn, so
        # at most one refusal (none when the probe ran before the first turn)
        assert d.output().count("context is full") <= 1
        with urllib.request.urlopen(d.url + "/backend", timeout=60) as r:
            assert json.loads(r.read())["context_window"] == 256
    finally:
        d.stop()


def test_openai_endpoint_finish_reason_usage_and_stream(daemon, real_model):
    body = json.dumps(
        {"model": "lmd", "user": "oa", "messages": [{"role": "user", "content": "Tell a story."}]}
    ).encode()
    status, raw = post(
        daemon.url + "/v1/chat/completions", body, {"Content-Type": "application/json"}
    )
    done = json.loads(raw)
    assert status == 200
    choice = done["choices"][0]
    assert choice["finish_reason"] in ("stop", "length")
    assert LENGTH_NOTE not in choice["message"]["content"]
    # the usage counts what went to the server (template aside), not only "Tell a story."
    assert done["usage"]["prompt_tokens"] >= 4
    assert done["usage"]["completion_tokens"] >= 1
    stream = json.dumps(
        {"model": "lmd", "user": "oa2", "stream": True, "stream_options": {"include_usage": True},
         "messages": [{"role": "user", "content": "Tell a long story."}]}
    ).encode()  # fmt: skip
    status, raw = post(
        daemon.url + "/v1/chat/completions", stream, {"Content-Type": "application/json"}
    )
    events = [json.loads(e[6:]) for e in raw.decode().split("\n\n") if e.startswith("data: {")]
    finishes = [c["choices"][0]["finish_reason"] for c in events if c["choices"]]
    assert finishes[-1] == "length"  # 24 tokens of a long story: the real reason came through
    assert events[-1]["usage"]["completion_tokens"] >= 1


def test_a_timeout_cancels_the_generation_at_the_server(small_model, tmp_path):
    """lmd streams dali's answers and closes the stream at llm_timeout_secs: the server stops
    generating (llama-server at its next token; llama-cpp-python went on for a closed request
    that was not streamed), and the next turn is not stuck behind the abandoned one."""
    home = configure_real_home(tmp_path / "h", small_model, reply_max_tokens=200)
    configure(home, llm_timeout_secs=0.2)  # reading the prompt alone takes longer
    from daemon.core.store import Store

    store = Store(home / "lmd.db")
    store.add_prompt("t", "user", " ".join(str(3000000 + i) for i in range(15)), tokens=9,
                     karma=1000)  # fmt: skip
    store.close()
    d = LiveDaemon(home, {"LMD_TOKENIZER": "estimate", "OPENAI_API_KEY": small_model.key})
    try:
        server = small_model.proc.pid
        status, reply, _ = say(d.url, "t", "dali Write a very long story.", timeout=120)
        assert status == 504, reply
        assert "I waited 0.2 seconds" in reply and "cancelled the request" in reply
        # the server goes quiet (its CPU time stops growing) instead of generating on
        assert wait_for(lambda: idle(server), 10, interval=0.1)
    finally:
        d.stop()


def idle(pid: int) -> bool:
    import time

    def ticks() -> int:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return int(fields[11]) + int(fields[12])

    before = ticks()
    time.sleep(0.3)
    return ticks() - before <= 2


def test_a_streamed_overflow_on_the_real_server_is_named_not_cut(small_model, tmp_path):
    """One utterance longer than the whole context: the server refuses it (llama-server with a
    400 before the stream starts; llama-cpp-python with an empty stream, which lmd asks again
    without streaming), and lmd says the conversation is too long (not "cut off")."""
    home = configure_real_home(tmp_path / "h", small_model, reply_max_tokens=8)
    d = LiveDaemon(home, {"LMD_TOKENIZER": "estimate", "OPENAI_API_KEY": small_model.key})
    try:
        text = "dali " + " ".join(str(4000000 + i) for i in range(60))
        status, reply, _ = say(d.url, "o", text, timeout=60)
        assert status == 502
        assert "too long for the model's context (it holds 256 tokens)" in reply
        assert "cut off" not in reply
        status, reply, _ = say(d.url, "o", "dali hi", timeout=60)  # not stuck
        assert status == 200, reply
    finally:
        d.stop()


def test_concurrent_turns_share_the_one_at_a_time_server(daemon):
    results: list = []

    def one(i: int) -> None:
        results.append(say(daemon.url, f"c{i}", "dali Say yes.", timeout=180)[:2])

    threads = [threading.Thread(target=one, args=(i,)) for i in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert [r[0] for r in results] == [200, 200, 200], results


def test_the_embedded_server_answers_only_with_its_key(real_model):
    """Other local users can reach a loopback port; without the daemon's random key they get a
    401 from every endpoint, the model's included."""
    body = json.dumps({"messages": [{"role": "user", "content": "hi"}], "max_tokens": 1})
    for path, data in (("/models", None), ("/chat/completions", body.encode())):
        for auth in ({}, {"Authorization": "Bearer not-the-key"}):
            req = urllib.request.Request(real_model.url + path, data, {**CT, **auth})
            with pytest.raises(urllib.error.HTTPError) as e:
                urllib.request.urlopen(req, timeout=60)
            assert e.value.code == 401, (path, auth)
    assert len(real_model.key) >= 32  # secrets.token_urlsafe(24): 192 random bits
