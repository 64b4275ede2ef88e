"""The public plugin API: everything a plugin may use, in one module.

A plugin (built-in or third-party) imports from here and nowhere else in `daemon`; the rest
of the package may change without notice. docs/plugins.md lists these names with their
one-line docs, and a test fails when a built-in plugin imports a private module.

Names resolve on first use (PEP 562), so `import daemon.api` costs almost nothing and a
plugin's module level stays light: `lmd --help` imports every plugin, and must not pull in
openai, tiktoken, numpy, starlette or hypercorn.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

# name -> the private module that defines it. Grouped as docs/plugins.md shows them.
_GROUPS: dict[str, dict[str, str]] = {
    # Hooks and what they register.
    "Registering": {
        "hookimpl": "daemon.hookspecs",
        "Mode": "daemon.modes",
        "Context": "daemon.modes",
        "Setting": "daemon.settings",
        "Daemon": "daemon.core",
    },
    # Exceptions: raise one with a sentence a voice user can act on.
    "Errors": {
        "LmdError": "daemon.errors",
        "BackendError": "daemon.errors",
        "AnswerCut": "daemon.errors",
        "SettingError": "daemon.settings",
        "ClientError": "daemon.client",
    },
    # Settings, the registry and the store, outside a request.
    "Settings and state": {
        "Settings": "daemon.settings",
        "read_settings_table": "daemon.defaults",
        "env_name": "daemon.settings",
        "refuse_if_protected": "daemon.settings",
        "check_setting": "daemon.core",
        "collect": "daemon.core",
        "Registry": "daemon.core",
        "get_plugin_manager": "daemon.plugins",
        "wanted_plugins": "daemon.plugins",
        "default_home": "daemon.home",
        "PRIVATE_FILES": "daemon.home",
        "record_turn": "daemon.modes",
    },
    # Writing routes: the request body, the session, the one reply path.
    "HTTP": {
        "read_json": "daemon.http.app",
        "read_body": "daemon.http.app",
        "decode_text": "daemon.http.app",
        "session_name": "daemon.http.app",
        "working_directory": "daemon.http.turn",
        "TurnReply": "daemon.http.turn",
        "wants_speech": "daemon.speak",
        "verbatim": "daemon.speak",
        "unmark": "daemon.speak",
        "token_presented": "daemon.http.guard",
        "owner_only": "daemon.http.guard",
        "allowed_http_path": "daemon.paths",
    },
    # Writing commands for the `lmd` group.
    "CLI": {
        "home_option": "daemon.cli",
        "fail": "daemon.cli",
        "open_daemon_state": "daemon.cli",
        "add_history_listing": "daemon.cli",
        "lazy_command": "daemon.lazy",
        "refuse_overwrite": "daemon.paths",
        "write_atomic": "daemon.paths",
        "clean": "daemon.terminal",
    },
    # Talking to a running daemon (the light client: standard library only).
    "Client": {
        "request": "daemon.client",
        "daemon_url": "daemon.client",
    },
    # How the server is bound and sandboxed (for diagnostics such as `lmd doctor`).
    "Server": {
        "parse_bind": "daemon.http.server",
        "is_loopback": "daemon.http.server",
        "check_policy": "daemon.http.server",
        "sandbox_state": "daemon.http.server",
        "backend_state": "daemon.http.server",
    },
    # Running commands: a process group, a timeout, the sandbox, secrets redacted.
    "Commands": {
        "run_command": "daemon.execution.runner",
        "CommandResult": "daemon.execution.runner",
        "usable_cwd": "daemon.execution.runner",
        "daemon_secrets": "daemon.execution.runner",
        "command_env": "daemon.execution.sandbox",
        "Policy": "daemon.execution.sandbox",
        "sandbox": "daemon.execution.sandbox",
        "staged_writes": "daemon.execution.writes",
        "protected_in": "daemon.execution.protected",
        "why_protected": "daemon.execution.protected",
        "hooks_path": "daemon.execution.protected",
        "simple_commands": "daemon.execution.bash",
        "SimpleCommand": "daemon.execution.bash",
        "Unmodelled": "daemon.execution.bash",
        "join_continuations": "daemon.execution.bash",
    },
    # Approval rules: what the user allowed, forbade or wants asked (docs/rules.md).
    "Rules": {
        "decide": "daemon.rules",
        "Decision": "daemon.rules",
        "rules": "daemon.rules",
        "describe_command": "daemon.readback",
        "spoken_command": "daemon.readback",
        "quoted_name": "daemon.readback",
    },
    # The project's own instructions (AGENTS.md) for a mode's system message.
    "Project memory": {
        "project_memory": "daemon.memory",
        "Memory": "daemon.memory",
    },
    # The language model backend.
    "LLM": {
        "LLM": "daemon.backends.llm",
        "api_key": "daemon.backends.llm",
        "base_url": "daemon.backends.llm",
        "endpoint_from": "daemon.backends.llm",
        "shown_url": "daemon.backends.llm",
        "NO_KEY": "daemon.backends.llm",
        "tokens": "daemon.backends.tokens",
        "Capabilities": "daemon.backends.capabilities",
        "stored_cache": "daemon.backends.capabilities",
        "action_protocol": "daemon.backends.protocols",
        "choose_backend": "daemon.backends.choice",
        "command_backend": "daemon.backends.for_commands",
        "CommandBackend": "daemon.backends.for_commands",
        "batch_concurrency": "daemon.backends.concurrency",
    },
    # Approvals and MCP tools: who may say yes, and the MCP servers the user configured.
    "Approvals and MCP": {
        "approval_allowed": "daemon.approvals",
        "approval_fingerprint": "daemon.approvals",
        "answer_word": "daemon.approvals",
        "relays_model": "daemon.approvals",
        "not_heard_reply": "daemon.approvals",
        "mcp_hub": "daemon.mcpclient",
        "McpHub": "daemon.mcpclient",
        "mcp_rule_name": "daemon.mcpclient",
    },
    # Sentences and splitting work into parts.
    "Words and shards": {
        "plural": "daemon.words",
        "Shard": "daemon.shards",
        "parse_shard": "daemon.shards",
        "part_of": "daemon.shards",
        "describe_parts": "daemon.shards",
        "file_sha256": "daemon.shards",
        "csv_cell": "daemon.tables",
        "csv_value": "daemon.tables",
    },
    # Speech as speech engines write it: answers, numbers, names (docs/voice.md).
    "Spoken words": {
        "Heard": "daemon.spoken.answers",
        "hear_answer": "daemon.spoken.answers",
        "is_bare_answer": "daemon.spoken.answers",
        "NOTHING_WAITING": "daemon.spoken.answers",
        "spoken_number": "daemon.spoken.numbers",
        "spoken_quantity": "daemon.spoken.numbers",
        "in_unit": "daemon.spoken.numbers",
        "match_name": "daemon.spoken.names",
        "NameMatch": "daemon.spoken.names",
        "spoken_punctuation": "daemon.spoken.names",
        "parse_directive": "daemon.directives",
        "alias_problem": "daemon.directives",
        "dictation_hint": "daemon.spoken.vocabulary",
    },
}

# Names that are whole modules (a namespace of helpers) rather than an attribute of one.
_MODULES = {"sandbox", "tokens", "rules", "staged_writes"}

# Constants have no docstring of their own.
_NOTES = {
    "PRIVATE_FILES": "The files in LMD_HOME that only the daemon's owner may read.",
    "NO_KEY": "The API key sent when there is none (local servers ignore it).",
    "NOTHING_WAITING": "The sentence for a yes or a no that no question waits for.",
}

_WHERE = {name: module for group in _GROUPS.values() for name, module in group.items()}

__all__ = [  # the same names as _GROUPS, in its order (a test holds them equal)
    "hookimpl",
    "Mode",
    "Context",
    "Setting",
    "Daemon",
    "LmdError",
    "BackendError",
    "AnswerCut",
    "SettingError",
    "ClientError",
    "Settings",
    "read_settings_table",
    "env_name",
    "refuse_if_protected",
    "check_setting",
    "collect",
    "Registry",
    "get_plugin_manager",
    "wanted_plugins",
    "default_home",
    "PRIVATE_FILES",
    "record_turn",
    "read_json",
    "read_body",
    "decode_text",
    "session_name",
    "working_directory",
    "TurnReply",
    "wants_speech",
    "verbatim",
    "unmark",
    "token_presented",
    "owner_only",
    "allowed_http_path",
    "home_option",
    "fail",
    "open_daemon_state",
    "add_history_listing",
    "lazy_command",
    "refuse_overwrite",
    "write_atomic",
    "clean",
    "request",
    "daemon_url",
    "parse_bind",
    "is_loopback",
    "check_policy",
    "sandbox_state",
    "backend_state",
    "run_command",
    "CommandResult",
    "usable_cwd",
    "daemon_secrets",
    "command_env",
    "Policy",
    "sandbox",
    "staged_writes",
    "protected_in",
    "why_protected",
    "hooks_path",
    "simple_commands",
    "SimpleCommand",
    "Unmodelled",
    "join_continuations",
    "decide",
    "Decision",
    "rules",
    "describe_command",
    "spoken_command",
    "quoted_name",
    "project_memory",
    "Memory",
    "LLM",
    "api_key",
    "base_url",
    "endpoint_from",
    "shown_url",
    "NO_KEY",
    "tokens",
    "Capabilities",
    "stored_cache",
    "action_protocol",
    "choose_backend",
    "command_backend",
    "CommandBackend",
    "batch_concurrency",
    "approval_allowed",
    "approval_fingerprint",
    "answer_word",
    "relays_model",
    "not_heard_reply",
    "mcp_hub",
    "McpHub",
    "mcp_rule_name",
    "plural",
    "Shard",
    "parse_shard",
    "part_of",
    "describe_parts",
    "file_sha256",
    "csv_cell",
    "csv_value",
    "Heard",
    "hear_answer",
    "is_bare_answer",
    "NOTHING_WAITING",
    "spoken_number",
    "spoken_quantity",
    "in_unit",
    "match_name",
    "NameMatch",
    "spoken_punctuation",
    "parse_directive",
    "alias_problem",
    "dictation_hint",
]


def groups() -> dict[str, list[str]]:
    """The public names by group, in the order docs/plugins.md lists them."""
    return {title: list(names) for title, names in _GROUPS.items()}


def summary(name: str) -> str:
    """A public name's first docstring paragraph on one line (what docs/plugins.md shows)."""
    import inspect

    if name in _NOTES:
        return _NOTES[name]
    doc = inspect.getdoc(__getattr__(name)) or ""
    return " ".join(doc.split("\n\n")[0].split())


def __getattr__(name: str) -> Any:
    """Import a public name from its module on first use, then keep it here."""
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"daemon.api has no {name!r}; docs/plugins.md lists what it offers.")
    found = importlib.import_module(module)
    value = found if name in _MODULES else getattr(found, name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted([*__all__, "groups", "summary"])


if TYPE_CHECKING:  # editors and type checkers see the real definitions
    from daemon import rules
    from daemon.approvals import (
        answer_word,
        approval_allowed,
        approval_fingerprint,
        not_heard_reply,
        relays_model,
    )
    from daemon.backends import tokens
    from daemon.backends.capabilities import Capabilities, stored_cache
    from daemon.backends.choice import choose_backend
    from daemon.backends.concurrency import batch_concurrency
    from daemon.backends.for_commands import CommandBackend, command_backend
    from daemon.backends.llm import LLM, NO_KEY, api_key, base_url, endpoint_from, shown_url
    from daemon.backends.protocols import action_protocol
    from daemon.cli import add_history_listing, fail, home_option, open_daemon_state
    from daemon.client import ClientError, daemon_url, request
    from daemon.core import Daemon, Registry, check_setting, collect
    from daemon.defaults import read_settings_table
    from daemon.directives import alias_problem, parse_directive
    from daemon.errors import AnswerCut, BackendError, LmdError
    from daemon.execution import sandbox
    from daemon.execution import writes as staged_writes
    from daemon.execution.bash import SimpleCommand, Unmodelled, join_continuations, simple_commands
    from daemon.execution.protected import hooks_path, protected_in, why_protected
    from daemon.execution.runner import CommandResult, daemon_secrets, run_command, usable_cwd
    from daemon.execution.sandbox import Policy, command_env
    from daemon.home import PRIVATE_FILES, default_home
    from daemon.hookspecs import hookimpl
    from daemon.http.app import decode_text, read_body, read_json, session_name
    from daemon.http.guard import owner_only, token_presented
    from daemon.http.server import (
        backend_state,
        check_policy,
        is_loopback,
        parse_bind,
        sandbox_state,
    )
    from daemon.http.turn import TurnReply, working_directory
    from daemon.lazy import lazy_command
    from daemon.mcpclient import McpHub, mcp_hub, mcp_rule_name
    from daemon.memory import Memory, project_memory
    from daemon.modes import Context, Mode, record_turn
    from daemon.paths import allowed_http_path, refuse_overwrite, write_atomic
    from daemon.plugins import get_plugin_manager, wanted_plugins
    from daemon.readback import describe_command, quoted_name, spoken_command
    from daemon.rules import Decision, decide
    from daemon.settings import Setting, SettingError, Settings, env_name, refuse_if_protected
    from daemon.shards import Shard, describe_parts, file_sha256, parse_shard, part_of
    from daemon.speak import unmark, verbatim, wants_speech
    from daemon.spoken.answers import NOTHING_WAITING, Heard, hear_answer, is_bare_answer
    from daemon.spoken.names import NameMatch, match_name, spoken_punctuation
    from daemon.spoken.numbers import in_unit, spoken_number, spoken_quantity
    from daemon.spoken.vocabulary import dictation_hint
    from daemon.tables import csv_cell, csv_value
    from daemon.terminal import clean
    from daemon.words import plural
