"""The public plugin API: daemon.api is light and complete, built-in plugins use nothing else,
the core names no built-in feature, and collect refuses what two plugins both claim."""

from __future__ import annotations

import ast
import re
import subprocess
import sys

import pytest

from daemon import api
from daemon.core.errors import LmdError
from daemon.core.registry import collect
from tests.daemons import ROOT, plugin_module

HEAVY = ("openai", "tiktoken", "numpy", "starlette", "hypercorn", "httpx", "httpx2")


def test_all_is_the_groups_and_every_name_resolves_with_a_summary():
    assert api.__all__ == [name for names in api.groups().values() for name in names]
    assert len(set(api.__all__)) == len(api.__all__)
    for name in api.__all__:
        assert getattr(api, name) is not None
        assert api.summary(name), f"{name} needs a docstring (docs/plugins.md shows it)"
    # The same objects as the private modules hold: one definition, re-exported.
    from daemon.core.modes import Mode
    from daemon.core.settings import Setting

    assert api.Mode is Mode and api.Setting is Setting
    assert api.tokens.count("hello") >= 1  # a module namespace, not an attribute


def test_the_type_checkers_imports_are_the_groups():
    """daemon/api.py names each public name once, in _GROUPS; its TYPE_CHECKING block (what
    editors and mypy read) must import the same names from the same modules."""
    tree = ast.parse((ROOT / "daemon" / "api.py").read_text())
    block = next(
        n for n in tree.body if isinstance(n, ast.If) and ast.unparse(n.test) == "TYPE_CHECKING"
    )
    imported = {}
    for node in block.body:
        assert isinstance(node, ast.ImportFrom), ast.unparse(node)
        for alias in node.names:
            name = alias.asname or alias.name
            whole = f"{node.module}.{alias.name}"
            imported[name] = whole if name in api._MODULES else node.module
    assert imported == api._WHERE


def test_an_unknown_name_is_one_sentence():
    with pytest.raises(AttributeError, match=r"^daemon\.api has no 'Store'; docs/plugins.md lists"):
        api.Store  # noqa: B018


def test_importing_the_api_and_the_plugins_registration_is_light():
    code = (
        "import sys, daemon.api;"
        "from daemon.api import hookimpl, Mode, Context, Setting, LmdError, home_option, fail;"
        f"print([m for m in {HEAVY!r} if m in sys.modules])"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"


# -- built-in plugins import only daemon.api -------------------------------------------------
def private_imports(source: str, filename: str) -> list[str]:
    """file:line of each import of a daemon module other than daemon.api."""
    found = []
    for node in ast.walk(ast.parse(source, filename)):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            if node.module == "daemon":
                names = [a.name for a in node.names if a.name != "api"]
            elif node.module.startswith("daemon.") and node.module != "daemon.api":
                names = [node.module]
            else:
                names = []
        elif isinstance(node, ast.Import):
            names = [
                a.name for a in node.names if a.name.startswith("daemon") and a.name != "daemon.api"
            ]
        else:
            continue
        found += [f"{filename}:{node.lineno} imports {n}" for n in names]
    return found


def test_builtin_plugins_import_only_the_public_api():
    found = []
    for path in sorted((ROOT / "plugins").rglob("*.py")):
        found += private_imports(path.read_text(), str(path.relative_to(ROOT)))
    assert found == [], "plugins may import only daemon.api:\n" + "\n".join(found)


def test_the_import_rule_catches_private_modules():
    planted = (
        "from daemon.api import Mode\n"
        "import daemon.api\n"
        "from daemon import api\n"
        "from daemon.core import collect\n"
        "def f():\n"
        "    from daemon import tokens\n"
        "    import daemon.http.app\n"
        "from .sibling import x\n"
    )
    assert private_imports(planted, "plugins/x.py") == [
        "plugins/x.py:4 imports daemon.core",
        "plugins/x.py:6 imports tokens",
        "plugins/x.py:7 imports daemon.http.app",
    ]


# -- the core names no built-in feature ------------------------------------------------------
def builtin_names() -> tuple[set[str], set[str]]:
    """(the built-in plugins' entry-point names, the settings they declare)."""
    import importlib.util
    import tomllib

    entry = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["entry-points"]
    spec = importlib.util.spec_from_file_location("docgen", ROOT / "docs" / "docgen.py")
    docgen = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(docgen)
    settings = {s.name for s in docgen.builtin_settings() if s.plugin != "core"}
    return set(entry["lmd"]), settings


def core_references(source: str, filename: str, settings: set[str]) -> list[str]:
    """Places where core code imports plugins, names a path into plugins/, or reads a
    built-in plugin's setting by name."""
    found = []
    for node in ast.walk(ast.parse(source, filename)):
        modules = []
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            modules = [node.module]
        elif isinstance(node, ast.Import):
            modules = [a.name for a in node.names]
        found += [
            f"{filename}:{node.lineno} imports {m}"
            for m in modules
            if m == "plugins" or m.startswith("plugins.")
        ]
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            text = node.value
            if re.search(r"(?<![\w/])plugins[/.](?!md\b)\w", text) or text in settings:
                found.append(f"{filename}:{node.lineno} names {text[:60]!r}")
    for m in re.finditer(r"/\s*[\"']plugins[\"']", source):  # a path joined onto plugins/
        found.append(f"{filename}:{source.count(chr(10), 0, m.start()) + 1} names 'plugins'")
    return sorted(found, key=lambda place: int(place.split(":")[1].split()[0]))


def test_the_core_names_no_builtin_plugin():
    _, settings = builtin_names()
    found = []
    for path in sorted((ROOT / "daemon").glob("*.py")):
        found += core_references(path.read_text(), f"daemon/{path.name}", settings)
    assert found == [], "the core must not name a built-in feature:\n" + "\n".join(found)


def test_the_core_rule_finds_plugin_imports_paths_and_setting_names():
    _, settings = builtin_names()
    assert "marat_approval" in settings
    planted = (
        "from plugins.lm_score.client import LM_SCORE\n"
        "import plugins.marat\n"
        'FILES = Path(__file__).parent.parent / "plugins"\n'
        'x = settings.get("marat_approval")\n'
        'y = "see plugins/selectit/rating_prompts.txt"\n'
        'z = "plugins in general are fine"\n'
    )
    assert core_references(planted, "daemon/x.py", settings) == [
        "daemon/x.py:1 imports plugins.lm_score.client",
        "daemon/x.py:2 imports plugins.marat",
        "daemon/x.py:3 names 'plugins'",
        "daemon/x.py:4 names 'marat_approval'",
        "daemon/x.py:5 names 'see plugins/selectit/rating_prompts.txt'",
    ]


# -- collect: who registered what, and no two claims on one name -----------------------------
def manager(**sources: str):
    """A plugin manager holding only the given plugins (name -> source)."""
    import pluggy

    from daemon import hookspecs

    pm = pluggy.PluginManager("lmd")
    pm.add_hookspecs(hookspecs)
    for name, source in sources.items():
        pm.register(plugin_module(name, source), name=name)
    return pm


def routes(*lines: str) -> str:
    body = "\n".join(f"    register({line})" for line in lines)
    return (
        "from daemon.api import hookimpl\n"
        "async def ep(request): ...\n"
        f"@hookimpl\ndef register_routes(register):\n{body}\n"
    )


def test_routes_are_attributed_to_their_plugin():
    reg = collect(manager(a=routes('"/a", ep, methods=["GET"]'), b=routes('"/a", ep, ["POST"]')))
    assert [(r.path, r.methods, r.plugin) for r in reg.routes] == [
        ("/a", ["GET"], "a"),
        ("/a", ["POST"], "b"),
    ]  # one path, two methods: no clash
    from daemon.plugins import load_plugins

    owners = {r.path: r.plugin for r in collect(load_plugins()).routes}
    assert owners["/lm_score"] == "lm_score" and owners["/v1/chat/completions"] == "clients"


@pytest.mark.parametrize(
    ("plugins", "sentence"),
    [
        (
            {"a": routes('"/x", ep, methods=["GET"]'), "b": routes('"/x", ep, methods=["get"]')},
            "Plugins a and b both register the route GET /x; remove one of them, or choose "
            "the plugins to load with LMD_LOAD_PLUGINS.",
        ),
        (
            {"a": routes('"/x/{id}", ep, ["PUT"]'), "b": routes('"/x/{name:str}", ep, ["PUT"]')},
            "Plugins a and b both register the route PUT /x/{};",
        ),
        ({"a": routes('"/x", ep', '"/x", ep')}, "Plugin a registers the route GET /x twice;"),
    ],
)
def test_a_route_registered_twice_is_refused_naming_both(plugins, sentence):
    with pytest.raises(LmdError) as e:
        collect(manager(**plugins))
    assert e.value.message.startswith(sentence)


def test_a_mode_or_setting_registered_twice_is_refused_naming_both():
    mode = (
        "from daemon.api import Mode, hookimpl\n"
        "async def respond(ctx):\n    yield 'x'\n"
        "@hookimpl\ndef register_modes(register):\n    register(Mode('twin', respond))\n"
    )
    with pytest.raises(LmdError, match=r"^Plugins a and b both register a mode called twin;"):
        collect(manager(a=mode, b=mode))
    setting = (
        "from daemon.api import Setting, hookimpl\n"
        "@hookimpl\ndef register_settings(register):\n    register(Setting('{}', 1, 'int'))\n"
    )
    with pytest.raises(LmdError, match=r"^Plugins a and b both register the setting s1;"):
        collect(manager(a=setting.format("s1"), b=setting.format("s1")))
    with pytest.raises(LmdError) as e:
        collect(manager(a=setting.format("max_tokens")))
    assert e.value.message == (
        "Plugin a registers the setting max_tokens, which is the core's own; rename it."
    )


def test_a_plugin_route_over_a_core_route_is_refused(home):
    from daemon.http.app import create_app

    with pytest.raises(LmdError) as e:
        create_app(home=home, pm=manager(a=routes('"/v1", ep, methods=["POST"]')))
    assert e.value.message.startswith(
        "Plugin a registers the route POST /v1, which is the core's own;"
    )


# -- what moved out of the core -------------------------------------------------------------
def test_modes_declare_their_spoken_aliases_and_the_setting_adds_more(make_client, backend):
    from daemon.core.core_settings import CORE_SETTINGS

    assert next(s for s in CORE_SETTINGS if s.name == "directive_aliases").default == {}
    c = make_client(directive_aliases={"dali": ["chatty"]})
    for said in ("Dolly, hi", "chatty: hi", "dali hi"):
        r = c.post("/v1", content=said, headers={"Accept": "application/json"})
        assert r.json()["mode"] == "dali", said
    assert [b["messages"][-1]["content"] for b in backend.chat_requests] == ["hi"] * 3


def test_history_listings_come_from_plugins():
    from click.testing import CliRunner

    from daemon.cli import cli

    out = CliRunner().invoke(cli, ["history", "--help"]).output
    assert "--commands" in out and "Commands marat ran" in out  # marat's, added by marat
    assert "marat" not in (ROOT / "daemon" / "cli.py").read_text()


def test_a_plugin_adds_a_history_listing_and_its_flag(home):
    import click
    from click.testing import CliRunner

    from daemon.cli import add_history_listing, cli

    @click.command("notes")
    @click.option("--session", "-s")
    @click.option("--limit", "-n", type=int)
    @click.option("--json", "as_json", is_flag=True)
    @click.option("--home")
    def notes(session, limit, as_json, home):
        """Notes a plugin keeps."""
        click.echo(f"notes {session} {limit} {as_json}")

    history = cli.commands["history"]
    add_history_listing(cli, notes, "Notes instead.")
    try:
        run = CliRunner().invoke
        out = run(cli, ["history", "--notes", "-s", "k", "-n", "3", "--json", "--home", str(home)])
        assert out.output == "notes k 3 True\n"  # the history options, handed on
        assert run(cli, ["history", "notes", "-s", "k"]).output == "notes k None False\n"
        assert "--notes" in run(cli, ["history", "--help"]).output
        both = run(cli, ["history", "--commands", "--notes", "--home", str(home)])
        assert both.exit_code == 1 and both.stderr == "Give only one of --commands, --notes.\n"
    finally:  # the group is the process's own: leave it as it was
        del history.commands["notes"]
        history.params = [p for p in history.params if p.name != "listing_notes"]
        del history.listings["listing_notes"]
