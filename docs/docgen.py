"""What cog writes into the docs and settings.sql, from the code itself.

Run `make docs` after changing a Setting, a command, daemon.api or the sample plugin;
`make lint` and tests/core/test_docs.py fail while a generated part is stale. Only the
built-in plugins (the `lmd` entry points of this repository's pyproject.toml) are
documented, whatever else happens to be installed, so the output is the same on every
machine.
"""

from __future__ import annotations

import importlib
import tomllib
from pathlib import Path

import click
import pluggy
from click.testing import CliRunner

ROOT = Path(__file__).resolve().parent.parent

# Where each built-in plugin is explained (settings.md links there).
PAGES = {
    "core": ("Core", "concepts.md"),
    "marat": ("marat", "marat.md"),
    "settings_mode": ("knob, the settings mode", "knob.md"),
    "cobol": ("cobol", "cobol.md"),
    "lm_score": ("LM_SCORE", "lm_score.md"),
    "selectit": ("SelectIT", "selectit.md"),
    "elo": ("Elo arena", "elo.md"),
    "clients": ("Clients", "clients.md"),
}


def builtin_entry_points() -> dict[str, str]:
    """name -> module of the built-in plugins, as pyproject.toml lists them."""
    with open(ROOT / "pyproject.toml", "rb") as f:
        return tomllib.load(f)["project"]["entry-points"]["lmd"]


def builtin_plugin_manager() -> pluggy.PluginManager:
    """A plugin manager holding exactly the built-in plugins (no third-party ones)."""
    from daemon import hookspecs

    pm = pluggy.PluginManager("lmd")
    pm.add_hookspecs(hookspecs)
    for name, module in builtin_entry_points().items():
        pm.register(importlib.import_module(module), name=name)
    return pm


def builtin_settings() -> list:
    """Every built-in Setting: the core's first, then each plugin's in pyproject order."""
    from daemon.core import collect

    specs = list(collect(builtin_plugin_manager()).specs.values())
    order = ["core", *builtin_entry_points()]
    return sorted(specs, key=lambda s: order.index(s.plugin))  # stable: declaration order kept


def _by_plugin(specs: list) -> dict[str, list]:
    groups: dict[str, list] = {}
    for spec in specs:
        groups.setdefault(spec.plugin, []).append(spec)
    return groups


def _sql_text(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def settings_sql() -> str:
    """One commented INSERT OR IGNORE per built-in setting, grouped by plugin."""
    out = []
    for plugin, specs in _by_plugin(builtin_settings()).items():
        out.append(f"\n-- == {plugin} ==\n")
        for spec in specs:
            note = f"{spec.help} Allowed: {spec.allowed()}."
            if spec.protected:
                note += " Protected."
            out.append("-- " + " ".join(note.split()) + "\n")
            out.append(
                "INSERT OR IGNORE INTO settings (name, value) VALUES "
                f"({_sql_text(spec.name)}, {_sql_text(spec.dump(spec.default))});\n"
            )
    return "".join(out)


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def settings_tables() -> str:
    """The settings reference: one table per plugin."""
    out = []
    for plugin, specs in _by_plugin(builtin_settings()).items():
        title, page = PAGES.get(plugin, (plugin, None))
        out.append(f"\n## {title}\n\n")
        source = "`daemon/core_settings.py`" if plugin == "core" else f"the plugin `{plugin}`"
        where = f"; explained in [{page.removesuffix('.md')}]({page})" if page else ""
        out.append(f"Declared by {source}{where}.\n\n")
        out.append("| setting | default | allowed | meaning |\n|---|---|---|---|\n")
        for spec in specs:
            default = spec.dump(spec.default)
            shown = f"`{_cell(default)}`" if default else "*(empty)*"
            meaning = spec.help + (" **Protected.**" if spec.protected else "")
            out.append(
                f"| `{spec.name}` | {shown} | {_cell(spec.allowed())} | {_cell(meaning)} |\n"
            )
    return "".join(out)


def builtin_cli() -> click.Group:
    """The `lmd` group with the core commands and the built-in plugins' commands only."""
    from daemon.cli import cli

    group = click.Group(name="lmd", help=cli.help, params=list(cli.params))
    from daemon.lazy import LazyCommand

    for name, command in cli.commands.items():
        lazy = isinstance(command, LazyCommand) and command.target.startswith("daemon.")
        if lazy or (command.callback and command.callback.__module__ or "").startswith("daemon."):
            group.add_command(command, name)
    builtin_plugin_manager().hook.register_commands(cli=group)
    resolve_all(group)
    return group


def resolve_all(group: click.Group) -> None:
    """Replace every LazyCommand in `group` and its subgroups by the real command."""
    from daemon.lazy import resolve

    for name in list(group.commands):
        command = resolve(group, name)
        if isinstance(command, click.Group):
            resolve_all(command)


def _help_texts(group: click.Group, path: tuple[str, ...] = ()) -> list[tuple[str, str]]:
    runner = CliRunner()
    found = []
    result = runner.invoke(group, [*path, "--help"], prog_name="lmd", terminal_width=88)
    found.append((" ".join(("lmd", *path)), result.output))
    command: click.Command = group
    for part in path:
        command = command.commands[part]  # type: ignore[attr-defined]
    if isinstance(command, click.Group):
        for name in sorted(command.commands):
            found.extend(_help_texts(group, (*path, name)))
    return found


def cli_help() -> str:
    """`--help` of every command and subcommand, as the CLI prints it."""
    out = []
    for name, text in _help_texts(builtin_cli()):
        out.append(f"\n### `{name}`\n\n```\n{text.rstrip()}\n```\n")
    return "".join(out)


def sample_plugin() -> str:
    """The third-party plugin the tests install, shown whole."""
    out = []
    folder = ROOT / "tests" / "sample_plugin"
    for path in sorted(folder.rglob("*")):
        if path.suffix not in (".py", ".toml") or "__pycache__" in path.parts:
            continue
        lang = "python" if path.suffix == ".py" else "toml"
        rel = path.relative_to(ROOT).as_posix()
        out.append(f"\n`{rel}`:\n\n```{lang}\n{path.read_text().rstrip()}\n```\n")
    return "".join(out)


def public_api() -> str:
    """docs/plugins.md's list of daemon.api: each name with its one-line docs, by group."""
    from daemon import api

    out = []
    for title, names in api.groups().items():
        out.append(f"\n**{title}**\n\n| name | what |\n|---|---|\n")
        out.extend(f"| `{name}` | {_cell(api.summary(name))} |\n" for name in names)
    return "".join(out)
