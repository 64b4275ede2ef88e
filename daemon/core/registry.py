"""What the plugins registered: modes, settings, routes and migrations, collected through the
register_* hooks, with one sentence for a name two plugins claim."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import pluggy

from daemon.core.core_settings import CORE_SETTINGS
from daemon.core.errors import LmdError
from daemon.core.modes import Mode
from daemon.core.settings import Setting, SettingError, Settings


def check_setting(registry: Registry, name: str, value: Any) -> None:
    """Rules that need the registry: default_prompt must name a registered mode."""
    if name == "default_prompt" and value not in registry.modes:
        raise SettingError(
            f"default_prompt cannot be {value!r}: there is no such mode; it must be one of "
            f"{', '.join(sorted(registry.modes))}."
        )


def parse_setting(registry: Registry, name: str, raw: Any) -> Any:
    """A new value for a setting, checked like every way of setting it (CLI, HTTP, knob)."""
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


def collect(pm: pluggy.PluginManager, *, routes: bool = True) -> Registry:
    """Call the register_* hooks; refuse a setting, mode or route registered twice with one
    sentence naming both plugins. Without `routes`, register_routes is not called: a command
    on the database needs no routes, nor their modules (starlette and the features' code)."""
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
    for impl in pm.hook.register_routes.get_hookimpls() if routes else []:

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
