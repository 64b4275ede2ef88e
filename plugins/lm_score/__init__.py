"""LM_SCORE: a 0-10 yes/no confidence from the model, over HTTP, from Python and in SQL.

Modules: prompt (the spec's prompt), parse (reading the score), aggregate (maj/avg),
logprob (the logprob method), config (settings and the original .env keys), scorer (calls,
ensembles, retries), cache, sql (SQLite), routes (POST /lm_score), commands (lmd score/sql).
"""

from __future__ import annotations

# Only the hook marker and lazy_command at module level: `lmd --help` imports every plugin to
# list commands; the settings (and their module) wait for the daemon to collect them.
from daemon.api import hookimpl, lazy_command

__all__ = ["register_lm_score"]


def register_lm_score(conn, scorer=None, *, home=None, cache: bool = True):
    """Add LM_SCORE(part, ..., question) to a sqlite3 connection (see plugins.lm_score.sql)."""
    from .sql import register_lm_score as register

    return register(conn, scorer, home=home, cache=cache)


@hookimpl
def register_settings(register):
    from .config import SETTINGS

    for setting in SETTINGS:
        register(setting)


@hookimpl
def register_migrations(register):
    from .cache import m001_cache, m002_identity

    register("cache", m001_cache)
    register("cache_identity", m002_identity)


@hookimpl
def register_routes(register):
    from .routes import lm_score

    register("/lm_score", lm_score, methods=["POST"])


@hookimpl
def register_commands(cli):
    cli.add_command(lazy_command("score", "plugins.lm_score.commands:score"))
    cli.add_command(lazy_command("sql", "plugins.lm_score.commands:sql"))


@hookimpl
def shutdown(daemon):
    from .routes import close_scorers

    return close_scorers(daemon)
