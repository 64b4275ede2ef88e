"""Parts of a batch job: `--shard I/N` takes the items whose stable hash falls in part I of N.

Any scheduler can run the N parts (a Slurm job array, GNU parallel, a loop over hosts). The
part of an item comes from a hash of its identity (a record id, a question, a battle), never
from its position, so it is the same on every machine, on every resume and when the input
grows; the N parts cover every item exactly once.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from pathlib import Path

from daemon.core.errors import LmdError

MAX_PARTS = 1_000_000
_SPEC = re.compile(r"\s*(\d+)\s*/\s*(\d+)\s*")


@dataclass(frozen=True)
class Shard:
    """Part `index` (1..count) of `count`."""

    index: int
    count: int

    def __str__(self) -> str:
        return f"{self.index}/{self.count}"

    def owns(self, identity: str) -> bool:
        return part_of(identity, self.count) == self.index


def part_of(identity: str, count: int) -> int:
    """The part (1..count) of an item: SHA-256 of its identity, the same everywhere."""
    digest = hashlib.sha256(identity.encode("utf-8", "surrogatepass")).digest()
    return int.from_bytes(digest[:8], "big") % count + 1


def parse_shard(text: str | None) -> Shard | None:
    """'2/8' -> Shard(2, 8); None stays None; anything else is one sentence."""
    if text is None:
        return None
    found = _SPEC.fullmatch(text)
    if not found:
        raise LmdError(
            f"--shard {text} is not a part: write I/N with whole numbers, part I of N parts, "
            "e.g. --shard 1/4."
        )
    index, count = int(found[1]), int(found[2])
    if count < 1:
        raise LmdError(f"--shard {text} has no parts; N must be at least 1, e.g. --shard 1/4.")
    if count > MAX_PARTS:
        raise LmdError(f"--shard {text} has too many parts; use at most {MAX_PARTS:,}.")
    if index < 1:
        raise LmdError(
            f"--shard {text}: parts are numbered from 1 to {count} (for a Slurm job array "
            f"use --array=1-{count})."
        )
    if index > count:
        raise LmdError(f"--shard {text} asks for part {index} of only {count}; I runs from 1 to N.")
    return Shard(index, count)


def describe_parts(indexes: list[int], count: int) -> str:
    """'parts 2/4 and 3/4' for sentences."""
    names = [f"{i}/{count}" for i in sorted(indexes)]
    if len(names) == 1:
        return f"part {names[0]}"
    return "parts " + ", ".join(names[:-1]) + " and " + names[-1]


def file_sha256(path: str | Path) -> str:
    """The SHA-256 of a file's bytes: merge checks every part was made from the same input."""
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()
