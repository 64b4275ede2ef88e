"""The spec's CSV files: questions, Q&A, battle arrangements and judged battles.

Reading validates with line numbers and one plain sentence per problem; writing goes to a
temporary file beside the target and is renamed over it, so nothing is left half-written.
"""

from __future__ import annotations

import csv
import io
import json
import re
import sys
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from daemon.api import LmdError, csv_cell, csv_value, write_atomic

from .winners import normalise_winner

ARRANGE_COLUMNS = ["question", "model_a", "model_b"]
PAIR_COLUMNS = ["model_a", "model_b", "winner"]
FULL_COLUMNS = [
    "model_a",
    "model_b",
    "winner",
    "judge",
    "turn",
    "language",
    "tstamp",
    "question",
    "answer_a",
    "answer_b",
    "gpt_4_response",
    "gpt_4_justification",
    "is_valid",
]
TRUE_TEXT = {"true", "1", "yes", "t"}
FALSE_TEXT = {"false", "0", "no", "f"}
# What pandas.read_csv reads as a missing value by default (its STR_NA_VALUES): the seed's
# files were written with pandas, where an unanswered question is a NaN cell. Such a cell is
# read as empty here, as pandas would.
NA_VALUES = frozenset(
    {"", "#N/A", "#N/A N/A", "#NA", "-1.#IND", "-1.#QNAN", "-NaN", "-nan", "1.#IND", "1.#QNAN",
     "<NA>", "N/A", "NA", "NULL", "NaN", "None", "n/a", "nan", "null"}
)  # fmt: skip

csv.field_size_limit(1 << 30)  # model answers can be long


class EloFileError(LmdError):
    """A file we cannot use, said in one sentence."""


@dataclass
class Table:
    """Rows of a CSV file as dicts, with the line each row starts on."""

    path: str
    columns: list[str]
    rows: list[dict[str, str]]
    lines: list[int] = field(default_factory=list)
    unit: str = "line"  # what `lines` count: file lines, or "battle" for a request body

    def require(self, *names: str) -> None:
        missing = [n for n in names if n not in self.columns]
        if missing:
            have = ", ".join(self.columns) or "none"
            plural = len(missing) > 1
            raise EloFileError(
                f"{self.path} lacks the column{'s' if plural else ''} {', '.join(missing)} "
                f"(it has: {have}); add {'them' if plural else 'it'}."
            )


def _lines_list(lines: Sequence[int], limit: int = 5) -> str:
    shown = ", ".join(str(n) for n in lines[:limit])
    return shown + (", …" if len(lines) > limit else "")


def read_table(path: str | Path, allow_empty: bool = False) -> Table:
    """A CSV file (UTF-8, optional BOM); a leading unnamed column (a pandas index) is dropped."""
    name = str(path)
    try:
        raw = sys.stdin.buffer.read() if name == "-" else Path(path).read_bytes()
    except FileNotFoundError:
        raise EloFileError(f"There is no file {name}; check the path.") from None
    except IsADirectoryError:
        raise EloFileError(f"{name} is a directory; give a CSV file.") from None
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        line = raw[: e.start].count(b"\n") + 1
        raise EloFileError(
            f"{name} is not UTF-8 (bad byte at line {line}); save it as UTF-8 and try again."
        ) from None
    reader = csv.reader(io.StringIO(text, newline=""))
    try:
        header = next(reader, None)
        if header is None or not any(h.strip() for h in header):
            if allow_empty:
                return Table(name, [], [], [])
            raise EloFileError(f"{name} is empty; it needs a header row and at least one row.")
        header = [csv_value(h.strip()) for h in header]
        drop_index = header[0] == "" or header[0].lower() == "unnamed: 0"
        columns = header[1:] if drop_index else header
        dupes = sorted({c for c in columns if columns.count(c) > 1})
        if dupes:
            raise EloFileError(f"{name} has the column {dupes[0]} twice; keep one.")
        rows, lines = [], []
        start = reader.line_num + 1
        for record in reader:
            if not record or (len(record) == 1 and not record[0].strip()):
                start = reader.line_num + 1
                continue
            if drop_index:
                record = record[1:]
            if len(record) > len(columns):
                raise EloFileError(
                    f"{name} line {start} has {len(record)} fields but the header has "
                    f"{len(columns)}; quote fields that contain commas."
                )
            record += [""] * (len(columns) - len(record))
            record = ["" if cell.strip() in NA_VALUES else csv_value(cell) for cell in record]
            rows.append(dict(zip(columns, record, strict=True)))
            lines.append(start)
            start = reader.line_num + 1
    except csv.Error as e:
        raise EloFileError(
            f"{name} line {reader.line_num} is not valid CSV ({e}); fix the quoting."
        ) from None
    if not rows and not allow_empty:
        raise EloFileError(f"{name} has a header but no rows; add some.")
    return Table(name, columns, rows, lines)


def write_table(path: str | Path, columns: Sequence[str], rows: Iterable[dict]) -> None:
    """Write a CSV atomically (temp file + rename); '-' writes to stdout."""
    cells = [[csv_cell("" if row.get(c) is None else row.get(c)) for c in columns] for row in rows]
    # formula cells neutralised (answers and names come from models); a carriage return in a
    # cell is no line end to csv's minimal quoting, so such a file quotes every cell
    carriage = any(isinstance(v, str) and "\r" in v for r in cells for v in r)
    text = io.StringIO(newline="")
    writer = csv.writer(
        text, lineterminator="\n", quoting=csv.QUOTE_ALL if carriage else csv.QUOTE_MINIMAL
    )
    writer.writerow([csv_cell(c) for c in columns])
    writer.writerows(cells)
    write_text(path, text.getvalue())


def write_text(path: str | Path, text: str) -> None:
    """Write text atomically: a temporary file in the same directory, then rename."""
    if str(path) == "-":
        sys.stdout.write(text)
        sys.stdout.flush()
        return
    target = Path(path)
    if target.is_dir():
        raise EloFileError(f"{target} is a directory; give a file name to write.")
    target.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(target, text)  # the umask's mode, as any other program's output


# -- questions and Q&A ----------------------------------------------------------------------
@dataclass
class QA:
    """Questions (in order) and each model's answers; a missing answer is absent or ''."""

    questions: list[str]
    models: list[str]
    answers: dict[str, dict[str, str]]  # model -> question -> answer

    def answer(self, model: str, question: str) -> str:
        return self.answers.get(model, {}).get(question, "")

    def answered(self, question: str) -> list[str]:
        """Models (in column order) with a non-empty answer to `question`."""
        return [m for m in self.models if self.answer(m, question).strip()]

    def add_model(self, model: str) -> None:
        if model not in self.models:
            self.models.append(model)
            self.answers.setdefault(model, {})

    def rows(self) -> list[dict[str, str]]:
        return [
            {"question": q, **{m: self.answer(m, q) for m in self.models}} for q in self.questions
        ]

    def to_dict(self) -> dict[str, list[dict[str, str]]]:
        """The spec's intermediate form: {question: [{"model", "answer"}, ...]}."""
        return {
            q: [{"model": m, "answer": self.answer(m, q)} for m in self.answered(q)]
            for q in self.questions
        }

    @classmethod
    def from_dict(cls, data: object, source: str = "the JSON") -> QA:
        if not isinstance(data, dict):
            raise EloFileError(
                f'{source} must be an object {{"question": [{{"model": ..., "answer": ...}}]}}.'
            )
        qa = cls([], [], {})
        for question, items in data.items():
            if not isinstance(items, list) or not all(
                isinstance(i, dict) and isinstance(i.get("model"), str) for i in items
            ):
                raise EloFileError(
                    f"In {source}, the answers to {question[:60]!r} must be a list of "
                    '{"model": ..., "answer": ...} objects.'
                )
            qa.questions.append(question)
            for item in items:
                answer = item.get("answer")
                if answer is None:
                    continue
                qa.add_model(item["model"])
                qa.answers[item["model"]][question] = str(answer)
        return qa


def _check_questions(path: str, lines: list[int], texts: list[str]) -> None:
    seen: dict[str, int] = {}
    empty = [line for line, q in zip(lines, texts, strict=True) if not q.strip()]
    if empty:
        raise EloFileError(
            f"{path} has an empty question at line {_lines_list(empty)}; fill or remove it."
        )
    for line, q in zip(lines, texts, strict=True):
        key = q.strip()
        if key in seen:
            raise EloFileError(
                f"{path} line {line} repeats the question of line {seen[key]}; "
                "keep each question once."
            )
        seen[key] = line


_COLUMN_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def read_questions(path: str | Path, note: Callable[[str], None] | None = None) -> list[str]:
    """A question collection: one unique question per row, under a `question` header.

    A single-column file without that header is read whole (the spec's "each row is a
    question"), its first line included, unless that line looks like a column name (one word
    such as `prompt`); either way `note` is told in one sentence, so no question is lost
    unsaid.
    """
    return _questions_of(read_table(path, allow_empty=True), note)


def _questions_of(table: Table, note: Callable[[str], None] | None) -> list[str]:
    if not table.columns:
        raise EloFileError(f"{table.path} is empty; write one question per line.")
    column = next((c for c in table.columns if c.lower() == "question"), None)
    lines, texts, say = list(table.lines), None, None
    if column is None and len(table.columns) > 1:
        if table.columns[-1].endswith("?"):
            raise EloFileError(
                f"{table.path} has no header line: its first line is a question. Put a line "
                "`question` at the top, and quote questions that contain commas."
            )
        table.require("question")
    if column is None:
        first = table.columns[0]
        if _COLUMN_NAME.fullmatch(first) and not first.endswith("?"):
            column = first
            say = (
                f"{table.path}: its first line, {first!r}, is read as the column name, not as a "
                "question; name it `question` to say so."
            )
        else:
            texts, lines = [first], [1, *lines]
            say = (
                f"{table.path} has no `question` header line, so its first line ({first[:60]!r}) "
                "is read as a question too."
            )
    texts = (texts or []) + [r[column or table.columns[0]] for r in table.rows]
    if not texts:
        raise EloFileError(f"{table.path} has a header but no questions; add some.")
    _check_questions(table.path, lines, texts)
    if say and note is not None:
        note(say)  # once the file is known to be usable: a refusal stays one sentence
    return texts


def read_question_source(path: str | Path, note: Callable[[str], None] | None = None) -> QA:
    """What `lmd elo answer` asks: a Q&A file (CSV with a `question` column, or the JSON
    form) or a question collection (see read_questions)."""
    if str(path).endswith(".json"):
        return read_qa(path)
    table = read_table(path, allow_empty=True)  # once: it may be stdin
    if "question" in table.columns:
        return _qa_of(table)
    return QA(_questions_of(table, note), [], {})


def read_qa(path: str | Path, allow_empty: bool = False) -> QA:
    """A Q&A collection: `question` plus one column per model (CSV), or the JSON form.
    `allow_empty`: a header without rows is an empty collection (a part that owns no
    question), not an error."""
    name = str(path)
    if name.endswith(".json"):
        try:
            data = json.loads(Path(path).read_text(encoding="utf-8"))
        except FileNotFoundError:
            raise EloFileError(f"There is no file {name}; check the path.") from None
        except UnicodeDecodeError:
            raise EloFileError(f"{name} is not UTF-8; save it as UTF-8 and try again.") from None
        except json.JSONDecodeError as e:
            raise EloFileError(f"{name} is not valid JSON (line {e.lineno}: {e.msg}).") from None
        return QA.from_dict(data, name)
    return _qa_of(read_table(path, allow_empty=allow_empty), allow_empty)


def _qa_of(table: Table, allow_empty: bool = False) -> QA:
    if not table.rows and not allow_empty:
        raise EloFileError(f"{table.path} has a header but no rows; add some.")
    table.require("question")
    texts = [r["question"] for r in table.rows]
    _check_questions(table.path, table.lines, texts)
    models = [c for c in table.columns if c != "question"]
    answers = {m: {r["question"]: r[m] for r in table.rows if r[m].strip()} for m in models}
    return QA(texts, models, answers)


def write_qa(path: str | Path, qa: QA) -> None:
    if str(path).endswith(".json"):
        write_text(path, json.dumps(qa.to_dict(), indent=2, ensure_ascii=False) + "\n")
    else:
        write_table(path, ["question", *qa.models], qa.rows())


# -- battles ----------------------------------------------------------------------------------
def check_arrangement(table: Table) -> None:
    """question, model_a, model_b present, no model battling itself."""
    table.require(*ARRANGE_COLUMNS)
    _check_pairs(table)


def _check_pairs(table: Table) -> None:
    selfish = [
        line
        for line, r in zip(table.lines, table.rows, strict=True)
        if r["model_a"].strip() == r["model_b"].strip()
    ]
    if selfish:
        raise EloFileError(
            f"{table.path} has a model battling itself at {table.unit} {_lines_list(selfish)}; "
            "a battle needs two different models."
        )
    empty = [
        line
        for line, r in zip(table.lines, table.rows, strict=True)
        if not r["model_a"].strip() or not r["model_b"].strip()
    ]
    if empty:
        raise EloFileError(
            f"{table.path} has an empty model name at {table.unit} {_lines_list(empty)}; "
            "fill it in."
        )


def _skip_hint(table: Table) -> str:
    return ", or pass --skip-invalid to leave them out" if table.unit == "line" else ""


def is_valid(row: dict) -> bool:
    """The is_valid column: empty counts as valid (plain battled-pairs files have none)."""
    text = str(row.get("is_valid", "")).strip().lower()
    return text not in FALSE_TEXT


@dataclass
class Judged:
    """Battles usable for ratings, plus what was left out."""

    rows: list[dict[str, str]]
    skipped_invalid: int = 0  # rows the judge marked is_valid false
    skipped_bad: list[int] = field(default_factory=list)  # line numbers of unknown labels


def read_battles(path: str | Path, skip_invalid: bool = False) -> Judged:
    """Battled pairs (model_a, model_b, winner [+ the full columns]) ready for rating."""
    return check_battles(read_table(path), skip_invalid)


def check_battles(table: Table, skip_invalid: bool = False) -> Judged:
    table.require(*PAIR_COLUMNS)
    out = Judged([])
    bad_lines, bad_labels, selfish = [], [], []
    has_validity = "is_valid" in table.columns
    labels: dict[str, str | None] = {}  # a file holds a handful of distinct labels
    for line, row in zip(table.lines, table.rows, strict=True):
        if has_validity and not is_valid(row):
            out.skipped_invalid += 1
            continue
        a, b = row["model_a"].strip(), row["model_b"].strip()
        label = row["winner"]
        if label not in labels:
            labels[label] = normalise_winner(label)
        winner = labels[label]
        if winner is None or not a or not b:
            bad_lines.append(line)
            bad_labels.append(row["winner"])
            continue
        if a == b:
            selfish.append(line)
            continue
        row["model_a"], row["model_b"], row["winner"] = a, b, winner
        out.rows.append(row)
    if selfish and not skip_invalid:
        raise EloFileError(
            f"{table.path} has a model battling itself at {table.unit} {_lines_list(selfish)}; "
            f"fix {'those rows' if table.unit == 'line' else 'it'}{_skip_hint(table)}."
        )
    if bad_lines and not skip_invalid:
        example = bad_labels[0] or "(empty)"
        raise EloFileError(
            f"{table.path} has {len(bad_lines)} row{'s' if len(bad_lines) > 1 else ''} with an "
            f"unknown winner (first {example!r} at {table.unit} {_lines_list(bad_lines)}); use "
            f"model_a, model_b, tie or tie (bothbad){_skip_hint(table)}."
        )
    out.skipped_bad = sorted(bad_lines + selfish)
    if not out.rows:
        raise EloFileError(f"{table.path} has no usable battles; nothing to rate.")
    return out
