"""Diffs from the model: extraction, path checks, `git apply --check`, apply, record, undo.

A file is only ever changed by `git apply` of a checked patch, and undone by `git apply -R` of
exactly that patch, so an undo never disturbs later edits to other files or the user's own.
"""

from __future__ import annotations

import json
import re
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from .repo import git, inside

_FENCE = re.compile(r"```[ \t]*([\w+-]*)[^\n]*\n(.*?)(?:\n```|\Z)", re.DOTALL)
_HUNK = re.compile(r"^@@ -(\d+)(?:,\d+)? \+(\d+)(?:,\d+)? @@")
_RENAMES = ("rename from ", "rename to ", "copy from ", "copy to ")
TABLE = "cobol_patches"


@dataclass
class FileChange:
    path: str
    added: int = 0
    removed: int = 0
    first_added: str | None = None  # text of the first added line, to find where it landed
    first_new_line: int | None = None  # from the first hunk header
    created: bool = False
    deleted: bool = False


@dataclass
class Patch:
    text: str
    strip: int  # the -p level for git apply
    files: list[FileChange] = field(default_factory=list)
    renames: list[str] = field(default_factory=list)  # rename/copy paths of git-style headers

    @property
    def added(self) -> int:
        return sum(f.added for f in self.files)

    @property
    def removed(self) -> int:
        return sum(f.removed for f in self.files)

    @property
    def paths(self) -> list[str]:
        return [f.path for f in self.files]


def extract_diff(reply: str) -> str | None:
    """The unified diff in a model reply: a ```diff block, any fence holding one, or bare."""
    candidates = []
    for lang, body in _FENCE.findall(reply):
        if lang.lower() in ("diff", "patch", "udiff") or _looks_like_diff(body):
            candidates.append(body)
    if not candidates and _looks_like_diff(reply):
        lines = reply.splitlines()
        for i, line in enumerate(lines):
            if line.startswith(("diff --git ", "--- ")):
                candidates.append("\n".join(lines[i:]))
                break
    if not candidates:
        return None
    text = "\n".join(c.rstrip("\n") for c in candidates)
    return text + "\n"


def _looks_like_diff(text: str) -> bool:
    return bool(re.search(r"^--- .*\n\+\+\+ ", text, re.MULTILINE)) and "@@" in text


def _header_path(raw: str) -> str:
    path = raw.split("\t")[0].strip()
    if path.startswith('"') and path.endswith('"'):
        path = path[1:-1]
    return path


def parse(text: str) -> Patch:
    """Files touched and lines added/removed; decides the -p level from the header paths."""
    lines = text.splitlines()
    headers: list[str] = []
    files: list[FileChange] = []
    renames: list[str] = []
    current: FileChange | None = None
    in_hunk = False
    i = 0
    while i < len(lines):
        line = lines[i]
        if line.startswith("--- ") and i + 1 < len(lines) and lines[i + 1].startswith("+++ "):
            old, new = _header_path(line[4:]), _header_path(lines[i + 1][4:])
            headers += [p for p in (old, new) if p != "/dev/null"]
            current = FileChange(
                path=new if new != "/dev/null" else old,
                created=old == "/dev/null",
                deleted=new == "/dev/null",
            )
            files.append(current)
            in_hunk = False
            i += 2
            continue
        if line.startswith("diff --git "):
            in_hunk = False
        elif not in_hunk and line.startswith(_RENAMES):
            renames.append(line.split(" ", 2)[2].strip())
        elif current is not None and (m := _HUNK.match(line)):
            in_hunk = True
            if current.first_new_line is None:
                current.first_new_line = int(m.group(2))
        elif in_hunk and current is not None:
            if line.startswith("+"):
                current.added += 1
                if current.first_added is None and line[1:].strip():
                    current.first_added = line[1:]
            elif line.startswith("-"):
                current.removed += 1
        i += 1
    strip = 1 if headers and all(p.startswith(("a/", "b/")) for p in headers) else 0
    for f in files:
        if strip and f.path.startswith(("a/", "b/")):
            f.path = f.path[2:]
    return Patch(text=text, strip=strip, files=files, renames=renames)


def bad_path(repo: str, patch: Patch) -> tuple[str, str] | None:
    """(path, 'outside the repository' or 'inside .git') for the first path we never touch."""
    for path in [*patch.paths, *patch.renames]:
        _, problem = inside(repo, path)
        if problem:
            return path, "inside .git" if "inside .git" in problem else "outside the repository"
    return None


def refuse_paths(repo: str, patch: Patch) -> str | None:
    """A sentence when the patch touches nothing, or a path outside the repo or inside .git."""
    for path in [*patch.paths, *patch.renames]:
        _, problem = inside(repo, path)
        if problem:
            return f"The change touches {path}: {problem}"
    if not patch.files:
        return (
            "The answer had no file headers (--- a/file, +++ b/file), so it is not a usable diff."
        )
    return None


def _apply_args(patch: Patch, reverse: bool, check: bool) -> list[str]:
    # --recount: models often get the hunk line counts wrong while the lines are right.
    # --unidiff-zero: without it git pins a hunk lacking trailing context to the end of the file
    # (and one starting at line 1 to its start); models often leave that context out.
    args = ["apply", "--recount", "--unidiff-zero", "--whitespace=nowarn", f"-p{patch.strip}"]
    if reverse:
        args.append("-R")
    if check:
        args.append("--check")
    return args


async def check(repo: str, patch: Patch, reverse: bool = False) -> str | None:
    """git's complaint when the patch would not apply cleanly, else None."""
    problem = refuse_paths(repo, patch)
    if problem:
        return problem
    code, out = await git(repo, *_apply_args(patch, reverse, True), "-", stdin=patch.text.encode())
    if code != 0:
        return out.strip() or f"git apply --check failed with exit code {code}."
    return None


async def apply(repo: str, patch: Patch, reverse: bool = False) -> str | None:
    """Apply (or reverse) a patch that passed `check`; git's complaint on failure."""
    problem = await check(repo, patch, reverse)
    if problem:
        return problem
    code, out = await git(repo, *_apply_args(patch, reverse, False), "-", stdin=patch.text.encode())
    return None if code == 0 else (out.strip() or "git apply failed.")


async def hand_edited(repo: str, path: str, own: list[Patch]) -> bool:
    """Whether `path` differs from HEAD plus our own patches: someone edited it by hand."""
    code, head = await git(repo, "show", f"HEAD:{path}")
    with tempfile.TemporaryDirectory(prefix="cobol-") as tmp:
        copy = Path(tmp, path)
        if code == 0:
            copy.parent.mkdir(parents=True, exist_ok=True)
            copy.write_text(head, "utf-8")
        for patch in own:
            args = [*_apply_args(patch, False, False), f"--include={path}", "-"]
            done, _ = await git(tmp, *args, stdin=patch.text.encode())
            if done != 0:
                return True
        expected = copy.read_text("utf-8", "replace") if copy.is_file() else None
    current = Path(repo, path)
    return (current.read_text("utf-8", "replace") if current.is_file() else None) != expected


# -- the record of applied patches ----------------------------------------------------------
def migrate_patches_table(db) -> None:
    db.execute(
        f"""CREATE TABLE IF NOT EXISTS {TABLE} (
            id INTEGER PRIMARY KEY,
            session TEXT NOT NULL,
            repo TEXT NOT NULL,
            files TEXT NOT NULL,
            patch TEXT NOT NULL,
            strip INTEGER NOT NULL DEFAULT 1,
            summary TEXT NOT NULL DEFAULT '',
            applied_at REAL NOT NULL,
            reverted INTEGER NOT NULL DEFAULT 0,
            reverted_at REAL
        )"""
    )
    db.execute(f"CREATE INDEX IF NOT EXISTS {TABLE}_session ON {TABLE} (session, repo, id)")


def record(store, session: str, repo: str, patch: Patch, summary: str) -> int:
    with store.lock:
        cur = store.db.execute(
            f"INSERT INTO {TABLE} (session, repo, files, patch, strip, summary, applied_at)"
            " VALUES (?, ?, ?, ?, ?, ?, ?)",
            [session, repo, json.dumps(patch.paths), patch.text, patch.strip, summary, time.time()],
        )
        return cur.lastrowid


def applied(store, session: str, repo: str) -> list[dict]:
    """This session's patches in this repository that are still in place, oldest first."""
    return store.db.execute_returning_dicts(
        f"SELECT * FROM {TABLE} WHERE session = ? AND repo = ? AND reverted = 0 ORDER BY id",
        [session, repo],
    )


def mark_reverted(store, patch_id: int) -> None:
    with store.lock:
        store.db.execute(
            f"UPDATE {TABLE} SET reverted = 1, reverted_at = ? WHERE id = ?",
            [time.time(), patch_id],
        )


def from_row(row: dict) -> Patch:
    patch = parse(row["patch"])
    patch.strip = row["strip"]
    return patch
