"""Token counting: the real tiktoken path with an Encoding built here, the server's tokenizer
on the real model, and the offline estimate (safe for digits and non-Latin text)."""

import logging

import pytest
import tiktoken

from daemon.backends import tokens


@pytest.fixture
def fresh(monkeypatch, tmp_path):
    monkeypatch.setattr(tokens, "_encodings", {})
    monkeypatch.setattr(tokens, "_warned", False)
    monkeypatch.setattr(tokens, "_servers", {})
    # a home of its own: another test in this worker may have said the warning in the
    # default home already, and then it is (rightly) only a debug line
    monkeypatch.setattr(tokens, "_marker", tmp_path / "fresh-home" / tokens.WARNED_FILE)
    (tmp_path / "fresh-home").mkdir()


def byte_encoding() -> tiktoken.Encoding:
    """A tiny real tiktoken Encoding: every byte a token, plus one merge for 'ab'."""
    ranks = {bytes([i]): i for i in range(256)}
    ranks[b"ab"] = 256
    return tiktoken.Encoding(
        name="test_bytes", pat_str=r"\S+|\s+", mergeable_ranks=ranks, special_tokens={}
    )


def test_tiktoken_path_counts_with_the_encoding(fresh):
    enc = byte_encoding()
    tokens.set_encoding("test-model", enc)
    assert tokens.count("abab c", "test-model") == len(enc.encode("abab c")) == 4
    assert tokens.tokenizer_name("test-model") == "tiktoken:test_bytes"
    # special-token text is counted as ordinary text, never an error
    assert tokens.count("<|endoftext|>", "test-model") > 0


def offline_tiktoken(monkeypatch):
    def offline(*a, **k):
        raise ConnectionError("no network")

    monkeypatch.delenv("LMD_TOKENIZER", raising=False)
    monkeypatch.setattr(tiktoken, "encoding_for_model", offline)
    monkeypatch.setattr(tiktoken, "get_encoding", offline)


def test_offline_fallback_estimates_and_warns_once(fresh, monkeypatch, caplog):
    offline_tiktoken(monkeypatch)
    with caplog.at_level(logging.WARNING, logger="lmd.tokens"):
        assert tokens.count("abcdefgh", "gpt-4.1-mini") == tokens.estimate("abcdefgh") == 3
        assert tokens.count("abcdefghi", "other-model") == 3
    warnings = [r for r in caplog.records if "estimated" in r.getMessage()]
    assert len(warnings) == 1
    assert tokens.tokenizer_name("gpt-4.1-mini").startswith("estimate")


def test_the_offline_warning_is_said_once_per_installation(fresh, monkeypatch, caplog, tmp_path):
    """A later process (every CLI command is one) with the same home stays quiet."""
    offline_tiktoken(monkeypatch)
    tokens.remember_warnings_in(tmp_path)
    with caplog.at_level(logging.WARNING, logger="lmd.tokens"):
        tokens.count("x", "gpt-4.1-mini")
    assert len([r for r in caplog.records if "estimated" in r.getMessage()]) == 1
    assert (tmp_path / tokens.WARNED_FILE).exists()
    caplog.clear()
    monkeypatch.setattr(tokens, "_encodings", {})
    monkeypatch.setattr(tokens, "_warned", False)  # as in a new process
    with caplog.at_level(logging.WARNING, logger="lmd.tokens"):
        tokens.count("x", "gpt-4.1-mini")
    assert [r for r in caplog.records if "estimated" in r.getMessage()] == []


def test_the_cli_says_it_once_too(tmp_path):
    """Through the real entry point, twice, offline (tiktoken cannot fetch its files here)."""
    import os
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if k != "LMD_TOKENIZER"}
    env["TIKTOKEN_CACHE_DIR"] = str(tmp_path / "empty-cache")
    home = tmp_path / "h"
    home.mkdir()
    said = []
    for _ in range(2):
        ran = subprocess.run(
            [sys.executable, "-m", "daemon.cli", "plugins"],
            env={**env, "LMD_HOME": str(home), "https_proxy": "http://127.0.0.1:9"},
            capture_output=True, text=True, timeout=60,
        )  # fmt: skip
        said.append("tiktoken could not load" in ran.stderr)
    assert said == [True, False]


def test_unknown_model_names_use_a_generic_encoding(fresh, monkeypatch):
    monkeypatch.delenv("LMD_TOKENIZER", raising=False)
    enc = byte_encoding()

    def for_model(name):
        raise KeyError(name)

    monkeypatch.setattr(tiktoken, "encoding_for_model", for_model)
    monkeypatch.setattr(tiktoken, "get_encoding", lambda name: enc)
    assert tokens.count("hello", "llama-3-8b") == 5


@pytest.mark.parametrize(
    ("text", "n"),
    [("", 0), ("a", 1), ("abcd", 2), ("abcdefg", 2), ("1234567", 7), ("é", 1), ("日本語", 5)],
)
def test_estimate_counts_digits_and_non_latin_text_safely(text, n):
    assert tokens.estimate(text) == n


def test_a_digit_history_is_not_underestimated(real_model):
    """The old 4-bytes rule said 800 tokens for this; SmolLM2's tokenizer (a digit a token)
    counts about four times that. The estimate must not fall short of the real count."""
    import json
    import urllib.request

    text = " ".join(str(1000000 + i) for i in range(400))
    req = urllib.request.Request(
        real_model.url.removesuffix("/v1") + "/tokenize",  # llama-server's
        json.dumps({"content": text}).encode(),
        {"Authorization": f"Bearer {real_model.key}", "Content-Type": "application/json"},
    )
    with urllib.request.urlopen(req, timeout=30) as r:
        real = len(json.loads(r.read())["tokens"])
    assert real > 3 * ((len(text) + 3) // 4)  # the old estimate was off by that much
    assert tokens.estimate(text) >= real


def test_the_server_counts_when_it_has_a_tokenize_endpoint(fresh, real_model):
    counter = tokens.ServerCounter(
        real_model.url.removesuffix("/v1"), "/tokenize", "content", real_model.key, "m"
    )
    tokens.use_server("m", counter)
    assert tokens.tokenizer_name("m") == "the server's tokenizer"
    n = tokens.count("hello 12345 world", "m")
    assert n == tokens.count("hello 12345 world", "m") and counter.requests == 1  # cached
    assert 5 <= n <= 10
    tokens.use_server("m", lambda text: 1 / 0)  # a failing counter falls back, never fails
    assert tokens.count("abcd", "m") == tokens.count("abcd", "unknown-model")


def test_counts_are_stored_once_at_insert(client, backend):
    client.post("/v1", content="dali " + "word " * 40)
    rows = client.get("/history").json()["prompts"]
    assert rows[0]["tokens"] == tokens.estimate(("word " * 40).strip())


def stand_in_counter(backend) -> tokens.ServerCounter:
    """The stand-in's tokenize endpoint (a token a word) as the counter of model "m"."""
    backend.capabilities["tokenize"] = True
    counter = tokens.ServerCounter(
        backend.url.removesuffix("/v1"), "/extras/tokenize", "input", "k", "m"
    )
    tokens.use_server("m", counter)
    return counter


def test_the_server_is_never_asked_from_the_event_loop(fresh, backend):
    """A wait there would stall every request of the daemon: a text the server has counted
    keeps its count, a new one is counted the next way down (here the estimate)."""
    import asyncio

    counter = stand_in_counter(backend)
    assert tokens.count("one two three", "m") == 3  # off the loop: the server counts

    async def on_the_loop() -> tuple[int, int]:
        return tokens.count("one two three", "m"), tokens.count("four five", "m")

    assert asyncio.run(on_the_loop()) == (3, tokens.estimate("four five"))
    assert counter.requests == 1


def test_a_busy_tokenize_endpoint_is_asked_once_then_left_alone(fresh, backend):
    """llama-cpp-python answers tokenize only between generations: a count that times out is
    not asked again at once, and the next texts are counted without the server for a while."""
    counter = stand_in_counter(backend)
    counter.TIMEOUT_SECS = 0.2
    backend.latency = 1.0  # the stand-in answers its tokenize endpoint after a second
    assert tokens.count("a b c d", "m") == tokens.estimate("a b c d")
    assert tokens.count("e f", "m") == tokens.estimate("e f")
    asked = [p for p in backend.probes if p.path.endswith("/tokenize")]
    assert len(asked) == 1 and counter.paused_until > 0
    counter.paused_until = 0.0  # the pause is over: the server counts again
    backend.latency = 0.0
    assert tokens.count("e f", "m") == 2
