"""The core's own settings: the seed daemon's 18, operative_karma, and a few the server needs."""

from __future__ import annotations

from .settings import Setting


def _check_aliases(value: object) -> str | None:
    if not isinstance(value, dict) or not all(
        isinstance(k, str) and isinstance(v, list) and all(isinstance(a, str) for a in v)
        for k, v in value.items()
    ):
        return 'it must be a JSON object like {"marat": ["murat"]}'
    return None


def _check_endpoint(value: str) -> str | None:
    if not value.startswith(("http://", "https://")):
        return "it must be an http:// or https:// URL"
    return None


def _check_origins(value: object) -> str | None:
    """A list of exact web origins: scheme://host[:port], nothing after."""
    if not isinstance(value, list) or not all(isinstance(o, str) for o in value):
        return 'it must be a JSON list of origins like ["http://localhost:3000"]'
    for origin in value:
        scheme, sep, rest = origin.partition("://")
        if (
            scheme not in ("http", "https")
            or not sep
            or not rest
            or any(c in rest for c in "/?#@ \t")
        ):
            return (
                f"{origin!r} is not an origin; write scheme://host[:port] exactly as the "
                'browser shows it, e.g. "http://localhost:3000", with no path'
            )
    return None


CORE_SETTINGS = [
    Setting("openai_model", "gpt-4.1-mini", "str", "Model id sent to the backend."),
    Setting(
        "openai_chat_endpoint",
        "https://api.openai.com/v1/chat/completions",
        "str",
        "Base URL or full chat-completions URL of an OpenAI-compatible server.",
        check=_check_endpoint,
        protected=True,  # it receives the API key: a local program must not repoint it
    ),
    Setting("llm_timeout_secs", 60.0, "float", "Seconds one backend call may take.", min=0.1),
    Setting("llm_max_retries", 2, "int", "Retries of one backend call.", min=0, max=10),
    Setting("system", "Ubuntu 22.04", "str", "The OS bash commands are written for."),
    Setting(
        "default_prompt",
        "dali",
        "str",
        "Mode used when no directive applies (one of the registered modes).",
    ),
    Setting(
        "end_session_after_idle_secs", 300, "int", "Idle seconds before a session resets.", min=0
    ),
    Setting("max_thought_loops", 6, "int", "Most model turns per request.", min=1, max=100),
    Setting(
        "directive_aliases",
        {
            "marat": ["murat", "marrat", "ma rat"],
            "dali": ["dolly", "dally"],
            "cobol": ["kobol", "co bol"],
        },
        "json",
        "Extra spoken forms of directives per mode.",
        check=_check_aliases,
    ),
    Setting("max_tokens", 3500, "int", "Most tokens of history sent to the model.", min=1),
    Setting("max_bash_output_len_for_response", 2000, "int", "Characters of output kept.", min=1),
    Setting("recent_history_limit", 50, "int", "Newest prompts considered.", min=1),
    Setting("default_karma", 1000, "int", "Karma of ordinary prompts.", min=0),
    Setting(
        "operative_karma",
        25000,
        "int",
        "Karma of prompts the user promoted (the seed's operative kind, ranked first).",
        min=0,
    ),
    Setting(
        "instructive_karma",
        10000,
        "int",
        "Karma of crucial prompts: a running task's instruction, cobol's current focus.",
        min=0,
    ),
    Setting(
        "contextual_karma",
        2500,
        "int",
        "Karma of what finished work leaves: a done task's instruction and answer.",
        min=0,
    ),
    Setting("decorative_karma", 500, "int", "Karma of corrections and format help.", min=0),
    Setting("expiring_id_discount", 3.0, "float", "zeta: discount per prompt of distance.", min=0),
    Setting(
        "expiring_created_at_discount", 300.0, "float", "tau: discount per minute of age.", min=0
    ),
    Setting("len_discount", 0.01, "float", "phi: discount per token of length.", min=0),
    Setting("karma_multiplier", 10.0, "float", "xi: multiplier of karma.", min=0),
    Setting("min_score_to_include_prompt", 0.00001, "float", "Lowest score sent.", min=0),
    Setting("max_body_bytes", 1048576, "int", "Largest request body in bytes.", min=64),
    Setting("shutdown_grace_secs", 10.0, "float", "Seconds to finish work on shutdown.", min=0),
    Setting(
        "body_read_timeout_secs",
        30.0,
        "float",
        "Seconds a request body may take to arrive (slow senders get 408).",
        min=0.1,
    ),
    Setting(
        "allowed_origins",
        [],
        "json",
        "Web origins (besides the daemon's own) whose pages may call lmd, e.g. "
        '["http://localhost:3000"]; every page of such an origin acts as you.',
        check=_check_origins,
        protected=True,  # a listed page can drive every mode
    ),
]
