"""SelectIT against the fake backend: exact scores, requests sent, resume, bad input, route."""

from __future__ import annotations

import json
import math
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from daemon.backends import tokens
from plugins.selectit import scoring
from plugins.selectit.datasets import parse_fields, read_dataset, to_sample
from plugins.selectit.output import ScoresFile
from plugins.selectit.prompts import BUILTIN_FILE, build_prompt, load_templates
from tests.daemons import ROOT, configure
from tests.fake_backend import Reply

from .conftest import (
    TASK,
    alpaca,
    dist_reply,
    prompt_of,
    read_jsonl,
    run_cli,
    task_handler,
    write_jsonl,
)


def expected_task_score(n: int) -> float:
    p5 = (n % 5 + 1) / 10
    return 4 * (1 - p5) + 5 * p5


# -- the arithmetic -------------------------------------------------------------------------
def test_token_score_and_penalty_by_hand():
    assert scoring.token_score((0.05, 0.05, 0.2, 0.5, 0.2)) == pytest.approx(3.75, abs=1e-12)
    assert scoring.final_score([4.2], 0.2) == 4.2  # k = 1: no penalty at all
    # mu = 4, population sigma = sqrt(2/3)
    expected = 4 / (1 + 0.2 * math.sqrt(2 / 3))
    assert scoring.final_score([5.0, 3.0, 4.0], 0.2) == pytest.approx(expected, abs=1e-12)
    assert scoring.final_score([3.0, 3.0], 0.7) == 3.0
    assert scoring.renormalise([1, 1, 2, 0, 0]) == (0.25, 0.25, 0.5, 0.0, 0.0)
    with pytest.raises(ValueError):
        scoring.renormalise([0, 0, 0, 0, 0])
    with pytest.raises(ValueError):
        scoring.final_score([3.0, 4.0], -0.1)


@pytest.mark.parametrize(
    "token,rating",
    [("5", 5), (" 5", 5), ("▁5", 5), ("Ġ5", 5), ("５", 5), ("1\n", 1), (" 3 ", 3)],
)
def test_rating_tokens_normalised(token, rating):
    assert scoring.rating_of(token) == rating


@pytest.mark.parametrize("token", ["6", "0", "15", "five", "", "▁", "a5", "5."])
def test_non_rating_tokens(token):
    assert scoring.rating_of(token) is None


def test_absent_ratings_get_the_bound():
    # Listed: 5 -> .6, 4 -> .3, "Hello" -> .05; unlisted mass .05 shared by 3 absent ratings.
    lp = [("5", math.log(0.6)), ("4", math.log(0.3)), ("Hello", math.log(0.05))]
    r = scoring.rating_from_logprobs(lp)
    assert r.absent == 3
    assert r.score == pytest.approx(4.3 / 0.95, abs=1e-12)
    # The least listed probability caps the share: listed .5/.45/.01, unlisted .04 for 3.
    lp = [("5", math.log(0.5)), ("x", math.log(0.45)), ("4", math.log(0.01))]
    r = scoring.rating_from_logprobs(lp)
    bound = 0.01  # min(0.01, 0.04 / 3)
    total = 0.5 + 0.01 + 3 * bound
    assert r.probs == pytest.approx((bound / total,) * 3 + (0.01 / total, 0.5 / total))


def test_spellings_of_one_rating_add_up():
    lp = [("5", math.log(0.4)), (" 5", math.log(0.4)), ("▁4", math.log(0.2))]
    r = scoring.rating_from_logprobs(lp)
    assert r.probs[4] == pytest.approx(0.8) and r.probs[3] == pytest.approx(0.2)
    assert r.absent == 3 and r.probs[0] == 0.0


@given(st.lists(st.floats(1.0, 5.0), min_size=1, max_size=12), st.floats(0, 10))
def test_final_score_stays_in_range_and_below_the_mean(scores, alpha):
    final = scoring.final_score(scores, alpha)
    mean = sum(scores) / len(scores)
    assert 1.0 / (1 + alpha * 2) - 1e-9 <= final <= mean + 1e-9


@given(
    st.lists(st.floats(0, 1, allow_nan=False), min_size=5, max_size=5).filter(
        lambda p: sum(p) > 1e-6
    )
)
def test_token_score_between_one_and_five(masses):
    s = scoring.token_score(scoring.renormalise(masses))
    assert 1 - 1e-9 <= s <= 5 + 1e-9


TOKENS = st.sampled_from(["1", " 2", "\u25813", "\u01204", "\uff15", "5", "The", "A", "\n"])


@given(st.lists(st.tuples(TOKENS, st.floats(1e-6, 1.0)), min_size=1, max_size=8))
def test_bounded_distributions_are_distributions(top):
    total = sum(p for _, p in top)
    top = [(t, math.log(p / max(total, 1.0))) for t, p in top]  # listed mass at most 1
    r = scoring.rating_from_logprobs(top)
    assert math.fsum(r.probs) == pytest.approx(1.0)
    assert all(0 <= p <= 1 for p in r.probs) and 1 - 1e-9 <= r.score <= 5 + 1e-9
    listed = {scoring.rating_of(t) for t, _ in top} - {None}
    assert r.absent == 5 - len(listed)
    if r.absent < 5:  # a bounded rating never outweighs the least likely listed token
        least = min(math.exp(lp) for _, lp in top)
        raw = {scoring.rating_of(t): 0.0 for t, _ in top}
        for t, lp in top:
            raw[scoring.rating_of(t)] += math.exp(lp)
        scale = max(raw[x] for x in listed) / max(r.probs[x - 1] for x in listed)
        for x in set(range(1, 6)) - listed:
            assert r.probs[x - 1] * scale <= least + 1e-12


# -- prompts -----------------------------------------------------------------------------------
def test_prompt_layout_and_builtin_templates():
    p = build_prompt("Rate it.", "Add 2 and 2.", "4", input="numbers")
    assert (
        p.text == "Rate it.\nInstruction: Add 2 and 2.\nInput: numbers\nResponse: 4\nThe answer is:"
    )
    assert build_prompt("Rate it.", "Hi", "Hello").text == (
        "Rate it.\nInstruction: Hi\nResponse: Hello\nThe answer is:"
    )
    templates = load_templates()
    assert len(templates) >= 9 and len(set(templates)) == len(templates)
    assert BUILTIN_FILE.read_text().count("\n") == len(templates)


# -- the CLI against the fake backend ---------------------------------------------------------
def test_exact_scores_k1_and_the_request_bodies(home, backend, tmp_path):
    data = write_jsonl(tmp_path / "a.jsonl", alpaca(3))
    backend.handler = task_handler
    out = tmp_path / "s.jsonl"
    r = run_cli(home, data, "-o", out, "--progress")
    assert r.exit_code == 0, r.stderr
    assert "3/3" in r.stderr and "sample/s" in r.stderr  # the progress bar, on stderr
    rows = read_jsonl(out)
    assert [row["id"] for row in rows] == [1, 2, 3]  # ids are line numbers when absent
    for row in rows:
        assert row["score"] == pytest.approx(expected_task_score(row["id"]), abs=1e-12)
        assert set(row) == {"id", "score"}
    bodies = [q.body for q in backend.requests]
    assert len(bodies) == 3 and all(q.path == "/v1/completions" for q in backend.requests)
    first_template = load_templates()[0]
    prompts = sorted(b["prompt"] for b in bodies)
    assert prompts[0] == (
        f"{first_template}\nInstruction: Do task 1.\nResponse: Answer 1 done.\nThe answer is:"
    )
    for b in bodies:
        assert b["max_tokens"] == 3 and b["logprobs"] == 20 and b["temperature"] == 0
        assert b["model"] == "fake-model"
    assert "3 samples, 3 scored now" in r.stderr and "0 missing" in r.stderr


def test_k3_penalty_with_a_users_rp_file_and_details(home, backend, tmp_path):
    rp = tmp_path / "rp.txt"
    rp.write_text("First judge.\n\nSecond judge.\nThird judge.\nFourth judge.\n")
    dists = {
        "First": {"5": 1.0},
        "Second": {"▁3": 1.0},
        "Third": {"Ġ4": 0.5, "４": 0.5},  # two spellings of 4 add up
    }
    backend.handler = lambda body: dist_reply(dists[prompt_of(body).split()[0]])
    data = write_jsonl(tmp_path / "a.jsonl", [{"id": "x", "instruction": "I", "output": "O"}])
    out = tmp_path / "s.jsonl"
    r = run_cli(home, data, "-o", out, "--k", 3, "--rp-file", rp, "--details")
    assert r.exit_code == 0, r.stderr
    (row,) = read_jsonl(out)
    assert row["id"] == "x"
    assert row["score"] == pytest.approx(4 / (1 + 0.2 * math.sqrt(2 / 3)), abs=1e-12)
    assert row["token_scores"] == [5.0, 3.0, 4.0]
    assert row["distributions"][1] == [0.0, 0.0, 1.0, 0.0, 0.0]
    starts = sorted(prompt_of(q.body).split("\n")[0] for q in backend.requests)
    assert starts == ["First judge.", "Second judge.", "Third judge."]
    # alpha from the flag changes only the penalty
    out2 = tmp_path / "s2.jsonl"
    assert run_cli(home, data, "-o", out2, "--k", 3, "--rp-file", rp, "--alpha", 1).exit_code == 0
    assert read_jsonl(out2)[0]["score"] == pytest.approx(4 / (1 + math.sqrt(2 / 3)), abs=1e-12)


def test_chat_api_request_and_missing_fields_score_three(home, backend, tmp_path):
    backend.handler = lambda body: dist_reply({"4": 0.5, "5": 0.5})
    rows = [
        {"instruction": "Say hi.", "output": "Hi."},
        {"instruction": "No answer here."},
        {"output": "An answer without a question."},
        {"instruction": "   ", "output": "blank instruction"},
    ]
    data = write_jsonl(tmp_path / "a.jsonl", rows)
    out = tmp_path / "s.jsonl"
    r = run_cli(home, data, "-o", out, "--api", "chat", "--model", "judge-1")
    assert r.exit_code == 0, r.stderr
    assert [row["score"] for row in read_jsonl(out)] == [4.5, 3.0, 3.0, 3.0]
    assert "3 missing instruction or output scored 3.0" in r.stderr
    (body,) = backend.chat_requests  # only the valid sample reached the backend
    assert body["messages"] == [
        {
            "role": "user",
            "content": load_templates()[0]
            + "\nInstruction: Say hi.\nResponse: Hi.\nThe answer is:",
        }
    ]
    assert body["logprobs"] is True and body["top_logprobs"] == 20 and body["max_tokens"] == 3
    assert body["model"] == "judge-1"


def test_long_samples_are_cut_to_max_length_keeping_the_cue(home, backend, tmp_path):
    backend.handler = lambda body: dist_reply({"4": 1.0})
    rows = [{"instruction": "Summarise.", "output": "word " * 2000}, *alpaca(1)]
    data = write_jsonl(tmp_path / "a.jsonl", rows)
    out = tmp_path / "s.jsonl"
    r = run_cli(home, data, "-o", out, "--max-length", 64, "--concurrency", 1, "--details")
    assert r.exit_code == 0, r.stderr
    assert "1 sample shortened in the middle to fit max_length 64" in r.stderr
    long, short = (q.body["prompt"] for q in backend.requests)
    assert re.search(r"\nResponse: (word ?)+ \[\.\.\.\] (word ?)+\nThe answer is:$", long)
    assert long.startswith(load_templates()[0] + "\nInstruction: Summarise.\n")
    assert len(long.encode()) <= 64 * 4  # offline the daemon counts 4 bytes a token
    assert short.endswith("Response: Answer 1 done.\nThe answer is:")
    cut, whole = read_jsonl(out)
    assert cut["truncated"] is True and cut["removed_tokens"][0] > 2400
    assert "truncated" not in whole and "removed_tokens" not in whole


@given(
    instruction=st.text(min_size=1, max_size=3000),
    response=st.text(min_size=1, max_size=3000),
    input=st.text(max_size=500),
    max_length=st.integers(16, 600),
)
def test_fitting_keeps_the_frame_or_refuses(instruction, response, input, max_length):
    """Whatever the texts: the fitted prompt is within max_length and keeps the template, the
    labels and the answer cue, or the sample is refused (never cut from the end)."""
    from plugins.selectit.openai_backend import DaemonTokens
    from plugins.selectit.prompts import TooLong, fit

    tokens = DaemonTokens("estimate-only")  # the tests run with LMD_TOKENIZER=estimate
    prompt = build_prompt("Rate it from 1 to 5.", instruction, response, input)
    try:
        fitted = fit(prompt, max_length, tokens)
    except TooLong as e:
        assert f"more than max_length {max_length}" in e.message
        return
    assert tokens.count(fitted.text) <= max_length
    assert fitted.text.startswith("Rate it from 1 to 5.\nInstruction: ")
    assert "\nResponse: " in fitted.text and fitted.text.endswith("\nThe answer is:")
    assert ("\nInput: " in fitted.text) == bool(input)
    assert (fitted.removed > 0) == (fitted is not prompt)


def test_a_long_instruction_never_pushes_out_the_response(home, backend, tmp_path):
    """Issue 14: the prompt was cut from the end, so a long instruction pushed `Response:` out
    and the sample was rated without its response, unflagged."""
    backend.handler = lambda body: dist_reply({"4": 1.0})
    rows = [{"id": 1, "instruction": "word " * 300, "output": "ok"}]
    data = write_jsonl(tmp_path / "a.jsonl", rows)
    out = tmp_path / "s.jsonl"
    r = run_cli(home, data, "-o", out, "--max-length", 64, "--details")
    assert r.exit_code == 0, r.stderr
    (sent,) = (prompt_of(q.body) for q in backend.requests)
    assert sent.startswith(load_templates()[0] + "\nInstruction: word word")
    assert " [...] word " in sent  # the middle of the instruction is gone
    assert sent.endswith("\nResponse: ok\nThe answer is:")
    assert tokens.count(sent) <= 64  # the daemon's offline count (a safe estimate)
    (row,) = read_jsonl(out)
    assert row["truncated"] is True and 300 < row["removed_tokens"][0] < 480
    assert row["score"] == 4.0 and "skipped" not in row
    assert "1 sample shortened in the middle to fit max_length 64 (" in r.stderr


def test_a_sample_that_cannot_fit_is_skipped_at_3_and_counted(home, backend, tmp_path):
    backend.handler = lambda body: dist_reply({"5": 1.0})
    rp = tmp_path / "rp.txt"
    rp.write_text("Rate it.\n" + "A very long rating prompt about many things. " * 8 + "\n")
    rows = [{"id": "a", "instruction": "word " * 300, "output": "ok"}, *alpaca(1)]
    data = write_jsonl(tmp_path / "a.jsonl", rows)
    out = tmp_path / "s.jsonl"
    r = run_cli(home, data, "-o", out, "--max-length", 40, "--k", 2, "--rp-file", rp)
    assert r.exit_code == 0, r.stderr
    skipped, fine = read_jsonl(out)
    # the second template alone is longer than 40 tokens: no rating of either sample
    assert (
        skipped
        == {
            "id": "a",
            "score": 3.0,
            "skipped": skipped["skipped"],
        }
        and "more than max_length 40" in skipped["skipped"]
    )
    assert fine["score"] == 3.0 and "more than max_length 40" in fine["skipped"]
    assert backend.requests == []
    assert "2 samples could not fit max_length 40 even shortened, skipped and scored 3.0" in (
        r.stderr
    )
    # a skipped sample is never selected as one of the best
    best = tmp_path / "best.jsonl"
    r = run_cli(home, data, "-o", out, "--max-length", 40, "--k", 2, "--rp-file", rp,
                "--top", 1, "--select-out", best)  # fmt: skip
    assert r.exit_code == 0 and read_jsonl(best) == []


def test_absent_ratings_are_bounded_and_counted(home, backend, tmp_path):
    backend.handler = lambda body: dist_reply({"5": 0.6, "4": 0.3, "Hello": 0.05})
    data = write_jsonl(tmp_path / "a.jsonl", alpaca(1))
    out = tmp_path / "s.jsonl"
    r = run_cli(home, data, "-o", out)
    assert read_jsonl(out)[0]["score"] == pytest.approx(4.3 / 0.95, abs=1e-12)
    assert "of the scores 0 measured, 1 bounded" in r.stderr
    assert "0 unrated (no score)" in r.stderr


def test_llama_cpp_shaped_completions_and_unrated_prompts(home, backend, tmp_path):
    top = [{"token": " 2", "logprob": math.log(0.5)}, {"token": "3", "logprob": math.log(0.5)}]
    content = [{"token": " 2", "logprob": math.log(0.5), "top_logprobs": top}]
    body = {
        "id": "cmpl-1",
        "object": "text_completion",
        "created": 0,
        "model": "fake-model",
        "choices": [{"index": 0, "text": " 2", "finish_reason": "length",
                     "logprobs": {"content": content}}],
    }  # fmt: skip
    backend.queue(Reply(body=body), dist_reply({"The": 0.9, "A": 0.1}))
    data = write_jsonl(tmp_path / "a.jsonl", alpaca(2))
    out = tmp_path / "s.jsonl"
    r = run_cli(home, data, "-o", out, "--concurrency", 1)
    assert r.exit_code == 0, r.stderr
    rows = read_jsonl(out)
    # no silent 3.0: a sample the model did not rate has no score, and says why
    assert [row["score"] for row in rows] == [2.5, None]
    assert rows[1]["unrated"] == [
        "no rating 1-5 among the top logprobs (the likeliest tokens: 'The', 'A')"
    ]
    assert "0 measured, 1 bounded" in r.stderr and "and 1 unrated (no score)" in r.stderr
    assert "warning: the model gave no rating for some prompts" in r.stderr


def test_server_without_logprobs_is_a_clear_error(home, backend, tmp_path):
    backend.no_logprobs = True
    backend.default = Reply("Five")
    data = write_jsonl(tmp_path / "a.jsonl", alpaca(2))
    r = run_cli(home, data, "-o", tmp_path / "s.jsonl")
    assert r.exit_code == 1
    assert "answered without logprobs" in r.stderr and "'Five'" in r.stderr
    assert backend.requests[0].body["logprobs"] == 20  # we did ask for them


def test_server_capping_logprobs_gets_asked_for_five(home, backend, tmp_path):
    def handler(body):
        if body["logprobs"] > 5:
            return Reply("logprobs must be at most 5", status=400)
        return dist_reply({"5": 1.0})

    backend.handler = handler
    data = write_jsonl(tmp_path / "a.jsonl", alpaca(3))
    out = tmp_path / "s.jsonl"
    r = run_cli(home, data, "-o", out, "--concurrency", 1)
    assert r.exit_code == 0, r.stderr
    assert [row["score"] for row in read_jsonl(out)] == [5.0, 5.0, 5.0]
    assert [q.body["logprobs"] for q in backend.requests] == [20, 5, 5, 5]


def test_resume_after_a_failure_gives_the_uninterrupted_file(home, backend, tmp_path):
    data = write_jsonl(tmp_path / "a.jsonl", alpaca(12))
    reference = tmp_path / "ref.jsonl"
    backend.handler = task_handler
    assert run_cli(home, data, "-o", reference, "--k", 2).exit_code == 0

    def failing(body):
        if "Do task 7." in prompt_of(body):
            return Reply("boom", status=500)
        return task_handler(body)

    backend.handler = failing
    backend.clear()
    out = tmp_path / "s.jsonl"
    r = run_cli(home, data, "-o", out, "--k", 2, "--concurrency", 1)
    assert r.exit_code == 1
    assert "HTTP 500" in r.stderr and "6 scores are saved" in r.stderr
    assert [row["id"] for row in read_jsonl(out)] == [1, 2, 3, 4, 5, 6]
    backend.handler = task_handler
    backend.clear()
    r = run_cli(home, data, "-o", out, "--k", 2)
    assert r.exit_code == 0, r.stderr
    assert "6 from an earlier run" in r.stderr
    # Only the unscored samples were asked for, k times each. Task 7's second prompt of the
    # failed run may still be on its way to the backend when the run gives up (it was cut,
    # not answered), so task 7 may show once more.
    asked = Counter(int(TASK.search(prompt_of(q.body)).group(1)) for q in backend.requests)
    assert set(asked) == set(range(7, 13)), asked
    assert all(asked[t] == 2 for t in range(8, 13)) and asked[7] in (2, 3), asked
    assert out.read_bytes() == reference.read_bytes()
    before = len(backend.requests)
    r = run_cli(home, data, "-o", out, "--k", 2)  # nothing left: no calls, same file
    assert len(backend.requests) == before and out.read_bytes() == reference.read_bytes()
    r = run_cli(home, data, "-o", out, "--k", 3)  # other settings would mix two scorings
    assert r.exit_code == 1 and "was started with other settings (k 2 then, 3 now)" in r.stderr
    assert len(backend.requests) == before and out.read_bytes() == reference.read_bytes()


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGKILL], ids=["ctrl-c", "kill-9"])
def test_a_real_process_stopped_midway_resumes_to_the_same_file(home, backend, tmp_path, sig):
    data = write_jsonl(tmp_path / "a.jsonl", alpaca(30))
    backend.handler = task_handler
    reference = tmp_path / "ref.jsonl"
    assert run_cli(home, data, "-o", reference).exit_code == 0
    # Tasks after the fourth wait at the backend until the signal is sent: the process is
    # always stopped midway, however busy the machine (no race with a fast run).
    gate = threading.Event()

    def held(body: dict) -> Reply:
        if int(TASK.search(prompt_of(body)).group(1)) > 4:
            gate.wait(20)
        return task_handler(body)

    backend.handler = held
    out = tmp_path / "s.jsonl"
    env = {**os.environ, "LMD_HOME": str(home)}
    cmd = [sys.executable, "-m", "daemon.cli", "selectit", str(data), "-o", str(out)]
    # A handler (not an ignore) and no block in this process, so the child starts with
    # Ctrl-C's default: an ignored or blocked SIGINT is inherited across exec, and a test
    # runner's worker may have either.
    before = signal.signal(signal.SIGINT, signal.default_int_handler)
    mask = signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})
    try:
        proc = subprocess.Popen(
            [*cmd, "--concurrency", "2"], env=env, cwd=ROOT, stderr=subprocess.PIPE, text=True
        )
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, mask)
        signal.signal(signal.SIGINT, before)
    try:
        deadline = time.time() + 20
        while time.time() < deadline and (not out.exists() or out.read_text().count("\n") < 4):
            time.sleep(0.02)
        status = Path(f"/proc/{proc.pid}/status").read_text()
        proc.send_signal(sig)
    finally:
        gate.set()
    _, err = proc.communicate(timeout=20)
    if sig == signal.SIGINT:  # Ctrl-C: a clean stop that says how to go on
        signals = [line for line in status.splitlines() if line.startswith("Sig")]
        assert proc.returncode == 130, (err, before, mask, signals)
        assert "interrupted" in err and "Run the same command again to resume" in err
    else:  # a crash: no goodbye, maybe a torn last line
        assert proc.returncode == -signal.SIGKILL
    assert 4 <= out.read_text().count("\n") < 30
    backend.handler = task_handler
    assert run_cli(home, data, "-o", out).exit_code == 0
    assert out.read_bytes() == reference.read_bytes()


def test_a_torn_last_line_is_cut_on_resume(tmp_path):
    out = tmp_path / "s.jsonl"
    out.write_text('{"id": 1, "score": 4.5}\n{"id": 2, "sco')
    f = ScoresFile(out)
    assert list(f.load()) == ["1"]
    assert out.read_text() == '{"id": 1, "score": 4.5}\n'
    out.write_text("not json\n")
    with pytest.raises(Exception, match="Line 1 of the output file .* is not a score record"):
        ScoresFile(out).load()


# -- datasets ----------------------------------------------------------------------------------
def test_json_array_sharegpt_and_fields(home, backend, tmp_path):
    backend.handler = task_handler
    records = [
        {
            "id": "conv-1",
            "conversations": [
                {"from": "system", "value": "Be nice."},
                {"from": "human", "value": "Do task 2."},
                {"from": "gpt", "value": "Done."},
            ],
        },
        {"id": "conv-2", "conversations": [{"from": "human", "value": "Do task 3."}]},
    ]
    data = tmp_path / "share.json"
    data.write_text(json.dumps(records))
    out = tmp_path / "s.jsonl"
    assert run_cli(home, data, "-o", out).exit_code == 0
    assert read_jsonl(out) == [
        {"id": "conv-1", "score": pytest.approx(expected_task_score(2))},
        {"id": "conv-2", "score": 3.0},  # no model turn: missing output
    ]
    assert "Instruction: Do task 2.\nResponse: Done.\n" in backend.requests[0].body["prompt"]
    # --fields maps other names, including the id
    other = write_jsonl(
        tmp_path / "o.jsonl", [{"uid": 9, "q": "Do task 4.", "a": "ok", "ctx": "c"}]
    )
    out2 = tmp_path / "o.scores.jsonl"
    r = run_cli(home, other, "-o", out2, "--fields", "instruction=q,output=a,input=ctx,id=uid")
    assert r.exit_code == 0, r.stderr
    assert read_jsonl(out2) == [{"id": 9, "score": pytest.approx(expected_task_score(4))}]
    assert (
        "Instruction: Do task 4.\nInput: c\nResponse: ok\n" in backend.requests[-1].body["prompt"]
    )


def test_default_output_path_and_selection(home, backend, tmp_path):
    backend.handler = task_handler
    data = write_jsonl(tmp_path / "alpaca.jsonl", [*alpaca(10), {"instruction": "no output"}])
    r = run_cli(home, data, "--top", 0.2, "--select-out", tmp_path / "best.jsonl")
    assert r.exit_code == 0, r.stderr
    scores = read_jsonl(tmp_path / "alpaca.selectit.jsonl")
    assert len(scores) == 11
    best = read_jsonl(tmp_path / "best.jsonl")
    # tasks 4 and 9 have P("5") = .5, the highest; original fields, best first
    assert best == [alpaca(10)[3], alpaca(10)[8]]
    assert "kept the best 2 records" in r.stderr
    r = run_cli(home, data, "--top", 0.3, "--select-out", tmp_path / "best.json")
    assert json.loads((tmp_path / "best.json").read_text())[0] == alpaca(10)[3]


def test_outputs_never_overwrite_the_dataset(home, backend, tmp_path):
    data = write_jsonl(tmp_path / "a.v2.jsonl", alpaca(2))
    before = data.read_bytes()
    r = run_cli(home, data, "-o", data)
    assert r.exit_code == 1 and "is the dataset itself" in r.stderr
    r = run_cli(home, data, "--top", 0.5, "--select-out", tmp_path / "a.v2.selectit.jsonl")
    assert r.exit_code == 1 and "would overwrite the dataset or the scores" in r.stderr
    assert data.read_bytes() == before and not backend.requests
    backend.handler = task_handler
    assert run_cli(home, data).exit_code == 0
    assert len(read_jsonl(tmp_path / "a.v2.selectit.jsonl")) == 2  # the default -o


def test_line_ids_and_skip_bad_lines(home, backend, tmp_path):
    backend.handler = task_handler
    data = tmp_path / "a.jsonl"
    lines = [json.dumps(alpaca(1)[0]), "{broken", "", "[1, 2]", json.dumps(alpaca(1, 5)[0])]
    data.write_text("\n".join(lines) + "\n")
    r = run_cli(home, data, "-o", tmp_path / "s.jsonl")
    assert r.exit_code == 1
    assert "Line 2 of" in r.stderr and "--skip-bad-lines" in r.stderr
    assert not backend.requests
    r = run_cli(home, data, "-o", tmp_path / "s.jsonl", "--skip-bad-lines")
    assert r.exit_code == 0, r.stderr
    assert "skipped 2 malformed records (lines 2, 4)" in r.stderr
    assert [row["id"] for row in read_jsonl(tmp_path / "s.jsonl")] == [1, 5]


@pytest.mark.parametrize(
    "content,message",
    [
        (b"", "is empty"),
        (b"  \n\n", "is empty"),
        (b'{"instruction": "caf\xe9", "output": "x"}\n', "is not UTF-8 (bad byte on line 1)"),
        (b'[{"instruction": "a", "output": "b"},', "is not valid JSON at line 1"),
        (b"[]", "has no records"),
        (
            b'{"id": 1, "instruction": "a", "output": "b"}\n{"id": 1, "output": "c"}\n',
            "appears twice",
        ),
    ],
)
def test_bad_datasets_are_refused_before_any_call(home, backend, tmp_path, content, message):
    data = tmp_path / "bad.jsonl"
    data.write_bytes(content)
    r = run_cli(home, data, "-o", tmp_path / "s.jsonl")
    assert r.exit_code == 1 and message in r.stderr, r.stderr
    assert r.stderr.count("\n") == 1  # one sentence
    assert not backend.requests and not (tmp_path / "s.jsonl").exists()


@pytest.mark.parametrize(
    "args,message",
    [
        (["--k", "0"], "k on the command line must be at least 1, not 0."),
        (["--alpha", "-0.5"], "alpha on the command line must be at least 0, not -0.5."),
        (["--k", "11"], "k is 11 but the rating-prompt file has only 10 prompts"),
        (
            ["--rp-file", "/nonexistent/rp.txt"],
            "The rating-prompt file /nonexistent/rp.txt does not exist",
        ),
        (["--top", "1.5", "--select-out", "b.jsonl"], "--top must be a fraction above 0"),
        (["--top", "0.5"], "--top and --select-out go together"),
        (["--config", "/nonexistent.yaml"], "The config file /nonexistent.yaml does not exist"),
        (["--fields", "question"], "--fields cannot use 'question'"),
    ],
)
def test_bad_options_are_refused_before_any_call(home, backend, tmp_path, args, message):
    data = write_jsonl(tmp_path / "a.jsonl", alpaca(2))
    r = run_cli(home, data, "-o", tmp_path / "s.jsonl", *args)
    assert r.exit_code == 1 and message in r.stderr, r.stderr
    assert not backend.requests


def test_empty_and_non_utf8_rp_files(home, backend, tmp_path):
    data = write_jsonl(tmp_path / "a.jsonl", alpaca(1))
    empty = tmp_path / "empty.txt"
    empty.write_text("\n   \n")
    r = run_cli(home, data, "--rp-file", empty)
    assert r.exit_code == 1 and "is empty; write one rating prompt per line" in r.stderr
    latin = tmp_path / "latin.txt"
    latin.write_bytes(b"Notez la r\xe9ponse.\n")
    r = run_cli(home, data, "--rp-file", latin)
    assert r.exit_code == 1 and "is not UTF-8" in r.stderr
    assert not backend.requests


# -- configuration -------------------------------------------------------------------------------
def test_yaml_keys_flags_over_file_over_settings(home, backend, tmp_path):
    rp = tmp_path / "rp.txt"
    rp.write_text("A judge.\nB judge.\nC judge.\n")
    cfg = tmp_path / "selectit.yaml"
    cfg.write_text(
        "name: SelectitTokenScorer\nmodel: yaml-model\nrp_file: rp.txt\nk: 2\nalpha: 0.5\n"
        "max_length: 1024\nbatch_size: 4\n"
    )
    configure(home, selectit_k=3, selectit_model="table-model", selectit_api="chat")
    backend.handler = lambda body: dist_reply(
        {"5": 1.0} if "A judge" in prompt_of(body) else {"3": 1.0}
    )
    data = write_jsonl(tmp_path / "a.jsonl", alpaca(1))
    out = tmp_path / "s.jsonl"
    r = run_cli(home, data, "-o", out, "--config", cfg)
    assert r.exit_code == 0, r.stderr
    # k and alpha from the file (over the table's k 3); api from the table; rp_file beside yaml
    assert read_jsonl(out)[0]["score"] == pytest.approx(4 / (1 + 0.5 * 1.0))
    assert len(backend.chat_requests) == 2
    assert {b["model"] for b in backend.chat_requests} == {"yaml-model"}
    backend.clear()
    out.unlink()
    r = run_cli(home, data, "-o", out, "--config", cfg, "--k", 1, "--model", "flag-model")
    assert read_jsonl(out)[0]["score"] == 5.0
    assert [b["model"] for b in backend.chat_requests] == ["flag-model"]
    backend.clear()
    out.unlink()
    r = run_cli(home, data, "-o", out, "--rp-file", rp)  # the table alone: k 3
    assert r.exit_code == 0 and len(backend.chat_requests) == 3


SPEC_YAML = """name: SelectitTokenScorer
model: meta-llama/Llama-3.1-8B
rp_file: scorers/SelectIT/rating_prompt.txt
k: 1
alpha: 0.2
max_length: 2048
batch_size: 8
"""


def test_the_specs_yaml_runs_unchanged(home, backend, tmp_path, monkeypatch, caplog):
    """Issue 14: its rp_file does not exist here (the run stopped), its name was ignored."""
    monkeypatch.chdir(tmp_path)  # no scorers/ directory here
    cfg = tmp_path / "selectit.yaml"
    cfg.write_text(SPEC_YAML)
    data = write_jsonl(tmp_path / "alpaca.jsonl", alpaca(2))
    backend.handler = lambda body: dist_reply({"4": 1.0})
    r = run_cli(home, data, "--config", cfg)
    assert r.exit_code == 0, r.stderr
    said = [rec.getMessage() for rec in caplog.records if rec.name == "lmd.selectit"]
    assert said == [
        "selectit: scorers/SelectIT/rating_prompt.txt (the SelectIT spec's default rp_file) "
        f"does not exist here; using the shipped rating prompts, {BUILTIN_FILE}."
    ]
    # the shipped first prompt, the YAML's model, and the name names the output
    assert [prompt_of(q.body).split("\n")[0] for q in backend.requests] == [load_templates()[0]] * 2
    assert {q.body["model"] for q in backend.requests} == {"meta-llama/Llama-3.1-8B"}
    out = tmp_path / "alpaca.SelectitTokenScorer.jsonl"
    assert read_jsonl(out) == [{"id": 1, "score": 4.0}, {"id": 2, "score": 4.0}]
    assert r.stderr.startswith(
        f"lmd: asking {backend.url}, model meta-llama/Llama-3.1-8B (openai_chat_endpoint is "
        "set).\nselectit: SelectitTokenScorer: 2 samples, 2 scored now"
    )
    # where the file does exist (beside the YAML, as in the spec's repository) it is used
    (tmp_path / "scorers" / "SelectIT").mkdir(parents=True)
    (tmp_path / "scorers" / "SelectIT" / "rating_prompt.txt").write_text("My own prompt.\n")
    backend.clear()
    caplog.clear()
    r = run_cli(home, data, "--config", cfg, "-o", tmp_path / "own.jsonl")
    assert r.exit_code == 0, r.stderr
    assert {prompt_of(q.body).split("\n")[0] for q in backend.requests} == {"My own prompt."}
    assert not [rec for rec in caplog.records if rec.name == "lmd.selectit"]


def test_a_name_that_is_no_file_name_still_names_the_output(home, backend, tmp_path):
    cfg = tmp_path / "c.yaml"
    cfg.write_text("name: my scorer/v2\n")
    data = write_jsonl(tmp_path / "d.json", alpaca(1))
    backend.handler = lambda body: dist_reply({"2": 1.0})
    r = run_cli(home, data, "--config", cfg)
    assert r.exit_code == 0, r.stderr
    assert read_jsonl(tmp_path / "d.my_scorer_v2.jsonl") == [{"id": 1, "score": 2.0}]


@pytest.mark.parametrize(
    "text,message",
    [
        ("k: 0\n", "k in"),
        ("alpha: -1\n", "alpha in"),
        ("k: two\n", "must be a whole number"),
        ("temperature: 1\n", "Unknown key 'temperature'"),
        ("k: [1\n", "is not valid YAML"),
        ("- k\n", "must be a mapping"),
        ("backend: gpu\n", "must be one of openai, transformers"),
    ],
)
def test_bad_yaml_configs(home, backend, tmp_path, text, message):
    cfg = tmp_path / "c.yaml"
    cfg.write_text(text)
    data = write_jsonl(tmp_path / "a.jsonl", alpaca(1))
    r = run_cli(home, data, "--config", cfg)
    assert r.exit_code == 1 and message in r.stderr, r.stderr
    assert not backend.requests


def test_dataset_units():
    assert parse_fields("instruction=q, output=a")["output"] == "a"
    s = to_sample({"instruction": "i", "output": "o", "id": [1]}, 7)
    assert s.id == 7 and s.valid  # a list is no id: the line number is used
    s = to_sample(
        {"messages": [{"role": "user", "content": "u"}, {"role": "assistant", "content": "a"}]},
        1,
        parse_fields("conversations=messages"),
    )
    assert (s.instruction, s.output) == ("u", "a")


def test_raw_unicode_line_separators_inside_records(home, backend, tmp_path):
    backend.handler = task_handler
    record = {"id": "u\u2028", "instruction": "Do task 3.", "output": "a\u2028b\x0cc\u0085d"}
    data = tmp_path / "a.jsonl"
    data.write_text(json.dumps(record, ensure_ascii=False) + "\r\n", encoding="utf-8")
    out = tmp_path / "s.jsonl"
    assert run_cli(home, data, "-o", out).exit_code == 0
    assert run_cli(home, data, "-o", out).exit_code == 0  # the resume reads its own file back
    assert read_jsonl(out) == [{"id": "u\u2028", "score": pytest.approx(expected_task_score(3))}]
    assert len(backend.requests) == 1
    assert "Response: a\u2028b\x0cc\u0085d\n" in backend.requests[0].body["prompt"]


def test_reading_a_dataset_keeps_string_and_int_ids_apart(tmp_path):
    data = write_jsonl(
        tmp_path / "a.jsonl",
        [
            {"id": 1, "instruction": "a", "output": "b"},
            {"id": "1", "instruction": "a", "output": "b"},
        ],
    )
    ds = read_dataset(data)
    assert [s.id for s in ds.samples] == [1, "1"]


# -- POST /selectit ------------------------------------------------------------------------------
def test_route_gives_the_cli_numbers(home, backend, client, tmp_path):
    backend.handler = task_handler
    records = [*alpaca(4), {"id": "m", "instruction": "only"}]
    data = write_jsonl(tmp_path / "a.jsonl", records)
    out = tmp_path / "s.jsonl"
    assert run_cli(home, data, "-o", out, "--k", 3).exit_code == 0
    cli_rows = read_jsonl(out)
    backend.clear()
    r = client.post("/selectit", json={"records": records, "k": 3})
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["results"] == cli_rows and body["count"] == 5 and body["missing"] == 1
    # how the scores came about, as the CLI's summary says it
    assert (body["measured"] + body["bounded"], body["unrated"]) == (4, 0)
    assert len(backend.requests) == 4 * 3
    assert all(q.body["max_tokens"] == 3 for q in backend.requests)
    # one bare record; a bare list
    r = client.post("/selectit", json=alpaca(1, 2)[0])
    one = r.json()
    assert one["score"] == pytest.approx(expected_task_score(2), abs=1e-12)
    assert one["id"] == 1 and one["quality"] in ("measured", "bounded")
    r = client.post("/selectit", json=alpaca(2))
    assert [x["score"] for x in r.json()["results"]] == [
        expected_task_score(1),
        expected_task_score(2),
    ]
    r = client.post("/selectit", json={"record": alpaca(1)[0], "details": True})
    assert r.json()["token_scores"] == [expected_task_score(1)]


def test_route_shortens_long_samples_and_skips_what_cannot_fit(make_client, backend):
    backend.handler = lambda body: dist_reply({"4": 1.0})
    client = make_client(selectit_max_length=64)
    long = {"id": 1, "instruction": "word " * 300, "output": "ok"}
    r = client.post("/selectit", json={"records": [long], "details": True})
    assert r.status_code == 200, r.text
    (result,) = r.json()["results"]
    assert result["truncated"] is True and result["removed_tokens"][0] > 300
    assert prompt_of(backend.requests[0].body).endswith("\nResponse: ok\nThe answer is:")
    backend.clear()
    client = make_client(selectit_max_length=16)  # the rating prompt alone is longer
    r = client.post("/selectit", json=[long, *alpaca(1)])
    body = r.json()
    assert body["skipped"] == 2 and body["count"] == 2 and backend.requests == []
    assert [x["score"] for x in body["results"]] == [3.0, 3.0]
    assert all("more than max_length 16" in x["skipped"] for x in body["results"])


@pytest.mark.parametrize(
    "body,message",
    [
        ("not json", "not valid JSON"),
        ([], "The list of records is empty"),
        ([1, 2], "Record 1 is not a JSON object"),
        ({"records": alpaca(1), "k": 0}, "k in the request must be at least 1"),
        ({"records": alpaca(1), "temperature": 1}, "Unknown option 'temperature'"),
        ({"records": alpaca(1), "details": "yes"}, '"details" must be true or false'),
        ({"records": alpaca(1), "fields": 3}, '"fields" must be like'),
        ({"records": [{"id": 1}, {"id": 1}]}, "The id 1 appears twice in the request"),
        ({"records": "x"}, '"records" must be a list'),
        ({"records": alpaca(1), "k": 99}, "k is 99 but the rating-prompt file has only"),
        ('"text"', "Send a JSON record"),
    ],
)
def test_route_bad_bodies(client, backend, body, message):
    if isinstance(body, str):
        r = client.post("/selectit", content=body, headers={"content-type": "application/json"})
    else:
        r = client.post("/selectit", json=body)
    assert r.status_code == 400 and message in r.json()["error"], r.text
    assert not backend.requests


def test_route_backend_without_logprobs(client, backend):
    backend.no_logprobs = True
    r = client.post("/selectit", json=alpaca(1)[0])
    assert r.status_code == 502 and "without logprobs" in r.json()["error"]


def test_route_over_real_http(live, backend):
    import urllib.request

    backend.handler = task_handler
    d = live()
    req = urllib.request.Request(
        d.url + "/selectit",
        data=json.dumps(alpaca(2)).encode(),
        headers={"Content-Type": "application/json"},
        method="POST",
    )
    with urllib.request.urlopen(req, timeout=10) as resp:
        body = json.loads(resp.read())
    assert [x["score"] for x in body["results"]] == [expected_task_score(1), expected_task_score(2)]
    assert len(backend.requests) == 2
