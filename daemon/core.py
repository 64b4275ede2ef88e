"""The Daemon: the store, the registered modes/settings/routes, LLM clients and session locks."""

from __future__ import annotations

import asyncio
import inspect
import re
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

import pluggy

from daemon.core_settings import CORE_SETTINGS
from daemon.errors import LmdError
from daemon.home import default_home, secure_home
from daemon.modes import Mode
from daemon.plugins import get_plugin_manager
from daemon.settings import Setting, SettingError, Settings

__all__ = ["Daemon", "Registry", "Route", "collect", "default_home", "parse_setting"]


def check_setting(registry: Registry, name: str, value: Any) -> None:
    """Rules that need the registry: default_prompt must name a registered mode."""
    if name == "default_prompt" and value not in registry.modes:
        raise SettingError(
            f"default_prompt cannot be {value!r}: there is no such mode; it must be one of "
            f"{', '.join(sorted(registry.modes))}."
        )


def parse_setting(registry: Registry, name: str, raw: Any) -> Any:
    """A new value for a setting, checked like every way of setting it (CLI, HTTP, knob)."""
    from daemon.settings import Settings

    value = Settings(registry.specs, {}).spec(name).parse(raw)
    check_setting(registry, name, value)
    return value


class Route(NamedTuple):
    """A route a plugin registered, and which plugin it was."""

    path: str
    endpoint: Any
    methods: list[str] | None
    plugin: str


@dataclass
class Registry:
    """Everything the plugins registered."""

    modes: dict[str, Mode] = field(default_factory=dict)
    specs: dict[str, Setting] = field(default_factory=dict)
    routes: list[Route] = field(default_factory=list)
    migrations: list[tuple[str, Any]] = field(default_factory=list)


_PARAM = re.compile(r"\{[^}]*\}")


def route_keys(path: str, methods: list[str] | None) -> list[str]:
    """ "METHOD /path" for each method, parameters unnamed: /a/{x} and /a/{y} are one route."""
    shape = _PARAM.sub("{}", path)
    return [f"{m.upper()} {shape}" for m in (methods or ["GET"])]  # Starlette's default: GET


def _clash(what: str, first: str, second: str) -> LmdError:
    """One sentence for a name two registrations claim."""
    if first == second:
        return LmdError(f"Plugin {first} registers {what} twice; register it once.")
    if first == "core":
        return LmdError(f"Plugin {second} registers {what}, which is the core's own; rename it.")
    return LmdError(
        f"Plugins {first} and {second} both register {what}; remove one of them, or choose "
        "the plugins to load with LMD_LOAD_PLUGINS."
    )


def collect(pm: pluggy.PluginManager) -> Registry:
    """Call the register_* hooks; refuse a setting, mode or route registered twice with one
    sentence naming both plugins."""
    reg = Registry(specs={s.name: s for s in CORE_SETTINGS})

    for impl in pm.hook.register_settings.get_hookimpls():

        def add_setting(setting: Setting, _plugin=impl.plugin_name) -> None:
            if setting.name in reg.specs:
                owner = reg.specs[setting.name].plugin
                raise _clash(f"the setting {setting.name}", owner, _plugin)
            reg.specs[setting.name] = Setting(**{**setting.__dict__, "plugin": _plugin})

        impl.function(register=add_setting)

    for impl in pm.hook.register_modes.get_hookimpls():

        def add_mode(mode: Mode, _plugin=impl.plugin_name) -> None:
            if mode.name in reg.modes:
                raise _clash(f"a mode called {mode.name}", reg.modes[mode.name].plugin, _plugin)
            reg.modes[mode.name] = Mode(**{**mode.__dict__, "plugin": _plugin})

        impl.function(register=add_mode)

    owners: dict[str, str] = {}  # "METHOD /path" -> plugin
    for impl in pm.hook.register_routes.get_hookimpls():

        def add_route(
            path: str, endpoint: Any, methods: list[str] | None = None, _plugin=impl.plugin_name
        ) -> None:
            keys = route_keys(path, methods)
            for key in keys:
                if key in owners:
                    raise _clash(f"the route {key}", owners[key], _plugin)
            owners.update(dict.fromkeys(keys, _plugin))
            reg.routes.append(Route(path, endpoint, methods, _plugin))

        impl.function(register=add_route)

    for impl in pm.hook.register_migrations.get_hookimpls():

        def add_migration(name: str, fn: Any, _plugin=impl.plugin_name) -> None:
            reg.migrations.append((f"{_plugin}:{name}", fn))

        impl.function(register=add_migration)
    return reg


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
        from daemon.store import Store

        self.home = Path(home) if home else default_home()
        self.pm = pm or get_plugin_manager()
        self.registry = collect(self.pm)
        self.modes = self.registry.modes
        self.token = token  # the active token (None: the app has none); never log it
        secure_home(self.home)
        from daemon.backends import tokens

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
        from daemon.backends.choice import choose_backend
        from daemon.backends.llm import LLM, api_key, endpoint_from

        s = settings or self.settings()
        embedded = self.embedded_server(s) if choose_backend(s).embedded else None
        if embedded is not None:
            from daemon.backends.for_commands import embedded_identity

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
        from daemon.backends.choice import choose_backend
        from daemon.backends.llm import endpoint_from, learned_window

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
            from daemon.backends.choice import embedded_model
            from daemon.backends.supervisor import Supervisor

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
            from daemon.backends.capabilities import CapabilityCache

            self._capabilities = CapabilityCache(
                self.store.capabilities, self.store.save_capabilities
            )
        return self._capabilities

    def directive_table(self, settings: Settings) -> dict:
        from daemon.directives import build_table

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
        from daemon.backends import tokens
        from daemon.execution import sandbox

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
            import logging

            logging.getLogger("lmd.core").debug("capability probe failed: %s", e)

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
        hub = self.state.get("mcp_hub")
        if hub is not None:
            await hub.close()  # the MCP servers lmd started end with it
        if self.embedded is not None:
            await self.embedded.stop()
        self.store.close()
