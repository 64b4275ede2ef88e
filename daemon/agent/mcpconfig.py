"""The MCP servers the user configured: LMD_HOME/mcp.json, read strictly (standard library only).

The file has the shape Claude Desktop, Cursor and Claude Code use, so a server's entry can be
pasted from their docs::

    {"mcpServers": {
        "files": {"command": "npx", "args": ["-y", "@modelcontextprotocol/server-memory"]},
        "tracker": {"url": "https://mcp.example.com/mcp", "headers": {"Authorization": "..."}}
    }}

A file, not a setting: header values and environment values are often secrets, and settings are
listed by `lmd settings list` and GET /settings. The file is one of LMD_HOME's private files
(0600, hidden from sandboxed commands). Every mistake is refused with one sentence naming the
server and the key.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path

from daemon.core.errors import LmdError

CONFIG_NAME = "mcp.json"
SERVER_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]{0,31}")
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_HEADER_NAME = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+")
_STDIO_KEYS = {"type", "command", "args", "env", "cwd", "disabled", "description"}
_HTTP_KEYS = {"type", "url", "headers", "disabled", "description"}
MAX_CONFIG_BYTES = 1_000_000


@dataclass(frozen=True)
class ServerConfig:
    """One configured MCP server: a command to start (stdio), or a URL (streamable HTTP)."""

    name: str
    command: str | None = None
    args: tuple[str, ...] = ()
    env: dict[str, str] = field(default_factory=dict)
    cwd: str | None = None
    url: str | None = None
    headers: dict[str, str] = field(default_factory=dict)
    disabled: bool = False

    @property
    def transport(self) -> str:
        return "stdio" if self.command else "http"

    def shown(self) -> str:
        """Where it runs, without secrets (header and environment values are left out)."""
        if self.command:
            return " ".join([self.command, *self.args])
        return self.url or ""

    def secrets(self) -> list[str]:
        """Values that may be secrets: cut out of every result lmd passes on."""
        return [*self.headers.values(), *self.env.values()]


def config_path(home: Path) -> Path:
    return Path(home) / CONFIG_NAME


def load(home: Path) -> list[ServerConfig]:
    """The configured servers (none when the file does not exist), or an LmdError sentence."""
    path = config_path(home)
    where = f"The MCP configuration {path}"
    try:
        raw = path.read_bytes()[: MAX_CONFIG_BYTES + 1]
    except FileNotFoundError:
        return []
    except OSError as e:
        raise LmdError(f"{where} cannot be read ({e.strerror}).") from None
    if len(raw) > MAX_CONFIG_BYTES:
        raise LmdError(f"{where} is larger than {MAX_CONFIG_BYTES} bytes; it cannot be right.")
    try:
        data = json.loads(raw.decode("utf-8"))
    except UnicodeDecodeError:
        raise LmdError(f"{where} is not UTF-8 text.") from None
    except ValueError as e:
        raise LmdError(f"{where} is not valid JSON ({e}).") from None
    return parse(data, where)


def parse(data: object, where: str = "The MCP configuration") -> list[ServerConfig]:
    """Servers from the decoded file; a sentence naming the first mistake otherwise."""
    example = '{"mcpServers": {"NAME": {"command": "...", "args": [...]}}}'
    if not isinstance(data, dict) or set(data) - {"mcpServers"}:
        raise LmdError(f"{where} must be a JSON object with one key, mcpServers, like {example}.")
    servers = data.get("mcpServers", {})
    if not isinstance(servers, dict):
        raise LmdError(f"{where}: mcpServers must be an object of named servers, like {example}.")
    return [_server(name, entry, where) for name, entry in servers.items()]


def _server(name: str, entry: object, where: str) -> ServerConfig:
    if not SERVER_NAME.fullmatch(name):
        raise LmdError(
            f"{where}: the server name {name[:40]!r} must be 1 to 32 letters, digits, _ or -, "
            "starting with a letter or digit (it prefixes the tools' names)."
        )
    at = f"{where}: the server {name}"
    if not isinstance(entry, dict):
        raise LmdError(f"{at} must be an object with a command or a url.")
    kind = entry.get("type")
    if "command" in entry and "url" in entry:
        raise LmdError(f"{at} has both a command and a url; give one of them.")
    if "command" in entry:
        if kind not in (None, "stdio"):
            raise LmdError(f"{at} has a command, so its type can only be stdio.")
        _known(entry, _STDIO_KEYS, at)
        command = entry["command"]
        if not isinstance(command, str) or not command.strip() or "\x00" in command:
            raise LmdError(f"{at}: command must be the program to start, as text.")
        args = entry.get("args", [])
        if not isinstance(args, list) or not all(
            isinstance(a, str) and "\x00" not in a for a in args
        ):
            raise LmdError(f"{at}: args must be a list of texts.")
        env = entry.get("env", {})
        if not isinstance(env, dict) or not all(
            isinstance(k, str) and _ENV_NAME.fullmatch(k) and isinstance(v, str) and "\x00" not in v
            for k, v in env.items()
        ):
            raise LmdError(f"{at}: env must map environment variable names to texts.")
        cwd = entry.get("cwd")
        if cwd is not None and (not isinstance(cwd, str) or not cwd.startswith(("/", "~"))):
            raise LmdError(f"{at}: cwd must be an absolute or ~ path.")
        return ServerConfig(
            name,
            command=command,
            args=tuple(args),
            env=dict(env),
            cwd=str(Path(cwd).expanduser()) if cwd else None,
            disabled=_flag(entry, at),
        )
    if "url" in entry:
        if kind not in (None, "http", "streamable-http", "streamableHttp"):
            raise LmdError(f"{at} has a url, so its type can only be http (streamable HTTP).")
        _known(entry, _HTTP_KEYS, at)
        url = entry["url"]
        if not isinstance(url, str) or not re.fullmatch(r"https?://[^\s]+", url):
            raise LmdError(f"{at}: url must be an http:// or https:// address.")
        headers = entry.get("headers", {})
        if not isinstance(headers, dict) or not all(
            isinstance(k, str)
            and _HEADER_NAME.fullmatch(k)
            and isinstance(v, str)
            and not re.search(r"[\r\n\x00]", v)
            for k, v in headers.items()
        ):
            raise LmdError(f"{at}: headers must map header names to one-line texts.")
        return ServerConfig(name, url=url, headers=dict(headers), disabled=_flag(entry, at))
    raise LmdError(f"{at} needs a command (a server lmd starts) or a url (one that runs).")


def _known(entry: dict, allowed: set[str], at: str) -> None:
    unknown = sorted(set(entry) - allowed)
    if unknown:
        raise LmdError(
            f"{at} has the key {unknown[0]!r}, which lmd does not know; it takes "
            f"{', '.join(sorted(allowed - {'type'}))}."
        )


def _flag(entry: dict, at: str) -> bool:
    value = entry.get("disabled", False)
    if not isinstance(value, bool):
        raise LmdError(f"{at}: disabled must be true or false.")
    return value
