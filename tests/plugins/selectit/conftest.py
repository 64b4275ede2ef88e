"""Helpers for the SelectIT tests: scripted rating logprobs and a CLI runner."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

from click.testing import CliRunner

from tests.fake_backend import Reply


def dist_reply(probs: dict[str, float], chosen: str | None = None) -> Reply:
    """A one-token reply whose top logprobs are `probs` (token -> probability)."""
    top = [(tok, math.log(p)) for tok, p in probs.items()]
    chosen = chosen or max(probs, key=probs.get)
    return Reply(chosen, logprobs=[(chosen, math.log(probs[chosen]), top)])


def prompt_of(body: dict) -> str:
    """The prompt text of a completions or chat request body."""
    if "prompt" in body:
        return body["prompt"]
    return body["messages"][-1]["content"]


def write_jsonl(path: Path, rows: list) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def read_jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").split("\n") if line]


def alpaca(n: int, start: int = 1) -> list[dict]:
    return [
        {"instruction": f"Do task {i}.", "input": "", "output": f"Answer {i} done."}
        for i in range(start, start + n)
    ]


def run_cli(home: Path, *args: str):
    """`lmd selectit ...` in-process; returns the click Result (stdout, stderr, exit_code)."""
    from daemon.cli import cli

    return CliRunner().invoke(
        cli, ["selectit", *map(str, args), "--home", str(home)], catch_exceptions=False
    )


TASK = re.compile(r"Do task (\d+)\.")


def task_handler(body: dict) -> Reply:
    """P("5") = (n % 5 + 1) / 10 for task n, the rest on " 4": the score is 4 + P("5")."""
    n = int(TASK.search(prompt_of(body)).group(1))
    p5 = (n % 5 + 1) / 10
    return dist_reply({" 5": p5, "4": 1 - p5})


def asked_tasks(backend) -> list[int]:
    """The task numbers of the rating requests the backend received, in arrival order."""
    return [int(TASK.search(prompt_of(r.body)).group(1)) for r in backend.requests]
