"""`--shard I/N` for `lmd elo answer` and `lmd elo judge`, and `lmd elo merge`.

A part's output is an ordinary Q&A or judged-battles file holding its part of the questions
or battles; beside it, OUT.shard.json records the run (what it did, with which model and
prompt, on which input, part I of N). A question's part comes from a hash of its text, a
battle's from its question and its two models (not their order), so every machine agrees.
`lmd elo merge OUT PART...` checks the parts belong to one run and cover every item once, then
writes OUT exactly as the same command without --shard would have.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any

from daemon.api import LmdError, Shard, describe_parts, file_sha256, part_of

from .answers import merge
from .arrange import battle_key
from .files import (
    QA,
    EloFileError,
    Table,
    check_arrangement,
    read_qa,
    read_question_source,
    read_table,
    write_qa,
    write_table,
)
from .judge import ORDER_COLUMNS, pending_orders
from .rows import columns_of, copy_verdicts, full_rows, judged_only, resume_rows

RECORD_SUFFIX = ".shard.json"
INPUT_NAMES = {"questions": "questions file", "battles": "battles file", "qa": "Q&A file"}


def record_path(output: Path) -> Path:
    return output.with_name(output.name + RECORD_SUFFIX)


def battle_identity(question: str, model_a: str, model_b: str) -> str:
    """The text a battle's part is hashed from: its question and its pair of models."""
    q, pair = battle_key(question, model_a, model_b)
    return json.dumps([q, sorted(pair)], ensure_ascii=False)


def _short_hash(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]


def _input(path: Path | None) -> dict | None:
    if path is None:
        return None
    if str(path) == "-":
        raise LmdError("--shard needs its input as a file, not stdin; save it to a file first.")
    return {"path": str(Path(path).resolve()), "sha256": file_sha256(Path(path))}


# -- the parts' records ---------------------------------------------------------------------
# Which server answered is not part of a run's identity: parts may run against different
# replicas of one model (and a re-run may land on another); the model and prompt are.
def answer_record(part: Shard, questions: Path, endpoint: Any, system: str) -> dict:
    run = {"model": endpoint.name, "model_id": endpoint.model}
    run["system_prompt"] = _short_hash(system)
    return _record("answer", part, run, {"questions": _input(questions)})


def judge_record(
    part: Shard, battles: Path, qa: Path | None, endpoint: Any, prompt: str, both: bool = True
) -> dict:
    run = {"judge": endpoint.name, "model_id": endpoint.model, "prompt": _short_hash(prompt)}
    run["orders"] = 2 if both else 1
    return _record("judge", part, run, {"battles": _input(battles), "qa": _input(qa)})


def _record(kind: str, part: Shard, run: dict, inputs: dict) -> dict:
    return {"lmd_shard": 1, "kind": kind, "part": str(part), "run": run, "inputs": inputs}


def read_record(output: Path) -> dict | None:
    """The record beside `output`, None when there is none; a broken one is a sentence."""
    path = record_path(output)
    if not path.exists():
        return None
    try:
        record = json.loads(path.read_text(encoding="utf-8"))
        Shard(*map(int, record["part"].split("/")))
        record["kind"], record["run"], record["inputs"]  # noqa: B018 - presence check
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        raise EloFileError(
            f"{path} is not a shard record of lmd; delete it if {output} is not a part."
        ) from None
    return record


def _write_record(output: Path, record: dict) -> None:
    path = record_path(output)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(record, ensure_ascii=False, indent=1) + "\n", encoding="utf-8")
    os.replace(tmp, path)


def _differences(old: dict, new: dict) -> list[str]:
    return [
        f"{key} {old.get(key)!r} then, {value!r} now"
        for key, value in new.items()
        if old.get(key) != value
    ]


def check_single_output(output: Path) -> None:
    """A run without --shard must not write into a part's output."""
    record = read_record(output)
    if record is not None:
        raise LmdError(
            f"{output} holds part {record['part']} of a sharded run; merge the parts with "
            "`lmd elo merge`, or give another -o."
        )


def start_part(output: Path, record: dict) -> None:
    """Refuse an output that is another part's, another run's or not a part at all; then
    write this part's record (before any work, so a killed part can be resumed)."""
    inputs = [Path(i["path"]) for i in record["inputs"].values() if i]
    if any(output.resolve() == p for p in inputs):
        raise LmdError(
            f"With --shard each part writes its own file; -o {output} is an input. Give e.g. "
            f"-o {output.stem}.part{record['part'].split('/')[0]}{output.suffix}."
        )
    old = read_record(output)
    if old is None:
        if output.exists() and output.stat().st_size:
            raise LmdError(
                f"{output} exists but is not the output of a part (it has no "
                f"{record_path(output).name}); give each part a new file with -o."
            )
    elif old["kind"] != record["kind"]:
        raise LmdError(
            f"{output} holds part {old['part']} of an `lmd elo {old['kind']}` run; give this "
            f"`lmd elo {record['kind']}` part another -o."
        )
    elif old["part"] != record["part"]:
        raise LmdError(
            f"{output} holds part {old['part']}, not {record['part']}; give each part its own -o."
        )
    elif old["run"] != record["run"]:
        changed = "; ".join(_differences(old["run"], record["run"]))
        raise LmdError(
            f"{output} holds part {old['part']} of another run ({changed}); give this run its "
            "own -o, or delete both files to start that part over."
        )
    _write_record(output, record)


# -- one part of the items --------------------------------------------------------------------
def only_part(qa: QA, part: Shard) -> QA:
    """The questions of `part` (in order) with their answers."""
    questions = [q for q in qa.questions if part.owns(q.strip())]
    keep = set(questions)
    answers = {m: {q: a for q, a in by_q.items() if q in keep} for m, by_q in qa.answers.items()}
    return QA(questions, list(qa.models), answers)


def only_battles_of(table: Table, part: Shard) -> Table:
    """The battles of `part`, with their line numbers."""
    kept = [
        (line, r)
        for line, r in zip(table.lines, table.rows, strict=True)
        if part.owns(battle_identity(r["question"], r["model_a"], r["model_b"]))
    ]
    return Table(
        table.path, table.columns, [r for _, r in kept], [line for line, _ in kept], table.unit
    )


# -- merging ---------------------------------------------------------------------------------
def _first(items: list[str], limit: int = 3) -> str:
    shown = ", ".join(repr(i if len(i) <= 60 else i[:57] + "...") for i in items[:limit])
    return shown + (", ..." if len(items) > limit else "")


def _items(path: Path) -> set[str]:
    """What a part holds, for naming doubles: its questions, or its battles."""
    table = read_table(path, allow_empty=True)
    if {"model_a", "model_b"} <= set(table.columns):
        return {f"{r['question']} ({r['model_a']} vs {r['model_b']})" for r in table.rows}
    return {r.get("question", "") for r in table.rows}


def read_parts(output: Path, files: list[Path]) -> tuple[dict, dict[int, Path], int]:
    """The common record and {part index: file}; refuses mixed runs, doubles and gaps."""
    resolved_out = output.resolve()
    records: list[tuple[Path, dict]] = []
    for f in files:
        if not f.exists():
            raise LmdError(f"There is no part {f}; check the path.")
        if f.resolve() == resolved_out:
            raise LmdError(f"{output} is one of the parts; merge into another file.")
        record = read_record(f)
        if record is None:
            raise LmdError(
                f"{f} is not the output of a part (it has no {record_path(f).name}); give "
                "the files written by `lmd elo answer|judge --shard I/N`."
            )
        if not _ends_whole(f):
            raise LmdError(
                f"The part {f} ends in a cut-off line (lmd writes whole lines); copy it again "
                "from where its part ran, or run that part again."
            )
        records.append((f, record))
    first_file, first = records[0]
    count = int(first["part"].split("/")[1])
    by_index: dict[int, Path] = {}
    for f, record in records:
        index, n = map(int, record["part"].split("/"))
        if record["kind"] != first["kind"] or n != count:
            raise LmdError(
                f"{f} is part {record['part']} of an `lmd elo {record['kind']}` run, "
                f"{first_file} part {first['part']} of an `lmd elo {first['kind']}` run; "
                "merge the parts of one run."
            )
        changed = [
            f"{key} {value!r} in {f.name}, {first['run'].get(key)!r} in {first_file.name}"
            for key, value in record["run"].items()
            if first["run"].get(key) != value
        ] + [
            f"another {INPUT_NAMES[name]}"
            for name, value in record["inputs"].items()
            if (value or {}).get("sha256") != (first["inputs"].get(name) or {}).get("sha256")
        ]
        if changed:
            raise LmdError(
                f"{f} and {first_file} are parts of different runs ({'; '.join(changed)}); "
                "merge the parts of one run."
            )
        if index in by_index:
            both = sorted(_items(by_index[index]) & _items(f))
            holding = f"; both hold {_first(both)}" if both else ""
            raise LmdError(
                f"Part {index}/{count} is given twice ({by_index[index]} and {f}{holding}); "
                "give each part once."
            )
        by_index[index] = f
    missing = [i for i in range(1, count + 1) if i not in by_index]
    if missing:
        raise LmdError(
            f"{describe_parts(missing, count).capitalize()} {'is' if len(missing) == 1 else 'are'}"
            f" missing; run `lmd elo {first['kind']} ... --shard I/{count}` for "
            f"{'it' if len(missing) == 1 else 'them'} and give every part's output."
        )
    return first, by_index, count


def _ends_whole(path: Path) -> bool:
    """Parts are written whole (temp file + rename), ending in a newline."""
    with open(path, "rb") as fh:
        fh.seek(0, os.SEEK_END)
        if fh.tell() == 0:
            return True
        fh.seek(-1, os.SEEK_END)
        return fh.read(1) == b"\n"


def _input_file(record: dict, name: str, override: Path | None) -> Path | None:
    """An input of the run, checked to be the very file the parts read."""
    meta = record["inputs"].get(name)
    if meta is None:
        return None
    what = INPUT_NAMES[name]
    flag = "--input" if name != "qa" else "--qa"
    path = Path(override) if override else Path(meta["path"])
    if not path.exists():
        raise LmdError(f"The {what} the parts ran on, {path}, is gone; give it with {flag}.")
    if file_sha256(path) != meta["sha256"]:
        raise LmdError(
            f"{path} is not the {what} the parts ran on (its content differs); give that file "
            f"with {flag}, or run the parts again."
        )
    return path


def _existing(output: Path, read: Any, what: str) -> Any:
    """Read the existing OUT (a merge adds to it, as the single run does), or one sentence."""
    try:
        return read(output)
    except EloFileError as e:
        raise LmdError(
            f"{output} exists and is not {what} to merge into ({e.message.rstrip('.')}); give "
            "another file, or move it away."
        ) from None


def merge_parts(
    output: Path, files: list[Path], input_file: Path | None, qa_file: Path | None
) -> str:
    """Write the merged file; returns the sentence to print."""
    record, parts, count = read_parts(output, files)
    check_single_output(output)  # OUT may not be some part's own file
    if record["kind"] == "answer":
        return _merge_answers(output, record, parts, count, input_file)
    return _merge_verdicts(output, record, parts, count, input_file, qa_file)


def _merge_answers(
    output: Path, record: dict, parts: dict[int, Path], count: int, input_file: Path | None
) -> str:
    source = _input_file(record, "questions", input_file)
    given = read_question_source(source)
    asked = set(given.questions)
    qa = given
    if output.exists() and output.resolve() != source.resolve():
        qa = merge(_existing(output, read_qa, "a Q&A file"), given)
    model = record["run"]["model"]
    qa.add_model(model)
    answers: dict[int, QA] = {}
    for index, path in parts.items():
        part = read_qa(path, allow_empty=True)  # a part may own no question
        wrong = [q for q in part.questions if part_of(q.strip(), count) != index]
        if wrong:
            raise LmdError(
                f"{path} holds questions of other parts (first: {_first(wrong)}); it was not "
                f"written by part {index}/{count} of this run."
            )
        foreign = [q for q in part.questions if q not in asked]
        if foreign:
            raise LmdError(
                f"{path} holds {len(foreign)} questions that are not in {source} (first: "
                f"{_first(foreign)}); it was started on another questions file."
            )
        answers[index] = part
    unasked = [q for q in qa.questions if q not in asked and not qa.answer(model, q).strip()]
    if unasked:
        raise LmdError(
            f"{output} has {len(unasked)} questions that are not in {source}, so no part asked "
            f"{model} them (first: {_first(unasked)}); merge into a new file, or add them to "
            "the questions and run the parts again."
        )
    missing: list[tuple[str, int]] = []
    for q in qa.questions:
        if qa.answer(model, q).strip():
            continue
        index = part_of(q.strip(), count)
        text = answers[index].answer(model, q)
        if text.strip():
            qa.answers[model][q] = text
        else:
            missing.append((q, index))
    if missing:
        q, index = missing[0]
        raise LmdError(
            f"{len(missing)} questions have no answer from {model} in the parts (first: "
            f"{_first([q])}, in part {index}/{count}, {parts[index]}); run "
            f"{describe_parts(sorted({i for _, i in missing}), count)} again (they resume), "
            "then merge."
        )
    write_qa(output, qa)
    return f"Merged {count} parts: {model}'s answers to {len(qa.questions)} questions in {output}."


def _merge_verdicts(
    output: Path,
    record: dict,
    parts: dict[int, Path],
    count: int,
    input_file: Path | None,
    qa_file: Path | None,
) -> str:
    source = _input_file(record, "battles", input_file)
    qa_path = _input_file(record, "qa", qa_file)
    table = read_table(source)
    check_arrangement(table)
    rows = full_rows(table, read_qa(qa_path) if qa_path else None)
    both = record["run"].get("orders", 1) == 2  # records before both orders have no "orders"
    if both:
        for r in rows:
            for c in ORDER_COLUMNS:
                r.setdefault(c, "")
    columns = columns_of(rows)
    judge = record["run"]["judge"]
    wanted = {battle_key(r["question"], r["model_a"], r["model_b"]) for r in rows}
    verdicts: list[dict] = []
    for index, path in parts.items():
        part = read_table(path, allow_empty=True)
        if part.rows:
            part.require("question", "model_a", "model_b")
        for line, r in zip(part.lines, part.rows, strict=True):
            if part_of(battle_identity(r["question"], r["model_a"], r["model_b"]), count) != index:
                raise LmdError(
                    f"{path} line {line} is a battle of another part; it was not written by "
                    f"part {index}/{count} of this run."
                )
            if battle_key(r["question"], r["model_a"], r["model_b"]) not in wanted:
                raise LmdError(
                    f"{path} line {line} is a battle that is not in {source}; it was started on "
                    "another battles file."
                )
        verdicts += part.rows
    earlier, todo = _existing(output, lambda out: resume_rows(rows, out, judge), "judged battles")
    picked = [rows[i] for i in todo]
    _, missing = copy_verdicts(picked, verdicts, judge)
    if both:  # a part cut off between a battle's two orders has half a verdict
        missing = sorted({*missing, *(i for i, r in enumerate(picked) if pending_orders(r, True))})
    if missing:
        r = picked[missing[0]]
        index = part_of(battle_identity(r["question"], r["model_a"], r["model_b"]), count)
        indexes = sorted(
            {
                part_of(battle_identity(p["question"], p["model_a"], p["model_b"]), count)
                for p in (picked[i] for i in missing)
            }
        )
        raise LmdError(
            f"{len(missing)} battles have no verdict from {judge} in the parts (first: "
            f"{r['model_a']} vs {r['model_b']} on {_first([r['question']])}, part "
            f"{index}/{count}, {parts[index]}); run {describe_parts(indexes, count)} again "
            "(they resume), then merge."
        )
    write_table(output, columns, earlier + judged_only(rows))
    return f"Merged {count} parts: {len(rows)} battles judged by {judge} in {output}."
