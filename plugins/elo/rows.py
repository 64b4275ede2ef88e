"""Battle rows as judge, label and merge build them: every column, verdicts carried over."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from daemon.api import plural

from .arrange import battle_key
from .files import FULL_COLUMNS, EloFileError, read_table


def full_rows(table: Any, qa: Any) -> list[dict[str, str]]:
    """Arranged battles with every column; answers come from the file or from `qa`."""
    has_answers = "answer_a" in table.columns and "answer_b" in table.columns
    if not has_answers and qa is None:
        raise EloFileError(
            f"{table.path} has no answer_a/answer_b columns; give the Q&A file with --qa."
        )
    rows, missing = [], []
    for line, r in zip(table.lines, table.rows, strict=True):
        row = {c: r.get(c, "") for c in FULL_COLUMNS}
        row.update({c: v for c, v in r.items() if c not in row})
        row["model_a"], row["model_b"] = r["model_a"].strip(), r["model_b"].strip()
        if qa is not None and not (row["answer_a"].strip() and row["answer_b"].strip()):
            row["answer_a"] = row["answer_a"] or qa.answer(row["model_a"], r["question"])
            row["answer_b"] = row["answer_b"] or qa.answer(row["model_b"], r["question"])
        if not row["answer_a"].strip() or not row["answer_b"].strip():
            missing.append(line)
        rows.append(row)
    if missing:
        raise EloFileError(
            f"{plural(len(missing), 'battle')} {'lacks' if len(missing) == 1 else 'lack'} an "
            f"answer (first at line {missing[0]} of {table.path}); "
            "fill the answers with `lmd elo answer` first."
        )
    return rows


def resume_rows(
    rows: list[dict], out: Path | None, judge: str | None
) -> tuple[list[dict], list[int]]:
    """Copy verdicts already in `out` into rows.

    Returns the earlier rows of `out` that are not among `rows` (kept, so one judged file
    can grow as models and questions are added) and the indexes still to judge.
    """
    previous = None
    if out is not None and out.exists() and out.stat().st_size:
        previous = read_table(out, allow_empty=True)
        previous.require("model_a", "model_b")
    return copy_verdicts(rows, previous.rows if previous else [], judge)


def copy_verdicts(
    rows: list[dict], judged_rows: list[dict], judge: str | None
) -> tuple[list[dict], list[int]]:
    """resume_rows on rows already read: (the other rows of `judged_rows`, indexes to judge)."""
    done: dict[tuple, dict] = {}
    others: list[dict] = []
    for r in judged_rows:
        key = battle_key(r.get("question", ""), r["model_a"], r["model_b"])
        judged = is_judged(r)
        if judged and (judge is None or r.get("judge") == judge) and key not in done:
            done[key] = r
        else:
            others.append(r)
    todo = []
    for i, row in enumerate(rows):
        key = battle_key(row["question"], row["model_a"], row["model_b"])
        old = done.pop(key, None)
        if old and old["model_a"].strip() == row["model_a"]:
            row.update({k: v for k, v in old.items() if k in row})
        else:
            if old:
                others.append(old)
            todo.append(i)
    return others + list(done.values()), todo


def is_judged(row: dict) -> bool:
    """A verdict or a judge's response in either order (a half-judged battle is kept)."""
    return any((row.get(c) or "").strip() for c in JUDGED_MARKS)


JUDGED_MARKS = ("winner", "gpt_4_response", "gpt_4_response_ba")


def judged_only(rows: list[dict]) -> list[dict]:
    return [r for r in rows if is_judged(r)]


def columns_of(rows: list[dict]) -> list[str]:
    extra = [c for r in rows[:1] for c in r if c not in FULL_COLUMNS]
    return FULL_COLUMNS + extra
