"""MCP servers as tools for the modes: started on first need, stopped with the daemon.

The official SDK (`mcp`) speaks the protocol. Each server runs in a task of its own (the SDK's
client is an anyio context that must be entered and left in one task); calls reach it from any
task. What a server says is untrusted: its tools are offered under a prefixed name
(`mcp__SERVER__TOOL`, so a tool called `bash` never stands in for marat's own), its
descriptions are cut short, its hints are shown but never decide anything, its results are cut
to the command-output limit and cleaned of secrets, and a server that hangs, crashes or floods
is stopped and said in one sentence.

stdio servers are read through a transport of our own: the SDK's re-joins a long line chunk by
chunk (a 50 MB message took minutes of CPU); ours refuses a message over `MAX_MESSAGE_BYTES`
and stops that server. HTTP servers' responses pass through a transport that does the same
per message (a JSON body, or an event of an event stream).
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import httpx2
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream

from daemon.agent import mcpconfig
from daemon.agent.mcpconfig import ServerConfig
from daemon.core.errors import LmdError
from daemon.execution.runner import cut, redact

log = logging.getLogger("lmd.mcp")

PREFIX = "mcp__"
EXPOSED = re.compile(r"[A-Za-z0-9_-]{1,64}")  # what OpenAI-style function names may be
MAX_DESCRIPTION = 400
MAX_SCHEMA_CHARS = 8000
MAX_MESSAGE_BYTES = 8 * 1024 * 1024
RETRY_AFTER_SECS = 120.0  # a failed server is tried again on a later need, not at once


def exposed_name(server: str, tool: str) -> str:
    """The name a model calls: prefixed, with characters function names refuse made _."""
    return f"{PREFIX}{server}__{re.sub(r'[^A-Za-z0-9_-]', '_', tool)}"


def mcp_rule_name(server: str, tool: str) -> str:
    """How approval rules name a tool: mcp:SERVER:TOOL."""
    return f"mcp:{server}:{tool}"


@dataclass(frozen=True)
class ToolInfo:
    """One tool a server offers, as lmd offers it on."""

    server: str
    name: str  # the server's own name for it
    exposed: str  # the name the model calls
    description: str
    schema: dict
    hints: dict  # the server's annotations (read_only_hint, ...): shown, never trusted

    def function(self) -> dict:
        """The tool as an OpenAI-style function definition."""
        return {
            "type": "function",
            "function": {
                "name": self.exposed,
                "description": f"[MCP server {self.server}] {self.description}".strip(),
                "parameters": self.schema,
            },
        }

    def said_hints(self) -> str:
        """The server's own hints in words, or ''."""
        said = []
        if self.hints.get("read_only_hint"):
            said.append("only reads")
        if self.hints.get("destructive_hint"):
            said.append("may destroy data")
        elif self.hints.get("destructive_hint") is False:
            said.append("destroys nothing")
        if self.hints.get("open_world_hint"):
            said.append("reaches the outside world")
        if not said:
            return ""
        return "The server says this tool " + " and ".join(said) + "; lmd asks anyway."


@dataclass
class ToolResult:
    """What a call gave back, cut and cleaned, for the model and the audit."""

    text: str
    is_error: bool = False
    cut: bool = False
    redacted: bool = False

    def describe(self) -> str:
        status = "the tool reported an error" if self.is_error else "the tool answered"
        body = self.text if self.text.strip() else "(nothing)"
        return f"{status}\n{body}"


@dataclass
class Server:
    """One configured server and its running connection."""

    config: ServerConfig
    state: str = "stopped"  # stopped | starting | running | failed | disabled
    problem: str | None = None
    tools: list[ToolInfo] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)  # tools left out, and why
    client: Any = None
    task: asyncio.Task | None = None
    ready: asyncio.Event = field(default_factory=asyncio.Event)
    stop: asyncio.Event = field(default_factory=asyncio.Event)
    failed_at: float = 0.0
    overflow: str | None = None  # set by the transport when a message was too large


class Hub:
    """Every configured MCP server of one daemon (or one `lmd mcp list`)."""

    def __init__(self, home: Path) -> None:
        self.home = Path(home)
        self.servers: dict[str, Server] = {}
        self.config_problem: str | None = None
        self._lock = asyncio.Lock()
        self._said: set[str] = set()  # failures already told: each is one sentence, once

    def _reload(self) -> None:
        """Read the file again; a server whose entry changed is restarted on next need."""
        try:
            configs = mcpconfig.load(self.home)
        except LmdError as e:
            self.config_problem = e.message
            return
        self.config_problem = None
        wanted = {c.name: c for c in configs}
        for name in list(self.servers):
            if name not in wanted or self.servers[name].config != wanted[name]:
                self._stop_soon(self.servers.pop(name))
        for name, config in wanted.items():
            if name not in self.servers:
                server = Server(config)
                if config.disabled:
                    server.state = "disabled"
                self.servers[name] = server

    def _stop_soon(self, server: Server) -> None:
        server.stop.set()

    async def tools(self, start_timeout: float, max_tools: int) -> tuple[list[ToolInfo], list[str]]:
        """The tools of every enabled server (starting those not running) and a sentence for
        each server that newly could not give them (`describe` keeps saying it)."""
        async with self._lock:
            self._reload()
            if self.config_problem:
                return [], self._once([self.config_problem])
            waiting = [
                self._ensure(s, start_timeout, max_tools)
                for s in self.servers.values()
                if s.state != "disabled"
            ]
            await asyncio.gather(*waiting)
        offered: list[ToolInfo] = []
        problems: list[str] = []
        for s in self.servers.values():
            if s.state == "running":
                offered += s.tools
                self._said -= {
                    p for p in self._said if p.startswith(f"The MCP server {s.config.name} ")
                }
            elif s.state == "failed" and s.problem:
                problems.append(s.problem)
        return offered, self._once(problems)

    def _once(self, problems: list[str]) -> list[str]:
        new = [p for p in problems if p not in self._said]
        self._said.update(new)
        return new

    def find(self, exposed: str) -> ToolInfo | None:
        for s in self.servers.values():
            for t in s.tools:
                if t.exposed == exposed:
                    return t
        return None

    async def _ensure(self, server: Server, start_timeout: float, max_tools: int) -> None:
        if server.state == "running" and server.task and not server.task.done():
            return
        if server.state == "failed" and time.monotonic() - server.failed_at < RETRY_AFTER_SECS:
            return
        server.ready = asyncio.Event()
        server.stop = asyncio.Event()
        server.overflow = None
        server.state, server.problem = "starting", None
        server.task = asyncio.create_task(
            self._run(server, max_tools), name=f"mcp {server.config.name}"
        )
        try:
            await asyncio.wait_for(server.ready.wait(), start_timeout)
        except TimeoutError:
            self._fail(
                server,
                f"The MCP server {server.config.name} did not answer within "
                f"{start_timeout:g} seconds, so I stopped it; check it with lmd mcp list.",
            )
            server.task.cancel()  # the transport still stops the process (shielded)

    def _fail(self, server: Server, sentence: str) -> None:
        log.warning("%s", sentence)
        server.state, server.problem, server.failed_at = "failed", sentence, time.monotonic()
        server.tools = []
        server.stop.set()
        server.ready.set()

    async def _run(self, server: Server, max_tools: int) -> None:
        """Connect, list the tools, then hold the connection until told to stop."""
        name = server.config.name
        try:
            # inside the try: without the SDK the start fails at once with the sentence
            # naming the package, not a start timeout 20 seconds later
            from mcp import Client

            async with Client(self._transport(server), mode="auto") as client:
                server.client = client
                listed = await _list_tools(client)
                if server.stop.is_set():
                    return  # too late: the start already timed out
                server.tools, server.notes = _offer(name, listed, max_tools)
                server.state = "running"
                server.ready.set()
                await server.stop.wait()
        except asyncio.CancelledError:
            raise
        except BaseException as e:  # noqa: BLE001 - any failure of a server is one sentence
            if server.state != "failed":
                self._fail(server, server.overflow or _sentence(name, e))
        finally:
            server.client = None
            if server.state == "running":
                server.state = "stopped"
            server.ready.set()

    def _transport(self, server: Server) -> Any:
        c = server.config
        if c.command:
            return _capped_stdio(server)
        return _http(server)

    async def call(
        self,
        tool: ToolInfo,
        arguments: dict,
        timeout: float,
        max_chars: int,
        secrets: list[str],
    ) -> ToolResult:
        """Call one tool; a failure is the result's text (one sentence), never an exception."""
        server = self.servers.get(tool.server)
        if server is None or server.state != "running" or server.client is None:
            why = server.problem if server and server.problem else "it is not running"
            return ToolResult(f"The MCP server {tool.server} cannot take calls: {why}", True)
        try:
            result = await asyncio.wait_for(
                server.client.call_tool(tool.name, arguments, read_timeout_seconds=timeout),
                timeout,
            )
        except TimeoutError:
            self._fail(
                server,
                f"The MCP server {tool.server} did not answer the call of {tool.name} within "
                f"{timeout:g} seconds, so I stopped it.",
            )
            return ToolResult(server.problem or "", True)
        except Exception as e:  # noqa: BLE001 - the server's failure, said in one sentence
            await asyncio.sleep(0)  # let the transport record why the connection closed
            self._fail(server, server.overflow or _sentence(tool.server, e))
            return ToolResult(server.problem or "", True)
        text = _result_text(result)
        all_secrets = [*secrets, *server.config.secrets()]
        text, redacted = redact(text, all_secrets)
        text, was_cut = cut(text, max_chars)
        return ToolResult(text, bool(getattr(result, "is_error", False)), was_cut, redacted)

    def describe(self) -> list[dict]:
        """Rows for `lmd mcp list`: each server, its state, its tools."""
        rows = []
        for s in self.servers.values():
            rows.append(
                {
                    "name": s.config.name,
                    "transport": s.config.transport,
                    "where": s.config.shown(),
                    "state": s.state,
                    "problem": s.problem,
                    "tools": [
                        {
                            "name": t.name,
                            "exposed": t.exposed,
                            "rule": mcp_rule_name(t.server, t.name),
                            "description": t.description,
                            "hints": {k: v for k, v in t.hints.items() if v is not None},
                        }
                        for t in s.tools
                    ],
                    "notes": s.notes,
                }
            )
        return rows

    async def close(self) -> None:
        """Stop every server (the daemon is stopping)."""
        tasks = []
        for s in self.servers.values():
            s.stop.set()
            if s.task is not None and not s.task.done():
                tasks.append(s.task)
        if tasks:
            _, pending = await asyncio.wait(tasks, timeout=8)
            for task in pending:
                task.cancel()


async def _list_tools(client: Any) -> list[Any]:
    """Every page of the listing (at most 50 pages: a server that pages forever is cut)."""
    tools: list[Any] = []
    cursor = None
    for _ in range(50):
        page = await client.list_tools(cursor=cursor)
        tools += list(page.tools)
        cursor = page.next_cursor
        if not cursor:
            break
    return tools


def _offer(server: str, listed: list[Any], max_tools: int) -> tuple[list[ToolInfo], list[str]]:
    """The tools lmd offers to the model, and a note for each kind of tool it left out."""
    offered: list[ToolInfo] = []
    notes: list[str] = []
    seen: set[str] = set()
    for tool in listed:
        exposed = exposed_name(server, tool.name)
        if not EXPOSED.fullmatch(exposed) or exposed in seen:
            notes.append(f"{tool.name[:60]!r}: its name is too long, or clashes once prefixed")
            continue
        schema = tool.input_schema if isinstance(tool.input_schema, dict) else {}
        schema = {**schema, "type": "object"}
        if len(json.dumps(schema)) > MAX_SCHEMA_CHARS:
            notes.append(f"{tool.name}: its argument schema is larger than {MAX_SCHEMA_CHARS}")
            continue
        seen.add(exposed)
        description = " ".join((tool.description or tool.title or "").split())
        if len(description) > MAX_DESCRIPTION:
            description = description[: MAX_DESCRIPTION - 3] + "..."
        hints = tool.annotations.model_dump() if tool.annotations is not None else {}
        offered.append(ToolInfo(server, tool.name, exposed, description, schema, hints))
    if len(offered) > max_tools:
        notes.append(
            f"it lists {len(offered)} tools; lmd offers the first {max_tools} "
            "(raise mcp_max_tools for more)"
        )
        offered = offered[:max_tools]
    return offered, notes


def _result_text(result: Any) -> str:
    """The result's content as text; images and other blobs are named, not passed on."""
    parts = []
    for block in getattr(result, "content", None) or []:
        kind = getattr(block, "type", "")
        if kind == "text":
            parts.append(block.text)
        elif kind in ("image", "audio"):
            parts.append(f"[{kind} {getattr(block, 'mime_type', '')} left out]")
        elif kind == "resource_link":
            parts.append(f"[link to {getattr(block, 'uri', '')}]")
        elif kind == "resource":
            inner = getattr(block, "resource", None)
            text = getattr(inner, "text", None)
            parts.append(
                text if isinstance(text, str) else f"[resource {getattr(inner, 'uri', '')}]"
            )
        else:
            parts.append(f"[{kind or 'unknown'} content left out]")
    if not parts and getattr(result, "structured_content", None) is not None:
        parts.append(json.dumps(result.structured_content, ensure_ascii=False))
    return "\n".join(parts)


def _sentence(name: str, e: BaseException) -> str:
    """One sentence for a server's failure."""
    while isinstance(e, BaseExceptionGroup) and e.exceptions:
        e = e.exceptions[0]
    if isinstance(e, ModuleNotFoundError) and (e.name or "").startswith("mcp"):
        return (
            f"The MCP server {name} needs the mcp package, which is not installed: run `make "
            "run` again (it installs it), or pip install 'lmd[mcp]'."
        )
    if isinstance(e, FileNotFoundError):
        return f"The MCP server {name} could not start: its command was not found."
    if isinstance(e, PermissionError):
        return f"The MCP server {name} could not start: its command may not be run."
    text = " ".join(str(e).split())[:200] or type(e).__name__
    if "connection closed" in text.lower():
        return f"The MCP server {name} stopped (its process ended or closed the connection)."
    return f"The MCP server {name} failed: {text}."


@asynccontextmanager
async def _http(server: Server) -> AsyncIterator[tuple[Any, Any]]:
    """Streamable HTTP with the configured headers, each message capped as stdio's are (the
    SDK leaves a client it was given open: it is closed here)."""
    # the mcp extra, optional: imported where a server is started (_run says when it is missing)
    from mcp.client.streamable_http import streamable_http_client
    from mcp.shared._httpx_utils import MCP_DEFAULT_SSE_READ_TIMEOUT, MCP_DEFAULT_TIMEOUT

    c = server.config
    http = httpx2.AsyncClient(
        headers=c.headers,
        timeout=httpx2.Timeout(MCP_DEFAULT_TIMEOUT, read=MCP_DEFAULT_SSE_READ_TIMEOUT),
        transport=_capped_http_transport(server),
    )
    async with http:
        async with streamable_http_client(c.url or "", http_client=http) as streams:
            yield streams


def _capped_http_transport(server: Server) -> Any:
    """An httpx transport whose responses stop at a message over MAX_MESSAGE_BYTES: a JSON
    body is one message, an event stream's messages end at a blank line."""

    class Capped(httpx2.AsyncByteStream):
        def __init__(self, inner: Any) -> None:
            self.inner = inner

        async def __aiter__(self) -> AsyncIterator[bytes]:
            pending = 0  # bytes since the last message boundary
            tail = b""
            async for chunk in self.inner:
                seen = tail + chunk
                cut = seen.rfind(b"\n\n")
                pending = len(seen) - cut - 2 if cut >= 0 else pending + len(chunk)
                tail = seen[-1:]
                if pending > MAX_MESSAGE_BYTES:
                    server.overflow = (
                        f"The MCP server {server.config.name} sent a message larger than "
                        f"{MAX_MESSAGE_BYTES // (1024 * 1024)} MB, so I stopped it."
                    )
                    raise httpx2.ReadError(server.overflow)
                yield chunk

        async def aclose(self) -> None:
            await self.inner.aclose()

    class Transport(httpx2.AsyncBaseTransport):
        def __init__(self) -> None:
            self.inner = httpx2.AsyncHTTPTransport()

        async def handle_async_request(self, request: Any) -> Any:
            response = await self.inner.handle_async_request(request)
            return httpx2.Response(
                response.status_code,
                headers=response.headers,
                stream=Capped(response.stream),
                extensions=response.extensions,
                request=request,
            )

        async def aclose(self) -> None:
            await self.inner.aclose()

    return Transport()


@asynccontextmanager
async def _capped_stdio(server: Server) -> AsyncIterator[tuple[Any, Any]]:
    """A stdio transport that refuses a message over MAX_MESSAGE_BYTES (see the module's
    docstring); the server runs in a process group of its own, killed whole at the end."""
    # the mcp extra, optional: imported where a server is started (_run says when it is missing)
    from mcp.client.stdio import get_default_environment
    from mcp.shared.message import SessionMessage
    from mcp_types import jsonrpc_message_adapter

    c = server.config
    process = await anyio.open_process(
        [c.command or "", *c.args],
        env=get_default_environment() | c.env,  # never the daemon's own secrets
        cwd=c.cwd,
        stderr=_stderr(),  # the daemon's log
        start_new_session=True,
    )
    # what the SDK's session reads (a message, or the error that stood for one) and writes
    read_writer: MemoryObjectSendStream[SessionMessage | Exception]
    read_stream: MemoryObjectReceiveStream[SessionMessage | Exception]
    read_writer, read_stream = anyio.create_memory_object_stream(0)
    write_stream: MemoryObjectSendStream[SessionMessage]
    write_reader: MemoryObjectReceiveStream[SessionMessage]
    write_stream, write_reader = anyio.create_memory_object_stream(0)
    stdout, stdin = process.stdout, process.stdin
    if stdout is None or stdin is None:  # piped by open_process's defaults: never None
        raise OSError("the MCP server's pipes were not made")

    async def reader() -> None:
        buffer = bytearray()
        try:
            async with read_writer:
                async for chunk in stdout:
                    buffer += chunk
                    while True:
                        end = buffer.find(b"\n")
                        if end < 0:
                            break
                        line = bytes(buffer[:end])
                        del buffer[: end + 1]
                        try:
                            message = jsonrpc_message_adapter.validate_json(line, by_name=False)
                        except ValueError as e:
                            await read_writer.send(e)
                            continue
                        await read_writer.send(SessionMessage(message))
                    if len(buffer) > MAX_MESSAGE_BYTES:
                        server.overflow = (
                            f"The MCP server {c.name} sent a message larger than "
                            f"{MAX_MESSAGE_BYTES // (1024 * 1024)} MB, so I stopped it."
                        )
                        _kill(process)
                        return
        except (anyio.ClosedResourceError, anyio.BrokenResourceError, OSError):
            pass

    async def writer() -> None:
        try:
            async with write_reader:
                async for message in write_reader:
                    data = message.message.model_dump_json(by_alias=True, exclude_unset=True)
                    await stdin.send((data + "\n").encode())
        except (anyio.ClosedResourceError, anyio.BrokenResourceError, OSError):
            await read_writer.aclose()

    async with anyio.create_task_group() as tg:
        tg.start_soon(reader)
        tg.start_soon(writer)
        try:
            yield read_stream, write_stream
        finally:
            with anyio.CancelScope(shield=True):
                await _stop_process(process)
            tg.cancel_scope.cancel()


def _stderr() -> Any:
    """Where a stdio server's stderr goes: ours when it is a real file, else nowhere."""
    try:
        sys.stderr.fileno()
    except (AttributeError, OSError, ValueError):
        return subprocess.DEVNULL
    return sys.stderr


def _kill(process: Any, sig: int = signal.SIGKILL) -> None:
    try:
        os.killpg(process.pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


async def _stop_process(process: Any) -> None:
    """Close stdin, give it two seconds, then SIGTERM and SIGKILL its whole group."""
    try:
        await process.stdin.aclose()
    except Exception:  # noqa: BLE001 - already closed or broken
        pass
    for sig in (None, signal.SIGTERM, signal.SIGKILL):
        if sig is not None:
            _kill(process, sig)
        with anyio.move_on_after(2):
            await process.wait()
        if process.returncode is not None:
            break
    _kill(process)  # whatever the server left behind in its group
    try:
        await process.aclose()
    except Exception:  # noqa: BLE001
        pass


McpHub = Hub


def mcp_hub(daemon: Any) -> Hub:
    """The daemon's MCP hub, made on first use (the servers start when their tools are
    wanted)."""
    hub = daemon.state.get("mcp_hub")
    if hub is None:
        hub = daemon.state["mcp_hub"] = Hub(daemon.home)
    return hub


async def close_mcp_hub(daemon: Any) -> None:
    """Stop the MCP servers of the daemon's hub, if one was made: the `shutdown` hook of each
    plugin that calls `mcp_hub` awaits this (once is enough; a second call finds no hub)."""
    hub = daemon.state.pop("mcp_hub", None)
    if hub is not None:
        await hub.close()


def configured(home: Path) -> bool:
    """Whether any MCP server is configured (without importing the SDK)."""
    return mcpconfig.config_path(home).exists()
