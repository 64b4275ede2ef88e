"""Approval rules: what the user allowed, forbade, or wants asked, so fewer questions are asked.

A rule has a decision (allow, ask, forbid), a pattern, a scope (a directory tree, by its real
path, or everywhere) and a lifetime (kept, or one session). A command pattern is words: it
matches a simple command of the parsed command line (daemon/execution/bash.py) whose first
words are exactly those, never a substring. A tool pattern is `mcp:SERVER:TOOL` (or
`mcp:SERVER:*`). For a command line of several parts: forbid when any part is forbidden, ask
when any part has an ask rule, allow only when every part is allowed; a command that cannot be
read matches nothing (it asks, as without rules).

An allow rule runs the command at once at the sandbox level it states: by default
`workspace-write` with the rule's directory as the only writable place; `none` (outside the
sandbox) only when the user said so in so many words. Only the user makes rules: by voice when
answering a question (`parse_answer`, read only from what the user said), `lmd rules`, or an
HTTP request carrying the daemon's token. Built-in defaults are rows like any other (origin
`built-in`), listed and removable.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

DECISIONS = ("allow", "ask", "forbid")
LEVELS = ("read-only", "workspace-write", "none")  # strictest first
DEFAULT_LEVEL = "workspace-write"
MAX_RULES = 1000
MAX_PATTERN_CHARS = 300
MAX_PATTERN_WORDS = 16
TOOL_PATTERN = re.compile(r"mcp:[\w.-]{1,64}:(?:[\w.-]{1,128}|\*)")
READ_ONLY_NOTE = (
    "Besides these rules, under marat_approval unsafe a command the classifier calls clearly "
    "read-only (ls, cat, grep, git status, ...) runs at once in the read-only sandbox."
)
_DEFAULT_IDLE = 300  # end_session_after_idle_secs' default, when the table has none

# The defaults, made by the migration and shown by `lmd rules list` (removable like any rule).
# forbid: commands that take the machine or the user's identity, never worth a voice's yes;
# ask: history-rewriting or remote git commands, asked even when a broader rule allows git.
BUILT_INS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("forbid", ("sudo",)),
    ("forbid", ("su",)),
    ("forbid", ("doas",)),
    ("forbid", ("rm", "-rf", "/")),
    ("forbid", ("rm", "-fr", "/")),
    ("forbid", ("rm", "-rf", "/*")),
    ("forbid", ("rm", "-rf", "~")),
    ("forbid", ("shutdown",)),
    ("forbid", ("reboot",)),
    ("forbid", ("poweroff",)),
    ("forbid", ("halt",)),
    ("ask", ("git", "push")),
    ("ask", ("git", "reset", "--hard")),
    ("ask", ("git", "clean")),
)

# Programs whose first argument is a subcommand: "yes, always" covers that subcommand only
# (`git commit`, not all of git).
SUBCOMMAND_PROGRAMS = frozenset(
    """git npm npx yarn pnpm bun deno cargo go docker podman kubectl helm pip pip3 uv poetry
    gh make apt apt-get brew systemctl terraform bundle rails mvn gradle dotnet conda rustup
    just tox nox hatch pdm""".split()
)


class RuleError(ValueError):
    """A rule that cannot be made or found, with one sentence saying why."""


@dataclass(frozen=True)
class Decision:
    """What a rule says about one command or tool call; None from `decide` means no rule
    applies (ask as without rules)."""

    decision: str  # allow | ask | forbid
    rule_id: int | None
    sandbox_level: str | None  # allow: read-only | workspace-write | none
    text: str  # the rule in one spoken sentence
    directory: str | None = None  # allow: the only writable place (None: the working dir)


@dataclass(frozen=True)
class Rule:
    """One row of the rules table."""

    id: int
    decision: str
    kind: str  # command | tool
    words: tuple[str, ...]  # command patterns; empty for tools
    tool: str | None
    directory: str | None  # a real path, or None for everywhere
    session: str | None  # None: kept
    sandbox: str | None
    origin: str  # built-in | voice | cli | http
    said: str | None
    created_at: float

    @property
    def pattern(self) -> str:
        return self.tool if self.kind == "tool" else shlex.join(self.words)

    def sentence(self, what: str | None = None) -> str:
        """The rule in one spoken sentence (`what` names the pattern otherwise)."""
        where = f"in {self.directory} and below" if self.directory else "everywhere"
        when = " for this session" if self.session else ""
        what = what or self.pattern
        if self.decision == "forbid":
            return f"I never run {what} {where}{when}."
        if self.decision == "ask":
            return f"I always ask before {what} {where}{when}."
        if self.kind == "tool":
            return f"I call {what} without asking {where}{when}."
        return f"I run {what} without asking {where}{when}, {_how(self.sandbox, self.directory)}."

    def to_json(self) -> dict:
        return {
            "id": self.id,
            "decision": self.decision,
            "kind": self.kind,
            "pattern": self.pattern,
            "directory": self.directory,
            "session": self.session,
            "lifetime": "session" if self.session else "kept",
            "sandbox": self.sandbox,
            "origin": self.origin,
            "said": self.said,
            "created_at": self.created_at,
            "sentence": self.sentence(),
        }


def _how(level: str | None, directory: str | None) -> str:
    if level == "none":
        return "outside the sandbox"
    if level == "read-only":
        return "in the read-only sandbox"
    return f"in the sandbox, writing only in {directory or 'the working directory'}"


# -- the table ---------------------------------------------------------------------------------
def m005_rules(db: Any) -> None:
    """The rules table, with the built-in defaults."""
    db.execute(
        """CREATE TABLE IF NOT EXISTS rules (
            id INTEGER PRIMARY KEY,
            decision TEXT NOT NULL,
            kind TEXT NOT NULL DEFAULT 'command',
            words TEXT NOT NULL DEFAULT '[]',
            tool TEXT,
            directory TEXT,
            session TEXT,
            sandbox TEXT,
            origin TEXT NOT NULL,
            said TEXT,
            created_at REAL NOT NULL
        )"""
    )
    now = time.time()
    for decision, words in BUILT_INS:
        db.execute(
            "INSERT INTO rules (decision, kind, words, origin, created_at)"
            " VALUES (?, 'command', ?, 'built-in', ?)",
            [decision, json.dumps(list(words)), now],
        )


def _db(store: Any) -> Any:
    """A Store or a sqlite-utils Database: the database either way."""
    return getattr(store, "db", store)


def _rows(store: Any, sql: str, args: list | None = None) -> list[dict]:
    """Rows of a query: a Store reads on its reading connection (the writing one belongs to
    whoever holds its lock), a bare database on itself."""
    read = getattr(store, "_read", None)
    if read is not None:
        return read(sql, args or [])
    return store.execute_returning_dicts(sql, args or [])


def _lock(store: Any) -> Any:
    import contextlib

    return getattr(store, "lock", None) or contextlib.nullcontext()


def _rule(row: dict) -> Rule:
    return Rule(
        id=row["id"],
        decision=row["decision"],
        kind=row["kind"],
        words=tuple(json.loads(row["words"] or "[]")),
        tool=row["tool"],
        directory=row["directory"],
        session=row["session"],
        sandbox=row["sandbox"],
        origin=row["origin"],
        said=row["said"],
        created_at=row["created_at"],
    )


def all_rules(store: Any, session: str | None = None) -> list[Rule]:
    """Kept rules, and the session rules of `session` (of every session when None), oldest
    first; expired session rules are dropped on the way."""
    _expire(store)
    rows = _rows(store, "SELECT * FROM rules ORDER BY id")
    found = [_rule(r) for r in rows]
    return [r for r in found if session is None or r.session in (None, session)]


def _expire(store: Any) -> None:
    """A session rule lasts while its session is in use: it goes when the session has been
    idle longer than end_session_after_idle_secs."""
    db = _db(store)
    rows = _rows(
        store,
        "SELECT r.id, r.created_at, s.last_active FROM rules r LEFT JOIN sessions s"
        " ON s.name = r.session WHERE r.session IS NOT NULL",
    )
    if not rows:
        return
    idle = _idle_secs(store)
    now = time.time()
    stale = [r["id"] for r in rows if now - max(r["created_at"], r["last_active"] or 0) >= idle]
    if stale:
        with _lock(store):
            db.execute(f"DELETE FROM rules WHERE id IN ({','.join('?' * len(stale))})", stale)


def _idle_secs(store: Any) -> float:
    env = os.environ.get("LMD_END_SESSION_AFTER_IDLE_SECS")
    try:
        if env is not None:
            return float(env)
        row = _rows(store, "SELECT value FROM settings WHERE name = 'end_session_after_idle_secs'")
        return float(row[0]["value"]) if row else _DEFAULT_IDLE
    except (ValueError, Exception):  # no settings table yet, or a bad value (reported elsewhere)
        return _DEFAULT_IDLE


def real_directory(path: str | os.PathLike) -> str:
    """A rule's directory: its real path (symlinks resolved now, once), which must exist."""
    text = os.fspath(path)
    if "\x00" in text or not text.strip():
        raise RuleError("The rule's directory is not a usable path; give an absolute directory.")
    expanded = os.path.expanduser(text)
    if not os.path.isabs(expanded):
        raise RuleError(f"The rule's directory {text} is not absolute; give a full path.")
    real = os.path.realpath(expanded)
    if not os.path.isdir(real):
        raise RuleError(f"The rule's directory {text} is not a directory here; give one that is.")
    return real


def pattern_words(pattern: str) -> tuple[str, ...]:
    """A command pattern as words, checked: one plain command (`git commit`), no operators,
    redirections or expansions."""
    from daemon.execution.bash import Unmodelled, simple_commands

    text = pattern.strip()
    if not text:
        raise RuleError("The rule has no pattern; say which command, like git commit.")
    if len(text) > MAX_PATTERN_CHARS:
        raise RuleError(f"The pattern is longer than {MAX_PATTERN_CHARS} characters; shorten it.")
    try:
        parts = simple_commands(text)
    except Unmodelled:
        parts = []
    if len(parts) != 1:
        raise RuleError(
            f"The pattern {text} is not one plain command; give a program and its first "
            "arguments, like git commit (no &&, pipes, redirections or $)."
        )
    words = parts[0].words
    if len(words) > MAX_PATTERN_WORDS:
        raise RuleError(f"The pattern has more than {MAX_PATTERN_WORDS} words; shorten it.")
    return words


def add_rule(
    store: Any,
    decision: str,
    pattern: str | tuple[str, ...],
    *,
    directory: str | None = None,
    session: str | None = None,
    sandbox: str | None = None,
    origin: str = "cli",
    said: str | None = None,
    lmd_home: str | None = None,
) -> tuple[Rule, bool]:
    """Make a rule (or find the same one); (rule, made now). RuleError says why not."""
    if decision not in DECISIONS:
        raise RuleError(f"A rule's decision is allow, ask or forbid, not {decision!r}.")
    kind, tool, words = "command", None, ()
    if isinstance(pattern, str) and pattern.strip().startswith("mcp:"):
        kind, tool = "tool", pattern.strip()
        if not TOOL_PATTERN.fullmatch(tool):
            raise RuleError(
                f"The tool pattern {tool[:80]} is not mcp:SERVER:TOOL (or mcp:SERVER:*)."
            )
    elif isinstance(pattern, str):
        words = pattern_words(pattern)
    else:
        words = tuple(pattern)
        if not words or len(words) > MAX_PATTERN_WORDS:
            raise RuleError("The rule's pattern must be 1 to 16 words.")
    if directory is not None:
        directory = real_directory(directory)
    if decision != "allow":
        if sandbox not in (None, ""):
            raise RuleError("Only an allow rule has a sandbox level; leave it out.")
        sandbox = None
    elif kind == "tool":
        sandbox = None
    else:
        sandbox = sandbox or DEFAULT_LEVEL
        if sandbox not in LEVELS:
            raise RuleError(
                f"The sandbox level is read-only, workspace-write or none, not {sandbox!r}."
            )
        from daemon.execution import sandbox as sb

        # what the sandbox cannot do there is said now, never when a command comes
        problem = sb.rule_problem(directory, sandbox, os.path.expanduser("~"), lmd_home)
        if problem:
            raise RuleError(problem)
    db = _db(store)
    with _lock(store):
        for existing in all_rules(store, session):
            if (
                existing.decision == decision
                and existing.words == words
                and existing.tool == tool
                and existing.directory == directory
                and existing.session == session
                and existing.sandbox == sandbox
            ):
                return existing, False
        count = _rows(store, "SELECT COUNT(*) AS n FROM rules")[0]["n"]
        if count >= MAX_RULES:
            raise RuleError(
                f"There are {MAX_RULES} rules already; remove some with lmd rules remove."
            )
        cur = db.execute(
            "INSERT INTO rules (decision, kind, words, tool, directory, session, sandbox, origin,"
            " said, created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            [
                decision,
                kind,
                json.dumps(list(words)),
                tool,
                directory,
                session,
                sandbox,
                origin,
                said,
                time.time(),
            ],
        )
        row = _rows(store, "SELECT * FROM rules WHERE id = ?", [cur.lastrowid])
    return _rule(row[0]), True


def get_rule(store: Any, rule_id: int) -> Rule | None:
    rows = _rows(store, "SELECT * FROM rules WHERE id = ?", [rule_id])
    return _rule(rows[0]) if rows else None


def remove_rule(store: Any, rule_id: int) -> Rule:
    """Remove one rule by id; RuleError when there is none."""
    found = get_rule(store, rule_id)
    if found is None:
        raise RuleError(f"There is no rule {rule_id}; lmd rules list shows them.")
    with _lock(store):
        _db(store).execute("DELETE FROM rules WHERE id = ?", [rule_id])
    return found


def forget(store: Any, session: str, named: str) -> list[Rule]:
    """Remove the rules a spoken name points at ("the git commit rule", "rule 3"): by id, or
    every rule of this session or kept whose pattern is those words (any case)."""
    named = named.strip()
    if named.isdigit():
        found = get_rule(store, int(named))
        if found is None or found.session not in (None, session):
            return []
        return [remove_rule(store, found.id)]
    wanted = " ".join(named.lower().split())
    gone = [
        r
        for r in all_rules(store, session)
        if " ".join(r.pattern.lower().split()) == wanted
        or (r.kind == "command" and " ".join(w.lower() for w in r.words) == wanted)
    ]
    for r in gone:
        remove_rule(store, r.id)
    return gone


# -- matching ----------------------------------------------------------------------------------
def _inside(real: str, directory: str) -> bool:
    return real == directory or real.startswith(directory.rstrip("/") + "/")


def _matches(rule: Rule, part: Any) -> bool:
    n = len(rule.words)
    if len(part.words) < n or tuple(part.words[:n]) != rule.words:
        return False
    # a glob in the matched words is not final: `g*t` is not git to an allow rule; a forbid
    # or ask rule that names the glob itself (rm -rf /*) still matches it as written
    globs = part.globs or (part.globbed,) * len(part.words)
    return rule.decision != "allow" or not any(globs[:n])


def _tool_matches(rule: Rule, tool: str) -> bool:
    if rule.tool == tool:
        return True
    return bool(rule.tool and rule.tool.endswith(":*") and tool.startswith(rule.tool[:-1]))


def decide(
    db: Any,
    *,
    cwd: Path | str,
    session: str,
    command: str | None = None,
    tool: str | None = None,
) -> Decision | None:
    """What the rules say about `command` (a bash command line) or `tool` ("mcp:SERVER:TOOL")
    run in `cwd` for `session`: forbid wins, then ask, then allow (every part of a command
    must be allowed); None when no rule applies."""
    real = os.path.realpath(os.fspath(cwd))
    here = [r for r in all_rules(db, session) if r.directory is None or _inside(real, r.directory)]
    if tool is not None:
        hits = [r for r in here if r.kind == "tool" and _tool_matches(r, tool)]
        for decision in ("forbid", "ask", "allow"):
            for r in hits:
                if r.decision == decision:
                    return Decision(decision, r.id, None, r.sentence(), r.directory)
        return None
    if not command or not command.strip():
        return None
    from daemon.execution.bash import Unmodelled, simple_commands

    try:
        parts = simple_commands(command)
    except Unmodelled:
        return None  # nothing is known about it: ask, as without rules
    commands = [r for r in here if r.kind == "command"]
    for decision in ("forbid", "ask"):
        for part in parts:
            for r in commands:
                if r.decision == decision and _matches(r, part):
                    return Decision(decision, r.id, None, r.sentence(), r.directory)
    chosen: list[Rule] = []
    for part in parts:
        allowing = [r for r in commands if r.decision == "allow" and _matches(r, part)]
        if not allowing:
            return None
        # the most specific: the longest pattern, then the deepest directory
        chosen.append(max(allowing, key=lambda r: (len(r.words), len(r.directory or ""))))
    strictest = min(chosen, key=lambda r: LEVELS.index(r.sandbox or DEFAULT_LEVEL))
    dirs = [r.directory for r in chosen if r.directory]
    writable = max(dirs, key=len) if dirs else None  # nested trees: the innermost
    return Decision(
        "allow", strictest.id, strictest.sandbox or DEFAULT_LEVEL, strictest.sentence(), writable
    )


def suggested_pattern(words: tuple[str, ...]) -> tuple[str, ...]:
    """What "yes, always" covers of one simple command: the program and, for programs with
    subcommands, the subcommand (`git commit -m x` -> git commit; `python -m pytest -q` ->
    python -m pytest; `ls -la` -> ls)."""
    program = words[0]
    rest = words[1:]
    if program in SUBCOMMAND_PROGRAMS and rest and not rest[0].startswith("-"):
        return (program, rest[0])
    if re.fullmatch(r"python[\d.]*", program) and rest[:1] == ("-m",) and len(rest) > 1:
        return (program, "-m", rest[1])
    return (program,)


_PLAIN_WORD = re.compile(r"[A-Za-z0-9][A-Za-z0-9._+-]{0,39}")


def always_hint(command: str, asked_before: list[str]) -> tuple[str, str | None]:
    """(the command's "yes, always" pattern, a hint to say with the question or None). The
    hint comes from the second question about the same pattern in a session on: the first
    question stays short; a repeated one tells the user the words that end the repeats."""
    from daemon.execution.bash import Unmodelled, simple_commands

    try:
        parts = simple_commands(command)
    except Unmodelled:
        return "", None
    if len(parts) != 1 or not parts[0].words:
        return "", None
    words = suggested_pattern(parts[0].words)
    # The words are the model's: spoken outside the verbatim command, they must not be able
    # to say anything but a program's name ('ls. It only reads, say yes' would be lmd's voice)
    if not all(_PLAIN_WORD.fullmatch(w) for w in words):
        return "", None
    pattern = " ".join(words)
    if pattern not in asked_before:
        return pattern, None
    return pattern, (
        f"To stop this question, say yes, always for {pattern}; or yes for this session."
    )


# -- what the user says --------------------------------------------------------------------------
@dataclass(frozen=True)
class Answer:
    """A spoken answer that makes a rule: "yes, always here", "never run that"..."""

    decision: str  # allow | forbid
    lifetime: str  # kept | session
    everywhere: bool
    named: tuple[str, ...] | None  # "always for git commit": the words the user named
    sandbox: str | None  # None: the default; "none" only when said in so many words
    problem: str | None = None  # said two things that do not go together


_YES = {"yes", "yeah", "yep", "yup", "sure", "ok", "okay", "alright", "fine"}
_NO = {"no", "nope"}
_FILLER = {"please", "run", "it", "that", "this", "do", "and", "but", "just", "go", "ahead",
           "then", "the", "command", "thanks", "thank", "you", "one", "them", "those", "so",
           "again"}  # fmt: skip
_PHRASES: list[tuple[tuple[str, ...], str]] = []


def _phrases(kind: str, *texts: str) -> None:
    for text in texts:
        _PHRASES.append((tuple(text.split()), kind))


_phrases("always", "always", "forever", "from now on", "every time", "each time",
         "dont ask again", "don't ask again", "do not ask again", "dont ask me again",
         "don't ask me again", "do not ask me again", "without asking", "permanently",
         "all the time")  # fmt: skip
_phrases("session", "for this session", "this session", "for the session",
         "for the rest of this session", "for the rest of the session", "in this session",
         "for now", "this time round")  # fmt: skip
_phrases("here", "here", "in here", "in this directory", "this directory", "in this folder",
         "this folder", "in this project", "this project", "in this repo", "this repo",
         "in this repository", "this repository", "in this dir")  # fmt: skip
_phrases("everywhere", "everywhere", "anywhere", "in every directory", "in all directories",
         "in any directory", "globally", "in every folder", "in any folder")  # fmt: skip
_phrases("unsandboxed", "without the sandbox", "without a sandbox", "without sandbox",
         "outside the sandbox", "outside of the sandbox", "unsandboxed", "no sandbox",
         "with no sandbox", "not sandboxed", "without sandboxing")  # fmt: skip
_phrases("read-only", "read only", "read-only", "in the read only sandbox",
         "in the read-only sandbox", "read only sandbox", "read-only sandbox")  # fmt: skip
_phrases("never", "never", "never ever", "dont ever", "don't ever", "do not ever")
_PHRASES.sort(key=lambda p: -len(p[0]))  # the longest phrase first


def _tokens(text: str) -> tuple[list[str], list[str]]:
    """Words as dictated (case kept, for a named command) and lowered, punctuation at their
    ends dropped."""
    kept = []
    for raw in text.replace("\u2019", "'").split():
        word = raw.strip('.,!?;:"()[]')
        if word.endswith("'s"):
            word = word[:-2]
        if word:
            kept.append(word)
    return kept, [w.lower() for w in kept]


def _phrase_at(low: list[str], i: int) -> tuple[str, int] | None:
    for words, kind in _PHRASES:
        if tuple(low[i : i + len(words)]) == words:
            return kind, len(words)
    return None


def parse_answer(text: str) -> Answer | None:
    """The rule a spoken answer asks for, or None when it is not such an answer (a plain yes
    or no, or anything else). Only ever called on what the user said."""
    if len(text) > 300:
        return None
    orig, low = _tokens(text)
    if not low:
        return None
    seen: dict[str, bool] = {}
    named: list[str] | None = None
    yes = no = strong = False
    i = 0
    while i < len(low):
        word = low[i]
        if word in _YES and not seen:
            yes = True
            i += 1
            continue
        if word in _NO and not seen:
            no = True
            i += 1
            continue
        found = _phrase_at(low, i)
        if found:
            seen[found[0]] = True
            i += found[1]
            if found[0] == "never":
                # "never run that" / "never run git push": the verb, then that or a command
                verb = False
                while i < len(low) and low[i] in ("run", "do", "allow", "execute"):
                    i += 1
                    verb = strong = True
                if i < len(low) and low[i] in ("that", "this", "it", "again"):
                    strong = True
                    i += 1
                    continue
                if not verb:
                    continue  # "never mind": the next word decides
                start = i
                while i < len(low) and not _phrase_at(low, i):
                    i += 1
                if i > start:
                    named = orig[start:i]
                    strong = True
            continue
        if word == "for" and (seen.get("always") or yes or seen.get("session")):
            start = i + 1
            i = start
            while i < len(low) and not _phrase_at(low, i):
                i += 1
            if i > start:
                named = orig[start:i]
            continue
        if word in _FILLER:
            i += 1
            continue
        return None  # a word that is not part of such an answer: not a rule answer
    forbid = seen.get("never", False)
    kept = seen.get("always", False)
    session = seen.get("session", False)
    problem = None
    if forbid:
        if not strong:
            return None  # "never" alone, "no, never": a plain no
        if yes:
            problem = "I heard both yes and never; say yes always, or never run that."
    elif not (kept or session) or no:
        return None  # a plain yes or no (or "yes, here"): no rule
    if kept and session:
        problem = "I heard both always and this session; say yes always, or yes for this session."
    if seen.get("here") and seen.get("everywhere"):
        problem = "I heard both here and everywhere; say one of them."
    if seen.get("unsandboxed") and seen.get("read-only"):
        problem = "I heard both without the sandbox and read-only; say one of them."
    sandbox = "none" if seen.get("unsandboxed") else "read-only" if seen.get("read-only") else None
    if forbid and sandbox:
        problem = "A never rule has no sandbox; say never run that."
    named_words = tuple(named) if named else None
    if named_words and len(named_words) > MAX_PATTERN_WORDS:
        problem = f"That command is longer than {MAX_PATTERN_WORDS} words; name a shorter one."
    # allow rules hold here unless said otherwise; never rules everywhere unless said here
    everywhere = bool(seen.get("everywhere")) or (forbid and not seen.get("here"))
    return Answer(
        "forbid" if forbid else "allow",
        "session" if session and not kept else "kept",
        everywhere,
        named_words,
        sandbox,
        problem,
    )


def make_from_answer(
    store: Any,
    answer: Answer,
    *,
    cwd: str,
    session: str,
    command: str | None = None,
    tool: str | None = None,
    said: str = "",
    lmd_home: str | None = None,
) -> tuple[list[Rule], str]:
    """The rules a spoken answer makes for the command (or tool call) it answers, and the
    sentence that says them back. RuleError says why none could be made."""
    if answer.problem:
        raise RuleError(answer.problem)
    directory = None if answer.everywhere else cwd
    lifetime_session = session if answer.lifetime == "session" else None
    patterns: list[str | tuple[str, ...]] = []
    if tool is not None:
        # "yes, always for write_note" (or "write note") names the tool asked about
        named = " ".join(answer.named or ()).lower()
        short = tool.rsplit(":", 1)[-1].lower()
        if named and named not in (tool.lower(), short, short.replace("_", " ")):
            raise RuleError(
                f"{' '.join(answer.named or ())} is not the tool I asked about ({tool}), so I "
                "made no rule; say yes always, or name that tool."
            )
        patterns = [tool]
    else:
        from daemon.execution.bash import Unmodelled, simple_commands

        try:
            parts = simple_commands(command or "")
        except Unmodelled as e:
            raise RuleError(
                f"I cannot read that command well enough to make a rule of it ({e}); rules "
                "cover plain commands without $, redirections to files or subshells."
            ) from None
        if answer.named:
            wanted = tuple(w.lower() for w in answer.named)
            for part in parts:
                if tuple(w.lower() for w in part.words[: len(wanted)]) == wanted:
                    patterns = [part.words[: len(wanted)]]
                    break
            if not patterns:
                raise RuleError(
                    f"{' '.join(answer.named)} is not how the command I asked about begins, "
                    "so I made no rule; name its first words, or say yes always."
                )
        elif answer.decision == "forbid":
            patterns = _unique([p.words for p in parts])  # that command, as it was
        else:
            patterns = _unique([suggested_pattern(p.words) for p in parts])
    made = []
    for pattern in patterns:
        rule, _ = add_rule(
            store,
            answer.decision,
            pattern,
            directory=directory,
            session=lifetime_session,
            sandbox=answer.sandbox if answer.decision == "allow" else None,
            origin="voice",
            said=said[:300] or None,
            lmd_home=lmd_home,
        )
        made.append(rule)
    return made, said_back(made)


def _unique(items: list[tuple[str, ...]]) -> list[tuple[str, ...]]:
    out: list[tuple[str, ...]] = []
    for item in items:
        if item not in out:
            out.append(item)
    return out


def said_back(made: list[Rule]) -> str:
    """One sentence for the rules just made: "From now on I run git commit without asking..."."""
    return "From now on " + made[0].sentence(" and ".join(r.pattern for r in made))


# -- spoken questions about rules ------------------------------------------------------------------
_LIST = re.compile(
    r"^\s*(?:what|which)\s+(?:are|is)?\s*(?:my|the|your)?\s*(?:approval\s+)?rules?"
    r"(?:\s+(?:do\s+i\s+have|are\s+there))?\s*[?.!]*\s*$"
    r"|^\s*(?:what|which)\s+rules?\s+(?:do\s+i\s+have|are\s+there|have\s+i\s+made)\s*[?.!]*\s*$"
    r"|^\s*(?:list|read|say|tell\s+me|show(?:\s+me)?)\s+(?:me\s+)?(?:my|the|all)?\s*"
    r"(?:approval\s+)?rules\s*[?.!]*\s*$",
    re.I,
)
_FORGET = re.compile(
    r"^\s*(?:please\s+)?(?:forget|remove|delete|drop|cancel)\s+(?:about\s+)?"
    r"(?:(?:the|my)\s+)?(?:rule\s+(?:number\s+)?(?P<id>\d+)|rule\s+for\s+(?P<for>.+?)"
    r"|(?P<name>.+?)\s+rule)\s*[.!]*\s*$",
    re.I,
)


def asks_for_list(text: str) -> bool:
    """ "what are my rules" and the ways a voice says it."""
    return bool(_LIST.match(text))


def forget_target(text: str) -> str | None:
    """ "forget the git commit rule" -> "git commit"; "forget rule 3" -> "3"; else None."""
    m = _FORGET.match(text)
    if not m:
        return None
    return (m.group("id") or m.group("for") or m.group("name") or "").strip() or None


def spoken_list(store: Any, session: str) -> str:
    """The user's rules in sentences, the built-in ones counted."""
    found = all_rules(store, session)
    mine = [r for r in found if r.origin != "built-in"]
    builtin = len(found) - len(mine)
    tail = (
        f" There are also {builtin} built-in rules; lmd rules list shows them." if builtin else ""
    )
    if not mine:
        return f"You have made no rules.{tail}"
    lines = [f"Rule {r.id}: {r.sentence()}" for r in mine]
    return "\n".join(lines) + tail
