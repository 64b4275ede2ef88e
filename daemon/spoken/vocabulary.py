"""What dictated words probably mean here: a hint for the model beside the user's words.

A speech engine writes "git check out dash b feature slash login" and "run pie test on
daemon slash core dot pie". When marat or cobol hand such a request to the model, lmd adds a
separate hint (the user's words stay as said): spoken punctuation written out, the names in
this repository and on PATH that the words sound like (files, branches, programs), and the
user's own dictionary (`lmd words add "kube cuddle" kubectl`, kept in lmd's database).
"""

from __future__ import annotations

import functools
import os
import re
import stat
import subprocess
import time
from dataclasses import dataclass
from typing import Any

from daemon.agent.memory import git_trusts
from daemon.spoken import names, sounds

MOST_SAID = 80  # characters of a dictionary entry's spoken form
MOST_WORDS = 500  # entries in the dictionary
MOST_LINES = 8  # names suggested in one hint
MOST_REPO_NAMES = 20_000  # files and branches read from one repository


class WordsError(ValueError):
    """A dictionary entry that cannot be made or found, with one sentence saying why."""


def m008_words(db: Any) -> None:
    """The user's dictionary: a spoken form and the word it means."""
    db.execute(
        """CREATE TABLE IF NOT EXISTS words (
            said TEXT PRIMARY KEY,
            meant TEXT NOT NULL,
            created_at REAL NOT NULL
        )"""
    )


def _said(text: str) -> str:
    return " ".join(re.findall(r"[^\W_]+(?:'[^\W_]+)?", text.lower()))


def add_word(store: Any, said: str, meant: str) -> tuple[str, str]:
    """Add (or change) one entry; (said, meant) as kept. WordsError says why not."""
    spoken, meant = _said(said), meant.strip()
    if not spoken:
        raise WordsError("Say the words as the speech engine writes them, like kube cuddle.")
    if len(said) > MOST_SAID or not meant or len(meant) > MOST_SAID or "\n" in meant:
        raise WordsError(f"An entry is one line of at most {MOST_SAID} characters each side.")
    with store.lock:
        count = store.db.execute("SELECT COUNT(*) FROM words").fetchone()[0]
        known = store.db.execute("SELECT 1 FROM words WHERE said = ?", [spoken]).fetchone()
        if count >= MOST_WORDS and not known:
            raise WordsError(f"The dictionary holds {MOST_WORDS} words; remove some first.")
        store.db.execute(
            "INSERT INTO words (said, meant, created_at) VALUES (?, ?, ?)"
            " ON CONFLICT(said) DO UPDATE SET meant = excluded.meant",
            [spoken, meant, time.time()],
        )
    return spoken, meant


def remove_word(store: Any, said: str) -> str:
    spoken = _said(said)
    with store.lock:
        gone = store.db.execute("DELETE FROM words WHERE said = ?", [spoken]).rowcount
    if not gone:
        raise WordsError(f"There is no entry for {spoken or said!r}; lmd words list shows them.")
    return spoken


def all_words(store: Any) -> list[tuple[str, str]]:
    """Every entry, (said, meant), by what is said."""
    read = getattr(store, "_read", None)  # a Store reads on its reading connection
    if read is not None:
        return [
            (r["said"], r["meant"]) for r in read("SELECT said, meant FROM words ORDER BY said", [])
        ]
    rows = store.db.execute("SELECT said, meant FROM words ORDER BY said").fetchall()
    return [(r[0], r[1]) for r in rows]


@dataclass(frozen=True)
class Known:
    """A name that exists here, and what it is (said in the hint)."""

    name: str
    what: str  # "a file here", "a branch here", "a program"


@functools.lru_cache(maxsize=4)
def _programs(path: str) -> tuple[str, ...]:
    """Programs on PATH (read once per PATH)."""
    found: set[str] = set()
    for d in path.split(os.pathsep):
        try:
            with os.scandir(d) as it:
                for e in it:
                    if len(found) > 20_000:
                        break
                    if e.name[:1].isalpha() and os.access(e.path, os.X_OK):
                        found.add(e.name)
        except OSError:
            continue
    return tuple(sorted(found))


# The names come from reading the directory and the repository's files, never from running
# git there: a repository's own configuration can make git run a program of its choosing
# (core.fsmonitor on ls-files, and others), and a hint is built for any directory marat is in.
_SKIP_DIRS = {".git", "node_modules", "__pycache__", ".venv", "venv", ".tox", ".mypy_cache"}


def _files(top: str) -> list[str]:
    """Files below `top` (relative paths, dot-folders and build clutter left out), at most
    MOST_REPO_NAMES, read without following links."""
    found: list[str] = []
    for here, dirs, files in os.walk(top):
        dirs[:] = sorted(d for d in dirs if d not in _SKIP_DIRS and not d.startswith("."))
        rel = os.path.relpath(here, top)
        for name in sorted(files):
            found.append(name if rel == "." else f"{rel}/{name}")
            if len(found) >= MOST_REPO_NAMES:
                return found
    return found


def _git_dir(cwd: str) -> str | None:
    """The .git folder of the repository `cwd` is in (a worktree's `.git` file followed), when
    the repository is the user's as git's safe.directory decides (daemon.agent.memory): another
    user's repository above the working directory (a /tmp/.git, a shared checkout) would
    otherwise put its branch names, their words, in the model's instructions."""
    here = os.path.abspath(cwd)
    while True:
        dot_git = os.path.join(here, ".git")
        if os.path.lexists(dot_git) and not git_trusts(os.path.realpath(here))[0]:
            return None
        if os.path.isdir(dot_git):
            return dot_git
        if os.path.isfile(dot_git):
            line = _read_file(dot_git, 4096).partition("\n")[0].strip()
            if line.startswith("gitdir:"):
                return os.path.join(here, line.removeprefix("gitdir:").strip())
            return None
        parent = os.path.dirname(here)
        if parent == here:
            return None
        here = parent


def _read_file(path: str, most: int) -> str:
    """The start of a regular file ("" for anything else): opened without blocking or
    following a link, so a named pipe planted in a repository cannot make lmd wait forever."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return ""
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return ""
        return os.read(fd, most).decode("utf-8", "replace")
    except OSError:
        return ""
    finally:
        os.close(fd)


def _branches(git_dir: str) -> list[str]:
    """Local branch names, from refs/heads and packed-refs (as files, not through git; a
    refs/heads that is a link to elsewhere is not followed, and at most MOST_REPO_NAMES)."""
    found: set[str] = set()
    heads = os.path.join(git_dir, "refs", "heads")
    if os.path.isdir(heads) and not os.path.islink(heads):
        for here, _, files in os.walk(heads):
            found.update(os.path.relpath(os.path.join(here, f), heads) for f in files)
            if len(found) >= MOST_REPO_NAMES:
                break
    for line in _read_file(os.path.join(git_dir, "packed-refs"), 8 << 20).splitlines():
        ref = line.strip().split(" ", 1)[-1]
        if ref.startswith("refs/heads/") and len(found) < MOST_REPO_NAMES:
            found.add(ref.removeprefix("refs/heads/"))
    return sorted(found)[:MOST_REPO_NAMES]


def known_names(cwd: str | None) -> list[Known]:
    """The directory's files and its repository's branches, and PATH's programs."""
    found: list[Known] = []
    if cwd and os.path.isdir(cwd):
        found += [Known(f, "a file here") for f in _files(cwd)]
        git_dir = _git_dir(cwd)
        if git_dir:
            found += [Known(b, "a branch here") for b in _branches(git_dir)]
    found += [Known(p, "a program") for p in _programs(os.environ.get("PATH", ""))]
    found += [Known(c, "a git command") for c in _git_commands()]
    return found


@functools.lru_cache(maxsize=1)
def _git_commands() -> tuple[str, ...]:
    """git's own commands (checkout, cherry-pick...), as git lists them (from the root
    directory: no repository's configuration is read)."""
    try:
        out = subprocess.run(
            ["git", "--list-cmds=main"], cwd="/", capture_output=True, text=True, timeout=5
        )
    except (OSError, subprocess.TimeoutExpired):
        return ()
    return tuple(out.stdout.splitlines()) if out.returncode == 0 else ()


class _Index:
    """Names by their letters and by their sound."""

    def __init__(self, known: list[Known]) -> None:
        self.by_flat: dict[str, list[Known]] = {}
        self.by_sound: dict[str, list[Known]] = {}
        self.exact = {k.name for k in known}
        for k in known:
            base = k.name.rsplit("/", 1)[-1]
            for form in {k.name, base, base.split(".", 1)[0]}:
                letters = names.flat(form)
                if len(letters) < 2:
                    continue
                self.by_flat.setdefault(letters, []).append(k)
                self.by_sound.setdefault(sounds.key(letters), []).append(k)

    def near(self, said: str, single: bool) -> Known | None:
        spelled = _spelled(said)
        if spelled:  # "jay queue" is jq, "el ess" is ls
            return next(iter(self.by_flat.get(spelled, [])), None)
        letters = names.flat(said)
        if len(letters) < 3 or (single and sounds.is_ordinary(letters)):
            return None  # "list", "run", "get": ordinary words mean themselves
        for k in self.by_flat.get(letters, []):
            return k
        best: tuple[tuple, Known] | None = None
        for k in self.by_sound.get(sounds.key(letters), []):
            target = names.flat(k.name.rsplit("/", 1)[-1])
            edits = sounds.distance(letters, target)
            rank = (edits, not k.name.isalnum(), k.name)  # pytest before py.test
            if edits <= max(1, len(target) // 3) and (best is None or rank < best[0]):
                best = (rank, k)
        return best[1] if best else None


# Letters as said one by one ("jay queue" -> jq).
LETTERS = {
    "ay": "a", "bee": "b", "see": "c", "sea": "c", "dee": "d", "ee": "e", "ef": "f", "gee": "g",
    "aitch": "h", "eye": "i", "jay": "j", "kay": "k", "el": "l", "em": "m", "en": "n", "oh": "o",
    "pee": "p", "queue": "q", "cue": "q", "are": "r", "ess": "s", "tee": "t", "you": "u",
    "vee": "v", "ex": "x", "why": "y", "zed": "z", "zee": "z",
}  # fmt: skip


def _spelled(said: str) -> str:
    words = said.lower().split()
    if len(words) < 2 or not all(w in LETTERS for w in words):
        return ""
    return "".join(LETTERS[w] for w in words)


_WORD = re.compile(r"[^\W_]+(?:'[^\W_]+)?")


def dictation_hint(text: str, cwd: str | None, store: Any = None) -> str:
    """The hint for a dictated request ("" when there is nothing to add): spoken punctuation
    written out, names here the words sound like, the user's own words (`lmd words`)."""
    lines: list[str] = []
    written = names.spoken_punctuation(text)
    if written != " ".join(text.split()):
        lines.append(f"spoken punctuation written out: {written}")
    low = " ".join(_WORD.findall(text.lower()))
    taken: set[str] = set()
    for said, meant in all_words(store) if store is not None else []:
        if re.search(rf"\b{re.escape(said)}\b", low) and meant not in text:
            lines.append(f'"{said}": {meant} (the user\'s own word)')
            taken.update(said.split())
    index = _Index(known_names(cwd))
    literal = set(text.split()) | set(written.split())
    words = _WORD.findall(text)
    i = 0
    while i < len(words) and len(lines) < MOST_LINES:
        for n in (3, 2, 1):
            part = words[i : i + n]
            if len(part) < n or taken & {w.lower() for w in part}:
                continue
            found = index.near(" ".join(part), single=n == 1)
            if found is not None and found.name not in literal:
                lines.append(f'"{" ".join(part)}": {found.name} ({found.what})')
                taken.update(w.lower() for w in part)
                i += n
                break
        else:
            i += 1
    for token in written.split():
        bare = token.strip(".,;:!?\"'")
        if ("/" in bare or "." in bare) and bare not in text and bare in index.exact:
            lines.append(f"{bare}: a name here")
    if not lines:
        return ""
    body = "\n".join(f"- {line}" for line in dict.fromkeys(lines))
    return (
        "The user's request was dictated through a speech engine. What its words probably "
        "mean here (a hint: the user's words stand as said):\n" + body
    )
