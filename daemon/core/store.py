"""The SQLite store: one file, WAL, migrations as a list of functions applied on every open."""

from __future__ import annotations

import json
import os
import sqlite3
import sys
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from daemon.core import defaults
from daemon.core.core_settings import CORE_SETTINGS
from daemon.core.errors import LmdError


def _import_sqlite_utils():
    """sqlite-utils imports pandas and numpy when they are installed (the ray and local extras
    bring them), only to map their types to column types in `insert`, which lmd never calls (it
    writes with SQL). Those imports cost every `lmd serve` and every CLI command that opens the
    database about 0.3 s of CPU (`lmd settings set` 0.7 s instead of 0.4), some of it at exit.
    They are kept out unless already imported."""
    kept_out = [name for name in ("pandas", "numpy") if name not in sys.modules]
    for name in kept_out:
        sys.modules[name] = None  # `import numpy` fails fast
    try:
        import sqlite_utils  # here, with numpy and pandas kept out (see above)
    finally:
        for name in kept_out:
            del sys.modules[name]
    return sqlite_utils


if TYPE_CHECKING:
    import sqlite_utils
else:
    sqlite_utils = _import_sqlite_utils()

# The settings table and what tells the user's values from lmd's defaults: the CREATE
# statements of settings.sql (daemon/core/defaults.py reads them); the defaults themselves are
# written from the declarations.
SETTINGS_SCHEMA = defaults.SCHEMA

Migration = Callable[[sqlite_utils.Database], None]


@dataclass
class Prompt:
    """One stored turn of a session."""

    id: int
    session: str
    role: str
    content: str
    tokens: int
    karma: float
    kind: str
    mode: str | None
    created_at: float
    status: str = "ok"
    meta: dict = field(default_factory=dict)
    # 1: a step of its mode's own protocol (a thought, a tool call, an observation, a format
    # correction), which only that mode's contexts take; 0: a turn (what the user said, the
    # reply), which every mode's context may take.
    step: int = 0

    @classmethod
    def from_row(cls, row: dict) -> Prompt:
        row = dict(row)
        row["meta"] = json.loads(row.get("meta") or "{}")
        return cls(**row)

    @classmethod
    def from_tuple(cls, row: tuple) -> Prompt:
        """From a row selected as PROMPT_COLUMNS (the hot path: no dicts, no empty-meta JSON)."""
        meta = row[10]
        fields = (*row[:10], json.loads(meta) if meta and meta != "{}" else {})
        return cls(*fields)


# The columns of Prompt, in order, for from_tuple.
PROMPT_COLUMNS = "id, session, role, content, tokens, karma, kind, mode, created_at, status, meta"


@dataclass
class Session:
    """What the daemon remembers about a session between requests."""

    name: str
    mode: str | None = None
    cwd: str | None = None
    pending: dict | None = None
    state: dict = field(default_factory=dict)
    last_active: float = 0.0
    created_at: float = 0.0


# Migrations: never edit one that has shipped; append a new function instead.
def m001_prompts(db: sqlite_utils.Database) -> None:
    db.execute(
        """CREATE TABLE IF NOT EXISTS prompts (
            id INTEGER PRIMARY KEY,
            session TEXT NOT NULL,
            role TEXT NOT NULL,
            content TEXT NOT NULL,
            tokens INTEGER NOT NULL,
            karma REAL NOT NULL,
            kind TEXT NOT NULL DEFAULT 'default',
            mode TEXT,
            created_at REAL NOT NULL,
            status TEXT NOT NULL DEFAULT 'ok',
            meta TEXT NOT NULL DEFAULT '{}'
        )"""
    )
    db.execute("CREATE INDEX IF NOT EXISTS prompts_session_id ON prompts (session, id)")


def m002_sessions(db: sqlite_utils.Database) -> None:
    db.execute(
        """CREATE TABLE IF NOT EXISTS sessions (
            name TEXT PRIMARY KEY,
            mode TEXT,
            cwd TEXT,
            pending TEXT,
            state TEXT NOT NULL DEFAULT '{}',
            last_active REAL NOT NULL DEFAULT 0,
            created_at REAL NOT NULL DEFAULT 0
        )"""
    )


def m003_operative_karma(db: sqlite_utils.Database) -> None:
    """Promoted prompts got contextual_karma before operative_karma existed; give them the
    operative points, so the seed's order (operative above instructive) holds for old rows
    too. A row already worth more keeps its points."""
    points = next(s.default for s in CORE_SETTINGS if s.name == "operative_karma")
    if "settings" in db.table_names():
        row = db.execute("SELECT value FROM settings WHERE name = 'operative_karma'").fetchone()
        if row is not None:
            try:
                points = int(row[0])
            except ValueError:
                pass  # a bad stored value is reported when the settings are read
    db.execute("UPDATE prompts SET karma = MAX(karma, ?) WHERE kind = 'operative'", [points])


def m004_backend_capabilities(db: sqlite_utils.Database) -> None:
    """What each backend (endpoint + model) showed it can do: daemon/backends/capabilities.py."""
    db.execute(
        """CREATE TABLE IF NOT EXISTS backend_capabilities (
            endpoint TEXT NOT NULL,
            model TEXT NOT NULL,
            capabilities TEXT NOT NULL,
            probed_at REAL NOT NULL,
            PRIMARY KEY (endpoint, model)
        )"""
    )


def m005_rules(db: sqlite_utils.Database) -> None:
    """The approval rules, with the built-in defaults (daemon/agent/rules.py)."""
    # once per database: the rules' and words' modules stay off every command's start
    from daemon.agent.rules import m005_rules as make

    make(db)


def m006_rule_ids(db: sqlite_utils.Database) -> None:
    """Rule ids never reused (daemon/agent/rules.py)."""
    # once per database: the rules' and words' modules stay off every command's start
    from daemon.agent.rules import m006_rule_ids as make

    make(db)


def m007_prompt_steps(db: sqlite_utils.Database) -> None:
    """A mode's protocol steps are kept apart from the turns (Prompt.step). Rows from before
    are marked as well as they can be told: marat's thoughts and observations (their meta
    says so), tool calls, format corrections and refusals."""
    db.execute("ALTER TABLE prompts ADD COLUMN step INTEGER NOT NULL DEFAULT 0")
    db.execute(
        "UPDATE prompts SET step = 1 WHERE role != 'error' AND ("
        " (json_valid(meta) AND (json_extract(meta, '$.marat') IS NOT NULL"
        "  OR json_extract(meta, '$.tool_call') IS NOT NULL))"
        " OR content LIKE 'Format help:%' OR content LIKE 'Refused: never use sudo%')"
    )


def m008_words(db: sqlite_utils.Database) -> None:
    """The user's dictionary of spoken words (daemon/spoken/vocabulary.py)."""
    # once per database: the rules' and words' modules stay off every command's start
    from daemon.spoken.vocabulary import m008_words as make

    make(db)


CORE_MIGRATIONS: list[Migration] = [
    m001_prompts,
    m002_sessions,
    m003_operative_karma,
    m004_backend_capabilities,
    m005_rules,
    m006_rule_ids,
    m007_prompt_steps,
    m008_words,
]


class Store:
    """All database access of the core. Plugins may use `store.db` for their own tables."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        # History holds what the user said and what commands printed: private to the user.
        # SQLite gives the -wal and -shm files the database file's mode.
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
            if str(path) != ":memory:" and not self.path.exists():
                os.close(os.open(self.path, os.O_CREAT | os.O_WRONLY, 0o600))
        except OSError as e:  # a home lmd cannot make (another user's folder, a file's name)
            raise LmdError(
                f"I cannot make lmd's database {self.path} ({e.strerror}); give lmd a "
                "directory of your own with --home or LMD_HOME."
            ) from None
        # The daemon touches SQLite from the event loop and from worker threads; sqlite itself
        # is threadsafe, and `lock` serialises our multi-statement writes.
        conn = sqlite3.connect(
            str(self.path), check_same_thread=False, isolation_level=None, timeout=30
        )
        self.db = sqlite_utils.Database(conn)
        self.lock = threading.RLock()
        self._settings: tuple[int, defaults.StoredSettings] | None = None  # (data_version, rows)
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("PRAGMA synchronous=NORMAL")
        conn.execute("PRAGMA busy_timeout=30000")
        conn.execute("PRAGMA foreign_keys=ON")
        # The core's reads use their own connection: in WAL mode a reader never waits for a
        # writer, so while another program holds the write lock only writes wait (the core
        # does those in worker threads) and the event loop keeps serving.
        self._reader = self.db
        if str(path) != ":memory:":
            reader = sqlite3.connect(
                str(self.path), check_same_thread=False, isolation_level=None, timeout=30
            )
            reader.execute("PRAGMA busy_timeout=30000")
            self._reader = sqlite_utils.Database(reader)

    def close(self) -> None:
        # Under the write lock: a worker thread may still be writing (a cancelled capability
        # probe's save runs on in its thread), and closing a connection in the middle of
        # another thread's statement crashed the process (SIGSEGV in sqlite3). A write that
        # comes after the close fails cleanly ("Cannot operate on a closed database").
        with self.lock:
            if self._reader is not self.db:
                self._reader.close()
            self.db.close()

    def _read(self, sql: str, args: list | None = None) -> list[dict]:
        """Rows of a query; inside a write transaction, from its connection (to see its rows)."""
        db = self.db if self.db.conn.in_transaction else self._reader
        return db.execute_returning_dicts(sql, args or [])

    # -- migrations ---------------------------------------------------------------------
    def migrate(
        self,
        extra: Iterable[tuple[str, Migration]] = (),
        specs: Mapping[str, Any] | None = None,
    ) -> list[str]:
        """Apply every migration not yet applied; return the names applied now. Then every
        declared setting (`specs`, else the core's) that the user did not choose is set to its
        declared default (daemon/core/defaults.py)."""
        with self.lock:
            self.db.execute(
                "CREATE TABLE IF NOT EXISTS _lmd_migrations"
                " (name TEXT PRIMARY KEY, applied_at REAL)"
            )
            done = {r[0] for r in self.db.execute("SELECT name FROM _lmd_migrations")}
            applied = []
            todo = [(f"core:{fn.__name__}", fn) for fn in CORE_MIGRATIONS] + list(extra)
            for name, fn in todo:
                if name in done:
                    continue
                with self.transaction():
                    fn(self.db)
                    self.db.execute(
                        "INSERT INTO _lmd_migrations (name, applied_at) VALUES (?, ?)",
                        [name, time.time()],
                    )
                applied.append(name)
            self._follow_defaults(specs)
            self._settings = None
            return applied

    def _follow_defaults(self, specs: Mapping[str, Any] | None) -> None:
        if specs is None:
            specs = {s.name: s for s in CORE_SETTINGS}
        self.db.executescript(SETTINGS_SCHEMA)
        to_follow, to_mark = defaults.plan(self.db.conn, specs)
        if not (to_follow or to_mark):
            return  # the usual start: nothing to write
        with self.transaction():
            for name, text in to_follow.items():
                defaults.follow(self.db.conn, name, text)
            for name in to_mark:
                self.db.execute("INSERT OR IGNORE INTO settings_chosen (name) VALUES (?)", [name])

    def transaction(self):
        """BEGIN IMMEDIATE ... COMMIT, rolled back on error."""
        return _Transaction(self)

    # -- settings -----------------------------------------------------------------------
    def stored_settings(self) -> defaults.StoredSettings:
        """The settings table as a read-only mapping, re-read only when it may have changed.

        Every request asks for it, so it is cached: `PRAGMA data_version` on the reading
        connection changes whenever any other connection commits (our own writer, the CLI's
        `lmd settings set`, another process); `set_setting` and `migrate` also drop the cache.
        No lock: the reader never waits for a writer (WAL), so a held write lock elsewhere
        cannot stall the event loop here.
        """
        conn = (self.db if self.db.conn.in_transaction else self._reader).conn
        version = conn.execute("PRAGMA data_version").fetchone()[0]
        cached = self._settings
        if cached is None or cached[0] != version:
            rows = conn.execute("SELECT name, value FROM settings").fetchall()
            chosen = defaults.chosen_names(conn)
            cached = self._settings = (version, defaults.StoredSettings(dict(rows), chosen))
        return cached[1]

    def set_setting(self, name: str, value: str) -> None:
        """Store a value the user chose (the table's trigger marks it chosen)."""
        with self.lock:
            self._settings = None
            self.db.execute(
                "INSERT INTO settings (name, value) VALUES (?, ?) "
                "ON CONFLICT(name) DO UPDATE SET value = excluded.value",
                [name, value],
            )

    def reset_setting(self, name: str, default: str) -> None:
        """Put a setting back on its declared default, following it from now on."""
        with self.lock:
            self._settings = None
            with self.transaction():
                defaults.follow(self.db.conn, name, default)

    # -- backend capabilities -----------------------------------------------------------
    def capabilities(self, endpoint: str, model: str) -> str | None:
        """The probed capabilities of a backend as JSON, or None when never probed."""
        rows = self._read(
            "SELECT capabilities FROM backend_capabilities WHERE endpoint = ? AND model = ?",
            [endpoint, model],
        )
        return rows[0]["capabilities"] if rows else None

    def save_capabilities(self, endpoint: str, model: str, capabilities: str) -> None:
        with self.lock:
            self.db.execute(
                "INSERT INTO backend_capabilities (endpoint, model, capabilities, probed_at) "
                "VALUES (?, ?, ?, ?) ON CONFLICT(endpoint, model) DO UPDATE SET "
                "capabilities = excluded.capabilities, probed_at = excluded.probed_at",
                [endpoint, model, capabilities, time.time()],
            )

    # -- prompts ------------------------------------------------------------------------
    def add_prompt(
        self,
        session: str,
        role: str,
        content: str,
        *,
        tokens: int,
        karma: float,
        kind: str = "default",
        mode: str | None = None,
        status: str = "ok",
        meta: dict | None = None,
        created_at: float | None = None,
        step: bool = False,
    ) -> int:
        with self.lock:
            cur = self.db.execute(
                "INSERT INTO prompts (session, role, content, tokens, karma, kind, mode,"
                " created_at, status, meta, step) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                [
                    session,
                    role,
                    content,
                    tokens,
                    karma,
                    kind,
                    mode,
                    time.time() if created_at is None else created_at,
                    status,
                    json.dumps(meta or {}),
                    int(step),
                ],
            )
            assert cur.lastrowid is not None  # an INSERT sets it
            return cur.lastrowid

    def recent(self, session: str, limit: int, mode: str | None = None) -> list[Prompt]:
        """The session's newest `limit` prompts that may enter a context, oldest first; for
        `mode`, its own rows and only the turns of other modes (never their protocol steps:
        marat's JSON step in dali's context made dali answer in marat's format)."""
        conn = (self.db if self.db.conn.in_transaction else self._reader).conn
        own = "" if mode is None else " AND (step = 0 OR mode = ?)"
        rows = conn.execute(
            # a failed turn (the backend unreachable, say) stays in the history, marked, and
            # never reaches a later context: it would steer the model with a dead question
            f"SELECT {PROMPT_COLUMNS} FROM prompts WHERE session = ? AND role != 'error'"
            f" AND status != 'failed'{own} ORDER BY id DESC LIMIT ?",
            [session, limit] if mode is None else [session, mode, limit],
        ).fetchall()
        return [Prompt.from_tuple(r) for r in reversed(rows)]

    def prompt(self, prompt_id: int) -> Prompt | None:
        rows = self._read("SELECT * FROM prompts WHERE id = ?", [prompt_id])
        return Prompt.from_row(rows[0]) if rows else None

    def history(
        self, session: str | None = None, limit: int = 20, prefix: str = ""
    ) -> list[Prompt]:
        """Newest `limit` prompts (of one session, or of all whose names start with `prefix`),
        oldest first, errors included."""
        if session is None and prefix:
            sql = "SELECT * FROM prompts WHERE substr(session, 1, ?) = ? ORDER BY id DESC LIMIT ?"
            args = [len(prefix), prefix, limit]
        elif session is None:
            sql, args = "SELECT * FROM prompts ORDER BY id DESC LIMIT ?", [limit]
        else:
            sql = "SELECT * FROM prompts WHERE session = ? ORDER BY id DESC LIMIT ?"
            args = [session, limit]
        return [Prompt.from_row(r) for r in reversed(self._read(sql, args))]

    def update_prompt(self, prompt_id: int, **fields: Any) -> None:
        if "meta" in fields:
            fields["meta"] = json.dumps(fields["meta"])
        sets = ", ".join(f"{k} = ?" for k in fields)
        with self.lock:
            self.db.execute(
                f"UPDATE prompts SET {sets} WHERE id = ?", [*fields.values(), prompt_id]
            )

    def ids_of_kind(self, session: str, kind: str, mode: str | None = None) -> list[int]:
        """Ids of a session's prompts of one karma kind (of one mode, when given)."""
        sql = "SELECT id FROM prompts WHERE session = ? AND kind = ?"
        args: list[Any] = [session, kind]
        if mode is not None:
            sql += " AND mode = ?"
            args.append(mode)
        return [r["id"] for r in self._read(sql, args)]

    def set_karma(self, ids: Iterable[int], kind: str, karma: float) -> None:
        ids = list(ids)
        if not ids:
            return
        marks = ",".join("?" * len(ids))
        with self.lock:
            self.db.execute(
                f"UPDATE prompts SET kind = ?, karma = ? WHERE id IN ({marks})", [kind, karma, *ids]
            )

    # -- sessions -----------------------------------------------------------------------
    def session(self, name: str) -> Session:
        rows = self._read("SELECT * FROM sessions WHERE name = ?", [name])
        if not rows:
            return Session(name=name, created_at=time.time())
        r = rows[0]
        return Session(
            name=r["name"],
            mode=r["mode"],
            cwd=r["cwd"],
            pending=json.loads(r["pending"]) if r["pending"] else None,
            state=json.loads(r["state"] or "{}"),
            last_active=r["last_active"],
            created_at=r["created_at"],
        )

    def save_session(self, s: Session) -> None:
        with self.lock:
            self.db.execute(
                "INSERT INTO sessions (name, mode, cwd, pending, state, last_active, created_at)"
                " VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT(name) DO UPDATE SET mode=excluded.mode,"
                " cwd=excluded.cwd, pending=excluded.pending, state=excluded.state,"
                " last_active=excluded.last_active",
                [
                    s.name,
                    s.mode,
                    s.cwd,
                    json.dumps(s.pending) if s.pending is not None else None,
                    json.dumps(s.state),
                    s.last_active,
                    s.created_at or time.time(),
                ],
            )

    def integrity(self) -> str:
        return self.db.execute("PRAGMA integrity_check").fetchone()[0]


class _Transaction:
    def __init__(self, store: Store) -> None:
        self.store = store

    def __enter__(self) -> sqlite_utils.Database:
        self.store.lock.acquire()
        self.store.db.execute("BEGIN IMMEDIATE")
        return self.store.db

    def __exit__(self, exc_type, exc, tb) -> None:
        try:
            self.store.db.execute("ROLLBACK" if exc_type else "COMMIT")
        finally:
            self.store.lock.release()
