"""LM_SCORE inside SQLite queries.

`register_lm_score(conn)` adds the function to any sqlite3 connection. Called row by row it
would wait for one backend call per row, so `SqlScorer.query` runs a statement in waves:
each wave runs the statement inside a savepoint that is rolled back, with LM_SCORE
answering from what is known and recording the argument tuples it has not seen; those are
scored concurrently (bounded by lm_score_concurrency), and the next wave runs with them.
When a wave finds nothing new (usually the second), the statement runs for real.

A score that fails is never passed off as data: `query` raises ScoreFailures (the rows, with
NULL where a score failed, and which calls failed and why), and a statement that would write
such a NULL changes nothing; called row by row outside `query`, the function raises.
"""

from __future__ import annotations

import asyncio
import logging
import sqlite3
import sys
import threading
from collections.abc import Callable, Coroutine, Sequence
from pathlib import Path
from typing import Any

from daemon.api import (
    LmdError,
    command_backend,
    open_daemon_state,
    plural,
    shown_url,
    stored_cache,
)

from .cache import ScoreCache
from .config import own_endpoint, read_dotenv, resolve
from .prompt import split_parts
from .scorer import Scorer

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


class ScoreFailures(LmdError):
    """Some LM_SCOREs of a statement could not be scored: the rows as far as they go (NULL
    where a score failed), and each failed call with why."""

    status = 502
    kind = "score_failures"

    def __init__(
        self,
        message: str,
        columns: list[str],
        rows: list[tuple],
        failures: list[tuple[tuple, str]],
        scored: int,
    ) -> None:
        super().__init__(message, detail={"failed": len(failures), "scored": scored})
        self.columns = columns
        self.rows = rows
        self.failures = failures  # [(the call's arguments, why)]
        self.scored = scored  # calls that did get a score


def failure_sentence(failures: list[tuple[tuple, str]], scored: int, changed: bool) -> str:
    """One sentence: how many LM_SCOREs failed, what became of them, and the first reason."""
    first = failures[0][1]
    if not first.startswith(("I ", "LM_SCORE")):  # "The model ..." -> "the model ..."
        first = first[:1].lower() + first[1:]
    total = len(failures) + scored
    if not scored:
        head = f"None of the {plural(total, 'LM_SCORE value')} could be scored"
    else:
        head = f"{len(failures)} of {plural(total, 'LM_SCORE value')} could not be scored"
    fate = "the statement changed nothing" if changed else "they are NULL in the result"
    return f"{head}; {fate}, and --errors lists them; the first: {first}"


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
        self.querying = False  # inside query(): a failed score is NULL until query reports it
        self.used: set[tuple] = set()  # the argument tuples of the query being run
        self.argument_error: LmdError | None = None
        self.store: Any = None  # the daemon store we opened for the cache, if any

    def attach(self, conn: sqlite3.Connection) -> None:
        conn.create_function("LM_SCORE", -1, self.function)

    # SQLite calls this for every row that needs it.
    def function(self, *args: Any) -> int | None:
        key = _key(args)
        if self.querying:
            self.used.add(key)
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
        self.args[key] = args
        self.score_now([key], {key: args})  # the naive path: one row, one wait
        if key in self.failures and not self.querying:
            # no NULL that looks like data: the statement fails (SQLite words it "user-defined
            # function raised exception"; the handle's failures say why)
            self.known.pop(key, None)
            raise LmdError(f"LM_SCORE{_short(args)} could not be scored: {self.failures[key]}")
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
                log.info("LM_SCORE%s is NULL: %s", _short(args[key]), result.message)
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

        ScoreFailures when any LM_SCORE could not be scored (it carries the rows, NULL there;
        a statement that writes is rolled back). `progress(total)` may return a callable
        that is called once per scored tuple."""
        self.attach(conn)
        self.argument_error = None
        for key in self.failures:  # failed before: asked again, not remembered as NULL
            self.known.pop(key, None)
        self.failures = {}
        self.used: set[tuple] = set()
        # Statements without LM_SCORE (PRAGMA, VACUUM, ...) need no waves, and some of them
        # cannot run inside a savepoint at all.
        scoring = "lm_score" in sql.lower()
        self.collecting = scoring
        self.querying = True
        try:
            for _ in range(MAX_WAVES if self.collecting else 0):
                self._dry_run(conn, sql, params)
                todo = self.pending()
                if not todo:
                    break
                tick = progress(len(todo)) if progress else None
                self.score_now(list(todo), todo, tick)
            self.collecting = False
            columns, rows, changed = self._run(conn, sql, params, scoring)
        finally:
            self.collecting = False
            self.querying = False
        if self.failures:
            failed = [(self.args[k], why) for k, why in self.failures.items()]
            scored = len(self.used - set(self.failures))
            raise ScoreFailures(
                failure_sentence(failed, scored, changed), columns, rows, failed, scored
            )
        return columns, rows

    def _run(
        self, conn: sqlite3.Connection, sql: str, params: Sequence[Any], scoring: bool
    ) -> tuple[list[str], list[tuple], bool]:
        """The statement, for real: (columns, rows, whether writes were undone because some
        score failed: NULLs would have been stored as if they were scores)."""
        if scoring:
            before = conn.total_changes
            conn.execute("SAVEPOINT lm_score_run")
        try:
            cursor = conn.execute(sql, params)
            rows = cursor.fetchall()
        except sqlite3.Error as e:
            if scoring:
                conn.execute("ROLLBACK TO lm_score_run")
                conn.execute("RELEASE lm_score_run")
            if self.argument_error is not None:
                raise self.argument_error from None
            raise explain_sql_error(e) from None
        undone = False
        if scoring:
            if self.failures and conn.total_changes != before:
                conn.execute("ROLLBACK TO lm_score_run")
                undone = True
            conn.execute("RELEASE lm_score_run")
        return [d[0] for d in cursor.description or []], rows, undone

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


def open_scorer(
    home: Any = None, *, dotenv: Path | None = None, say: Any = None
) -> tuple[Any, Any]:
    """An in-process Scorer configured from the daemon's settings, with its cache; and the
    store to close afterwards. It asks LM_SCORE's own endpoint where one is set, else the
    backend `lmd serve` would use (daemon.api.command_backend: a configured server, the
    running daemon's embedded model, or one started for the command on its first call and
    stopped when the scorer closes); the first line, to `say` (default stderr), names it.

    Whether a call looks a score up is the call's own `cache`: --no-cache asks the model and
    stores the fresh score, as the docs say. With `dotenv` (the CLI's ./.env), the original
    project's keys in that file apply, and one line on stderr says what each did."""
    _, store, settings = open_daemon_state(home)
    notes: list[str] = []
    backend = None
    try:
        keys = read_dotenv(dotenv) if dotenv else None
        if not own_endpoint(settings, keys):
            backend = command_backend(settings, say=lambda line: None)  # said below
        config = resolve(settings, dotenv=keys, notes=notes, backend=backend)
    except BaseException:
        if backend is not None:
            backend.close()
        store.close()
        raise
    if backend is None:
        line = f"lmd: asking {shown_url(config.endpoint)}, model {config.model} " + (
            f"({config.endpoint_source} is set)."
        )
    else:  # named with the model asked for (lm_score_model, MODEL in ./.env)
        line = f"lmd: asking {backend.describe(config.model)}."
    if say is None:
        print(line, file=sys.stderr)
    else:
        say(line)
    for note in notes:
        print(f"lmd: {note}", file=sys.stderr)
    llm = backend.client(config.model) if backend is not None else None
    scorer = Scorer(config, llm=llm, cache=ScoreCache(store.db, store.lock))
    if backend is not None:
        scorer.owns_llm = True
        scorer.on_close = backend.close  # the embedded server started for the command stops
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
