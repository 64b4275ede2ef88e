"""LM_SCORE inside SQLite queries.

`register_lm_score(conn)` adds the function to any sqlite3 connection. Called row by row it
would wait for one backend call per row, so `SqlScorer.query` runs a statement in waves:
each wave runs the statement inside a savepoint that is rolled back, with LM_SCORE
answering from what is known and recording the argument tuples it has not seen; those are
scored concurrently (bounded by lm_score_concurrency), and the next wave runs with them.
When a wave finds nothing new (usually the second), the statement runs for real.
"""

from __future__ import annotations

import asyncio
import logging
import sqlite3
import threading
from collections.abc import Callable, Coroutine, Sequence
from pathlib import Path
from typing import Any

from daemon.api import LmdError

from .prompt import split_parts

log = logging.getLogger("lmd.lm_score")

MAX_WAVES = 8


class LoopThread:
    """A private event loop in a thread, so synchronous code (SQLite functions) can await."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()

    def run(self, coro: Coroutine) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result()

    def close(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(5)
        self.loop.close()


def _key(args: Sequence[Any]) -> tuple:
    # Type-tagged, so 1 and 1.0 (which become "1" and "1.0" in the prompt) stay apart.
    return tuple((type(a).__name__, a) for a in args)


def explain_sql_error(e: sqlite3.Error) -> LmdError:
    """One sentence for a query SQLite refused."""
    msg = str(e)
    if isinstance(e, sqlite3.ProgrammingError) and "one statement" in msg:
        return LmdError("Run one SQL statement at a time.")
    if "syntax error" in msg or "incomplete input" in msg:
        return LmdError(f"The query has a syntax error ({msg}); fix the SQL and run it again.")
    if msg.startswith("no such table:"):
        table = msg.split(":", 1)[1].strip()
        return LmdError(
            f"The database has no table {table}; check the name "
            "(SELECT name FROM sqlite_master WHERE type = 'table' lists them).",
            status=404,
        )
    if msg.startswith("no such column:"):
        return LmdError(f"The query names a column that does not exist ({msg}); check the name.")
    return LmdError(f"SQLite refused the query ({msg}).")


class SqlScorer:
    """The LM_SCORE function of one or more connections, with its known scores."""

    def __init__(self, scorer: Any, *, cache: bool = True, runner: LoopThread | None = None):
        self.scorer = scorer
        self.cache = cache
        self.owns_runner = runner is None
        self.runner = runner or LoopThread()
        self.known: dict[tuple, int | None] = {}
        self.args: dict[tuple, tuple] = {}
        self.failures: dict[tuple, str] = {}
        self.collecting = False
        self.argument_error: LmdError | None = None
        self.store: Any = None  # the daemon store we opened for the cache, if any

    def attach(self, conn: sqlite3.Connection) -> None:
        conn.create_function("LM_SCORE", -1, self.function)

    # SQLite calls this for every row that needs it.
    def function(self, *args: Any) -> int | None:
        key = _key(args)
        if key in self.known:
            return self.known[key]
        try:
            split_parts(args)
        except LmdError as e:
            self.argument_error = e
            if self.collecting:
                return None
            log.warning("LM_SCORE: %s", e.message)
            raise
        if self.collecting:
            self.args[key] = args
            return None
        self.score_now([key], {key: args})  # the naive path: one row, one wait
        return self.known[key]

    def pending(self) -> dict[tuple, tuple]:
        return {k: a for k, a in self.args.items() if k not in self.known}

    def score_now(self, keys: list[tuple], args: dict[tuple, tuple], progress=None) -> None:
        rows = [args[k] for k in keys]
        results = self.runner.run(self.scorer.score_many(rows, cache=self.cache, progress=progress))
        for key, result in zip(keys, results, strict=True):
            if isinstance(result, LmdError):
                self.known[key] = None
                self.failures[key] = result.message
                log.warning("LM_SCORE%s is NULL: %s", _short(args[key]), result.message)
            else:
                self.known[key] = result.score

    def query(
        self,
        conn: sqlite3.Connection,
        sql: str,
        params: Sequence[Any] = (),
        progress: Callable[[int], Any] | None = None,
    ) -> tuple[list[str], list[tuple]]:
        """(column names, rows) of a statement, its LM_SCOREs computed concurrently first.

        `progress(total)` may return a callable that is called once per scored tuple."""
        self.attach(conn)
        self.argument_error = None
        # Statements without LM_SCORE (PRAGMA, VACUUM, ...) need no waves, and some of them
        # cannot run inside a savepoint at all.
        self.collecting = "lm_score" in sql.lower()
        try:
            for _ in range(MAX_WAVES if self.collecting else 0):
                self._dry_run(conn, sql, params)
                todo = self.pending()
                if not todo:
                    break
                tick = progress(len(todo)) if progress else None
                self.score_now(list(todo), todo, tick)
        finally:
            self.collecting = False
        try:
            cursor = conn.execute(sql, params)
            rows = cursor.fetchall()
        except sqlite3.Error as e:
            if self.argument_error is not None:
                raise self.argument_error from None
            raise explain_sql_error(e) from None
        columns = [d[0] for d in cursor.description or []]
        return columns, rows

    def _dry_run(self, conn: sqlite3.Connection, sql: str, params: Sequence[Any]) -> None:
        try:
            conn.execute("SAVEPOINT lm_score_collect")
        except sqlite3.Error as e:
            raise explain_sql_error(e) from None
        try:
            conn.execute(sql, params).fetchall()
        except sqlite3.Error as e:
            raise explain_sql_error(e) from None
        finally:
            conn.execute("ROLLBACK TO lm_score_collect")
            conn.execute("RELEASE lm_score_collect")
        if self.argument_error is not None:
            raise self.argument_error

    def close(self) -> None:
        if self.owns_runner:
            self.runner.run(self.scorer.close())
            self.runner.close()
        if self.store is not None:
            self.store.close()


def _short(args: Sequence[Any]) -> str:
    text = repr(tuple(args))
    return text if len(text) <= 80 else text[:77] + "...)"


def open_scorer(home: Any = None, *, dotenv: Path | None = None) -> tuple[Any, Any]:
    """An in-process Scorer configured from the daemon's settings, with its cache; and the
    store to close afterwards. Whether a call looks a score up is the call's own `cache`:
    --no-cache asks the model and stores the fresh score, as the docs say. With `dotenv`
    (the CLI's ./.env), the original project's keys in that file apply, and one line on
    stderr says what each did."""
    import sys

    from daemon.api import open_daemon_state, stored_cache

    from .cache import ScoreCache
    from .config import read_dotenv, resolve
    from .scorer import Scorer

    _, store, settings = open_daemon_state(home)
    notes: list[str] = []
    try:
        config = resolve(settings, dotenv=read_dotenv(dotenv) if dotenv else None, notes=notes)
    except BaseException:
        store.close()
        raise
    for note in notes:
        print(f"lmd: {note}", file=sys.stderr)
    scorer = Scorer(config, cache=ScoreCache(store.db, store.lock))
    scorer.llm.capability_cache = stored_cache(store)  # probed once, kept with the daemon's
    return scorer, store


def register_lm_score(
    conn: sqlite3.Connection, scorer: Any = None, *, home: Any = None, cache: bool = True
) -> SqlScorer:
    """Add LM_SCORE(part, ..., question) to a sqlite3 connection.

    Without a scorer, one is built from the daemon's settings (LMD_HOME) and uses its cache.
    Plain queries score row by row; `handle.query(conn, sql)` scores concurrently first.
    Call `handle.close()` when done.
    """
    store = None
    if scorer is None:
        scorer, store = open_scorer(home)
    handle = SqlScorer(scorer, cache=cache)
    handle.store = store
    handle.attach(conn)
    return handle
