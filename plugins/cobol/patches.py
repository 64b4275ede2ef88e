"""Diffs from the model: extraction, reading by git, path checks, `git apply --check`, apply,
record, undo.

What a patch touches is git's reading, not lmd's: `git apply --numstat --summary` (forwards
and reversed) lists every path git would write, rename, copy, delete or change the mode of,
binary sections included, with the same options the apply uses, so the list is the apply's
own. lmd reads the text hunks too, only to say where a change landed; a patch whose text
hunks git reads differently from lmd (other files, other line counts) is refused, since the
diff the user reads would not be the one that applies.

A file is only ever changed by `git apply` of a checked patch, and undone by `git apply -R` of
exactly that patch, so an undo never disturbs later edits to other files or the user's own.
"""

from __future__ import annotations

import json
import os
import re
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from daemon.api import LmdError

from .repo import git, git_split, inside

_FENCE = re.compile(r"```[ \t]*([\w+-]*)[^\n]*\n(.*?)(?:\n```|\Z)", re.DOTALL)
_HUNK = re.compile(r"^@@ -(\d+)(?:,\d+)? \+(\d+)(?:,\d+)? @@")
_GIT_HEADER = re.compile(r'^diff --git ("(?:[^"\\]|\\.)*"|\S+) ("(?:[^"\\]|\\.)*"|\S+)\s*$')
_MODE = r"(\d{6})"
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
TABLE = "cobol_patches"
NO_HEADERS = "The answer had no file headers (--- a/file, +++ b/file), so it is not a usable diff."


class Unreadable(LmdError):
    """git could not read the diff (its own complaint): the model may try again."""


@dataclass
class FileChange:
    """One file of a patch as git reads it."""

    path: str  # the path after the change (for a deletion, the deleted one)
    old_path: str | None = None  # what a rename or copy starts from
    added: int = 0
    removed: int = 0
    binary: bool = False  # a GIT binary patch: its content cannot be read back to the user
    created: bool = False
    deleted: bool = False
    renamed: bool = False
    copied: bool = False
    old_mode: str | None = None  # "100644" ...; set when git names a mode
    new_mode: str | None = None
    first_added: str | None = None  # lmd's hint: the first added line, to find where it landed
    first_new_line: int | None = None  # lmd's hint: from the first hunk header

    @property
    def paths(self) -> list[str]:
        return [self.path] if self.old_path in (None, self.path) else [self.old_path, self.path]


@dataclass
class Patch:
    text: str
    strip: int  # the -p level for git apply
    files: list[FileChange] = field(default_factory=list)

    @property
    def added(self) -> int:
        return sum(f.added for f in self.files)

    @property
    def removed(self) -> int:
        return sum(f.removed for f in self.files)

    @property
    def paths(self) -> list[str]:
        """Every path the patch touches, rename and copy sources included, in git's order."""
        seen: dict[str, None] = {}
        for f in self.files:
            seen.update(dict.fromkeys(f.paths))
        return list(seen)


@dataclass
class Reading:
    """lmd's own reading of a diff's text hunks: what the user reads in it."""

    strip: int
    text_files: dict[str, list[int]] = field(default_factory=dict)  # path -> [added, removed]
    hints: dict[str, tuple[str | None, int | None]] = field(default_factory=dict)


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
    # a binary section ends with an empty line, which git needs; a blank line after text
    # hunks would read as a line of context
    last = text[text.rfind("diff --git ") :]
    return text + ("\n\n" if "\nGIT binary patch\n" in last else "\n")


_BINARY_DATA = re.compile(r"^((?:literal|delta) (\d+))\n(?:[A-Za-z][!-~]*\n)+", re.MULTILINE)


def readable(text: str) -> str:
    """The diff as a person reads it: each binary section's base85 data replaced by its size
    (the whole text stays in the JSON reply's `diff`)."""
    return _BINARY_DATA.sub(lambda m: f"{m[1]} (binary data of {m[2]} bytes, not shown)\n", text)


def _looks_like_diff(text: str) -> bool:
    return (bool(re.search(r"^--- .*\n\+\+\+ ", text, re.MULTILINE)) and "@@" in text) or bool(
        re.search(r"^diff --git ", text, re.MULTILINE)
    )


def _header_path(raw: str) -> str:
    path = raw.split("\t")[0].strip()
    if path.startswith('"') and path.endswith('"'):
        path = path[1:-1]
    return path


def read_text(text: str) -> Reading:
    """lmd's reading of the diff: the -p level (1 when every header path starts with a/ or b/)
    and, per file of the text hunks, the lines added and removed, ended as git ends a hunk
    when it recounts (at the first line that is not context, +, - or \\)."""
    lines = text.splitlines()
    headers: list[str] = []
    files: list[tuple[str, list[int], list]] = []  # (path, counts, [first added, first line])
    current = None
    in_hunk = False
    i = 0
    while i < len(lines):
        line = lines[i]
        if (m := _GIT_HEADER.match(line)) is not None:
            headers += [_header_path(m.group(1)), _header_path(m.group(2))]
            in_hunk, current = False, None
        elif line.startswith("--- ") and i + 1 < len(lines) and lines[i + 1].startswith("+++ "):
            if not in_hunk or current is None:
                old, new = _header_path(line[4:]), _header_path(lines[i + 1][4:])
                headers += [p for p in (old, new) if p != "/dev/null"]
                current = (new if new != "/dev/null" else old, [0, 0], [None, None])
                files.append(current)
                in_hunk = False
                i += 2
                continue
        if current is not None and (m := _HUNK.match(line)):
            in_hunk = True
            if current[2][1] is None:
                current[2][1] = int(m.group(2))
        elif in_hunk and current is not None:
            if line.startswith("+"):
                current[1][0] += 1
                if current[2][0] is None and line[1:].strip():
                    current[2][0] = line[1:]
            elif line.startswith("-"):
                current[1][1] += 1
            elif not (line == "" or line.startswith((" ", "\\"))):
                in_hunk, current = False, None  # git's recount stops here too
        i += 1
    strip = 1 if headers and all(p.startswith(("a/", "b/")) for p in headers) else 0
    reading = Reading(strip)
    for path, counts, (first_added, first_line) in files:
        if strip and path.startswith(("a/", "b/")):
            path = path[2:]
        total = reading.text_files.setdefault(path, [0, 0])
        total[0] += counts[0]
        total[1] += counts[1]
        reading.hints.setdefault(path, (first_added, first_line))
    return reading


def _apply_args(strip: int, reverse: bool = False, check: bool = False) -> list[str]:
    # --recount: models often get the hunk line counts wrong while the lines are right.
    # --unidiff-zero: without it git pins a hunk lacking trailing context to the end of the file
    # (and one starting at line 1 to its start); models often leave that context out.
    args = ["apply", "--recount", "--unidiff-zero", "--whitespace=nowarn", f"-p{strip}"]
    if reverse:
        args.append("-R")
    if check:
        args.append("--check")
    return args


def _numstat(out: bytes) -> list[tuple[str, str, str]]:
    """(added, removed, path) of `--numstat -z` output ('-' counts: binary)."""
    entries = []
    for entry in out.split(b"\0"):
        if not entry:
            continue
        added, removed, path = entry.decode("utf-8", "surrogateescape").split("\t", 2)
        entries.append((added, removed, path))
    return entries


async def _git_reads(repo: str, text: str, strip: int) -> tuple[bytes, bytes, str | None]:
    """git's --numstat --summary output, its reversed --numstat, or its complaint."""
    args = [*_apply_args(strip), "--numstat", "--summary", "-z", "-"]
    code, out, err = await git_split(repo, *args, stdin=text.encode())
    if code != 0:
        return b"", b"", err.decode("utf-8", "replace").strip() or "git could not read the diff."
    back = [*_apply_args(strip, reverse=True), "--numstat", "-z", "-"]
    code, rev, err = await git_split(repo, *back, stdin=text.encode())
    if code != 0:
        return b"", b"", err.decode("utf-8", "replace").strip() or "git could not read the diff."
    return out, rev, None


def _read_summary(files: list[FileChange], lines: list[str]) -> bool:
    """Fill in creations, deletions, renames, copies and modes from `--summary` lines, taken in
    patch order; False when a line is left over (git said something lmd could not place)."""
    at = 0
    for f in files:
        line = lines[at] if at < len(lines) else ""
        if f.old_path is not None:  # git's only rename and copy lines are for these
            if not line.startswith((" rename ", " copy ")):
                return False
            f.renamed, f.copied = line.startswith(" rename "), line.startswith(" copy ")
            at += 1
            line = lines[at] if at < len(lines) else ""
            if m := re.fullmatch(rf" mode change {_MODE} => {_MODE}", line):
                f.old_mode, f.new_mode = m.groups()
                at += 1
            continue
        for kind in ("create", "delete"):
            # " create mode 100644 NAME", or " create NAME" in a diff that named no mode
            m = re.fullmatch(rf" {kind} mode {_MODE} (.*)", line)
            mode = m[1] if m and m[2] == f.path else None
            if mode or line == f" {kind} {f.path}":
                f.created, f.deleted = kind == "create", kind == "delete"
                f.new_mode = mode if kind == "create" else None
                f.old_mode = mode if kind == "delete" else None
                at += 1
                break
        else:
            m = re.fullmatch(rf" mode change {_MODE} => {_MODE} (.*)", line)
            if m and m[3] == f.path:
                f.old_mode, f.new_mode = m[1], m[2]
                at += 1
    return at == len(lines)


async def read(repo: str, text: str, strip: int | None = None, compare: bool = True) -> Patch:
    """The patch as git reads it (see the module docstring). Unreadable (git's complaint) when
    git cannot read it; LmdError with what is wrong, in words, when it names a file with a
    control character or (`compare`) git reads its text hunks differently from lmd.
    `strip`: the -p level, when recorded; else lmd decides it."""
    reading = read_text(text)
    if strip is not None:
        reading.strip = strip
    out, rev, problem = await _git_reads(repo, text, reading.strip)
    if problem:
        raise Unreadable(NO_HEADERS if "No valid patches" in problem else problem, status=422)
    numstat, _, summary = out.rpartition(b"\0")
    forward, backward = _numstat(numstat + b"\0"), _numstat(rev)[::-1]  # -R reverses the order
    if len(forward) != len(backward):
        raise LmdError("git read the diff differently forwards and backwards", status=422)
    files = []
    for (added, removed, path), (_, _, old) in zip(forward, backward, strict=True):
        for name in (path, old):
            if _CONTROL.search(name):
                raise LmdError(
                    f"the change names a file with a control character ({name!r})", status=422
                )
        binary = added == "-"
        files.append(
            FileChange(
                path=path,
                old_path=old if old != path else None,
                added=0 if binary else int(added),
                removed=0 if binary else int(removed),
                binary=binary,
            )
        )
    if not _read_summary(files, summary.decode("utf-8", "surrogateescape").splitlines()):
        raise LmdError("git's summary of the diff named changes its file list did not", status=422)
    if compare:
        _compare(reading, files)
    for f in files:
        f.first_added, f.first_new_line = reading.hints.get(f.path, (None, None))
    return Patch(text=text, strip=reading.strip, files=files)


def _compare(reading: Reading, files: list[FileChange]) -> None:
    """Refuse a patch whose text hunks git reads as other files or other line counts than
    lmd (and the user reading the diff) does: what applies must be what was read."""
    by_git: dict[str, list[int]] = {}
    for f in files:
        if not f.binary and (f.added or f.removed):
            counts = by_git.setdefault(f.path, [0, 0])
            counts[0] += f.added
            counts[1] += f.removed
    if by_git == reading.text_files:
        return
    differ = sorted(
        p
        for p in set(by_git) | set(reading.text_files)
        if by_git.get(p) != reading.text_files.get(p)
    )
    shown = ", ".join(differ[:4])
    raise LmdError(
        f"git would apply this diff to other lines or files than it shows ({shown})",
        status=422,
        detail={"git": {p: by_git.get(p) for p in differ}, "text": reading.text_files},
    )


def bad_path(repo: str, patch: Patch) -> tuple[str, str] | None:
    """(path, 'outside the repository' or 'inside .git') for the first path we never touch."""
    for path in patch.paths:
        _, problem = inside(repo, path)
        if problem:
            return path, "inside .git" if "inside .git" in problem else "outside the repository"
    return None


def refuse_paths(repo: str, patch: Patch) -> str | None:
    """A sentence when the patch touches nothing, or a path outside the repo or inside .git."""
    for path in patch.paths:
        _, problem = inside(repo, path)
        if problem:
            return f"The change touches {path}: {problem}"
    if not patch.files:
        return NO_HEADERS
    return None


async def check(repo: str, patch: Patch, reverse: bool = False) -> str | None:
    """git's complaint when the patch would not apply cleanly, else None."""
    problem = refuse_paths(repo, patch)
    if problem:
        return problem
    args = _apply_args(patch.strip, reverse, check=True)
    code, out = await git(repo, *args, "-", stdin=patch.text.encode())
    if code != 0:
        return out.strip() or f"git apply --check failed with exit code {code}."
    return None


async def apply(repo: str, patch: Patch, reverse: bool = False) -> str | None:
    """Apply (or reverse) a patch that passed `check`; git's complaint on failure."""
    problem = await check(repo, patch, reverse)
    if problem:
        return problem
    args = _apply_args(patch.strip, reverse)
    code, out = await git(repo, *args, "-", stdin=patch.text.encode())
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
            args = [*_apply_args(patch.strip), f"--include={path}", "-"]
            done, _ = await git(tmp, *args, stdin=patch.text.encode())
            if done != 0:
                return True
        expected = copy.read_text("utf-8", "replace") if copy.is_file() else None
    current = Path(repo, path)
    return (current.read_text("utf-8", "replace") if current.is_file() else None) != expected


# -- undoing what git cannot reverse -------------------------------------------------------
def needs_own_undo(patch: Patch) -> bool:
    """git reverses every patch but one that copies a file (its reverse reads as a copy back,
    onto a file that exists): such a patch is undone by a diff of its own effect."""
    return any(f.copied for f in patch.files)


def snapshot(repo: str, patch: Patch) -> dict[str, tuple[str, bytes] | None]:
    """The patch's paths as they are now: ("file"/"exec", bytes), ("link", target) or None."""
    found: dict[str, tuple[str, bytes] | None] = {}
    for rel in patch.paths:
        path = Path(repo, rel)
        try:
            st = path.lstat()
        except OSError:
            found[rel] = None
            continue
        if path.is_symlink():
            found[rel] = ("link", os.readlink(path).encode("utf-8", "surrogateescape"))
        elif path.is_file():
            found[rel] = ("exec" if st.st_mode & 0o100 else "file", path.read_bytes())
        else:
            found[rel] = None
    return found


async def effect_diff(before: dict, after: dict) -> str:
    """git's diff taking snapshot `before` to `after`, written without renames or copies: a
    patch that `git apply -p1` applies. The undo of a patch is effect_diff(after, before)."""
    with tempfile.TemporaryDirectory(prefix="cobol-undo-") as tmp:
        for side, state in (("a", before), ("b", after)):
            Path(tmp, side).mkdir()
            for rel, entry in state.items():
                if entry is None:
                    continue
                target = Path(tmp, side, rel)
                target.parent.mkdir(parents=True, exist_ok=True)
                kind, data = entry
                if kind == "link":
                    os.symlink(data.decode("utf-8", "surrogateescape"), target)
                else:
                    target.write_bytes(data)
                    target.chmod(0o755 if kind == "exec" else 0o644)
        code, out, err = await git_split(
            tmp,
            "diff", "--no-index", "--no-prefix", "--binary", "--full-index", "--no-renames",
            "--no-ext-diff", "--no-textconv", "a", "b",
        )  # fmt: skip
    if code not in (0, 1):
        raise LmdError(f"git could not write the undo diff: {err.decode(errors='replace')}")
    return out.decode("utf-8", "surrogateescape")


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


def migrate_patches_undo(db) -> None:
    """The diff that undoes a patch git cannot reverse itself (one that copies a file: git
    reads its reverse as a copy the other way); NULL: `git apply -R` of the patch."""
    db.execute(f"ALTER TABLE {TABLE} ADD COLUMN undo TEXT")


def record(
    store, session: str, repo: str, patch: Patch, summary: str, undo: str | None = None
) -> int:
    with store.lock:
        cur = store.db.execute(
            f"INSERT INTO {TABLE} (session, repo, files, patch, strip, summary, applied_at, undo)"
            " VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
            [
                session,
                repo,
                json.dumps(patch.paths),
                patch.text,
                patch.strip,
                summary,
                time.time(),
                undo,
            ],
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


async def from_row(repo: str, row: dict) -> Patch:
    """A recorded patch, read by git again (as when it was applied: the same text and -p)."""
    return await read(repo, row["patch"], strip=row["strip"], compare=False)
