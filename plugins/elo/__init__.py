"""The Elo arena: arrange pairwise battles, answer, judge, and rate models.

Hook implementations only; the work lives in the small modules beside this one, imported
when needed so the CLI and the daemon start fast.
"""

from __future__ import annotations

# Only the hook marker and lazy_command at module level: `lmd --help` imports every plugin to
# list commands, and Settings made here would cost it their module for nothing.
from daemon.api import hookimpl, lazy_command


@hookimpl
def register_settings(register):
    from .config import SETTINGS

    for s in SETTINGS:
        register(s)


@hookimpl
def register_migrations(register):
    from .store import MIGRATIONS

    for name, fn in MIGRATIONS:
        register(name, fn)


@hookimpl
def register_routes(register):
    from . import routes

    register("/elo", routes.page, methods=["GET"])
    register("/elo/leaderboard", routes.leaderboard, methods=["GET"])
    register("/elo/battles", routes.add_battles, methods=["POST"])


@hookimpl
def register_commands(cli):
    cli.add_command(lazy_command("elo", "plugins.elo.commands:elo"))
