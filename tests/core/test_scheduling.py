"""make test's scheduling (tests/scheduling.py): which files are the real-model tier, and which
the local-model files, in what order the units go; and what keeps daemons forked warm
(tests/warm_lmd.py)."""

from __future__ import annotations

import os
from pathlib import Path

from tests.daemons import ROOT
from tests.scheduling import (
    JOURNEYS,
    LOCAL_MODEL_FILES,
    costly_first,
    group_of,
    uses_local_model,
    uses_real_model,
)
from tests.warm_lmd import WarmLmd, interpreter_env, put_back_interpreter_env


def writer(folder: Path):
    def file(name: str, text: str) -> Path:
        path = folder / name
        path.write_text(text)
        return path

    return file


def test_a_file_whose_tests_take_the_model_is_in_the_tier(tmp_path: Path):
    file = writer(tmp_path)
    assert uses_real_model(file("a.py", "def test_x(real_model, tmp_path):\n    pass\n"))
    assert uses_real_model(file("b.py", "def test_y(\n    tmp_path,\n    small_model,\n): ...\n"))
    assert uses_real_model(file("c.py", "@pytest.fixture\ndef scorer(real_model): ...\n"))
    # named, but not taken: a comment, a string, a longer name, another suffix
    assert not uses_real_model(file("d.py", "# real_model is slow\nx = 'small_model'\n"))
    assert not uses_real_model(file("e.py", "def test_z(real_model_path): ...\n"))
    assert not uses_real_model(file("f.md", "def test_x(real_model): ...\n"))
    assert not uses_real_model(file("g.py", "def test_x(real_model:\n"))  # pytest's to report
    assert not uses_real_model(tmp_path / "missing.py")


def test_the_tier_is_the_files_that_use_the_model():
    tier = {p.relative_to(ROOT).as_posix() for p in (ROOT / "tests").rglob("test_*.py")
            if uses_real_model(p)}  # fmt: skip
    assert {
        "tests/core/test_real_backend.py",
        "tests/plugins/lm_score/test_real_model.py",
        "tests/plugins/selectit/test_truthful.py",
    } <= tier
    assert "tests/core/test_scheduling.py" not in tier and "tests/core/test_app.py" not in tier


def test_a_file_that_imports_torch_or_transformers_is_a_local_model_file(tmp_path: Path):
    file = writer(tmp_path)
    assert uses_local_model(file("a.py", "def f():\n    torch = pytest.importorskip('torch')\n"))
    assert uses_local_model(file("b.py", "pytest.importorskip(\n    'transformers', reason='x')\n"))
    # named, but not imported so: a comment, a string, another module, another suffix
    assert not uses_local_model(file("c.py", "# importorskip('torch')\nx = 'torch'\n"))
    assert not uses_local_model(file("d.py", "pytest.importorskip('ray')\n"))
    assert not uses_local_model(file("e.md", "pytest.importorskip('torch')\n"))
    assert not uses_local_model(file("f.py", "pytest.importorskip('torch'\n"))  # pytest's to report


def test_the_local_model_files_are_those_that_import_torch():
    local = {p.relative_to(ROOT).as_posix() for p in (ROOT / "tests").rglob("test_*.py")
             if uses_local_model(p)}  # fmt: skip
    assert {
        "tests/plugins/selectit/test_ray.py",
        "tests/plugins/selectit/test_transformers.py",
        "tests/test_seed_examples.py",
    } <= local
    assert not any(uses_real_model(ROOT / p) for p in local)  # one unit each, never both
    assert "tests/plugins/selectit/test_selectit.py" not in local


def test_each_test_is_in_its_files_group_but_the_two_units():
    tests = ROOT / "tests"
    assert group_of(tests / "core" / "test_app.py", ROOT) == "tests/core/test_app.py"
    real = tests / "core" / "test_real_backend.py"  # the real-model tier: a group a file
    assert group_of(real, ROOT) == "tests/core/test_real_backend.py"
    assert group_of(tests / "plugins" / "selectit" / "test_ray.py", ROOT) == LOCAL_MODEL_FILES


CONFTEST = """\
import json, os, sys
import pytest
sys.path.insert(0, {root!r})
from tests.scheduling import Scheduling

def pytest_xdist_make_scheduler(config, log):
    return Scheduling(config, log)

@pytest.fixture(autouse=True)
def _note(request):
    with open("ran.jsonl", "a") as f:
        f.write(json.dumps([request.node.nodeid, os.environ["PYTEST_XDIST_WORKER"]]) + "\\n")
"""


def test_two_workers_run_each_group_on_one(tmp_path: Path):
    """A small project scheduled as make test schedules lmd's: the two files that import torch
    run on one worker, each other file's tests together."""
    import json
    import subprocess
    import sys

    (tmp_path / "conftest.py").write_text(CONFTEST.format(root=str(ROOT)))
    tier = (  # never called: the file is known by the call it holds
        "import pytest\ndef torch(): pytest.importorskip('torch')\n"
        "@pytest.mark.parametrize('i', range(4))\ndef test_x(i): ...\n"
    )
    plain = "import pytest\n@pytest.mark.parametrize('i', range(6))\ndef test_y(i): ...\n"
    for name, text in [("a", tier), ("b", tier), ("c", plain), ("d", plain)]:
        (tmp_path / f"test_{name}.py").write_text(text)
    ran = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "xdist.plugin", "-n", "2", "--dist", "loadgroup",
         "-q", "-p", "no:cacheprovider", "-c", "/dev/null", "--rootdir", str(tmp_path),
         str(tmp_path)],
        cwd=tmp_path, capture_output=True, text=True,
        env={**os.environ, "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"},  # only xdist: 3 starts
    )  # fmt: skip
    assert ran.returncode == 0, ran.stdout + ran.stderr
    rows = [json.loads(line) for line in (tmp_path / "ran.jsonl").read_text().splitlines()]
    assert len(rows) == 20
    workers: dict[str, set[str]] = {}
    for nodeid, worker in rows:
        unit = "tier" if nodeid.startswith(("test_a.py", "test_b.py")) else nodeid.split("::")[0]
        workers.setdefault(unit, set()).add(worker)
    assert all(len(w) == 1 for w in workers.values()), workers


def test_a_changed_interpreter_variable_is_named_and_put_back(monkeypatch):
    # what tests/conftest.py does after each module (ray.init once set PYTHONBREAKPOINT, and
    # every later daemon of that worker started cold)
    monkeypatch.setenv("PYTHONWARNINGS", "default")
    monkeypatch.delenv("PYTHONBREAKPOINT", raising=False)
    start = interpreter_env(os.environ)
    os.environ["PYTHONBREAKPOINT"] = "ray.util.rpdb._driver_set_trace"
    os.environ["PYTHONWARNINGS"] = "error"
    os.environ["LMD_OTHER"] = "kept"  # not an interpreter variable: no concern of the check
    try:
        assert put_back_interpreter_env(start) == ["PYTHONBREAKPOINT", "PYTHONWARNINGS"]
        assert "PYTHONBREAKPOINT" not in os.environ
        assert os.environ["PYTHONWARNINGS"] == "default"
        assert put_back_interpreter_env(start) == []
    finally:
        os.environ.pop("LMD_OTHER", None)


def test_a_daemon_is_forked_warm_only_for_the_interpreter_it_would_be(tmp_path: Path):
    base = {"PATH": "/usr/bin", "PYTHONPATH": "/repo", "PYTHONUNBUFFERED": "1"}
    warm = WarmLmd(tmp_path, base)
    assert warm.forkable({**base, "LMD_HOME": "/h"}) and warm.path_first(base) == []
    # a plugin's site before the worker's own path: forked, the site put first in sys.path
    site = {**base, "PYTHONPATH": "/tmp/site:/other:/repo"}
    assert warm.forkable(site) and warm.path_first(site) == ["/tmp/site", "/other"]
    # anything else starts cold: another order, a relative directory, a changed flag
    for env in [
        {**base, "PYTHONPATH": "/repo:/tmp/site"},
        {**base, "PYTHONPATH": "site:/repo"},
        {**base, "PYTHONPATH": "/tmp/site:/repo", "PYTHONUNBUFFERED": ""},
        {**base, "PYTHONPATH": ""},
        {**base, "LD_PRELOAD": "/x.so"},
    ]:
        assert not warm.forkable(env), env


def test_the_journeys_tier_is_a_unit_per_user():
    """Its files share a daemon on the embedded model per Unix user: one worker starts
    root's once, another the ordinary user's."""

    def group(nodeid: str) -> str:
        return group_of(ROOT / nodeid.split("::")[0], ROOT, nodeid)

    root = group("tests/journeys/test_marat.py::test_x[root]")
    assert root == group("tests/journeys/test_code.py::test_y[root]") and JOURNEYS in root
    user = group("tests/journeys/test_code.py::test_y[user]")
    assert user == group("tests/journeys/test_marat.py::test_x[user]") and JOURNEYS in user
    assert root != user
    assert group("tests/core/test_app.py::test_z") == "tests/core/test_app.py"


class _Item:
    """What costly_first reads of a collected test."""

    def __init__(self, nodeid: str, slow: bool = False) -> None:
        self.nodeid, self.path, self.slow = nodeid, ROOT / nodeid.split("::")[0], slow

    def get_closest_marker(self, name: str) -> object:
        return name == "slow" and self.slow or None


def test_the_costliest_units_are_handed_out_first():
    """The units larger than a file first, then the files marked slow or on the real model,
    then the rest, each by number of tests; a unit's own tests keep their order (a module's
    fixtures, once)."""
    plain = [_Item(f"tests/core/test_app.py::test_{i}") for i in range(5)]
    small = [_Item("tests/core/test_cli.py::test_a")]
    slow = [_Item("tests/core/test_sandbox_writes_live.py::test_a", slow=True)]
    tier = [_Item(f"tests/core/test_real_backend.py::test_{i}") for i in range(2)]
    journeys = [_Item(f"tests/journeys/test_marat.py::test_x[{w}]") for w in ("root", "user")]
    items = [*small, *plain, *slow, *tier, *journeys]
    costly_first(items, ROOT)
    assert items == [*journeys, *tier, *slow, *plain, *small]
