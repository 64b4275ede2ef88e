"""How `make test` hands test files to its xdist workers: pytest-xdist's `--dist loadgroup`
scheduler (a group's tests on one worker), each test in the group of its file (as `--dist
loadfile` would), with a few groups larger than a file.

The groups are given to the scheduler through its public interface: the collection a worker
reports is handed on with each test id ending in `@group`, as pytest-xdist's own
`xdist_group` marks would make it (those no longer reach the ids under pytest 9.2, which keeps
a node's id apart from the attribute xdist sets). The scheduler sends tests by index, so the
workers run the tests they collected, under their own ids.

The real-model tier's files (those with a test or fixture that takes the `real_model`,
`small_model` or `python_server` fixture) are a group each, among the costly ones: a worker
that runs one starts the servers it takes, once (llama-server over the bundled model: 0.3
CPU-seconds; llama-cpp-python's server: 0.6), and the run probes each kind of server once
(tests/real_model.py, in the directory the workers share). As one unit, the tier was the
longest chain of the run (201 s of 350 on a quiet machine).

The journeys tier (tests/journeys/: its daemons on the embedded model, one per Unix user,
started once and shared by the tier's files) is two more units: its runs as root, and its
runs as the ordinary user, each on one worker (the two share nothing, so they run side by
side).

The local-model files (those that import torch or transformers into the worker, through
`pytest.importorskip`) go to one worker as another unit: each worker that imports them and
loads a model through transformers pays some 7 CPU-seconds (torch, transformers' modelling
code), once.

The units are handed out costliest first (`costly_first`, the collection's order, which the
scheduler keeps: tests/conftest.py turns xdist's reordering by test count off): the units
larger than a file, then the files marked `slow`, then the rest by their number of tests. By
test count alone the journeys' two units (28 tests each, two minutes and more) came 27th and
28th of 144, and the run's last minutes were theirs alone.
"""

from __future__ import annotations

import ast
from functools import cache
from pathlib import Path

from xdist.scheduler import LoadGroupScheduling

MODEL_FIXTURES = {"real_model", "small_model", "python_server"}
LOCAL_MODEL_FILES = "the local-model files"
JOURNEYS = "the journeys tier"
LOCAL_MODEL_MODULES = {"torch", "transformers"}


def _tree(path: Path, *names: str) -> ast.AST | None:
    """The module's syntax tree, or None where it cannot hold any of `names` (a file that
    never spells one is not parsed: every worker sorts the whole collection by unit)."""
    if path.suffix != ".py":
        return None
    try:
        source = path.read_bytes()
        if not any(name.encode() in source for name in names):
            return None
        return ast.parse(source)
    except (OSError, SyntaxError):
        return None  # pytest reports it when it collects the file


@cache
def uses_real_model(path: Path) -> bool:
    """Whether a test file has a test (or fixture) that takes the real-model fixtures."""
    tree = _tree(path, *MODEL_FIXTURES)
    return tree is not None and any(
        arg.arg in MODEL_FIXTURES
        for node in ast.walk(tree)
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
        for arg in node.args.args + node.args.kwonlyargs
    )


@cache
def uses_local_model(path: Path) -> bool:
    """Whether a test file imports torch or transformers: `pytest.importorskip("torch")`."""
    tree = _tree(path, "importorskip")
    return tree is not None and any(
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr == "importorskip"
        and node.args
        and isinstance(node.args[0], ast.Constant)
        and node.args[0].value in LOCAL_MODEL_MODULES
        for node in ast.walk(tree)
    )


def group_of(path: Path, root: Path, nodeid: str = "") -> str:
    """The xdist group of a test (`nodeid`) collected from `path`: its file (relative to
    `root`), or one of the units larger than a file."""
    rel = path.relative_to(root).as_posix() if path.is_relative_to(root) else str(path)
    if rel.startswith("tests/journeys/"):
        return f"{JOURNEYS} as {'the user' if nodeid.endswith('[user]') else 'root'}"
    if uses_local_model(path):
        return LOCAL_MODEL_FILES
    return rel


LARGER_THAN_A_FILE = (LOCAL_MODEL_FILES, JOURNEYS)


def costly_first(items: list, root: Path) -> None:
    """Sort collected `items` (in place, stably) so that each unit's first test comes in the
    order its unit should start: the units larger than a file, then the modules with a test
    marked `slow` or on the real model, then the rest, each part by number of tests (most
    first)."""
    groups = [group_of(item.path, root, item.nodeid) for item in items]
    slow = {item.path for item in items if item.get_closest_marker("slow")}
    slow |= {path for path in {item.path for item in items} if uses_real_model(path)}
    count: dict[str, int] = {}
    rank: dict[str, int] = {}
    for item, group in zip(items, groups, strict=True):
        count[group] = count.get(group, 0) + 1
        big = group.startswith(LARGER_THAN_A_FILE)
        rank[group] = min(rank.get(group, 2), 0 if big else 1 if item.path in slow else 2)
    order = {id(item): (rank[g], -count[g]) for item, g in zip(items, groups, strict=True)}
    items.sort(key=lambda item: order[id(item)])


class Scheduling(LoadGroupScheduling):
    """loadgroup, with every test in its group (group_of) whatever its marks say."""

    def add_node_collection(self, node, collection) -> None:  # noqa: ANN001 (xdist's types)
        root = self.config.rootpath
        grouped = [
            f"{nodeid}@{group_of(root / nodeid.split('::')[0], root, nodeid)}"
            for nodeid in collection
        ]
        super().add_node_collection(node, grouped)
