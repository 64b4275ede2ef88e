"""LM_SCORE: the prompt, parsing, ensembles, thinking, logprobs, retries, faults and cache —
against the real fake backend, asserting the request bodies it received."""

from __future__ import annotations

import asyncio
import json
import math
import sqlite3
from pathlib import Path

import pytest
import sqlite_utils
from hypothesis import given
from hypothesis import strategies as st

from daemon.core.errors import LmdError
from daemon.core.settings import SettingError, Settings
from plugins.lm_score.aggregate import aggregate, average, majority
from plugins.lm_score.cache import ScoreCache, m001_cache, m002_identity
from plugins.lm_score.config import SETTINGS, read_dotenv, resolve
from plugins.lm_score.logprob import expected_score, score_value
from plugins.lm_score.parse import parse_score, strip_thinking
from plugins.lm_score.prompt import THINK_PREFILL, build_prompt, content_text, prompt_for
from plugins.lm_score.scorer import NoLogprobs, NoScore, Scorer
from tests.daemons import ROOT
from tests.fake_backend import Reply

from .conftest import GOLDEN_INVOICE_PROMPT, config, digits_logprobs, run_score

INVOICE = ["Weekly invoice 12/12/2022", "$14,000", "Is my invoice greater than $5,000?"]


# -- the prompt --------------------------------------------------------------------------
def test_golden_prompt_reaches_the_backend_byte_for_byte(backend):
    backend.queue("10")
    result, _ = run_score(backend, INVOICE)
    assert result.score == 10
    body = backend.chat_requests[-1]
    assert body["messages"] == [{"role": "user", "content": GOLDEN_INVOICE_PROMPT}]
    assert body["model"] == "fake-model"
    assert body["temperature"] == 0.0
    for key in ("n", "logprobs", "extra_body", "continue_final_message", "chat_template_kwargs"):
        assert key not in body


def test_the_seed_examples_build_the_spec_prompt():
    seed = (ROOT.parent / "shared" / "seeds" / "000_28082dd3be6a785f.txt").resolve()
    if seed.exists():  # the template in the seed, evaluated as the seed's f-string
        text = seed.read_text()
        template = text.split('prompt = f"""', 1)[1].split('"""', 1)[0]
        expected = template.replace("{question}", INVOICE[-1]).replace(
            "{content}", "\n".join(INVOICE[:-1])
        )
        assert prompt_for(INVOICE) == expected
    assert prompt_for(INVOICE) == GOLDEN_INVOICE_PROMPT
    one = prompt_for(["This is a test", "Is this a test?"])
    assert "question: Is this a test?\n\nContent: \nThis is a test\n\nProvide" in one
    assert one.endswith("Provide only a single number from 0 to 10.\nScore:")


def test_non_text_contents_become_text_in_a_documented_way():
    assert content_text(14000.0) == "14000.0"  # what SQLite's CAST(14000.0 AS TEXT) gives
    assert content_text(1999.99) == "1999.99"
    assert content_text(7) == "7"
    assert content_text(None) == ""
    assert content_text(True) == "true"
    assert content_text(b"caf\xc3\xa9 \xff") == "café \ufffd"
    # compact JSON, no spaces, exactly as SQLite's json() writes the same value
    assert content_text(["a", 1]) == '["a",1]'
    assert content_text({"k": [1, 2.5, None], "é": "x"}) == '{"k":[1,2.5,null],"é":"x"}'
    sqlite = sqlite3.connect(":memory:")
    for value in (["a", 1], {"k": [1, 2.5, None], "é": "x"}):
        spaced = json.dumps(value, ensure_ascii=False)  # Python's default puts spaces in
        assert content_text(value) == sqlite.execute("SELECT json(?)", [spaced]).fetchone()[0]
    assert build_prompt([None, 5, b"x"], "q?").split("Content: \n")[1].startswith("\n5\nx\n\n")


@pytest.mark.parametrize(
    "parts, sentence",
    [
        (["Is this a test?"], "at least two arguments"),
        (["content", ""], "question is empty"),
        (["content", "   "], "question is empty"),
        (["content", 7], "must be the question as text"),
    ],
)
def test_bad_arguments_are_refused_before_any_call(backend, parts, sentence):
    with pytest.raises(LmdError, match=sentence) as err:
        run_score(backend, parts)
    assert err.value.status == 400
    assert backend.requests == []


def test_huge_contents_are_refused_by_token_count(backend):
    with pytest.raises(LmdError, match="about .* tokens, more than the scoring budget") as err:
        run_score(backend, ["word " * 5000, "Is this long?"], max_prompt_tokens=1000)
    assert err.value.status == 413
    assert backend.requests == []
    backend.queue("4")  # under the budget it goes through
    assert (
        run_score(backend, ["word " * 100, "Is this long?"], max_prompt_tokens=1000)[0].score == 4
    )


# -- parsing -----------------------------------------------------------------------------
@pytest.mark.parametrize(
    "reply, score",
    [
        ("7", 7),
        ("Score: 7", 7),
        ("7/10", 7),
        ("**7**", 7),
        ("7.", 7),
        (" 10\n", 10),
        ("０９", 9),
        ("１０", 10),
        ("**Score:** 9", 9),
        ("The score is 8 out of 10.", 8),
        ("8. The email mentions a payment.", 8),
        ("I am fairly sure, so 6", 6),
        ("<think>The invoice is 14000, more than 5000, so 10.</think>\n\n9", 9),
        ("it says 14,000 vs 5,000 ... </think>3", 3),
        ("First 2 facts, then 4 more. Score: 7", 7),
        ("6.5", 7),
        ("I cannot answer", None),
        ("11", None),
        ("Score: 12", None),
        ("-3", None),
        ("between 3 and 5", None),
        ("<think>still thinking about 7", None),
        ("", None),
    ],
)
def test_parse_score(reply, score):
    assert parse_score(reply) == score


@given(
    st.integers(0, 10),
    st.sampled_from(["{}", "Score: {}", "{}/10", "**{}**", "{}.", " {} ", "Score: **{}**"]),
    st.text(alphabet="abc xyz\n", max_size=30),
)
def test_decorated_scores_parse_back(n, shape, thought):
    assert parse_score(f"<think>{thought}</think>" + shape.format(n)) == n


def test_strip_thinking():
    assert strip_thinking("<think>a</think> 5 <think>b</think>") == "5"
    assert strip_thinking("reasoning</think>\n7") == "7"
    assert strip_thinking("<think>never ends") == ""


def test_reasoning_field_is_ignored_and_think_tags_stripped(backend):
    backend.queue(Reply("<think>hmm, 2 or 3?</think>8", reasoning="The answer is 1."))
    result, _ = run_score(backend, ["x", "Is it?"])
    assert result.score == 8 and result.raw == ["<think>hmm, 2 or 3?</think>8"]


def test_no_score_is_retried_once_then_a_clear_error(backend):
    backend.queue("I cannot answer that.", "7")
    result, _ = run_score(backend, ["x", "Is it?"])
    assert (result.score, result.retries) == (7, 1)
    assert len(backend.chat_requests) == 2
    backend.clear()
    backend.queue("I cannot answer that.", "Sorry, I cannot answer.")
    with pytest.raises(NoScore) as err:
        run_score(backend, ["x", "Is it?"])
    assert err.value.status == 422
    assert "did not answer with a score from 0 to 10" in err.value.message
    assert "Sorry, I cannot answer." in err.value.message
    assert err.value.detail["raw"] == ["Sorry, I cannot answer."] or "cannot" in str(
        err.value.detail
    )
    assert len(backend.chat_requests) == 2  # no made-up 5, no third call


def test_out_of_range_is_not_a_score(backend):
    backend.queue("11", "42")
    with pytest.raises(NoScore, match="'42'"):
        run_score(backend, ["x", "Is it?"])


# -- aggregation -------------------------------------------------------------------------
def test_average_rounds_half_up():
    assert average([6, 7]) == 7  # 6.5: the original floored to 6
    assert average([6, 6, 7]) == 6  # 6.33
    assert average([0, 10, 10]) == 7  # 6.67
    assert aggregate([1, 2], "avg") == 2


def test_majority_and_its_tie_break():
    assert majority([7, 7, 3, 9, 7]) == 7
    assert majority([2, 2, 9, 9, 8]) == 9  # tie: 9 is nearer the mean 6
    assert majority([3, 3, 7, 7]) == 3  # equally near the mean 5: the lower
    assert aggregate([4], "maj") == 4


@given(st.lists(st.integers(0, 10), min_size=1, max_size=9))
def test_aggregates_stay_in_range(scores):
    for how in ("maj", "avg"):
        assert min(scores) <= aggregate(scores, how) <= max(scores)


# -- ensembles ---------------------------------------------------------------------------
def test_ensemble_asks_once_with_n(backend):
    backend.queue("8", "7", "8", "2", "Score: 8")
    result, scorer = run_score(backend, ["x", "Is it?"], ensemble=True, aggregation="maj")
    assert (result.score, result.members, result.requested) == (8, 5, 5)
    assert sorted(result.scores) == [2, 7, 8, 8, 8]
    [body] = backend.chat_requests
    assert body["n"] == 5 and body["temperature"] == 0.7
    assert scorer.calls == 1


def test_ensemble_avg(backend):
    backend.queue("8", "7", "8", "2", "9")
    result, _ = run_score(backend, ["x", "Is it?"], ensemble=True, aggregation="avg")
    assert result.score == 7 and result.aggregation == "avg"  # 34/5 = 6.8


def test_ensemble_falls_back_to_concurrent_calls_when_n_is_refused(backend):
    backend.reject_n = True
    backend.latency = 0.1
    backend.handler = lambda body: Reply("6")

    async def go():
        scorer = Scorer(config(backend, ensemble=True, ensemble_size=5))
        try:
            first = await scorer.score(["x", "Is it?"])
            second = await scorer.score(["y", "Is it?"])
            return first, second, scorer
        finally:
            await scorer.close()

    first, second, scorer = asyncio.run(go())
    assert first.score == second.score == 6 and first.members == 5
    ns = [b.get("n") for b in backend.chat_requests]
    assert ns == [5] + [None] * 10  # n tried once, then learnt: 5 separate calls per score
    assert backend.max_active >= 4  # the members ran at once


def test_sequential_setting_sends_one_call_at_a_time(backend):
    backend.latency = 0.03
    backend.handler = lambda body: Reply("5")
    result, _ = run_score(backend, ["x", "Is it?"], ensemble=True, sequential=True)
    assert result.members == 5
    assert [b.get("n") for b in backend.chat_requests] == [None] * 5
    assert backend.max_active == 1


def test_server_ignoring_n_is_topped_up(backend):
    # A server that ignores n answers with one choice: the other members are asked separately.
    backend.ignore_n = True
    backend.handler = lambda body: Reply("9")
    result, _ = run_score(backend, ["x", "Is it?"], ensemble=True, ensemble_size=3)
    assert result.members == 3 and result.scores == [9, 9, 9]
    assert [b.get("n") for b in backend.chat_requests] == [3, None, None]


def test_a_member_that_times_out_is_retried(backend):
    calls = {"n": 0}

    def slow_second(body):
        calls["n"] += 1
        return Reply("7", delay=1.0) if calls["n"] == 2 else Reply("7")

    backend.handler = slow_second
    result, _ = run_score(
        backend, ["x", "Is it?"], ensemble=True, use_n=False, timeout=0.4, ensemble_size=5
    )
    assert (result.members, result.requested, result.retries) == (5, 5, 1)
    assert len(backend.chat_requests) == 6


def test_a_member_that_keeps_failing_does_not_count(backend):
    calls = {"n": 0}

    def slow_one(body):
        calls["n"] += 1
        return Reply("7", delay=1.0) if calls["n"] in (2, 6) else Reply("8")

    backend.handler = slow_one
    result, _ = run_score(
        backend, ["x", "Is it?"], ensemble=True, use_n=False, timeout=0.4, ensemble_size=5
    )
    assert (result.members, result.requested, result.score) == (4, 5, 8)
    assert len(result.failures) == 1 and "did not answer: I waited" in result.failures[0]


# -- thinking ----------------------------------------------------------------------------
def test_thinking_on_sends_nothing_extra(backend):
    backend.queue("5")
    run_score(backend, ["x", "Is it?"], thinking=True)
    body = backend.chat_requests[-1]
    assert len(body["messages"]) == 1
    assert "continue_final_message" not in body and "chat_template_kwargs" not in body


def test_thinking_off_by_prefill_continues_the_assistant_message(backend):
    backend.queue("5")
    run_score(backend, ["x", "Is it?"], thinking=False, thinking_strategy="prefill")
    body = backend.chat_requests[-1]
    assert body["messages"][-1] == {
        "role": "assistant",
        "content": "<think>Okay, I think I have finished thinking</think>",
    }
    assert THINK_PREFILL == body["messages"][-1]["content"]
    assert body["continue_final_message"] is True
    assert body["add_generation_prompt"] is False
    assert "chat_template_kwargs" not in body


def test_thinking_off_by_template_kwargs(backend):
    backend.queue("5")
    run_score(backend, ["x", "Is it?"], thinking=False, thinking_strategy="template_kwargs")
    body = backend.chat_requests[-1]
    assert body["chat_template_kwargs"] == {"enable_thinking": False}
    assert [m["role"] for m in body["messages"]] == ["user"]
    assert "continue_final_message" not in body


# -- logprobs ----------------------------------------------------------------------------
def test_score_tokens_are_normalised():
    assert [score_value(t) for t in (" 7", "7", "７", "**7", "10", "１０", " 10 ")] == [
        7,
        7,
        7,
        7,
        10,
        10,
        10,
    ]
    assert [score_value(t) for t in ("11", "07", "a", "", " ", "7.", "-1")] == [None] * 7


def test_logprob_method_sends_logprob_params_and_returns_the_expected_score(backend):
    ln = math.log
    first = [("8", ln(0.5)), (" 8", ln(0.1)), ("７", ln(0.2)), ("9", ln(0.2))]
    backend.queue(Reply("8", logprobs=digits_logprobs(first)))
    result, _ = run_score(backend, ["x", "Is it?"], method="logprob", thinking=False)
    body = backend.chat_requests[-1]
    assert body["logprobs"] is True and body["top_logprobs"] == 20 and body["max_tokens"] == 4
    assert body["temperature"] == 0.0
    assert body["continue_final_message"] is True  # thinking suppressed here too
    assert result.method == "logprob"
    assert result.distribution == {"7": 0.2, "8": 0.6, "9": 0.2}
    assert result.expected == pytest.approx(8.0)
    assert result.score == 8


def test_logprob_ten_split_into_one_zero_reads_the_next_token(backend):
    ln = math.log
    first = [("1", ln(0.7)), ("9", ln(0.2)), ("0", ln(0.1))]
    then = ("0", ln(0.9), [("0", ln(0.9)), ("\n", ln(0.1))])
    backend.queue(Reply("10", logprobs=digits_logprobs(first, "1", then)))
    result, _ = run_score(backend, ["x", "Is it?"], method="logprob")
    assert result.distribution["10"] == pytest.approx(0.63)
    assert result.distribution["1"] == pytest.approx(0.07)
    assert result.expected == pytest.approx(0.63 * 10 + 0.07 + 0.2 * 9)
    assert result.score == 8


def test_logprob_ambiguous_one_follows_the_lean():
    ln = math.log
    yes = expected_score([("9", ln(0.6), [("9", ln(0.6)), ("1", ln(0.3)), ("8", ln(0.1))])])
    assert yes.one_split == "leaning" and yes.distribution[10] == pytest.approx(0.3)
    no = expected_score([("2", ln(0.6), [("2", ln(0.6)), ("1", ln(0.3)), ("0", ln(0.1))])])
    assert no.one_split == "none" and no.distribution[1] == pytest.approx(0.3)
    # A tokenizer with a "10" token: "1" is really one.
    real = expected_score([("9", ln(0.5), [("9", ln(0.5)), ("10", ln(0.3)), ("1", ln(0.2))])])
    assert real.distribution[1] == pytest.approx(0.2)
    assert expected_score([("Yes", -0.1, [("Yes", -0.1)])]) is None


def test_logprob_skips_leading_non_score_tokens(backend):
    ln = math.log
    spec = [(" ", ln(0.9), [(" ", ln(0.9))]), ("6", ln(0.5), [("6", ln(0.5)), ("4", ln(0.5))])]
    backend.queue(Reply(" 6", logprobs=spec))
    assert run_score(backend, ["x", "Is it?"], method="logprob")[0].expected == 5.0


def test_no_logprobs_is_a_clear_error_or_falls_back(backend):
    backend.no_logprobs = True
    backend.handler = lambda body: Reply("7", logprobs=[("7", 0.0, [])])
    with pytest.raises(NoLogprobs, match="sent no logprobs; set lm_score_method to text"):
        run_score(backend, ["x", "Is it?"], method="logprob")
    backend.clear()
    result, _ = run_score(backend, ["x", "Is it?"], method="logprob", logprob_fallback=True)
    assert result.score == 7 and result.method == "text" and "no logprobs" in result.fallback
    assert backend.chat_requests[0]["logprobs"] is True
    assert "logprobs" not in backend.chat_requests[1]


def test_logprob_without_a_score_token_retries_then_errors(backend):
    backend.handler = lambda body: Reply("I cannot", logprobs=[("I", -0.1, [("I", -0.1)])])
    with pytest.raises(NoScore, match="did not answer with a score"):
        run_score(backend, ["x", "Is it?"], method="logprob")
    assert len(backend.chat_requests) == 2


def spelled(*tokens: str) -> list:
    """A reply's logprobs, token by token: each token sure, with a 6 and a 9 beside the
    digits (what a distribution would be read from, were it a rating)."""
    ln = math.log
    out = []
    for t in tokens:
        alts = [(t, ln(0.6))]
        if score_value(t) is not None:
            alts += [("6", ln(0.2)), ("9", ln(0.2))]
        out.append((t, ln(0.6), alts))
    return out


@pytest.mark.parametrize(
    "tokens",
    [
        ("6", "-", "8"),  # a range
        ("-", " 10", " =", " strongly", " yes"),  # the rubric's first line, echoed
        ("Not", " 7"),  # a negation
        ("1", "1"),  # eleven: out of range ("1" then "1" is no one)
        ("-", "3"),  # below zero
        ("7", "-", "9", " =", " probably"),  # a rubric line with its range
        ("I", " would", " say", " 3", " or", " 4"),  # two numbers: no one answer
    ],
)
def test_the_logprob_method_reads_no_score_out_of_what_is_no_rating(backend, tokens):
    """The text method's guards hold for the logprob method: a digit among words that are
    not a rating gives no score (asked once more, then said), never a distribution."""
    text = "".join(tokens)
    backend.handler = lambda body: Reply(text, logprobs=spelled(*tokens))
    with pytest.raises(NoScore) as e:
        run_score(backend, ["x", "Is it?"], method="logprob")
    assert e.value.message.startswith(
        f"The model did not answer with a score from 0 to 10 (it said: {text!r})"
    )
    assert e.value.detail == {"raw": [text, text]} and len(backend.chat_requests) == 2


@pytest.mark.parametrize(
    "tokens, at",
    [
        (("7",), 0),
        ((" ", "7"), 1),
        (("Score", ":", " 7"), 2),
        (("No", ",", " 7"), 2),  # an answer after a no is still the score
        (("{", '"', "score", '":', " 7", "}"), 4),  # held to the JSON schema
        (("7", "/", "1", "0"), 0),  # "7/10": the 7, not the 10
        (("The", " score", " is", " 7", "."), 3),
    ],
)
def test_the_logprob_method_reads_the_distribution_where_the_rating_stands(tokens, at):
    from plugins.lm_score.logprob import rated_position

    spec = spelled(*tokens)
    assert rated_position(spec) == at
    found = expected_score(spec, at)
    assert found.distribution == pytest.approx({6: 0.2, 7: 0.6, 9: 0.2})


def test_the_logprob_method_reads_a_ten_written_in_two_tokens():
    from plugins.lm_score.logprob import rated_position

    ln = math.log
    spec = [
        ("{", 0.0, []), ('"score":', 0.0, []), (" ", 0.0, []),
        ("1", ln(0.8), [("1", ln(0.8)), ("9", ln(0.2))]),
        ("0", ln(0.9), [("0", ln(0.9)), ("}", ln(0.1))]),
        ("}", 0.0, []),
    ]  # fmt: skip
    assert rated_position(spec) == 3
    found = expected_score(spec, 3)
    assert found.one_split == "next_token"
    assert found.distribution[10] == pytest.approx(0.72) and found.distribution[9] == 0.2


# -- backend faults ----------------------------------------------------------------------
def test_rate_limit_429_is_retried_after_its_header(backend):
    backend.queue(Reply("slow down", status=429, headers={"retry-after-ms": "20"}), "8")
    result, _ = run_score(backend, ["x", "Is it?"], retries=1)
    assert result.score == 8 and len(backend.chat_requests) == 2


def test_rate_limit_429_that_persists_says_so(backend):
    backend.handler = lambda body: Reply("slow down", status=429)
    with pytest.raises(LmdError, match="rate limiting us") as err:
        run_score(backend, ["x", "Is it?"])
    assert err.value.status == 429
    assert len(backend.chat_requests) == 2  # the call and our one retry


def test_backend_500_is_a_502_sentence(backend):
    backend.handler = lambda body: Reply("boom", status=500)
    with pytest.raises(LmdError, match="failed with HTTP 500") as err:
        run_score(backend, ["x", "Is it?"])
    assert err.value.status == 502


# -- cache -------------------------------------------------------------------------------
def _cache(tmp_path: Path) -> ScoreCache:
    db = sqlite_utils.Database(tmp_path / "cache.db")
    m001_cache(db)
    m002_identity(db)
    return ScoreCache(db)


def test_cache_hits_skip_the_backend_and_keys_cover_the_config(backend, tmp_path):
    cache = _cache(tmp_path)
    backend.handler = lambda body: Reply("9")
    first, _ = run_score(backend, INVOICE, store=cache)
    assert not first.cached
    again, _ = run_score(backend, INVOICE, store=cache)
    assert again.cached and again.score == 9 and again.raw == ["9"]
    assert len(backend.chat_requests) == 1
    run_score(backend, INVOICE, store=cache, **{"model": "other-model"})
    run_score(backend, INVOICE, store=cache, **{"ensemble": True})
    run_score(backend, INVOICE, store=cache, **{"thinking": False})
    assert len(backend.chat_requests) == 4
    # Speed knobs do not change the answer, so they share the cached score.
    run_score(backend, INVOICE, store=cache, **{"concurrency": 3})
    assert len(backend.chat_requests) == 4


def test_failures_are_not_cached(backend, tmp_path):
    cache = _cache(tmp_path)
    backend.queue("no idea", "none")
    with pytest.raises(NoScore):
        run_score(backend, INVOICE, store=cache)
    backend.queue("6")
    assert run_score(backend, INVOICE, store=cache)[0].score == 6


# -- settings and the original .env keys --------------------------------------------------
def _settings(stored=None, environ=None) -> Settings:
    from daemon.core.core_settings import CORE_SETTINGS

    specs = {s.name: s for s in [*CORE_SETTINGS, *SETTINGS]}
    return Settings(specs, stored or {}, environ or {})


def test_spec_spellings_are_accepted():
    spec = {s.name: s for s in SETTINGS}
    assert spec["lm_score_ensemble"].parse("t") is True
    assert spec["lm_score_thinking"].parse("f") is False
    assert spec["lm_score_aggregation"].parse("average") == "avg"
    assert spec["lm_score_aggregation"].parse("MAJ") == "maj"
    assert spec["lm_score_thinking_strategy"].parse("chat_template_kwargs") == "template_kwargs"
    with pytest.raises(SettingError, match="one of maj, avg"):
        spec["lm_score_aggregation"].parse("median")


def test_precedence_lmd_env_over_dotenv_over_table(tmp_path):
    (tmp_path / ".env").write_text(
        "# the original project's .env\nENSEMBLE=t\nAGGREGATION='avg'\nTHINKING=f\n"
        "SERVER_URL=http://10.0.0.5:8080/v1\nAPI_TOKEN=sk-dotenv\nMODEL=qwen3-8b\n"
    )
    dotenv = read_dotenv(tmp_path / ".env")
    stored = {"lm_score_ensemble": "false", "openai_chat_endpoint": "http://127.0.0.1:1/v1"}
    env: dict = {"OPENAI_API_KEY": "sk-mine"}
    notes: list = []
    cfg = resolve(_settings(stored, env), env, dotenv, notes)
    assert (cfg.ensemble, cfg.aggregation, cfg.thinking) == (True, "avg", False)
    # The file's endpoint gets the file's key, never OPENAI_API_KEY.
    assert (cfg.endpoint, cfg.api_key, cfg.model) == (
        "http://10.0.0.5:8080/v1",
        "sk-dotenv",
        "qwen3-8b",
    )
    assert "./.env sets SERVER_URL=http://10.0.0.5:8080/v1." in notes
    # Generic names in the process environment change nothing.
    env = {"ENSEMBLE": "f", "MODEL": "llama", "SERVER_URL": "http://evil/v1"}
    cfg = resolve(_settings(stored, env), env, dotenv)
    assert (cfg.ensemble, cfg.model, cfg.endpoint) == (True, "qwen3-8b", "http://10.0.0.5:8080/v1")
    env = {"LMD_LM_SCORE_ENSEMBLE": "false"}
    assert resolve(_settings(stored, env), env, dotenv).ensemble is False
    # Without a file (the daemon), the settings decide.
    cfg = resolve(_settings(stored, {"OPENAI_API_KEY": "sk-mine"}), {"OPENAI_API_KEY": "sk-mine"})
    assert (cfg.ensemble, cfg.endpoint, cfg.api_key) == (False, "http://127.0.0.1:1/v1", "sk-mine")


def test_a_dotenv_without_server_url_keeps_the_users_endpoint_and_key(tmp_path):
    stored = {"openai_chat_endpoint": "http://h:1/v1"}
    env = {"OPENAI_API_KEY": "sk-mine"}
    notes: list = []
    cfg = resolve(_settings(stored, env), env, {"API_TOKEN": "sk-file", "MODEL": "m"}, notes)
    assert (cfg.endpoint, cfg.api_key, cfg.model) == ("http://h:1/v1", "sk-mine", "m")
    assert notes == [
        "./.env sets MODEL=m.",
        "API_TOKEN in ./.env is ignored: it goes only to a SERVER_URL from the same file.",
    ]
    # A file's SERVER_URL with no API_TOKEN: no key at all, not ours.
    cfg = resolve(_settings(stored, env), env, {"SERVER_URL": "http://x:2/v1"})
    assert (cfg.endpoint, cfg.api_key) == ("http://x:2/v1", "sk-no-key-needed")
    # LMD_LM_SCORE_ENDPOINT (the user's environment) beats the file and gets the user's key.
    env = {**env, "LMD_LM_SCORE_ENDPOINT": "http://mine:3/v1"}
    cfg = resolve(_settings(stored, env), env, {"SERVER_URL": "http://x:2/v1", "API_TOKEN": "t"})
    assert (cfg.endpoint, cfg.api_key) == ("http://mine:3/v1", "sk-mine")


def test_defaults_follow_the_daemon_backend(tmp_path):
    stored = {"openai_model": "m1", "openai_chat_endpoint": "http://h:1/v1/chat/completions"}
    cfg = resolve(_settings(stored), {})
    assert (cfg.model, cfg.endpoint, cfg.method, cfg.ensemble) == (
        "m1",
        "http://h:1/v1",
        "text",
        False,
    )


def test_a_bad_original_key_names_itself(tmp_path):
    # In the environment the generic name is ignored, bad or not.
    assert resolve(_settings({}, {"ENSEMBLE": "maybe"}), {"ENSEMBLE": "maybe"}).ensemble is False
    (tmp_path / ".env").write_text("SERVER_URL=ftp://nope\n")
    with pytest.raises(SettingError, match="SERVER_URL in the .env file"):
        resolve(_settings(), {}, read_dotenv(tmp_path / ".env"))


def test_the_same_prompt_scored_at_once_costs_one_call(backend):
    backend.latency = 0.05
    backend.handler = lambda body: Reply("6")

    async def go():
        scorer = Scorer(config(backend))
        try:
            # 1 and "1" are different SQL values but the same prompt text.
            return await scorer.score_many([[1, "Is it?"], ["1", "Is it?"], ["2", "Is it?"]])
        finally:
            await scorer.close()

    results = asyncio.run(go())
    assert [r.score for r in results] == [6, 6, 6]
    assert len(backend.chat_requests) == 2


def test_a_shared_failure_reaches_every_waiter(backend):
    backend.latency = 0.05
    backend.handler = lambda body: Reply("no idea")

    async def go():
        scorer = Scorer(config(backend))
        try:
            return await scorer.score_many([[1, "Is it?"], ["1", "Is it?"]])
        finally:
            await scorer.close()

    results = asyncio.run(go())
    assert all(isinstance(r, NoScore) for r in results)
    assert len(backend.chat_requests) == 2  # one call and its retry, shared


@given(
    st.lists(
        st.tuples(st.sampled_from(["0", "1", "5", "9", "10", " 7", "x"]), st.floats(-8, 0)),
        min_size=1,
        max_size=6,
    )
)
def test_logprob_expectation_stays_in_range(alts):
    found = expected_score([(alts[0][0], alts[0][1], alts)])
    if found is not None:
        assert 0 <= found.expected <= 10
        assert sum(found.distribution.values()) == pytest.approx(1.0)


def test_a_cancelled_scorer_does_not_fail_those_sharing_its_prompt(backend):
    backend.latency = 0.2
    backend.handler = lambda body: Reply("4")

    async def go():
        scorer = Scorer(config(backend))
        try:
            first = asyncio.create_task(scorer.score(["x", "Is it?"]))
            await asyncio.sleep(0.05)
            second = asyncio.create_task(scorer.score(["x", "Is it?"]))
            await asyncio.sleep(0.05)
            first.cancel()
            return await second
        finally:
            await scorer.close()

    assert asyncio.run(go()).score == 4


def test_a_server_refusing_the_thinking_fields_gets_advice(backend):
    def strict(body):
        if "continue_final_message" in body:
            return Reply("Unrecognized request argument: continue_final_message", status=400)
        return Reply("5")

    backend.handler = strict
    with pytest.raises(LmdError, match="set lm_score_thinking to true") as err:
        run_score(backend, ["x", "Is it?"], thinking=False)
    assert err.value.status == 502
    assert run_score(backend, ["x", "Is it?"], thinking=True)[0].score == 5
