"""How lmd's modules import each other: at the top, in no circle, lazily only at the doors.

The doors are where a command or a plugin is picked before its code is needed: the CLI's
dispatch (daemon/cli.py, daemon/lazy.py, daemon/plugins.py), the public API (daemon/api.py,
which resolves a name on first use) and each plugin's entry module. Behind them a module
imports at its top; the few imports left inside a function say why on their line or the line
above (an optional extra, a module kept off a light command's path).
"""

from __future__ import annotations

import ast
from pathlib import Path

from tests.daemons import ROOT

DOORS = {"daemon/cli.py", "daemon/lazy.py", "daemon/plugins.py", "daemon/api.py"}
PENDING: tuple[str, ...] = ()  # folders not yet held to the rule (none)


def modules() -> dict[str, Path]:
    """Every module of daemon/ and plugins/ by dotted name."""
    found = {}
    for root in ("daemon", "plugins"):
        for path in sorted((ROOT / root).rglob("*.py")):
            parts = list(path.relative_to(ROOT).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            found[".".join(parts)] = path
    return found


def is_door(rel: str) -> bool:
    """The CLI's dispatch, the public API, and a plugin's entry module (its __init__.py, or
    the one file of a single-module plugin)."""
    parts = rel.split("/")
    return (
        rel in DOORS
        or (parts[0] == "plugins" and parts[-1] == "__init__.py" and len(parts) == 3)
        or (parts[0] == "plugins" and len(parts) == 2 and parts[1] != "__init__.py")
    )


def function_imports(source: str) -> list[tuple[ast.stmt, bool]]:
    """The import statements inside a function (at any depth), each with whether it sits in a
    `try` that catches ImportError (an optional package, whose absence the handler says)."""
    found: list[tuple[ast.stmt, bool]] = []

    def walk(node: ast.AST, inside: bool, guarded: bool) -> None:
        for child in ast.iter_child_nodes(node):
            if inside and isinstance(child, (ast.Import, ast.ImportFrom)):
                found.append((child, guarded))
            catches = isinstance(child, ast.Try) and any(
                "ImportError" in ast.unparse(h.type or ast.Name("BaseException"))
                for h in child.handlers
            )
            walk(
                child,
                inside or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)),
                guarded or catches,
            )

    walk(ast.parse(source), False, False)
    return found


def unexplained(source: str, rel: str) -> list[str]:
    """rel:line of each function-level import that says no reason: none on its line, none on
    a comment line above it or above the imports right before it, no ImportError handler."""
    lines = source.splitlines()
    out = []
    for node, guarded in function_imports(source):
        if guarded or "#" in lines[node.lineno - 1]:
            continue
        i = node.lineno - 2
        while i >= 0 and lines[i].strip().startswith(("import ", "from ")):
            i -= 1
        if i < 0 or not lines[i].strip().startswith("#"):
            out.append(f"{rel}:{node.lineno} {ast.unparse(node)}")
    return out


def test_imports_inside_functions_are_at_the_doors_or_say_why():
    found = []
    for path in modules().values():
        rel = str(path.relative_to(ROOT))
        if is_door(rel) or rel.startswith(PENDING):
            continue
        found += unexplained(path.read_text(), rel)
    assert found == [], "import at the top, or say why not:\n" + "\n".join(found)


def test_the_rule_finds_an_unexplained_import_and_takes_a_reason():
    source = (
        "import os\n"
        "def f():\n"
        "    import json\n"
        "    # the mcp extra is optional\n"
        "    import mcp\n"
        "    import mcp.client\n"
        "    import torch  # the local extra\n"
        "    try:\n"
        "        import ray\n"
        "    except ImportError:\n"
        "        raise SystemExit('the ray extra is not installed')\n"
        "    def g():\n"
        "        from . import sibling\n"
    )
    assert unexplained(source, "x.py") == ["x.py:3 import json", "x.py:13 from . import sibling"]
    assert is_door("plugins/marat/__init__.py") and is_door("plugins/dali.py")
    assert not is_door("plugins/marat/loop.py") and not is_door("daemon/core/store.py")


def import_graph() -> dict[str, set[str]]:
    """module -> the lmd modules it imports when it is imported (module level, outside
    TYPE_CHECKING); importing a.b.c counts as importing a.b.c only (its packages were
    imported already on the way)."""
    mods = modules()
    graph: dict[str, set[str]] = {}
    for name, path in mods.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        edges: set[str] = set()
        for node in ast.parse(path.read_text()).body:
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    up = package.split(".")[: len(package.split(".")) - node.level + 1]
                    base = ".".join([*up, *([node.module] if node.module else [])])
                targets = [
                    f"{base}.{a.name}" if f"{base}.{a.name}" in mods else base for a in node.names
                ]
            else:
                continue
            for target in targets:
                while target and target not in mods:
                    target = target.rpartition(".")[0]
                if target and target != name:
                    edges.add(target)
        graph[name] = edges
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected groups of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                group.append(w)
                if w == v:
                    break
            if len(group) > 1:
                found.append(sorted(group))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_no_module_imports_in_a_circle():
    assert cycles(import_graph()) == []


def test_the_circle_finder_finds_one():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
