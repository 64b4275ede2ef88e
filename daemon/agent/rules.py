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
answering a question (a mode reads the answer, only ever what the user said), `lmd rules`, or an
HTTP request carrying the daemon's token. Built-in defaults are rows like any other (origin
`built-in`), listed and removable.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shlex
import time
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

from daemon.agent import effective
from daemon.execution import sandbox as sb
from daemon.execution.bash import Unmodelled, simple_commands

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
# (`git commit`, not all of git). Their global options: daemon/agent/effective.py.
SUBCOMMAND_PROGRAMS = effective.SUBCOMMAND_PROGRAMS


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
    removed_at: float | None = None  # a removed rule stays, for the audit that names it

    @property
    def pattern(self) -> str:
        return self.tool if self.kind == "tool" and self.tool else shlex.join(self.words)

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
        inert = _inert(self.words)
        if inert:  # made by an older lmd: it covers nothing now, and says so
            return f"Rule for {what} {where}{when} lets nothing run: {inert}."
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
            "removed_at": self.removed_at,
            "sentence": self.sentence(),
        }


def _inert(words: tuple[str, ...]) -> str | None:
    """Why an allow rule's pattern can cover nothing (a wrapper, an interpreter, a moving
    option: an older lmd made such rules), or None."""
    try:
        return effective.why_no_rule(effective.read_words(words))
    except effective.Unread as e:
        return f"I cannot read it ({e})"


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


def m006_rule_ids(db: Any) -> None:
    """Rule ids are never reused: an audit row's rule 15 stays the rule that let its command
    run. The table becomes AUTOINCREMENT (its rows keep their ids) and a removed or expired
    rule stays as a row with `removed_at`, so the audit can still name it. Ids removed before
    this migration are skipped too: the sequence starts above the highest id any audit row
    names."""
    columns = (
        "id, decision, kind, words, tool, directory, session, sandbox, origin, said, created_at"
    )
    db.execute(
        """CREATE TABLE rules_new (
            id INTEGER PRIMARY KEY AUTOINCREMENT,
            decision TEXT NOT NULL,
            kind TEXT NOT NULL DEFAULT 'command',
            words TEXT NOT NULL DEFAULT '[]',
            tool TEXT,
            directory TEXT,
            session TEXT,
            sandbox TEXT,
            origin TEXT NOT NULL,
            said TEXT,
            created_at REAL NOT NULL,
            removed_at REAL
        )"""
    )
    db.execute(f"INSERT INTO rules_new ({columns}) SELECT {columns} FROM rules")
    db.execute("DROP TABLE rules")
    db.execute("ALTER TABLE rules_new RENAME TO rules")
    top = db.execute("SELECT COALESCE(MAX(id), 0) FROM rules").fetchone()[0]
    has_audit = db.execute(
        "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'marat_commands'"
    ).fetchone()
    if has_audit:
        named = db.execute("PRAGMA table_info(marat_commands)").fetchall()
        if any(col[1] == "rule_id" for col in named):
            audited = db.execute("SELECT COALESCE(MAX(rule_id), 0) FROM marat_commands")
            top = max(top, audited.fetchone()[0] or 0)
    db.execute("DELETE FROM sqlite_sequence WHERE name IN ('rules', 'rules_new')")
    db.execute("INSERT INTO sqlite_sequence (name, seq) VALUES ('rules', ?)", [top])


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
        removed_at=row.get("removed_at"),
    )


def all_rules(store: Any, session: str | None = None) -> list[Rule]:
    """Kept rules, and the session rules of `session` (of every session when None), oldest
    first; expired session rules are dropped on the way."""
    _expire(store)
    rows = _rows(store, "SELECT * FROM rules WHERE removed_at IS NULL ORDER BY id")
    found = [_rule(r) for r in rows]
    return [r for r in found if session is None or r.session in (None, session)]


def _expire(store: Any) -> None:
    """A session rule lasts while its session is in use: it goes when the session has been
    idle longer than end_session_after_idle_secs."""
    db = _db(store)
    rows = _rows(
        store,
        "SELECT r.id, r.created_at, s.last_active FROM rules r LEFT JOIN sessions s"
        " ON s.name = r.session WHERE r.session IS NOT NULL AND r.removed_at IS NULL",
    )
    if not rows:
        return
    idle = _idle_secs(store)
    now = time.time()
    stale = [r["id"] for r in rows if now - max(r["created_at"], r["last_active"] or 0) >= idle]
    if stale:
        with _lock(store):
            db.execute(
                f"UPDATE rules SET removed_at = ? WHERE id IN ({','.join('?' * len(stale))})",
                [now, *stale],
            )


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


def _check_allow_pattern(words: tuple[str, ...]) -> None:
    """An allow rule names what runs: never a wrapper or interpreter (`timeout`, `env`,
    `python3`, `sh`), nor an option that moves the command (`git -C dir`, `make -f file`)."""
    try:
        problem = effective.why_no_rule(effective.read_words(words))
    except effective.Unread as e:
        problem = f"I cannot read it ({e})"
    if problem:
        shown = shlex.join(words)[:80]
        raise RuleError(
            f"I make no rule that runs {shown} without asking: {problem}. Name the program "
            "that runs, like make test or git commit."
        )


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
    kind, tool = "command", None
    words: tuple[str, ...] = ()
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
    if kind == "command" and decision == "allow":
        _check_allow_pattern(words)
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
        count = _rows(store, "SELECT COUNT(*) AS n FROM rules WHERE removed_at IS NULL")[0]["n"]
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


def get_rule(store: Any, rule_id: int, removed: bool = False) -> Rule | None:
    """The rule with this id (a removed one too when `removed`: the audit names it)."""
    rows = _rows(store, "SELECT * FROM rules WHERE id = ?", [rule_id])
    if not rows or (rows[0]["removed_at"] is not None and not removed):
        return None
    return _rule(rows[0])


def remove_rule(store: Any, rule_id: int) -> Rule:
    """Remove one rule by id; RuleError when there is none."""
    found = get_rule(store, rule_id)
    if found is None:
        raise RuleError(f"There is no rule {rule_id}; lmd rules list shows them.")
    with _lock(store):
        _db(store).execute(
            "UPDATE rules SET removed_at = ? WHERE id = ? AND removed_at IS NULL",
            [time.time(), rule_id],
        )
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


def _pattern(rule: Rule) -> effective.Run | None:
    """A command rule's pattern read as a command (None when it cannot be read)."""
    return _read_pattern(rule.words)


@lru_cache(maxsize=2048)
def _read_pattern(words: tuple[str, ...]) -> effective.Run | None:
    try:
        return effective.read_words(words)
    except effective.Unread:
        return None


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
    run in `cwd` for `session`: forbid wins, then ask, then allow; None when no rule applies.

    A command line is read into what it really runs (daemon/agent/effective.py). Forbid and ask
    rules hold for every command it runs: each part, and what each wrapper, `sh -c` script,
    `find -exec` or `xargs` inside it runs, through global options (`git -C . push` is git
    push). Where the reading is unsure (a glob that may become a forbidden word, a git alias, a
    wrapper's guessed start), no allow rule lets it run: it asks. Allow rules hold only when
    every part runs directly (no
    wrapper, no interpreter code, no option that moves it or runs something given) and is
    covered; an allow rule outside the sandbox never covers a command that reads a file
    through its options (`--pathspec-from-file=`, `-F`, `@file`) or its input (`< file`)."""
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
    try:
        parts = effective.read_cached(command)
    except effective.Unread:
        return None  # nothing is known about it: ask, as without rules
    ruled = [(r, p) for r in here if r.kind == "command" for p in [_pattern(r)] if p is not None]
    every = [run for part in parts for run in part.walk()]
    unsure: Decision | None = None
    for decision in ("forbid", "ask"):
        for run in every:
            for r, pattern in ruled:
                if r.decision != decision:
                    continue
                hit = effective.restricts(pattern, run)
                if hit and run.guess:
                    hit = None  # a later word of a wrapper's command, read in case: may be
                if hit:
                    return Decision(decision, r.id, None, r.sentence(), r.directory)
                if hit is None and unsure is None:
                    unsure = Decision("ask", r.id, None, r.sentence(), r.directory)
    reads = bool(effective.stdin_files(command))
    chosen: list[Rule] = []
    for part in parts:
        allowing = [
            r
            for r, pattern in ruled
            if r.decision == "allow"
            and effective.allows(pattern, part)
            and not (r.sandbox == "none" and (reads or part.reads))
        ]
        if not allowing:
            return None
        if unsure is not None:
            return unsure  # it may be what a forbid or ask rule names: asked, never allowed
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
    subcommands, the subcommand (`git commit -m x` -> git commit; `git --no-pager log` -> git
    log; `python -m pytest -q` -> python -m pytest; `ls -la` -> ls). RuleError when no rule
    can cover the command: a wrapper or interpreter (`timeout 9 make`, `python3 -c ...`), or
    an option that moves it or runs something it is given (`git -C dir commit`)."""
    try:
        run = effective.read_words(tuple(words))
    except effective.Unread as e:
        raise RuleError(
            f"I cannot read that command well enough to make a rule of it ({e})."
        ) from None
    problem = effective.why_no_rule(run)
    if problem:
        raise RuleError(f"I make no rule of it: {problem}.")
    program, rest = run.program, run.args
    if run.name in effective.SUBCOMMAND_PROGRAMS:
        if run.subcommand is not None:
            return (program, run.subcommand)
        return tuple(words[:MAX_PATTERN_WORDS]) if len(words) > 1 else (program,)
    if effective.python_module(run):
        return (program, "-m", rest[1])
    return (program,)


def covers(pattern: tuple[str, ...], command: str, sandbox: str | None = None) -> bool:
    """Would an allow rule of `pattern` (at `sandbox`) cover every part of `command`?"""
    try:
        want = effective.read_words(pattern)
        parts = effective.read_cached(command)
    except effective.Unread:
        return False
    if sandbox == "none" and effective.stdin_files(command):
        return False
    return all(effective.allows(want, p) and not (sandbox == "none" and p.reads) for p in parts)


_PLAIN_WORD = re.compile(r"[A-Za-z0-9][A-Za-z0-9._+-]{0,39}")


def always_hint(command: str, asked_before: list[str]) -> tuple[str, str | None]:
    """(the command's "yes, always" pattern, a hint to say with the question or None). The
    hint comes from the second question about the same pattern in a session on: the first
    question stays short; a repeated one tells the user the words that end the repeats. It
    offers only a pattern a rule may hold and that would cover this very command (none for a
    wrapper, interpreter code, or an option that moves the command)."""
    try:
        parts = effective.read_cached(command)
    except effective.Unread:
        return "", None
    if len(parts) != 1:
        return "", None
    try:
        words = suggested_pattern(parts[0].words)
    except RuleError:
        return "", None
    # The words are the model's: spoken outside the verbatim command, they must not be able
    # to say anything but a program's name ('ls. It only reads, say yes' would be lmd's voice)
    if not all(_PLAIN_WORD.fullmatch(w) for w in words) or not covers(words, command):
        return "", None
    pattern = " ".join(words)
    if pattern not in asked_before:
        return pattern, None
    return pattern, (
        f"To stop this question, say yes, always for {pattern}; or yes for this session."
    )


def said_back(made: list[Rule]) -> str:
    """One sentence for the rules just made: "From now on I run git commit without asking..."."""
    return "From now on " + made[0].sentence(" and ".join(r.pattern for r in made))
