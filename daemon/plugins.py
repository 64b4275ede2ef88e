"""The plugin manager: built-ins and third-party plugins load from the `lmd` entry points."""

from __future__ import annotations

import importlib
import os
import re
import sys

import pluggy

from daemon import hookspecs

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


def entry_points(group: str = "lmd") -> list[tuple[str, str]]:
    """(name, value) of each entry point in `group`, as importlib.metadata lists them."""
    found = scan_entry_points(group)
    if found is None:
        # importlib.metadata costs `lmd --help` ~25 ms: only where the scan is unsure
        from importlib.metadata import entry_points as from_metadata

        found = [(ep.name, ep.value) for ep in from_metadata(group=group)]
    return found


def scan_entry_points(group: str, path: list[str] | None = None) -> list[tuple[str, str]] | None:
    """Read entry_points.txt of each distribution on sys.path, or None when unsure.

    Importing importlib.metadata costs `lmd --help` about 25 ms; this reads the same files in
    the same order (sys.path order, one distribution per normalised name, the first found
    wins). Zip files and old-style .egg entries are left to importlib.metadata.
    """
    seen: set[str] = set()
    found = []
    marker = group.encode()
    for entry in sys.path if path is None else path:
        root = entry or "."
        try:
            names = os.listdir(root)
        except NotADirectoryError:
            return None
        except OSError:
            continue
        infos: dict[str, list[str]] = {}
        for name in names:
            low = name.lower()
            if low.endswith(".egg"):
                return None
            if low.endswith((".dist-info", ".egg-info")):
                dist = re.sub(r"[-_.]+", "_", name.rpartition(".")[0].partition("-")[0]).lower()
                infos.setdefault(dist, []).append(name)
        for dist, dirs in infos.items():
            if dist in seen:
                continue
            seen.add(dist)
            try:
                with open(os.path.join(root, dirs[0], "entry_points.txt"), "rb") as f:
                    raw = f.read()
            except OSError:
                continue
            if marker not in raw:  # most distributions have console scripts only
                continue
            section = None
            for line in raw.decode("utf-8").splitlines():
                line = line.strip()
                if not line or line[0] in "#;":
                    continue
                if line[0] == "[" and line[-1] == "]":
                    section = line[1:-1].strip()
                elif section == group and "=" in line:
                    name, _, value = line.partition("=")
                    found.append((name.strip(), value.strip()))
    return found


def load_plugins(wanted: set[str] | None = None) -> pluggy.PluginManager:
    """A fresh manager with the entry-point plugins (filtered by LMD_LOAD_PLUGINS)."""
    pm = pluggy.PluginManager("lmd")
    pm.add_hookspecs(hookspecs)
    wanted = wanted_plugins() if wanted is None else wanted
    seen = set()
    for name, value in entry_points("lmd"):
        if name in seen or (wanted is not None and name not in wanted):
            continue
        seen.add(name)
        try:
            module = importlib.import_module(value)
        except Exception as e:  # a broken plugin must not take the CLI down
            print(f"lmd: plugin {name} failed to load ({e}); skipping it.", file=sys.stderr)
            continue
        pm.register(module, name=name)
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
