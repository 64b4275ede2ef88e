"""The arena in parts: `lmd elo answer|judge --shard I/N` and `lmd elo merge`."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections import Counter

import pytest

from daemon.core.shards import part_of
from plugins.elo.shards import battle_identity
from tests.daemons import ROOT
from tests.fake_backend import FakeBackend, Reply

from .conftest import (
    ANSWER_1,
    ANSWER_2,
    JUDGE,
    arena_handler,
    is_judge_request,
    lmd,
    models_file,
    read_csv,
    write_csv,
)

MODELS = ["alpha-7b", "beta-13b", "gamma-70b", "delta-1t"]
QUESTIONS = [f"Question number {i}: why?" for i in range(1, 31)]


@pytest.fixture
def arena(tmp_path, home, backend, monkeypatch):
    """Questions, a models file, the fake arena, and a fixed clock for the judge's tstamp
    (so two runs can be compared byte for byte)."""
    import plugins.elo.judge

    monkeypatch.setattr(plugins.elo.judge.time, "time", lambda: 1_700_000_000.0)
    backend.handler = arena_handler()
    write_csv(tmp_path / "questions.csv", ["question"], [[q] for q in QUESTIONS])
    models_file(home / "elo_models.yaml", backend, MODELS)
    return tmp_path


def ok(result) -> str:
    assert result.exit_code == 0, result.output
    return result.stderr


def refused(result, *sentences: str) -> None:
    assert result.exit_code == 1, result.output
    assert "Traceback" not in result.output
    for s in sentences:
        assert s in result.stderr, result.stderr
    assert result.stderr.count("\n") == 1, result.stderr


def answer(home, source, model, out, *more):
    return lmd(home, "elo", "answer", str(source), "-m", model, "-o", str(out), *map(str, more))


def judge(home, battles, out, *more):
    args = ["elo", "judge", str(battles), "--judge-model", JUDGE, "-o", str(out)]
    return lmd(home, *args, *map(str, more))


def merge(home, out, *parts):
    return lmd(home, "elo", "merge", str(out), *map(str, parts))


def asked(backend) -> list[str]:
    return [b["messages"][-1]["content"] for b in backend.chat_requests]


def test_answer_parts_merge_to_the_single_run(arena, home, backend):
    d = arena
    ok(answer(home, d / "questions.csv", "alpha-7b", d / "single.csv"))
    backend.clear()
    parts = [d / f"a{i}.csv" for i in (1, 2, 3)]
    for i, part in enumerate(parts, start=1):
        assert f"(part {i}/3)" in ok(
            answer(home, d / "questions.csv", "alpha-7b", part, "--shard", f"{i}/3")
        )
        assert json.loads((d / f"a{i}.csv.shard.json").read_text())["part"] == f"{i}/3"
        assert {part_of(r["question"], 3) for r in read_csv(part)} == {i}
    assert Counter(asked(backend)) == Counter(QUESTIONS)  # each question asked once
    assert "Merged 3 parts" in ok(merge(home, d / "merged.csv", *parts))
    assert (d / "merged.csv").read_bytes() == (d / "single.csv").read_bytes()
    # adding a model in parts, merged into the Q&A file itself, as `-o qa.csv` would
    shutil.copy(d / "single.csv", d / "qa.csv")
    ok(answer(home, d / "single.csv", "beta-13b", d / "single.csv"))
    parts = [d / f"b{i}.csv" for i in (1, 2)]
    for i, part in enumerate(parts, start=1):
        ok(answer(home, d / "qa.csv", "beta-13b", part, "--shard", f"{i}/2"))
    ok(merge(home, d / "qa.csv", *parts))
    assert (d / "qa.csv").read_bytes() == (d / "single.csv").read_bytes()
    assert list(read_csv(d / "qa.csv")[0]) == ["question", "alpha-7b", "beta-13b"]


def test_an_answer_part_resumes_and_merge_waits_for_it(arena, home, backend):
    d = arena
    good = arena_handler()
    backend.handler = lambda body: (
        Reply("down", status=503) if "number 7:" in body["messages"][-1]["content"] else good(body)
    )
    parts = [d / f"a{i}.csv" for i in (1, 2)]
    results = [answer(home, d / "questions.csv", "alpha-7b", p, "--shard", f"{i}/2") for i, p in
               enumerate(parts, start=1)]  # fmt: skip
    failed = part_of(QUESTIONS[6], 2)
    assert results[failed - 1].exit_code == 1 and results[2 - failed].exit_code == 0
    refused(
        merge(home, d / "m.csv", *parts),
        "1 questions have no answer from alpha-7b in the parts (first: 'Question number 7: "
        f"why?', in part {failed}/2",
        f"run part {failed}/2 again (they resume), then merge.",
    )
    assert not (d / "m.csv").exists()
    backend.clear()
    # the part runs again against another replica of the model: the same run, resumed
    with FakeBackend() as replica:
        replica.handler = good
        models_file(d / "replica.yaml", replica, MODELS)
        again = ["--shard", f"{failed}/2", "--models", d / "replica.yaml"]
        ok(answer(home, d / "questions.csv", "alpha-7b", parts[failed - 1], *again))
        assert asked(replica) == [QUESTIONS[6]]  # only what the part lacked
    assert backend.requests == []
    ok(merge(home, d / "m.csv", *parts))
    backend.handler = good
    ok(answer(home, d / "questions.csv", "alpha-7b", d / "single.csv"))
    assert (d / "m.csv").read_bytes() == (d / "single.csv").read_bytes()


def qa_with_answers(d, models=MODELS[:3]) -> None:
    write_csv(
        d / "qa.csv",
        ["question", *models],
        [[q, *(f"{m}-id answers: {q}" for m in models)] for q in QUESTIONS],
    )


def test_judge_parts_merge_to_the_single_run(arena, home, backend):
    d = arena
    qa_with_answers(d)
    lmd(home, "elo", "arrange", str(d / "qa.csv"), "-o", str(d / "battles.csv"))
    ok(judge(home, d / "battles.csv", d / "single.csv", "--qa", d / "qa.csv"))
    assert len(read_csv(d / "single.csv")) == 90
    backend.clear()
    parts = [d / f"j{i}.csv" for i in (1, 2, 3)]
    for i, part in enumerate(parts, start=1):
        err = ok(judge(home, d / "battles.csv", part, "--qa", d / "qa.csv", "--shard", f"{i}/3"))
        assert f"battles of part {i}/3" in err
        rows = read_csv(part)
        assert {part_of(battle_identity(r["question"], r["model_a"], r["model_b"]), 3)
                for r in rows} == {i}  # fmt: skip
    judged = [b["messages"][0]["content"] for b in backend.chat_requests if is_judge_request(b)]
    assert len(judged) == 180 and len(set(judged)) == 180  # every battle once in each order
    ok(merge(home, d / "merged.csv", *parts))
    assert (d / "merged.csv").read_bytes() == (d / "single.csv").read_bytes()
    # a new model: its battles judged in parts and merged into the judged file, which keeps
    # its earlier verdicts, exactly as `lmd elo judge new.csv -o judged.csv` would
    qa_with_answers(d, MODELS)
    lmd(home, "elo", "arrange", str(d / "qa.csv"), "--existing", str(d / "single.csv"),
        "-o", str(d / "new.csv"))  # fmt: skip
    shutil.copy(d / "single.csv", d / "grown.csv")
    ok(judge(home, d / "new.csv", d / "single.csv", "--qa", d / "qa.csv"))
    parts = [d / f"n{i}.csv" for i in (1, 2)]
    for i, part in enumerate(parts, start=1):
        ok(judge(home, d / "new.csv", part, "--qa", d / "qa.csv", "--shard", f"{i}/2"))
    ok(merge(home, d / "grown.csv", *parts))
    assert (d / "grown.csv").read_bytes() == (d / "single.csv").read_bytes()
    assert len(read_csv(d / "grown.csv")) == 180


def test_a_judge_part_killed_with_sigkill_resumes_without_judging_again(arena, home, backend):
    d = arena
    qa_with_answers(d)
    lmd(home, "elo", "arrange", str(d / "qa.csv"), "-o", str(d / "battles.csv"))
    part = d / "j1.csv"
    backend.latency = 0.1
    env = {**os.environ, "LMD_HOME": str(home)}
    cmd = [sys.executable, "-m", "daemon.cli", "elo", "judge", str(d / "battles.csv")]
    cmd += ["--qa", str(d / "qa.csv"), "--judge-model", JUDGE, "-o", str(part)]
    cmd += ["--shard", "1/2", "-j", "2"]
    proc = subprocess.Popen(cmd, env=env, cwd=ROOT, stderr=subprocess.PIPE)
    deadline = time.time() + 30
    while time.time() < deadline and not part.exists():  # the first checkpoint (after 2 s)
        time.sleep(0.02)
    proc.send_signal(signal.SIGKILL)
    proc.communicate(timeout=20)
    assert proc.returncode == -signal.SIGKILL
    kept = read_csv(part)
    done = {(r["question"], r["model_a"], r["model_b"]) for r in kept}
    # (question, model shown first, model shown second) of every order already judged
    asked_before = {(r["question"], r["model_a"], r["model_b"]) for r in kept
                    if r["gpt_4_response"]}  # fmt: skip
    asked_before |= {(r["question"], r["model_b"], r["model_a"]) for r in kept
                     if r["gpt_4_response_ba"]}  # fmt: skip
    mine = {
        (r["question"], r["model_a"], r["model_b"])
        for r in read_csv(d / "battles.csv")
        if part_of(battle_identity(r["question"], r["model_a"], r["model_b"]), 2) == 1
    }
    assert 0 < len(done) < len(mine) and done <= mine
    # The resume asks a backend of its own: a request the killed process had already sent
    # can still reach the first one after the kill (it was counted twice, a flaky failure).
    with FakeBackend() as fresh:
        fresh.handler = arena_handler()
        models_file(home / "elo_models.yaml", fresh, MODELS)
        ok(judge(home, d / "battles.csv", part, "--qa", d / "qa.csv", "--shard", "1/2"))
    prompts = [b["messages"][0]["content"] for b in fresh.chat_requests if is_judge_request(b)]
    shown = {
        (
            p.split("Question:\n")[1].split("\n")[0],
            ANSWER_1.search(p).group(1).split("-id")[0],
            ANSWER_2.search(p).group(1).split("-id")[0],
        )
        for p in prompts
    }
    assert shown & asked_before == set()  # no order judged again
    assert len(prompts) == 2 * len(mine) - len(asked_before)
    assert len(read_csv(part)) == len(mine)


@pytest.fixture
def answer_parts(arena, home):
    d = arena
    parts = [d / f"a{i}.csv" for i in (1, 2, 3)]
    for i, part in enumerate(parts, start=1):
        ok(answer(home, d / "questions.csv", "alpha-7b", part, "--shard", f"{i}/3"))
    return d, parts


def test_merge_refuses_a_missing_and_a_duplicated_part(answer_parts, home):
    d, (p1, p2, p3) = answer_parts
    refused(
        merge(home, d / "m.csv", p1, p3),
        "Part 2/3 is missing; run `lmd elo answer ... --shard I/3` for it",
    )
    shutil.copy(p3, d / "copy.csv")
    shutil.copy(d / "a3.csv.shard.json", d / "copy.csv.shard.json")
    refused(
        merge(home, d / "m.csv", p1, p2, p3, d / "copy.csv"),
        f"Part 3/3 is given twice ({p3} and {d / 'copy.csv'}; both hold 'Question number",
        "give each part once.",
    )
    assert not (d / "m.csv").exists()


def test_merge_refuses_mixed_runs_and_strangers(answer_parts, home, backend):
    d, (p1, p2, p3) = answer_parts
    other = d / "beta3.csv"
    ok(answer(home, d / "questions.csv", "beta-13b", other, "--shard", "3/3"))
    refused(
        merge(home, d / "m.csv", p1, p2, other),
        "are parts of different runs (model 'beta-13b' in beta3.csv, 'alpha-7b' in a1.csv;",
    )
    halves = d / "h.csv"
    ok(answer(home, d / "questions.csv", "alpha-7b", halves, "--shard", "2/2"))
    refused(merge(home, d / "m.csv", p1, p2, halves), "merge the parts of one run")
    write_csv(d / "mine.csv", ["question", "alpha-7b"], [["q", "a"]])
    refused(merge(home, d / "m.csv", p1, p2, d / "mine.csv"), "is not the output of a part")
    refused(merge(home, p1, p1, p2, p3), f"{p1} is one of the parts; merge into another file")
    (d / "notes.csv").write_text("my notes\n")
    refused(
        merge(home, d / "notes.csv", p1, p2, p3),
        "notes.csv exists and is not a Q&A file to merge into (",
    )
    assert (d / "notes.csv").read_text() == "my notes\n"
    ok(answer(home, d / "questions.csv", "beta-13b", d / "other-part.csv", "--shard", "1/2"))
    refused(merge(home, d / "other-part.csv", p1, p2, p3), "holds part 1/2 of a sharded run")
    # a part cut short (a copy interrupted mid-line)
    text = p2.read_text()
    p2.write_text(text[:-7])
    refused(merge(home, d / "m.csv", p1, p2, p3), f"The part {p2} ends in a cut-off line")
    assert not (d / "m.csv").exists()
    # the questions changed after the parts ran
    p2.write_text(text)
    write_csv(d / "questions.csv", ["question"], [[q] for q in [*QUESTIONS, "New?"]])
    refused(
        merge(home, d / "m.csv", p1, p2, p3),
        "is not the questions file the parts ran on (its content differs)",
    )


def test_part_outputs_are_checked_before_any_call(arena, home, backend):
    d = arena
    q = d / "questions.csv"
    write_csv(d / "precious.csv", ["question", "x"], [["a", "b"]])
    refused(
        answer(home, q, "alpha-7b", d / "precious.csv", "--shard", "1/2"),
        "precious.csv exists but is not the output of a part",
    )
    refused(answer(home, q, "alpha-7b", q, "--shard", "1/2"), "each part writes its own file")
    ok(answer(home, q, "alpha-7b", d / "p.csv", "--shard", "1/2"))
    backend.clear()
    refused(answer(home, q, "alpha-7b", d / "p.csv", "--shard", "2/2"), "holds part 1/2, not 2/2")
    refused(
        answer(home, q, "beta-13b", d / "p.csv", "--shard", "1/2"),
        "holds part 1/2 of another run (model 'alpha-7b' then, 'beta-13b' now",
    )
    refused(answer(home, q, "alpha-7b", d / "p.csv"), "holds part 1/2 of a sharded run")
    for spec, sentence in [
        ("3/2", "asks for part 3 of only 2"),
        ("0/0", "has no parts"),
        ("a/b", "is not a part: write I/N"),
    ]:
        refused(answer(home, q, "alpha-7b", d / "x.csv", "--shard", spec), sentence)
        refused(judge(home, d / "b.csv", d / "x.csv", "--shard", spec), sentence)
    assert backend.requests == [] and not (d / "x.csv").exists()


def test_parts_that_own_no_question_still_merge(arena, home, backend):
    # two questions in five parts: at least three parts own none, and write an empty file
    d = arena
    write_csv(d / "two.csv", ["question"], [[q] for q in QUESTIONS[:2]])
    ok(answer(home, d / "two.csv", "alpha-7b", d / "single.csv"))
    parts = [d / f"p{i}.csv" for i in range(1, 6)]
    for i, part in enumerate(parts, start=1):
        ok(answer(home, d / "two.csv", "alpha-7b", part, "--shard", f"{i}/5"))
    empty = [p for p in parts if not read_csv(p)]
    assert len(empty) >= 3
    # running an empty part again (a resume) is fine too, and asks nothing
    backend.clear()
    i = parts.index(empty[0]) + 1
    ok(answer(home, d / "two.csv", "alpha-7b", empty[0], "--shard", f"{i}/5"))
    assert asked(backend) == []
    assert "Merged 5 parts" in ok(merge(home, d / "merged.csv", *parts))
    assert (d / "merged.csv").read_bytes() == (d / "single.csv").read_bytes()
