"""How `make test` hands test files to its xdist workers: pytest-xdist's `--dist loadfile`
(a file's tests on one worker, files with the most tests first), with two changes.

The real-model tier's files (those with a test or fixture that takes the `real_model`,
`small_model` or `python_server` fixture) go to one worker as one unit: every worker that ran
one of them started the model servers (seconds of CPU each, on a CPU-bound run), and one
worker reading the tier's prompts in a row reuses their common prefixes.

The local-model files (those that import torch or transformers into the worker, through
`pytest.importorskip`) go to one worker as another unit: each worker that imports them and
loads a model through transformers pays some 7 CPU-seconds (torch, transformers' modelling
code), once.
"""

from __future__ import annotations

import ast
from functools import cache
from pathlib import Path

from xdist.scheduler import LoadFileScheduling

REAL_MODEL_TIER = "the real-model tier"
MODEL_FIXTURES = {"real_model", "small_model", "python_server"}
LOCAL_MODEL_FILES = "the local-model files"
LOCAL_MODEL_MODULES = {"torch", "transformers"}


def _tree(path: Path) -> ast.AST | None:
    if path.suffix != ".py":
        return None
    try:
        return ast.parse(path.read_bytes())
    except (OSError, SyntaxError):
        return None  # pytest reports it when it collects the file


@cache
def uses_real_model(path: Path) -> bool:
    """Whether a test file has a test (or fixture) that takes the real-model fixtures."""
    tree = _tree(path)
    return tree is not None and any(
        arg.arg in MODEL_FIXTURES
        for node in ast.walk(tree)
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
        for arg in node.args.args + node.args.kwonlyargs
    )


@cache
def uses_local_model(path: Path) -> bool:
    """Whether a test file imports torch or transformers: `pytest.importorskip("torch")`."""
    tree = _tree(path)
    return tree is not None and any(
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr == "importorskip"
        and node.args
        and isinstance(node.args[0], ast.Constant)
        and node.args[0].value in LOCAL_MODEL_MODULES
        for node in ast.walk(tree)
    )


class Scheduling(LoadFileScheduling):
    """loadfile, with the real-model tier as one unit and the local-model files as another."""

    def _split_scope(self, nodeid: str) -> str:
        path = super()._split_scope(nodeid)
        if uses_real_model(self.config.rootpath / path):
            return REAL_MODEL_TIER
        return LOCAL_MODEL_FILES if uses_local_model(self.config.rootpath / path) else path
