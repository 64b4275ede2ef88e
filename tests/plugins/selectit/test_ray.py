"""SelectIT on a real local Ray (num_cpus=2) with tiny models built here.

One Ray session serves the module and one `--engine ray` run serves its tests (starting Ray
and a worker pool are the slow parts); the CLI joins the session. A test hook makes one worker
die mid-run: LMD_SELECTIT_RAY_CRASH_ONCE names a file, and the first worker to remove it after
its first batch exits with os._exit(1).
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from types import SimpleNamespace

import pytest

from plugins.selectit.ray_engine import CRASH_ONCE

from .conftest import alpaca, read_jsonl, run_cli, write_jsonl

pytestmark = pytest.mark.slow  # Ray and its worker pool: the longest module of all


def ray_processes() -> set[int]:
    """PIDs of Ray's daemons on this machine (raylet, gcs_server)."""
    out = subprocess.run(["ps", "-eo", "pid,comm"], capture_output=True, text=True).stdout
    return {
        int(line.split()[0])
        for line in out.splitlines()[1:]
        if line.split()[-1] in ("raylet", "gcs_server")
    }


@pytest.fixture(scope="module")
def ray_session(tmp_path_factory):
    """One local Ray for the module; afterwards none of its processes may be left."""
    ray = pytest.importorskip("ray", reason="the Ray engine needs pip install 'lmd[ray]'")
    pytest.importorskip("ray.data", reason="the Ray engine needs pip install 'lmd[ray]'")
    marker = tmp_path_factory.mktemp("ray-hook") / "crash-once"
    before = ray_processes()
    # ray.init leaves its own variables behind (PYTHONBREAKPOINT, RAY_*): the whole environment
    # is put back afterwards, or every later daemon of this worker would start cold
    # (tests/daemons.py forks a warm one only for the same PYTHON* variables).
    saved = dict(os.environ)
    # set before ray.init: the raylet, and so every worker it starts, inherits them
    os.environ.update({CRASH_ONCE: str(marker), "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"})
    import logging

    started = time.monotonic()
    ray.init(num_cpus=2, include_dashboard=False, logging_level=logging.ERROR, log_to_driver=False)
    print(f"ray.init took {time.monotonic() - started:.1f} s")
    try:
        yield marker
    finally:
        ray.shutdown()
        os.environ.clear()
        os.environ.update(saved)
        # ray.shutdown() signals its processes; on a loaded machine they take their time to
        # end: wait for each one's exit itself (a pidfd), not for a fixed while
        for pid in ray_processes() - before:
            wait_for_exit(pid, timeout=180)
        assert not ray_processes() - before, "Ray left raylet/gcs_server processes behind"


def wait_for_exit(pid: int, timeout: float) -> None:
    """Block until process `pid` (not our child) has ended, or `timeout` seconds passed."""
    import select

    try:
        fd = os.pidfd_open(pid)
    except ProcessLookupError:
        return  # already gone
    try:
        select.select([fd], [], [], timeout)
    finally:
        os.close(fd)


@pytest.fixture(scope="module")
def ray_run(ray_session, tmp_path_factory):
    """One `--engine ray` run (two workers) that resumes a file a local run began, loses a
    worker mid-run (the hook) and meets a sample too long for the model; beside it, the local
    engine's output for reference. Starting a worker pool costs seconds (torch is imported in
    each worker), so the tests below read this one run."""
    pytest.importorskip("torch", reason="the transformers backend needs pip install lmd[local]")
    pytest.importorskip("transformers", reason="the transformers backend needs lmd[local]")
    from click.testing import CliRunner

    from daemon.cli import cli
    from tests.daemons import configure

    from .tiny_models import byte_level_tokenizer, gpt2

    d = tmp_path_factory.mktemp("ray-run")
    home = d / "home"
    configure(home)
    tok = byte_level_tokenizer()
    gpt2(len(tok), seed=1).save_pretrained(d / "gpt2")  # 1024 positions
    tok.save_pretrained(d / "gpt2")
    records = [{"id": i, **r} for i, r in enumerate(alpaca(24), start=1)]
    records[6]["output"] = " ".join(["poem about cats"] * 700)  # id 7: > 1024 tokens
    records.append({"id": 25, "instruction": "No output: scored 3.0 without the model."})
    full = write_jsonl(d / "all.jsonl", records)
    fits = write_jsonl(d / "fits.jsonl", [r for r in records if r["id"] != 7])
    args = ["--backend", "transformers", "--model", d / "gpt2", "--k", 2, "--batch-size", 2]
    # the module fixture runs before each test's clean_env: keep the developer's LMD_* out
    env = {k: None for k in os.environ if k.startswith(("LMD_", "OPENAI_")) and k != CRASH_ONCE}

    def lmd_selectit(*more):
        argv = ["selectit", *map(str, more), *map(str, args), "--home", str(home)]
        return CliRunner(env=env).invoke(cli, argv, catch_exceptions=False)

    local = d / "local.jsonl"
    r = lmd_selectit(fits, "-o", local)  # the local engine, for reference
    assert r.exit_code == 0, r.stderr
    out = d / "ray.jsonl"
    earlier = "".join(local.read_text().splitlines(keepends=True)[:10])
    out.write_text(earlier)  # ten scores from an earlier run: Ray must not redo them
    ray_session.write_text("")  # arm the hook: one worker dies after its first batch
    started = time.monotonic()
    result = lmd_selectit(full, "-o", out, "--engine", "ray", "--workers", 2)
    print(f"--engine ray run took {time.monotonic() - started:.1f} s")
    return SimpleNamespace(result=result, local=local, out=out, earlier=earlier, hook=ray_session)


def test_ray_gives_the_local_scores_and_resumes(ray_run):
    r = ray_run.result
    assert "Ray scored with 2 workers" in r.stderr
    assert "14 scored now" in r.stderr and "10 from an earlier run" in r.stderr
    want, got = read_jsonl(ray_run.local), read_jsonl(ray_run.out)
    assert [g["id"] for g in got] == [w["id"] for w in want]  # same ids, same order
    for w, g in zip(want, got, strict=True):
        assert g["score"] == pytest.approx(w["score"], abs=1e-6)
    assert got[-1] == {"id": 25, "score": 3.0}
    assert ray_run.out.read_text().startswith(ray_run.earlier)  # kept as they were


def test_a_dead_worker_is_retried_and_a_failing_sample_named(ray_run):
    r = ray_run.result
    assert not ray_run.hook.exists(), "no worker died: the hook did not fire"
    # the batch of the dead worker was retried: every sample but the failing one is written,
    # once, in order
    ids = [row["id"] for row in read_jsonl(ray_run.out)]
    assert ids == [i for i in range(1, 26) if i != 7]
    assert all(1 <= row["score"] <= 5 for row in read_jsonl(ray_run.out))
    # the sample longer than GPT-2's 1024 positions failed alone, and is named
    assert r.exit_code == 1
    assert "1 sample could not be scored and is not in" in r.stderr
    assert "(first: id 7: IndexError" in r.stderr and "run the same command again" in r.stderr
    meta = json.loads(ray_run.out.with_name("ray.jsonl.meta.json").read_text())
    assert meta["shard"] == "all" and meta["backend"] == "transformers"


@pytest.mark.parametrize(
    "args,sentence",
    [
        (["--engine", "ray"], "--engine ray runs a local model (--backend transformers)"),
        (["--workers", "2"], "--workers go with --engine ray; add it or drop them."),
        (
            ["--address", "auto", "--gpus-per-worker", "1"],
            "--address, --gpus-per-worker go with --engine ray",
        ),
        (
            ["--engine", "ray", "--backend", "transformers", "--workers", "0"],
            "--workers must be at least 1, not 0.",
        ),
        (
            ["--engine", "ray", "--backend", "transformers", "--gpus-per-worker", "-1"],
            "--gpus-per-worker must be 0 or more",
        ),
    ],
)
def test_bad_engine_flags_are_one_sentence(home, backend, tmp_path, args, sentence):
    data = write_jsonl(tmp_path / "a.jsonl", alpaca(2))
    r = run_cli(home, data, *args)
    assert r.exit_code == 1 and sentence in r.stderr, r.stderr
    assert r.stderr.count("\n") == 1 and backend.requests == []
