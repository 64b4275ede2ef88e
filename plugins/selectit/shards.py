"""`lmd selectit merge OUT PART...`: the parts of a sharded run as the file one run writes.

Each part (`lmd selectit DATASET --shard I/N -o PART`) keeps beside it, in PART.meta.json, the
run's settings, its part and the dataset it read (path and SHA-256). Merge checks the parts
come from one run, that each holds only its own ids and together every id exactly once, and
writes OUT in dataset order with the meta a whole run leaves: the same bytes.
"""

from __future__ import annotations

from pathlib import Path

from daemon.api import LmdError, Shard, describe_parts, file_sha256, part_of, refuse_overwrite

from .datasets import parse_fields, read_dataset
from .output import WHOLE, ScoresFile, write_rows


def run_record(dataset: Path, fields: str | None, skip_bad: bool, details: bool) -> dict:
    """What a merge needs besides the settings: the dataset as read, and the row format."""
    source = {"path": str(Path(dataset).resolve()), "sha256": file_sha256(Path(dataset))}
    source.update({"fields": fields or "", "skip_bad_lines": skip_bad})
    return {"dataset": source, "details": details}


def _ids(keys: list[str], limit: int = 5) -> str:
    return ", ".join(keys[:limit]) + (", ..." if len(keys) > limit else "")


def _read_parts(output: Path, files: list[Path]) -> tuple[dict, dict[int, ScoresFile], int]:
    """The common meta and {part index: loaded part}; refuses mixes, doubles and gaps."""
    parts: list[tuple[ScoresFile, dict, Shard]] = []
    for f in files:
        if not f.exists():
            raise LmdError(f"There is no part {f}; check the path.")
        if f.resolve() == output.resolve():
            raise LmdError(f"{output} is one of the parts; merge into another file.")
        scores = ScoresFile(f, role="part")
        meta = scores.read_meta()
        if meta is None:
            raise LmdError(
                f"{f} is not the output of a part (it has no {scores.meta_path.name}); give the "
                "files written by `lmd selectit --shard I/N`."
            )
        shard = meta.get("shard", WHOLE)
        if shard == WHOLE or not isinstance(shard, str) or "dataset" not in meta:
            raise LmdError(f"{f} is the output of a whole run, not of a part; it needs no merging.")
        index, count = map(int, shard.split("/"))
        parts.append((scores, meta, Shard(index, count)))
    first_scores, first, first_shard = parts[0]
    common = {k: v for k, v in first.items() if k != "shard"}
    by_index: dict[int, ScoresFile] = {}
    for scores, meta, shard in parts:
        if shard.count != first_shard.count:
            raise LmdError(
                f"{scores.path} is part {shard} and {first_scores.path} part {first_shard}: "
                "they split the data differently; merge the parts of one run."
            )
        changed = [
            f"{key} {value!r} in {scores.path.name}, {common.get(key)!r} in "
            f"{first_scores.path.name}"
            for key, value in meta.items()
            if key != "shard" and common.get(key) != value
        ]
        if changed:
            raise LmdError(
                f"{scores.path} and {first_scores.path} are parts of different runs "
                f"({'; '.join(changed)}); merge the parts of one run."
            )
        if shard.index in by_index:
            other = by_index[shard.index]
            both = sorted(set(other.load(repair=False)) & set(scores.load(repair=False)))
            holding = f"; both hold the ids {_ids(both)}" if both else ""
            raise LmdError(
                f"Part {shard} is given twice ({other.path} and {scores.path}{holding}); give "
                "each part once."
            )
        by_index[shard.index] = scores
    count = first_shard.count
    missing = [i for i in range(1, count + 1) if i not in by_index]
    if missing:
        verb = "is" if len(missing) == 1 else "are"
        raise LmdError(
            f"{describe_parts(missing, count).capitalize()} {verb} missing; run `lmd selectit "
            f"DATASET --shard I/{count}` for {'it' if len(missing) == 1 else 'them'} and give "
            "every part's output."
        )
    return first, by_index, count


def _dataset_file(meta: dict, override: Path | None) -> Path:
    recorded = meta["dataset"]
    path = Path(override) if override else Path(recorded["path"])
    if not path.exists():
        raise LmdError(f"The dataset the parts read, {path}, is gone; give it with --dataset.")
    if file_sha256(path) != recorded["sha256"]:
        raise LmdError(
            f"{path} is not the dataset the parts read (its content differs); give that file "
            "with --dataset, or run the parts again on this one."
        )
    return path


def merge_parts(
    output: Path, files: list[Path], dataset_override: Path | None = None, force: bool = False
) -> tuple[object, dict[str, dict], int]:
    """Write OUT (and its meta) from the parts; returns (dataset, rows by id key, parts)."""
    meta, parts, count = _read_parts(output, files)
    path = _dataset_file(meta, dataset_override)
    if output.resolve() == path.resolve():
        raise LmdError(f"The output {output} is the dataset itself; give another file.")
    refuse_overwrite(output, force)
    source = meta["dataset"]
    dataset = read_dataset(path, parse_fields(source["fields"] or None), source["skip_bad_lines"])
    known = {s.key for s in dataset.samples}
    done: dict[str, dict] = {}
    for index, scores in sorted(parts.items()):
        rows = scores.load(repair=False)
        if scores.repeated:
            raise LmdError(
                f"The part {scores.path} has the id {scores.repeated[0]} on two lines; it was "
                "not written by lmd selectit. Run that part again into a new file."
            )
        foreign = [k for k in rows if k not in known]
        if foreign:
            raise LmdError(
                f"The part {scores.path} holds ids that are not in {path} (first: "
                f"{_ids(foreign)}); it was run on another dataset."
            )
        strays = [k for k in rows if part_of(k, count) != index]
        if strays:
            raise LmdError(
                f"The part {scores.path} holds ids of other parts (first: {_ids(strays)}); it "
                f"was not written by part {index}/{count}."
            )
        done.update(rows)
    missing = [s.key for s in dataset.samples if s.key not in done]
    if missing:
        where = sorted({part_of(k, count) for k in missing})
        files_named = ", ".join(str(parts[i].path) for i in where[:3])
        raise LmdError(
            f"{len(missing)} ids are in no part (first: {_ids(missing)}); run "
            f"{describe_parts(where, count)} ({files_named}) again (they resume), then merge."
        )
    output.parent.mkdir(parents=True, exist_ok=True)
    write_rows(output, (done[s.key] for s in dataset.samples))
    merged = {k: (WHOLE if k == "shard" else v) for k, v in meta.items()}
    merged["dataset"] = {**source, "path": str(path.resolve())}  # where it is now
    ScoresFile(output).write_meta(merged)
    return dataset, done, count
