"""The scores file: appended line by line as results arrive, resumable, put in input order.

Lines are written in the order samples finish (so an interrupt loses nothing already scored);
at the end the file is rewritten in input order, so a resumed run ends with exactly the file
an uninterrupted run writes.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterable
from pathlib import Path
from typing import IO, Any

from daemon.api import LmdError, plural

from .datasets import id_key

WHOLE = "all"  # the shard of a run over the whole dataset


class ScoresFile:
    """An append-only JSONL file of {"id", "score", ...} records keyed by id.

    `role` names the file in sentences: "output file" (a run's -o) or "part" (a shard's
    output given to merge, which only reads it).
    """

    def __init__(self, path: str | Path, role: str = "output file") -> None:
        self.path = Path(path)
        self.role = role
        self.done: dict[str, dict] = {}
        self.repeated: list[str] = []  # ids found on more than one line
        self._fh: IO[str] | None = None

    def _not_ours(self, why: str) -> LmdError:
        fix = (
            "give another -o"
            if self.role == "output file"
            else "give the files written by `lmd selectit --shard I/N`"
        )
        return LmdError(f"The {self.role} {self.path} is not a scores file ({why}); {fix}.")

    def load(self, repair: bool = True) -> dict[str, dict]:
        """Records already scored. A torn last line (a crash mid-write) is cut off, or, with
        `repair` False (merge reads parts it must not change), refused."""
        if not self.path.exists():
            return self.done
        raw = self.path.read_bytes()
        cut = len(raw)
        if raw and not raw.endswith(b"\n"):
            cut = raw.rfind(b"\n") + 1
            tail = raw[cut:]
            if not (tail.startswith(b'{"id"') or b'{"id"'.startswith(tail)):
                # not a record torn by a crash: this is someone else's file, leave it whole
                raise self._not_ours("its last line is not a score record")
            if not repair:
                raise LmdError(
                    f"The {self.role} {self.path} ends in a cut-off line: its run was stopped "
                    "mid-write. Run that part again (it resumes and repairs the file), then "
                    "merge."
                )
            raw = raw[:cut]
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError:
            raise self._not_ours("not UTF-8") from None
        for number, line in enumerate(text.split("\n"), start=1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError:
                row = None
            if not isinstance(row, dict) or "id" not in row or "score" not in row:
                fix = "give another -o, or delete the file to start over"
                if self.role != "output file":
                    fix = "give the files written by `lmd selectit --shard I/N`"
                raise LmdError(
                    f"Line {number} of the {self.role} {self.path} is not a score record; {fix}."
                )
            key = id_key(row["id"])
            if key in self.done:
                self.repeated.append(key)
            self.done[key] = row
        if cut < self.path.stat().st_size:  # only now, once the file is known to be ours
            with self.path.open("r+b") as fh:
                fh.truncate(cut)
        return self.done

    @property
    def meta_path(self) -> Path:
        return self.path.with_name(self.path.name + ".meta.json")

    def read_meta(self) -> dict | None:
        """The run record beside the file (settings, shard, dataset), None when absent."""
        try:
            meta = json.loads(self.meta_path.read_text(encoding="utf-8"))
        except (ValueError, OSError):
            return None
        return meta if isinstance(meta, dict) else None

    def check_run(self, fingerprint: dict, record: dict | None = None) -> None:
        """Refuse to resume scores made with other settings (or another shard); then remember
        this run's fingerprint and `record` (what merge needs: the dataset, --details)."""
        old = self.read_meta() if self.done else None
        if old is not None:
            old.setdefault("shard", WHOLE)  # written before shards existed: a whole run
            changed = [
                f"{key} {old[key]!r} then, {value!r} now"
                for key, value in fingerprint.items()
                if key in old and old[key] != value
            ]
            if changed:
                raise LmdError(
                    f"{self.path} was started with other settings ({'; '.join(changed)}); use "
                    f"another -o, or delete it and {self.meta_path.name} to start over."
                )
        self.write_meta({**fingerprint, **(record or {})})

    def write_meta(self, meta: dict) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.meta_path.with_name(self.meta_path.name + ".tmp")
        tmp.write_text(json.dumps(meta, ensure_ascii=False) + "\n", encoding="utf-8")
        os.replace(tmp, self.meta_path)

    def append(self, row: dict) -> None:
        if id_key(row["id"]) in self.done:
            return  # a retried batch (Ray) may deliver a sample again: the file keeps one
        if self._fh is None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._fh = self.path.open("a", encoding="utf-8")
        self._fh.write(json.dumps(row, ensure_ascii=False) + "\n")
        self._fh.flush()
        self.done[id_key(row["id"])] = row

    def close(self) -> None:
        if self._fh is not None:
            self._fh.close()
            self._fh = None

    def put_in_order(self, keys: Iterable[str]) -> None:
        """Rewrite the file in the given id order (ids not listed keep their place at the end)."""
        self.close()
        order = list(keys)
        rows = [self.done[k] for k in order if k in self.done]
        listed = set(order)
        rows += [row for k, row in self.done.items() if k not in listed]
        write_rows(self.path, rows)


def write_rows(path: Path, rows: Iterable[dict]) -> None:
    """The scores file's final form, written beside it and renamed over it."""
    tmp = path.with_name(path.name + ".tmp")
    with tmp.open("w", encoding="utf-8") as fh:
        for row in rows:
            fh.write(json.dumps(row, ensure_ascii=False) + "\n")
    os.replace(tmp, path)


def write_records(path: str | Path, records: list[Any], as_array: bool) -> None:
    """The selected original records: a JSON array for .json files, else JSONL."""
    file = Path(path)
    file.parent.mkdir(parents=True, exist_ok=True)
    with file.open("w", encoding="utf-8") as fh:
        if as_array:
            json.dump(records, fh, ensure_ascii=False, indent=1)
            fh.write("\n")
        else:
            for r in records:
                fh.write(json.dumps(r, ensure_ascii=False) + "\n")


def file_part(name: str) -> str:
    """A scorer name as part of a file name (letters, digits, . _ - kept; others become _)."""
    return re.sub(r"[^A-Za-z0-9._-]+", "_", name).strip("._") or "selectit"


def summary(
    cfg: Any,
    stats: dict,
    samples: int,
    before: int,
    missing: int,
    elapsed: float,
    output: Path,
    part: Any = None,
) -> list[str]:
    """The lines said at the end of a run: counts, shortened and skipped samples, warnings."""
    rate = stats["scored"] / elapsed if elapsed > 0 else 0.0
    where = f"part {part}: " if part is not None else ""
    line = (
        f"selectit: {cfg.name}: {where}{plural(samples, 'sample')}, {stats['scored']} scored now "
        f"({rate:.1f}/s), {before} from an earlier run; {missing} missing instruction or "
        "output scored 3.0"
    )
    if stats["truncated"]:
        line += (
            f"; {plural(stats['truncated'], 'sample')} shortened in the middle to fit "
            f"max_length {cfg.max_length} ({plural(stats['removed'], 'token')} removed)"
        )
    if stats["skipped"]:
        line += (
            f"; {plural(stats['skipped'], 'sample')} could not fit max_length "
            f"{cfg.max_length} even shortened, skipped and scored 3.0"
        )
    rated = stats.get("measured", 0) + stats.get("bounded", 0) + stats.get("partly unrated", 0)
    if rated or stats.get("unrated"):
        line += (
            f"; of the scores {stats.get('measured', 0)} measured, {stats.get('bounded', 0)} "
            f"bounded (a rating absent from the top logprobs got an upper bound), "
            f"{stats.get('partly unrated', 0)} from fewer prompts (the model rated only some) "
            f"and {stats.get('unrated', 0)} unrated (no score)"
        )
    lines = [line + f". Scores: {output}"]
    if stats.get("unrated") or stats.get("partly unrated"):
        lines.append(
            f"selectit: warning: the model gave no rating for some prompts (first: "
            f"{stats.get('unrated_why')}); such samples have no score or one from fewer "
            "prompts, and say why in the scores file."
        )
    return lines
