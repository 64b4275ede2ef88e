"""`lmd score` and `lmd sql`: both score in-process (no daemon needed), using the daemon's
settings and its database for the cache; `lmd score --daemon` asks the running daemon."""

from __future__ import annotations

import asyncio
import csv
import json
import sqlite3
import sys
from pathlib import Path

import click
from tqdm import tqdm

from daemon.api import LmdError, csv_cell, daemon_url
from daemon.api import fail as _fail
from daemon.api import home_option as _home_option

from .client import ClientError, lm_score_result
from .sql import ScoreFailures, SqlScorer, open_scorer


@click.command()
@click.argument("parts", nargs=-1, required=True)
@click.option("--json", "as_json", is_flag=True, help="Print the whole result as JSON.")
@click.option("--no-cache", is_flag=True, help="Ask the model even if the score is cached.")
@click.option("--daemon", "via_daemon", is_flag=True, help="Ask the running daemon instead.")
@click.option("--url", envvar="LMD_URL", help="Daemon URL for --daemon.")
@click.option("--no-dotenv", is_flag=True, help="Ignore ./.env (the original project's keys).")
@_home_option
def score(
    parts: tuple[str, ...],
    as_json: bool,
    no_cache: bool,
    via_daemon: bool,
    url: str | None,
    no_dotenv: bool,
    home: Path | None,
) -> None:
    """LM_SCORE(PART..., QUESTION): 0 (no) to 10 (yes). The last argument is the question.

    The original project's keys in ./.env apply (SERVER_URL with its API_TOKEN, MODEL,
    ENSEMBLE, AGGREGATION, THINKING); your OPENAI_API_KEY never goes to a SERVER_URL from
    a file."""
    if via_daemon:
        click.echo(f"lmd: asking the daemon at {daemon_url(url)} (its backend scores).", err=True)
        try:
            result = lm_score_result(list(parts), url=url, cache=not no_cache)
        except ClientError as e:
            _fail(e.message)
    else:
        try:
            scorer, store = open_scorer(home, dotenv=_dotenv(no_dotenv))
        except LmdError as e:
            _fail(e.message)

        async def run():
            try:
                return await scorer.score(list(parts), cache=not no_cache)
            finally:
                await scorer.close()

        try:
            result = asyncio.run(run()).to_json()
        except LmdError as e:
            _fail(e.message)
        finally:
            store.close()
    if as_json:
        click.echo(json.dumps(result, indent=2, ensure_ascii=False))
    else:
        click.echo(result["score"])


@click.command()
@click.argument("database", type=click.Path(dir_okay=False, path_type=Path))
@click.argument("query")
@click.option("--json", "as_json", is_flag=True, help="Rows as a JSON list of objects.")
@click.option("--csv", "as_csv", is_flag=True, help="Rows as CSV with a header.")
@click.option("--no-cache", is_flag=True, help="Ask the model even for cached scores.")
@click.option(
    "--errors", "show_errors", is_flag=True, help="List each LM_SCORE that failed, and why."
)
@click.option(
    "--progress/--no-progress", default=None, help="Progress bar on stderr (default: on a TTY)."
)
@click.option("--no-dotenv", is_flag=True, help="Ignore ./.env (the original project's keys).")
@_home_option
def sql(
    database: Path,
    query: str,
    as_json: bool,
    as_csv: bool,
    no_cache: bool,
    show_errors: bool,
    progress: bool | None,
    no_dotenv: bool,
    home: Path | None,
) -> None:
    """Run QUERY on the SQLite DATABASE with LM_SCORE(part, ..., question) available.

    The LM_SCOREs a statement needs are collected first and scored concurrently. When any
    could not be scored, it exits with status 1 and says how many (NULL in the rows; a
    statement that writes changes nothing); --errors lists them."""
    if as_json and as_csv:
        _fail("Choose one of --json and --csv.")
    if not database.is_file():
        _fail(f"There is no database file {database}; give the path of an SQLite file.")
    try:
        conn = sqlite3.connect(f"file:{database}?mode=rw", uri=True, isolation_level=None)
        conn.execute("SELECT count(*) FROM sqlite_master").fetchone()
    except sqlite3.Error as e:
        _fail(f"{database} is not an SQLite database I can open ({e}).")
    try:
        scorer, store = open_scorer(home, dotenv=_dotenv(no_dotenv))
    except LmdError as e:
        _fail(e.message)
    handle = SqlScorer(scorer, cache=not no_cache)
    handle.store = store
    show = sys.stderr.isatty() if progress is None else progress
    bars = []

    def bar(total: int):
        b = tqdm(total=total, desc="LM_SCORE", unit="score", file=sys.stderr, disable=not show)
        bars.append(b)
        return lambda: b.update(1)

    failed: ScoreFailures | None = None
    try:
        columns, rows = handle.query(conn, query, progress=bar)
    except ScoreFailures as e:
        failed, columns, rows = e, e.columns, e.rows
    except LmdError as e:
        _fail(e.message)
    finally:
        for b in bars:
            b.close()
        handle.close()
        conn.close()
    _print(columns, rows, as_json, as_csv)
    if failed is not None:
        if show_errors:
            for args, why in failed.failures:
                click.echo(f"LM_SCORE{_call(args)}: {why}", err=True)
        _fail(failed.message)


def _call(args: tuple) -> str:
    """A failed call as it reads in SQL, long texts cut."""

    def one(v):
        text = repr(v.hex() if isinstance(v, bytes) else v)
        return text if len(text) <= 60 else text[:57] + "...'"

    return "(" + ", ".join(one(a) for a in args) + ")"


def _dotenv(skip: bool) -> Path | None:
    """./.env when it is there and not refused: the seed's convention for these commands."""
    path = Path.cwd() / ".env"
    return None if skip or not path.is_file() else path


def _print(columns: list[str], rows: list[tuple], as_json: bool, as_csv: bool) -> None:
    def cell(v):
        return v.hex() if isinstance(v, bytes) else v

    if as_json:
        data = [dict(zip(columns, map(cell, r), strict=True)) for r in rows]
        click.echo(json.dumps(data, indent=2, ensure_ascii=False))
    elif as_csv:
        out = csv.writer(sys.stdout, lineterminator="\n")
        out.writerow([csv_cell(c) for c in columns])
        out.writerows([[csv_cell(cell(v)) for v in r] for r in rows])
    else:
        if columns:
            click.echo("\t".join(columns))
        for r in rows:
            click.echo("\t".join("NULL" if v is None else str(cell(v)) for v in r))
