"""LM_SCORE's settings, and the original project's `.env` keys layered over them.

Precedence, highest first: `LMD_LM_SCORE_*` environment variables (the core's rule for every
setting), then, for the CLI commands `lmd score` and `lmd sql` only, the original project's
keys in a `.env` file in the working directory (ENSEMBLE, AGGREGATION, THINKING, SERVER_URL,
API_TOKEN, MODEL), then the settings table, then the defaults below.

The daemon reads no `.env`, and generic names in the process environment (MODEL, SERVER_URL,
...) change nothing: any program may set them, any checkout may ship a `.env`.

Credentials stay with their endpoint: API_TOKEN from a `.env` goes only to SERVER_URL from the
same file; OPENAI_API_KEY only to the endpoint from the settings table or the environment
(lm_score_endpoint, LMD_OPENAI_CHAT_ENDPOINT, OPENAI_BASE_URL, openai_chat_endpoint), never
to a SERVER_URL a file supplied.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from daemon.api import NO_KEY, Setting, SettingError, api_key, base_url, endpoint_from, env_name


def _check_url(value: str) -> str | None:
    if value and not value.startswith(("http://", "https://")):
        return "it must be empty (the daemon's backend) or an http:// or https:// URL"
    return None


SETTINGS = [
    Setting("lm_score_ensemble", False, "bool", "Score with an ensemble of calls (ENSEMBLE)."),
    Setting(
        "lm_score_aggregation",
        "maj",
        "choice",
        "How ensemble scores combine: maj (mode) or avg (mean, half up) (AGGREGATION).",
        choices=("maj", "avg"),
        synonyms={"majority": "maj", "mode": "maj", "average": "avg", "mean": "avg"},
    ),
    Setting("lm_score_thinking", True, "bool", "Let the model think (THINKING)."),
    Setting(
        "lm_score_thinking_strategy",
        "prefill",
        "choice",
        "How thinking is suppressed when lm_score_thinking is false.",
        choices=("prefill", "template_kwargs", "both"),
        synonyms={"chat_template_kwargs": "template_kwargs", "enable_thinking": "template_kwargs"},
    ),
    Setting("lm_score_ensemble_size", 5, "int", "Members of an ensemble.", min=2, max=64),
    Setting("lm_score_temperature", 0.7, "float", "Temperature of ensemble members.", min=0, max=2),
    Setting(
        "lm_score_model",
        "",
        "str",
        "Scoring model (empty: openai_model) (MODEL).",
        shapes=("model",),  # whose score lmd takes: CLI or token only
    ),
    Setting(
        "lm_score_endpoint",
        "",
        "str",
        "Scoring backend URL (empty: openai_chat_endpoint) (SERVER_URL).",
        check=_check_url,
        shapes=("safety", "model"),  # it receives the API key, like openai_chat_endpoint
    ),
    Setting(
        "lm_score_method",
        "text",
        "choice",
        "text (the model writes the score) or logprob (expected score from logprobs).",
        choices=("text", "logprob"),
        synonyms={"logprobs": "logprob"},
    ),
    Setting(
        "lm_score_concurrency",
        0,
        "int",
        "Most scoring calls in flight at once; 0: what the backend serves (batch_concurrency).",
        min=0,
        max=256,
        past_defaults=(8,),  # before batch_concurrency (stop 36)
    ),
    Setting("lm_score_sequential", False, "bool", "One call at a time (servers without batching)."),
    Setting("lm_score_use_n", True, "bool", "Ask for an ensemble in one call with n."),
    Setting(
        "lm_score_logprob_fallback",
        False,
        "bool",
        "Use the text method when the backend sends no logprobs.",
    ),
    Setting("lm_score_top_logprobs", 20, "int", "Alternatives per token (logprob).", min=1, max=20),
    Setting("lm_score_max_tokens", 0, "int", "Most answer tokens (0: the backend decides).", min=0),
    Setting(
        "lm_score_max_prompt_tokens",
        16000,
        "int",
        "Largest prompt in tokens; bigger contents are refused.",
        min=16,
    ),
    Setting("lm_score_cache", True, "bool", "Keep scores in the daemon's database."),
    Setting(
        "lm_score_constrain",
        True,
        "bool",
        'Where the backend can hold output to a JSON schema, ask for {"score": 0..10} so (the '
        "prompt stays the spec's); false asks in words only.",
    ),
]

# The original project's .env keys and the settings they stand for (API_TOKEN has none: it is
# the key for SERVER_URL from the same file).
ORIGINAL_KEYS = {
    "ENSEMBLE": "lm_score_ensemble",
    "AGGREGATION": "lm_score_aggregation",
    "THINKING": "lm_score_thinking",
    "SERVER_URL": "lm_score_endpoint",
    "MODEL": "lm_score_model",
}


@dataclass(frozen=True)
class ScoreConfig:
    """Everything that decides how one score is obtained."""

    endpoint: str
    api_key: str
    model: str
    method: str = "text"
    ensemble: bool = False
    ensemble_size: int = 5
    aggregation: str = "maj"
    temperature: float = 0.7
    thinking: bool = True
    thinking_strategy: str = "prefill"
    concurrency: int = 0  # 0: batch_concurrency (what the backend serves in parallel)
    sequential: bool = False
    use_n: bool = True
    logprob_fallback: bool = False
    top_logprobs: int = 20
    max_tokens: int = 0
    max_prompt_tokens: int = 16000
    cache: bool = True
    constrain: bool = True  # a JSON schema where the backend has one
    timeout: float = 60.0
    retries: int = 2
    # Where the endpoint came from, named in errors so the user fixes the right knob:
    # "SERVER_URL in the .env file", "lm_score_endpoint", "openai_chat_endpoint", ...
    endpoint_source: str = "openai_chat_endpoint"
    # Who answers, for the cache key: the endpoint of a server, or the embedded model's file
    # (the same model through the daemon or a server of the command's own); "" = endpoint.
    identity: str = ""
    embedded: bool = False  # the embedded model answers (one model: `model` is its name)

    def fingerprint(self) -> dict:
        """What changes an answer (the cache key): the answering model's identity and id, the
        method and its settings; no secrets or speed knobs."""
        keys = {"identity", "model", "method", "thinking", "max_tokens", "constrain"}
        if self.method == "logprob":
            keys |= {"top_logprobs"}
        else:
            keys |= {"ensemble"}
            if self.ensemble:
                keys |= {"ensemble_size", "aggregation", "temperature"}
        if not self.thinking:
            keys |= {"thinking_strategy"}
        found = {k: getattr(self, k) for k in sorted(keys)}
        found["identity"] = self.identity or self.endpoint
        return found


def read_dotenv(path: Path) -> dict[str, str]:
    """KEY=VALUE lines of a .env file (comments, `export` and quotes allowed)."""
    found: dict[str, str] = {}
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return found
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#") or "=" not in line:
            continue
        key, _, value = line.partition("=")
        key = key.removeprefix("export ").strip()
        value = value.strip()
        if len(value) >= 2 and value[0] == value[-1] and value[0] in "\"'":
            value = value[1:-1]
        elif " #" in value:
            value = value.split(" #", 1)[0].rstrip()
        found[key] = value
    return found


def own_endpoint(settings: Any, dotenv: Mapping[str, str] | None = None) -> bool:
    """Whether LM_SCORE has a server of its own (lm_score_endpoint, or SERVER_URL in the
    CLI's .env) rather than lmd's backend."""
    return bool(settings["lm_score_endpoint"] or (dotenv or {}).get("SERVER_URL"))


def resolve(
    settings: Any,
    environ: Mapping[str, str] | None = None,
    dotenv: Mapping[str, str] | None = None,
    notes: list[str] | None = None,
    backend: Any = None,
) -> ScoreConfig:
    """The ScoreConfig for these settings and, for the CLI, the keys of a `.env` file.

    `backend`: lmd's backend (a CommandBackend, or the daemon's client described the same
    way: url, key, model, identity, embedded), which scores unless LM_SCORE has its own
    endpoint; without one, the configured endpoint is used as it is. `notes` collects one
    sentence per `.env` key used or ignored (the CLI prints them).
    """
    env = os.environ if environ is None else environ
    notes = [] if notes is None else notes
    dotenv = {k: v for k, v in (dotenv or {}).items() if v not in (None, "")}
    values: dict[str, Any] = {s.name: settings[s.name] for s in SETTINGS}
    sources = {s.name: env_name(s.name) if env.get(env_name(s.name)) else s.name for s in SETTINGS}
    for key, name in ORIGINAL_KEYS.items():
        if key not in dotenv:
            continue
        if env.get(env_name(name)) is not None:
            notes.append(f"{key} in ./.env is ignored: {env_name(name)} is set.")
            continue  # LMD_LM_SCORE_* wins over the original keys
        try:
            values[name] = settings.spec(name).parse(dotenv[key])
        except SettingError as e:
            raise SettingError(f"{key} in the .env file: {e}") from None
        sources[name] = f"{key} in the .env file"
        notes.append(f"./.env sets {key}={dotenv[key]}.")
    endpoint = values["lm_score_endpoint"]
    if endpoint:
        source = sources["lm_score_endpoint"]
    elif env.get("LMD_OPENAI_CHAT_ENDPOINT"):
        source = "LMD_OPENAI_CHAT_ENDPOINT"
    elif env.get("OPENAI_BASE_URL"):
        source = "OPENAI_BASE_URL"
    else:
        source = "openai_chat_endpoint"
    if source == "SERVER_URL in the .env file":
        # An endpoint a file chose gets that file's key, or none: never the user's own key.
        key = dotenv.get("API_TOKEN", NO_KEY)
    else:
        if "API_TOKEN" in dotenv:
            notes.append(
                "API_TOKEN in ./.env is ignored: it goes only to a SERVER_URL from the same file."
            )
        key = api_key(env)
    url = base_url(endpoint) if endpoint else endpoint_from(settings, env)
    model = values["lm_score_model"] or settings["openai_model"]
    identity, embedded = "", False
    if not endpoint and backend is not None:  # lmd's own backend scores
        url, key, identity, embedded = backend.url, backend.key, backend.identity, backend.embedded
        if embedded:
            if values["lm_score_model"] and values["lm_score_model"] != backend.model:
                notes.append(
                    f"{sources['lm_score_model']} ({values['lm_score_model']}) is not used: the "
                    f"embedded model {backend.model} answers; configure a server to score with "
                    "another model."
                )
            model = backend.model
        else:
            model = values["lm_score_model"] or backend.model
    return ScoreConfig(
        endpoint_source=source,
        endpoint=url,
        identity=identity,
        embedded=embedded,
        api_key=key,
        model=model,
        method=values["lm_score_method"],
        ensemble=values["lm_score_ensemble"],
        ensemble_size=values["lm_score_ensemble_size"],
        aggregation=values["lm_score_aggregation"],
        temperature=values["lm_score_temperature"],
        thinking=values["lm_score_thinking"],
        thinking_strategy=values["lm_score_thinking_strategy"],
        concurrency=values["lm_score_concurrency"],
        sequential=values["lm_score_sequential"],
        use_n=values["lm_score_use_n"],
        logprob_fallback=values["lm_score_logprob_fallback"],
        top_logprobs=values["lm_score_top_logprobs"],
        max_tokens=values["lm_score_max_tokens"],
        max_prompt_tokens=values["lm_score_max_prompt_tokens"],
        cache=values["lm_score_cache"],
        constrain=values["lm_score_constrain"],
        timeout=settings["llm_timeout_secs"],
        retries=settings["llm_max_retries"],
    )
