"""The Daemon: the store, what the plugins registered, LLM clients and session locks."""

from __future__ import annotations

import asyncio
import inspect
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pluggy

from daemon.backends import tokens
from daemon.backends.capabilities import CapabilityCache
from daemon.backends.choice import choose_backend, embedded_model
from daemon.backends.for_commands import embedded_identity
from daemon.backends.llm import LLM, api_key, endpoint_from, learned_window
from daemon.backends.supervisor import Supervisor
from daemon.core.directives import build_table
from daemon.core.errors import LmdError
from daemon.core.home import default_home
from daemon.core.private import secure_home
from daemon.core.registry import collect, parse_setting
from daemon.core.settings import Settings
from daemon.core.store import Store
from daemon.execution import sandbox
from daemon.plugins import get_plugin_manager

log = logging.getLogger("lmd.core")


class SessionLocks:
    """One asyncio lock per session, dropped when nobody holds or waits for it."""

    def __init__(self) -> None:
        self._locks: dict[str, asyncio.Lock] = {}
        self._users: dict[str, int] = {}

    @asynccontextmanager
    async def hold(self, name: str) -> AsyncIterator[None]:
        lock = self._locks.setdefault(name, asyncio.Lock())
        self._users[name] = self._users.get(name, 0) + 1
        try:
            async with lock:
                yield
        finally:
            self._users[name] -= 1
            if not self._users[name]:
                del self._users[name]
                del self._locks[name]


class Daemon:
    """The running daemon as plugins see it (the `startup(daemon)` hook receives it)."""

    def __init__(
        self,
        home: Path | None = None,
        pm: pluggy.PluginManager | None = None,
        token: str | None = None,
    ) -> None:
        self.home = Path(home) if home else default_home()
        self.pm = pm or get_plugin_manager()
        self.registry = collect(self.pm)
        self.modes = self.registry.modes
        self.token = token  # the active token (None: the app has none); never log it
        secure_home(self.home)

        tokens.remember_warnings_in(self.home)
        self.store = Store(self.home / "lmd.db")
        self.store.migrate(self.registry.migrations, self.registry.specs)
        self.locks = SessionLocks()
        self._llms: dict[tuple, Any] = {}
        self._capabilities: Any = None  # a CapabilityCache over the store, made on first use
        self.embedded: Any = None  # the embedded model's Supervisor, when it is the backend
        self._directives: tuple[Any, dict] | None = None
        self.state: dict[str, Any] = {}  # plugins keep their process-wide objects here
        self.stopping = False  # set when shutdown starts
        self.inflight: set[asyncio.Task] = set()  # non-streaming turns being answered

    def stop_inflight(self) -> None:
        """Shutdown's grace is nearly over: cut the turns still running, so each can still
        answer its client with a sentence before the server drops the connections."""
        self.stopping = True
        for task in list(self.inflight):
            task.cancel("lmd is shutting down")

    def parse_setting(self, name: str, raw: Any) -> Any:
        """A new value for `name` from text or JSON, or a SettingError sentence."""
        return parse_setting(self.registry, name, raw)

    def settings(self) -> Settings:
        """A fresh snapshot (the CLI may change the table while we run)."""
        return Settings(self.registry.specs, self.store.stored_settings())

    def llm(self, settings: Settings | None = None):
        """The LLM client for the current endpoint and model (cached)."""
        s = settings or self.settings()
        embedded = self.embedded_server(s) if choose_backend(s).embedded else None
        if embedded is not None:
            url, key, model = embedded.url, embedded.key, embedded.alias
        else:
            url, key, model = endpoint_from(s), api_key(), s["openai_model"]
        cache_key = (url, key, s["llm_timeout_secs"], s["llm_max_retries"], model)
        client = self._llms.get(cache_key)
        if client is None:
            uds = embedded.uds if embedded is not None else None
            client = self._llms[cache_key] = LLM(*cache_key, uds=uds)
            client.capability_cache = self.capability_cache()
            if embedded is not None:
                client.before_call = embedded.wait_ready
                client.after_lost = embedded.wait_restarted
                client.unreachable = embedded.unreachable
                # the model file's bytes, not its path or the process: caches (capabilities,
                # scores) follow the model
                try:
                    client.identity = embedded_identity(embedded.model_path)
                except OSError:  # no such file: the supervisor says so to every request
                    client.identity = embedded.identity
        client.capability_overrides = s["backend_capabilities"]
        client.batch_concurrency = s["batch_concurrency"]
        return client

    def history_budget(self, settings: Settings) -> int:
        """Tokens of history a context may hold: max_tokens, and no more than three quarters
        of the model's context window where it is known (the embedded model's, or one a
        server stated when it refused a longer one), leaving room for the answer."""
        budget = settings["max_tokens"]
        if choose_backend(settings).embedded:
            # each of its slots holds embedded_context tokens, unless the server said less
            embedded = self.embedded
            said = learned_window(embedded.identity, embedded.alias) if embedded else None
            window = min(said or settings["embedded_context"], settings["embedded_context"])
        else:
            # learned by whichever client of this backend heard it (clients differ by timeout)
            window = learned_window(endpoint_from(settings), settings["openai_model"])
        if window:
            budget = min(budget, max(1, int(window * 0.75)))
        return budget

    def embedded_server(self, settings: Settings):
        """The embedded model's supervisor, started on first need (on the event loop)."""
        if self.embedded is None:
            path, alias = embedded_model(settings)
            self.embedded = Supervisor(
                path,
                settings["embedded_context"],
                settings["embedded_threads"],
                alias,
                slots=settings["embedded_slots"],
            )
            self.embedded.start()
        return self.embedded

    def capability_cache(self):
        """Probed backend capabilities, kept in the database across restarts."""
        if self._capabilities is None:
            self._capabilities = CapabilityCache(
                self.store.capabilities, self.store.save_capabilities
            )
        return self._capabilities

    def directive_table(self, settings: Settings) -> dict:
        aliases = dict(settings["directive_aliases"])
        for mode in self.modes.values():
            aliases.setdefault(mode.name, [])
            aliases[mode.name] = [*mode.aliases, *aliases[mode.name]]
        aliases = {m: a for m, a in aliases.items() if m in self.modes}
        cache_key = repr(sorted(aliases.items()))
        if self._directives is None or self._directives[0] != cache_key:
            self._directives = (cache_key, build_table(self.modes, aliases))
        return self._directives[1]

    async def warm_up(self) -> None:
        """Import the backend client, probe the sandbox and load the tokenizer now, not on the
        first request."""
        settings = self.settings()
        try:
            llm = self.llm(settings)  # with the embedded model, its server starts now
        except LmdError:
            pass  # each request says it (and `lmd serve` printed it at start)
        else:
            # What the backend can do, in the background (once per endpoint and model: the
            # answer is kept in the database): its tokenizer then counts the context's tokens.
            self._probe_task = asyncio.create_task(self._probe(llm))
        # Probe for the command sandbox now (a short bwrap run), not on the first command.
        await asyncio.to_thread(sandbox.detect)
        try:
            await asyncio.wait_for(
                asyncio.to_thread(tokens.encoding_for, settings["openai_model"]), 10
            )
        except TimeoutError:
            pass  # counting falls back to the estimate if tiktoken is still stuck

    async def _probe(self, llm: Any) -> None:
        try:
            await llm.capabilities()
        except Exception as e:  # noqa: BLE001 - a probe never stops the daemon
            log.debug("capability probe failed: %s", e)

    async def call_hook(self, name: str) -> None:
        """Run startup/shutdown hooks, awaiting those that return awaitables."""
        for result in getattr(self.pm.hook, name)(daemon=self):
            if inspect.isawaitable(result):
                await result

    async def close(self) -> None:
        task = getattr(self, "_probe_task", None)
        if task is not None and not task.done():
            task.cancel()
        for client in self._llms.values():
            await client.close()
        self._llms.clear()
        if self.embedded is not None:
            await self.embedded.stop()
        self.store.close()
