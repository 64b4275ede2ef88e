"""The Elo arena: arrange pairwise battles, answer, judge, and rate models.

Hook implementations only; the work lives in the small modules beside this one, imported
when needed so the CLI and the daemon start fast.
"""

from __future__ import annotations

import os

from daemon.api import Setting, hookimpl

# numpy's OpenBLAS starts a thread per core for every large matrix product, and on a machine
# whose cores are busy (a model server, other jobs) those threads spin: the style-control
# bootstrap took 3.6 s of CPU with them and 1.5 s on one thread. numpy is imported lazily, so
# this is set before it loads; a value the user set wins.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")


def _check_models_file(value: str) -> str | None:
    if value and not value.endswith((".yaml", ".yml", ".json")):
        return "it must be a .yaml, .yml or .json file (or empty for the default)"
    return None


SETTINGS = [
    Setting(
        "elo_method",
        "bt",
        "choice",
        "Rating method of /elo and reports: bt or online.",
        choices=("bt", "online"),
        synonyms={"bradley-terry": "bt", "elo": "online"},
    ),
    Setting("elo_k", 4.0, "float", "Online Elo K factor.", min=0),
    Setting("elo_scale", 400.0, "float", "Rating points per factor elo_base of odds.", min=1),
    Setting("elo_base", 10.0, "float", "Base of the odds in the Elo formula.", min=1.0001),
    Setting("elo_initial", 1000.0, "float", "Starting rating (online) and mean rating (BT)."),
    Setting(
        "elo_bootstrap_rounds",
        1000,
        "int",
        "Bootstrap rounds for /elo and reports.",
        min=0,
        max=100000,
    ),
    Setting(
        "elo_seed", 42, "int", "Seed of the bootstrap; -1 draws a fresh one each time.", min=-1
    ),
    Setting("elo_judge_model", "gpt-4", "str", "Model that judges battles (a models-file name)."),
    Setting(
        "elo_models_file",
        "",
        "str",
        "Models file; empty means LMD_HOME/elo_models.yaml.",
        check=_check_models_file,
        protected=True,  # it names the servers that receive the API key
    ),
    Setting(
        "elo_concurrency",
        8,
        "int",
        "Backend calls in flight when answering or judging.",
        min=1,
        max=256,
    ),
]


@hookimpl
def register_settings(register):
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
    from .commands import elo

    cli.add_command(elo)
