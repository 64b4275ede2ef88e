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
    from daemon.core.registry import collect

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
        source = "`daemon/core/core_settings.py`" if plugin == "core" else f"the plugin `{plugin}`"
        where = f"; explained in [{page.removesuffix('.md')}]({page})" if page else ""
        out.append(f"Declared by {source}{where}.\n\n")
        out.append("| setting | default | allowed | meaning |\n|---|---|---|---|\n")
        for spec in specs:
            default = spec.dump(spec.default)
            shown = f"`{_cell(default)}`" if default else "*(empty)*"
            shapes = ", ".join(spec.shapes)
            meaning = spec.help + (f" **Protected ({shapes}).**" if spec.protected else "")
            out.append(
                f"| `{spec.name}` | {shown} | {_cell(spec.allowed())} | {_cell(meaning)} |\n"
            )
    return "".join(out)


def protected_settings() -> str:
    """The protected settings by what they shape (daemon.core.settings.SHAPES)."""
    from daemon.core.settings import SHAPES

    specs = builtin_settings()
    out = ["| shapes | what that is | the settings |\n|---|---|---|\n"]
    for shape, meaning in SHAPES.items():
        names = ", ".join(f"`{s.name}`" for s in specs if shape in s.shapes)
        out.append(f"| {shape} | {_cell(meaning)} | {names} |\n")
    return "".join(out)


def rule_reading() -> str:
    """What daemon/agent/effective.py knows: wrappers, interpreters, programs' moving options."""
    from daemon.agent import effective

    def names(items) -> str:
        return ", ".join(f"`{n}`" for n in sorted(items))

    out = [
        "| kind | programs |\n|---|---|\n",
        f"| wrappers (what they run is read) | {names(effective.WRAPPERS)} |\n",
        f"| shells (`-c` scripts are read) | {names(effective.SHELLS)} |\n",
        f"| interpreters (their code is not read) | {names(effective.INTERPRETERS)}, "
        "`python3.X`, `pypy3.X` |\n",
        "\n| program | options that move it (no allow rule covers them) |\n|---|---|\n",
    ]
    for program, grammar in sorted(effective.GRAMMARS.items()):
        if grammar.moving:
            extra = ", `NAME=value`" if program in ("make", "gmake") else ""
            out.append(f"| `{program}` | {names(grammar.moving)}{extra} |\n")
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


# -- the layout of docs/development.md ------------------------------------------------------

LAYOUT_TOP = [
    (
        "pyproject.toml",
        'distribution "lmd"; console script `lmd`; the `lmd` entry points list'
        " the built-in plugins exactly as a third-party plugin lists itself",
    ),
    ("settings.sql", "the settings table and every built-in default (generated: make docs)"),
]
LAYOUT_BOTTOM = [
    ("examples/", "the sample files the docs' examples use"),
    ("docs/", "these pages; docgen.py is what cog runs to fill their generated parts"),
    (
        "tests/",
        "core/, system/ (whole daemon), plugins/<name>/ and journeys/, a conftest.py"
        " each; fake_backend.py (the stand-in model server) and daemons.py are shared",
    ),
    ("benchmarks/", "scripts that print ratios (`make bench`)"),
]


def _first_line(path: Path) -> str:
    """The first sentence-line of a module's docstring (a package's: its __init__.py)."""
    import ast

    doc = ast.get_docstring(ast.parse(path.read_text(encoding="utf-8"))) or ""
    return " ".join(doc.split("\n\n")[0].split()).split(". ")[0].rstrip(".")


def _layout_rows(directory: Path, depth: int, whole: bool) -> list[tuple[int, str, str]]:
    """(depth, name, description) for a package's modules and subpackages, in name order;
    only the packages and single-file modules of the top level unless `whole`."""
    rows = []
    for child in sorted(directory.iterdir(), key=lambda p: (p.is_dir(), p.name)):
        if child.name.startswith(("_", ".")):
            continue
        if child.is_dir() and (child / "__init__.py").exists():
            rows.append((depth, child.name + "/", _first_line(child / "__init__.py")))
            if whole:
                rows += _layout_rows(child, depth + 1, whole)
        elif child.suffix == ".py":
            rows.append((depth, child.name, _first_line(child)))
    return rows


def layout() -> str:
    """The repository's layout from the code: each module's first docstring line."""
    import textwrap

    rows = [(0, name, text) for name, text in LAYOUT_TOP]
    for package, whole in (("daemon", True), ("plugins", False)):
        rows.append((0, package + "/", _first_line(ROOT / package / "__init__.py")))
        rows += _layout_rows(ROOT / package, 1, whole)
    rows += [(0, name, text) for name, text in LAYOUT_BOTTOM]
    column = 24
    out = ["```\n"]
    for depth, name, text in rows:
        left = "  " * depth + name
        lead = left.ljust(column - 1) + " " if len(left) < column else left + "\n" + " " * column
        lines = textwrap.wrap(text, 100 - column) or [""]
        out.append(lead + lines[0] + "\n")
        out += [" " * column + line + "\n" for line in lines[1:]]
    out.append("```\n")
    return "".join(out)
