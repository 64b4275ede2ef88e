"""How `make test` hands test files to its xdist workers: pytest-xdist's `--dist loadfile`
(a file's tests on one worker, files with the most tests first), with one change.

The real-model tier's files (those with a test or fixture that takes the `real_model` or
`small_model` fixture) go to one worker as one unit: every worker that ran one of them
started both model servers (seconds of CPU each, on a CPU-bound run), and one worker reading
the tier's prompts in a row reuses their common prefixes.
"""

from __future__ import annotations

import ast
from functools import cache
from pathlib import Path

from xdist.scheduler import LoadFileScheduling

REAL_MODEL_TIER = "the real-model tier"
MODEL_FIXTURES = {"real_model", "small_model"}


@cache
def uses_real_model(path: Path) -> bool:
    """Whether a test file has a test (or fixture) that takes the real-model fixtures."""
    if path.suffix != ".py":
        return False
    try:
        tree = ast.parse(path.read_bytes())
    except (OSError, SyntaxError):
        return False  # pytest reports it when it collects the file
    return any(
        arg.arg in MODEL_FIXTURES
        for node in ast.walk(tree)
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
        for arg in node.args.args + node.args.kwonlyargs
    )


class Scheduling(LoadFileScheduling):
    """loadfile, with the real-model tier as one unit."""

    def _split_scope(self, nodeid: str) -> str:
        path = super()._split_scope(nodeid)
        return REAL_MODEL_TIER if uses_real_model(self.config.rootpath / path) else path
