"""The arena's settings (imported when the daemon collects settings, not by `lmd --help`)."""

from __future__ import annotations

from daemon.api import Setting


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
    Setting(
        "elo_judge_model",
        "",
        "str",
        "Model that judges battles (a models-file name); empty: the backend's own model.",
        past_defaults=("gpt-4",),  # before the backend's own model was the default (stop 36)
        shapes=("model",),  # whose verdicts the ratings take: CLI or token only
    ),
    Setting(
        "elo_models_file",
        "",
        "str",
        "Models file; empty means LMD_HOME/elo_models.yaml.",
        check=_check_models_file,
        shapes=("safety", "model"),  # it names the servers that receive the API key
    ),
    Setting(
        "elo_concurrency",
        0,
        "int",
        "Backend calls in flight when answering or judging; 0: what the backend serves "
        "(batch_concurrency).",
        min=0,
        max=256,
        past_defaults=(8,),  # before batch_concurrency (stop 36)
    ),
]
