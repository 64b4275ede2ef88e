"""Helpers for the Elo tests: a fake arena on the fake backend, CSV files, running `lmd`."""

from __future__ import annotations

import csv
import re
from pathlib import Path

from click.testing import CliRunner

from tests.fake_backend import FakeBackend, Reply

# The fake models' strength: the judge prefers the stronger model's answer.
STRENGTH = {"alpha-7b": 1, "beta-13b": 2, "gamma-70b": 3, "delta-1t": 4}
JUDGE = "judge-model"
ANSWER_1 = re.compile(r"Model 1's Answer:\n(.*?)\n\nModel 2's Answer:", re.S)
ANSWER_2 = re.compile(r"Model 2's Answer:\n(.*?)\n\nJudge which", re.S)


def answer_text(model: str, question: str) -> str:
    return f"{model} answers: {question}"


def is_judge_request(body: dict) -> bool:
    return "Score of Model 1" in body["messages"][-1]["content"]


def arena_handler(first_position_bias: bool = False, broken_judge: bool = False):
    """Answers name their model; the judge scores by STRENGTH (equal strength: tie).

    first_position_bias: the judge prefers Model 1 whenever gamma-70b is one of the two.
    broken_judge: the judge replies without any scores.
    """

    def handle(body: dict) -> Reply:
        text = body["messages"][-1]["content"]
        if not is_judge_request(body):
            return Reply(answer_text(body["model"], text))
        if broken_judge:
            return Reply("Both answers have merits; I cannot decide.")
        first = ANSWER_1.search(text).group(1).split(" answers:")[0].removesuffix("-id")
        second = ANSWER_2.search(text).group(1).split(" answers:")[0].removesuffix("-id")
        s1, s2 = STRENGTH.get(first, 0), STRENGTH.get(second, 0)
        if first_position_bias and "gamma-70b" in (first, second):
            s1, s2 = 1, 0
        if s1 > s2:
            scores = (1, 0)
        elif s2 > s1:
            scores = (0, 1)
        else:
            scores = (0.5, 0.5)
        return Reply(
            f"Score of Model 1: {scores[0]}\nScore of Model 2: {scores[1]}\n"
            f"Brief Explanation: {first} vs {second}."
        )

    return handle


def write_csv(path: Path, header: list[str], rows: list[list]) -> Path:
    with open(path, "w", newline="", encoding="utf-8") as f:
        w = csv.writer(f)
        w.writerow(header)
        w.writerows(rows)
    return path


def read_csv(path: Path) -> list[dict[str, str]]:
    with open(path, newline="", encoding="utf-8") as f:
        return list(csv.DictReader(f))


def models_file(path: Path, backend: FakeBackend, models: list[str]) -> Path:
    """A models file mapping each fake model (and the judge) to the fake backend."""
    lines = []
    for m in [*models, JUDGE]:
        lines += [f"{m}:", f"  base_url: {backend.url}", f"  model: {m}-id"]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def lmd(home: Path, *args: str, input: str | None = None):
    """Run `lmd ARGS` in-process against `home`; returns the click Result."""
    from daemon.cli import cli

    runner = CliRunner()
    return runner.invoke(
        cli, list(args), input=input, env={"LMD_HOME": str(home)}, catch_exceptions=False
    )
