"""SelectIT configuration: the spec's YAML keys, CLI flags and the settings table.

A value comes from, in order: a command-line flag, the YAML file (--config), the settings
table (`selectit_<key>`), the declared default.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields
from typing import Any

from daemon.api import LmdError, Setting

# The spec's keys first, then this implementation's extras (also accepted in the YAML file).
SPEC_KEYS = ("name", "model", "rp_file", "k", "alpha", "max_length", "batch_size")
EXTRA_KEYS = ("backend", "api", "concurrency", "top_logprobs", "device", "fallback_model")


@dataclass(frozen=True)
class Rule:
    type: type
    min: float | None = None
    max: float | None = None
    choices: tuple[str, ...] = ()


RULES: dict[str, Rule] = {
    "name": Rule(str),
    "model": Rule(str),
    "rp_file": Rule(str),
    "k": Rule(int, 1, 1000),
    "alpha": Rule(float, 0),
    "max_length": Rule(int, 16),
    "batch_size": Rule(int, 1, 4096),
    "backend": Rule(str, choices=("openai", "transformers")),
    "api": Rule(str, choices=("completions", "chat")),
    "concurrency": Rule(int, 0, 256),
    "top_logprobs": Rule(int, 1, 100),
    "device": Rule(str),
    "fallback_model": Rule(str),
}


@dataclass(frozen=True)
class Config:
    name: str = "SelectitTokenScorer"
    model: str = ""
    rp_file: str = ""
    k: int = 1
    alpha: float = 0.2
    max_length: int = 2048
    batch_size: int = 8
    backend: str = "openai"
    api: str = "completions"
    concurrency: int = 0  # 0: batch_concurrency (what the backend serves in parallel)
    top_logprobs: int = 20
    device: str = "auto"
    fallback_model: str = ""


DEFAULTS = Config()

SETTINGS = [
    Setting(
        "selectit_backend",
        DEFAULTS.backend,
        "choice",
        "Where SelectIT gets rating probabilities: an OpenAI-compatible server or a local model.",
        choices=("openai", "transformers"),
        shapes=("model",),  # which model rates: CLI or token only
    ),
    Setting(
        "selectit_api",
        DEFAULTS.api,
        "choice",
        "OpenAI backend: completions (raw prompt, base models) or chat (instruct models).",
        choices=("completions", "chat"),
        synonyms={"completion": "completions", "raw": "completions"},
        shapes=("model",),  # which of the server's endpoints rates: CLI or token only
    ),
    Setting(
        "selectit_model",
        DEFAULTS.model,
        "str",
        "Model id (openai; empty = the backend's model) or local model (transformers; empty = "
        "meta-llama/Llama-3.1-8B).",
        shapes=("safety", "model"),  # a path the daemon loads, and the model that rates
    ),
    Setting(
        "selectit_rp_file",
        DEFAULTS.rp_file,
        "str",
        "Rating-prompt file, one template per line (empty = the built-in prompts).",
        protected=True,  # its lines are sent to the model: only the CLI or the token may set it
    ),
    Setting("selectit_k", DEFAULTS.k, "int", "Rating prompts per sample.", min=1, max=1000),
    Setting("selectit_alpha", DEFAULTS.alpha, "float", "Penalty on the std across prompts.", min=0),
    Setting(
        "selectit_max_length",
        DEFAULTS.max_length,
        "int",
        "Most prompt tokens; a longer sample's instruction and response are shortened.",
        min=16,
    ),
    Setting(
        "selectit_batch_size",
        DEFAULTS.batch_size,
        "int",
        "Samples per forward pass (transformers backend).",
        min=1,
        max=4096,
    ),
    Setting(
        "selectit_concurrency",
        DEFAULTS.concurrency,
        "int",
        "Requests in flight at once (openai backend); 0: what the backend serves "
        "(batch_concurrency).",
        min=0,
        max=256,
        past_defaults=(32,),  # before batch_concurrency (stop 36)
    ),
    Setting(
        "selectit_top_logprobs",
        DEFAULTS.top_logprobs,
        "int",
        "How many top logprobs to ask the server for (it is lowered if the server refuses).",
        min=1,
        max=100,
    ),
    Setting(
        "selectit_device",
        DEFAULTS.device,
        "str",
        "Torch device for the transformers backend (auto = cuda when available, else cpu).",
    ),
    Setting(
        "selectit_fallback_model",
        DEFAULTS.fallback_model,
        "str",
        "Local model to load, with a warning, when the model fails to (empty = stop instead).",
        shapes=("safety", "model"),  # a path the daemon loads, and the model that rates
    ),
]


def check(key: str, value: Any, where: str) -> Any:
    """One value, typed and range-checked, or a sentence naming the key and its source."""
    rule = RULES.get(key)
    if rule is None:
        allowed = ", ".join(SPEC_KEYS + EXTRA_KEYS)
        raise LmdError(f"Unknown key {key!r} {where}; the keys are {allowed}.")
    kind = {int: "a whole number", float: "a number", str: "text"}[rule.type]
    if rule.type is str:
        if value is None:
            value = ""
        if not isinstance(value, str):
            raise LmdError(f"{key} {where} must be {kind}, not {value!r}.")
        if rule.choices:
            value = value.strip().lower()
            if value not in rule.choices:
                raise LmdError(
                    f"{key} {where} must be one of {', '.join(rule.choices)}, not {value!r}."
                )
        return value
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise LmdError(f"{key} {where} must be {kind}, not {value!r}.")
    if rule.type is int:
        if isinstance(value, float) and not value.is_integer():
            raise LmdError(f"{key} {where} must be {kind}, not {value!r}.")
        value = int(value)
    else:
        value = float(value)
        if not math.isfinite(value):
            raise LmdError(f"{key} {where} must be a finite number, not {value!r}.")
    if rule.min is not None and value < rule.min:
        raise LmdError(f"{key} {where} must be at least {rule.min:g}, not {value:g}.")
    if rule.max is not None and value > rule.max:
        raise LmdError(f"{key} {where} must be at most {rule.max:g}, not {value:g}.")
    return value


def resolve(
    settings: Any,
    file_values: dict[str, Any] | None = None,
    flags: dict[str, Any] | None = None,
    where: str = "on the command line",
) -> Config:
    """flags > file > settings table > defaults; flags that are None are not given."""
    values: dict[str, Any] = {}
    for f in fields(Config):
        if f.name == "name":
            values[f.name] = DEFAULTS.name
            continue
        values[f.name] = (
            settings[f"selectit_{f.name}"] if settings is not None else getattr(DEFAULTS, f.name)
        )
    values.update(file_values or {})
    for key, value in (flags or {}).items():
        if value is not None:
            values[key] = check(key, value, where)
    return Config(**values)
