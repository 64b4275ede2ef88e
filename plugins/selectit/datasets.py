"""Datasets in: JSONL or a JSON array, Alpaca-style or ShareGPT-style records.

Alpaca: {"instruction", "input", "output"}. ShareGPT (the original SelectIT's format):
{"conversations": [{"from": "human", "value": ...}, {"from": "gpt", "value": ...}]}; the first
human turn is the instruction and the reply after it the response. `fields` maps other names.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from daemon.api import LmdError

FIELD_NAMES = ("instruction", "input", "output", "id", "conversations")
HUMAN_ROLES = {"human", "user"}
MODEL_ROLES = {"gpt", "assistant", "model", "chatgpt"}


@dataclass
class Sample:
    """One record: its id, the original fields, and the three texts scoring needs."""

    id: Any
    record: Any
    instruction: str | None
    input: str
    output: str | None
    line: int

    @property
    def valid(self) -> bool:
        return bool(self.instruction) and bool(self.output)

    @property
    def key(self) -> str:
        """The id as JSON, so 1 and "1" stay different ids."""
        return id_key(self.id)


@dataclass
class Dataset:
    samples: list[Sample]
    skipped_lines: list[int] = field(default_factory=list)
    kind: str = "jsonl"  # or "json" (an array)


def id_key(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, sort_keys=True)


def parse_fields(spec: str | None) -> dict[str, str]:
    """'instruction=prompt,output=answer' -> {"instruction": "prompt", "output": "answer"}."""
    mapping = {name: name for name in FIELD_NAMES}
    if not spec:
        return mapping
    for part in spec.split(","):
        if not part.strip():
            continue
        ours, sep, theirs = part.partition("=")
        ours, theirs = ours.strip(), theirs.strip()
        if not sep or not theirs or ours not in FIELD_NAMES:
            raise LmdError(
                f"--fields cannot use {part.strip()!r}; write ours=theirs pairs such as "
                f"instruction=prompt,output=answer, with ours one of {', '.join(FIELD_NAMES)}."
            )
        mapping[ours] = theirs
    return mapping


def read_dataset(
    path: str | Path, fields: dict[str, str] | None = None, skip_bad: bool = False
) -> Dataset:
    """Every record of a JSONL file or JSON array, with clear errors for bad input."""
    file = Path(path)
    fields = fields or parse_fields(None)
    try:
        raw = file.read_bytes()
    except FileNotFoundError:
        raise LmdError(f"The dataset {file} does not exist; check the path.") from None
    except IsADirectoryError:
        raise LmdError(f"The dataset {file} is a directory; give a .jsonl or .json file.") from None
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        line = raw.count(b"\n", 0, e.start) + 1
        raise LmdError(
            f"The dataset {file} is not UTF-8 (bad byte on line {line}); convert it to UTF-8."
        ) from None
    if not text.strip():
        raise LmdError(
            f"The dataset {file} is empty; give a file with one JSON record per line "
            "or a JSON array of records."
        )
    if text.lstrip().startswith("["):
        return _read_array(file, text, fields, skip_bad)
    return _read_lines(file, text, fields, skip_bad)


def _read_lines(file: Path, text: str, fields: dict[str, str], skip_bad: bool) -> Dataset:
    samples, bad = [], []
    # split("\n"), not splitlines(): JSON strings may hold U+2028 and other line breaks raw.
    for number, line in enumerate(text.split("\n"), start=1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except (json.JSONDecodeError, RecursionError) as e:
            problem = f"is not valid JSON ({getattr(e, 'msg', 'too deeply nested')})"
            record = None
        else:
            problem = None if isinstance(record, dict) else "is not a JSON object"
        if problem:
            if not skip_bad:
                raise LmdError(
                    f"Line {number} of {file} {problem}; fix it, or pass --skip-bad-lines "
                    "to skip such lines."
                )
            bad.append(number)
            continue
        samples.append(to_sample(record, number, fields))
    return _finish(samples, bad, file, "jsonl", "no usable records; every line was malformed")


def _read_array(file: Path, text: str, fields: dict[str, str], skip_bad: bool) -> Dataset:
    try:
        items = json.loads(text)
    except (json.JSONDecodeError, RecursionError) as e:
        where = f" at line {e.lineno} column {e.colno}" if hasattr(e, "lineno") else ""
        raise LmdError(
            f"The dataset {file} is not valid JSON{where}; fix it, or write it as JSONL "
            "(one record per line)."
        ) from None
    if not isinstance(items, list):
        raise LmdError(f"The dataset {file} must be a JSON array of records or JSONL.")
    samples, bad = [], []
    for number, record in enumerate(items, start=1):
        if not isinstance(record, dict):
            if not skip_bad:
                raise LmdError(
                    f"Record {number} of {file} is not a JSON object; fix it, or pass "
                    "--skip-bad-lines to skip such records."
                )
            bad.append(number)
            continue
        samples.append(to_sample(record, number, fields))
    return _finish(samples, bad, file, "json", "no records; give at least one JSON object")


def _finish(samples: list[Sample], bad: list[int], file: Path, kind: str, empty: str) -> Dataset:
    """The dataset, refused when nothing usable is left or two records share an id."""
    if not samples:
        raise LmdError(f"The dataset {file} has {empty}.")
    check_unique(samples, file)
    return Dataset(samples, bad, kind)


def check_unique(samples: list[Sample], file: Path | str) -> None:
    """Resuming and joining work by id, so two records may not share one."""
    first: dict[str, int] = {}
    for s in samples:
        if s.key in first:
            raise LmdError(
                f"The id {s.key} appears twice in {file} (records {first[s.key]} and {s.line}); "
                "make the ids unique, or map --fields id= to a unique field."
            )
        first[s.key] = s.line


def to_sample(record: Any, number: int, fields: dict[str, str] | None = None) -> Sample:
    """Pull id, instruction, input and output out of one record (Alpaca or ShareGPT)."""
    fields = fields or parse_fields(None)
    if not isinstance(record, dict):
        return Sample(number, record, None, "", None, number)
    rid = record.get(fields["id"])
    if rid is None or isinstance(rid, dict | list | bool):
        rid = number
    instruction = _text(record.get(fields["instruction"]))
    output = _text(record.get(fields["output"]))
    input_ = _text(record.get(fields["input"])) or ""
    turns = record.get(fields["conversations"])
    if instruction is None and output is None and isinstance(turns, list):
        instruction, output = _first_exchange(turns)
    return Sample(rid, record, instruction, input_, output, number)


def _text(value: Any) -> str | None:
    if isinstance(value, str) and value.strip():
        return value
    return None


def _first_exchange(turns: list) -> tuple[str | None, str | None]:
    """The first human turn and the model turn right after it."""
    instruction = None
    for turn in turns:
        if not isinstance(turn, dict):
            continue
        role = str(turn.get("from", turn.get("role", ""))).lower()
        value = _text(turn.get("value", turn.get("content")))
        if instruction is None and role in HUMAN_ROLES:
            instruction = value
        elif instruction is not None and role in MODEL_ROLES:
            return instruction, value
    return instruction, None
