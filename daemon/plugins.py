"""The plugin manager: built-ins and third-party plugins load from the `lmd` entry points."""

from __future__ import annotations

import importlib
import os
import sys
from importlib.metadata import entry_points

import pluggy

from . import hookspecs

_pm: pluggy.PluginManager | None = None


def wanted_plugins() -> set[str] | None:
    """Names from LMD_LOAD_PLUGINS (comma separated), or None for all."""
    raw = os.environ.get("LMD_LOAD_PLUGINS")
    if raw is None:
        return None
    return {name.strip() for name in raw.split(",") if name.strip()}


def get_plugin_manager() -> pluggy.PluginManager:
    """The process-wide plugin manager, loaded on first use."""
    global _pm
    if _pm is None:
        _pm = load_plugins()
    return _pm


def load_plugins(wanted: set[str] | None = None) -> pluggy.PluginManager:
    """A fresh manager with the entry-point plugins (filtered by LMD_LOAD_PLUGINS)."""
    pm = pluggy.PluginManager("lmd")
    pm.add_hookspecs(hookspecs)
    wanted = wanted_plugins() if wanted is None else wanted
    seen = set()
    for ep in entry_points(group="lmd"):
        if ep.name in seen or (wanted is not None and ep.name not in wanted):
            continue
        seen.add(ep.name)
        try:
            module = importlib.import_module(ep.value)
        except Exception as e:  # a broken plugin must not take the CLI down
            print(f"lmd: plugin {ep.name} failed to load ({e}); skipping it.", file=sys.stderr)
            continue
        pm.register(module, name=ep.name)
    return pm


def reset_plugin_manager(pm: pluggy.PluginManager | None = None) -> None:
    """Replace the process-wide manager (tests use this)."""
    global _pm
    _pm = pm


def describe(pm: pluggy.PluginManager) -> list[dict]:
    """Each plugin with the hooks it implements."""
    rows = []
    for name, plugin in pm.list_name_plugin():
        hooks = sorted(h.name for h in pm.get_hookcallers(plugin) or [])
        rows.append(
            {"name": name, "module": getattr(plugin, "__name__", str(plugin)), "hooks": hooks}
        )
    return rows
