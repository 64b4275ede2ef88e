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
        "Mode": "daemon.core.modes",
        "Context": "daemon.core.modes",
        "Setting": "daemon.core.settings",
        "Daemon": "daemon.core.daemon",
    },
    # Exceptions: raise one with a sentence a voice user can act on.
    "Errors": {
        "LmdError": "daemon.core.errors",
        "BackendError": "daemon.core.errors",
        "AnswerCut": "daemon.core.errors",
        "SettingError": "daemon.core.settings",
        "ClientError": "daemon.client",
    },
    # Settings, the registry and the store, outside a request.
    "Settings and state": {
        "Settings": "daemon.core.settings",
        "read_settings_table": "daemon.core.defaults",
        "env_name": "daemon.core.settings",
        "refuse_if_protected": "daemon.core.settings",
        "check_setting": "daemon.core.registry",
        "collect": "daemon.core.registry",
        "Registry": "daemon.core.registry",
        "get_plugin_manager": "daemon.plugins",
        "wanted_plugins": "daemon.plugins",
        "default_home": "daemon.core.home",
        "PRIVATE_FILES": "daemon.core.home",
        "record_turn": "daemon.core.modes",
    },
    # Writing routes: the request body, the session, the one reply path.
    "HTTP": {
        "read_json": "daemon.http.body",
        "read_body": "daemon.http.body",
        "decode_text": "daemon.http.body",
        "session_name": "daemon.http.body",
        "working_directory": "daemon.core.turn",
        "TurnReply": "daemon.http.reply",
        "wants_speech": "daemon.core.speak",
        "verbatim": "daemon.core.speak",
        "unmark": "daemon.core.speak",
        "token_presented": "daemon.http.guard",
        "owner_only": "daemon.http.guard",
        "allowed_http_path": "daemon.core.paths",
    },
    # Writing commands for the `lmd` group.
    "CLI": {
        "home_option": "daemon.cli",
        "fail": "daemon.cli",
        "open_daemon_state": "daemon.cli",
        "add_history_listing": "daemon.cli",
        "lazy_command": "daemon.lazy",
        "refuse_overwrite": "daemon.core.paths",
        "write_atomic": "daemon.core.paths",
        "clean": "daemon.core.terminal",
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
        "decide": "daemon.agent.rules",
        "Decision": "daemon.agent.rules",
        "rules": "daemon.agent.rules",
        "describe_command": "daemon.agent.readback",
        "spoken_command": "daemon.agent.readback",
        "quoted_name": "daemon.agent.readback",
    },
    # The project's own instructions (AGENTS.md) for a mode's system message.
    "Project memory": {
        "project_memory": "daemon.agent.memory",
        "Memory": "daemon.agent.memory",
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
        "approval_allowed": "daemon.core.approvals",
        "approval_fingerprint": "daemon.core.approvals",
        "answer_word": "daemon.core.approvals",
        "relays_model": "daemon.core.approvals",
        "not_heard_reply": "daemon.core.approvals",
        "mcp_hub": "daemon.agent.mcpclient",
        "McpHub": "daemon.agent.mcpclient",
        "mcp_rule_name": "daemon.agent.mcpclient",
        "close_mcp_hub": "daemon.agent.mcpclient",
    },
    # Sentences and splitting work into parts.
    "Words and shards": {
        "plural": "daemon.core.words",
        "Shard": "daemon.core.shards",
        "parse_shard": "daemon.core.shards",
        "part_of": "daemon.core.shards",
        "describe_parts": "daemon.core.shards",
        "file_sha256": "daemon.core.shards",
        "csv_cell": "daemon.core.tables",
        "csv_value": "daemon.core.tables",
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
        "parse_directive": "daemon.core.directives",
        "alias_problem": "daemon.core.directives",
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

__all__ = [name for group in _GROUPS.values() for name in group]


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


# Editors and type checkers see the real definitions: the same names from the same modules
# as _GROUPS (tests/core/test_public_api.py holds the two equal).
if TYPE_CHECKING:
    from daemon.agent import rules
    from daemon.agent.mcpclient import McpHub, close_mcp_hub, mcp_hub, mcp_rule_name
    from daemon.agent.memory import Memory, project_memory
    from daemon.agent.readback import describe_command, quoted_name, spoken_command
    from daemon.agent.rules import Decision, decide
    from daemon.backends import tokens
    from daemon.backends.capabilities import Capabilities, stored_cache
    from daemon.backends.choice import choose_backend
    from daemon.backends.concurrency import batch_concurrency
    from daemon.backends.for_commands import CommandBackend, command_backend
    from daemon.backends.llm import LLM, NO_KEY, api_key, base_url, endpoint_from, shown_url
    from daemon.backends.protocols import action_protocol
    from daemon.cli import add_history_listing, fail, home_option, open_daemon_state
    from daemon.client import ClientError, daemon_url, request
    from daemon.core.approvals import (
        answer_word,
        approval_allowed,
        approval_fingerprint,
        not_heard_reply,
        relays_model,
    )
    from daemon.core.daemon import Daemon
    from daemon.core.defaults import read_settings_table
    from daemon.core.directives import alias_problem, parse_directive
    from daemon.core.errors import AnswerCut, BackendError, LmdError
    from daemon.core.home import PRIVATE_FILES, default_home
    from daemon.core.modes import Context, Mode, record_turn
    from daemon.core.paths import allowed_http_path, refuse_overwrite, write_atomic
    from daemon.core.registry import Registry, check_setting, collect
    from daemon.core.settings import Setting, SettingError, Settings, env_name, refuse_if_protected
    from daemon.core.shards import Shard, describe_parts, file_sha256, parse_shard, part_of
    from daemon.core.speak import unmark, verbatim, wants_speech
    from daemon.core.tables import csv_cell, csv_value
    from daemon.core.terminal import clean
    from daemon.core.turn import working_directory
    from daemon.core.words import plural
    from daemon.execution import sandbox
    from daemon.execution import writes as staged_writes
    from daemon.execution.bash import SimpleCommand, Unmodelled, join_continuations, simple_commands
    from daemon.execution.protected import hooks_path, protected_in, why_protected
    from daemon.execution.runner import CommandResult, daemon_secrets, run_command, usable_cwd
    from daemon.execution.sandbox import Policy, command_env
    from daemon.hookspecs import hookimpl
    from daemon.http.body import decode_text, read_body, read_json, session_name
    from daemon.http.guard import owner_only, token_presented
    from daemon.http.reply import TurnReply
    from daemon.http.server import (
        backend_state,
        check_policy,
        is_loopback,
        parse_bind,
        sandbox_state,
    )
    from daemon.lazy import lazy_command
    from daemon.plugins import get_plugin_manager, wanted_plugins
    from daemon.spoken.answers import NOTHING_WAITING, Heard, hear_answer, is_bare_answer
    from daemon.spoken.names import NameMatch, match_name, spoken_punctuation
    from daemon.spoken.numbers import in_unit, spoken_number, spoken_quantity
    from daemon.spoken.vocabulary import dictation_hint
