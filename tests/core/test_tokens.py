"""Token counting: the real tiktoken path with an Encoding built here, and the offline estimate."""

import logging

import pytest
import tiktoken

from daemon.backends import tokens


@pytest.fixture
def fresh(monkeypatch):
    monkeypatch.setattr(tokens, "_encodings", {})
    monkeypatch.setattr(tokens, "_warned", False)


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


def test_offline_fallback_estimates_and_warns_once(fresh, monkeypatch, caplog):
    def offline(*a, **k):
        raise ConnectionError("no network")

    monkeypatch.delenv("LMD_TOKENIZER", raising=False)
    monkeypatch.setattr(tiktoken, "encoding_for_model", offline)
    monkeypatch.setattr(tiktoken, "get_encoding", offline)
    with caplog.at_level(logging.WARNING, logger="lmd.tokens"):
        assert tokens.count("abcdefgh", "gpt-4.1-mini") == 2
        assert tokens.count("abcdefghi", "other-model") == 3
    warnings = [r for r in caplog.records if "estimated" in r.getMessage()]
    assert len(warnings) == 1
    assert tokens.tokenizer_name("gpt-4.1-mini").startswith("estimate")


def test_unknown_model_names_use_a_generic_encoding(fresh, monkeypatch):
    monkeypatch.delenv("LMD_TOKENIZER", raising=False)
    enc = byte_encoding()

    def for_model(name):
        raise KeyError(name)

    monkeypatch.setattr(tiktoken, "encoding_for_model", for_model)
    monkeypatch.setattr(tiktoken, "get_encoding", lambda name: enc)
    assert tokens.count("hello", "llama-3-8b") == 5


@pytest.mark.parametrize(
    ("text", "n"), [("", 0), ("a", 1), ("abcd", 1), ("abcde", 2), ("é", 1), ("日本語", 3)]
)
def test_estimate_is_four_utf8_bytes_per_token_rounded_up(text, n):
    assert tokens.estimate(text) == n


def test_counts_are_stored_once_at_insert(client, backend):
    client.post("/v1", content="dali " + "word " * 40)
    rows = client.get("/history").json()["prompts"]
    assert rows[0]["tokens"] == tokens.estimate(("word " * 40).strip())
