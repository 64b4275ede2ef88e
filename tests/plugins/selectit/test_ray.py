"""SelectIT on a real local Ray (num_cpus=2) with tiny models built here.

One Ray session serves the module (starting Ray is the slow part); the CLI joins it. A test
hook makes one worker die mid-run: LMD_SELECTIT_RAY_CRASH_ONCE names a file, and the first
worker to remove it after its first batch exits with os._exit(1).
"""

from __future__ import annotations

import json
import os
import subprocess
import time

import pytest

from plugins.selectit.ray_engine import CRASH_ONCE

from .conftest import alpaca, read_jsonl, run_cli, write_jsonl


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
    saved = {k: os.environ.get(k) for k in (CRASH_ONCE, "HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")}
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
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
        deadline = time.monotonic() + 15
        while ray_processes() - before and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not ray_processes() - before, "Ray left raylet/gcs_server processes behind"


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    """A tiny Llama (SentencePiece-like tokenizer) and a tiny GPT-2 (1024 positions)."""
    pytest.importorskip("torch", reason="the transformers backend needs pip install lmd[local]")
    pytest.importorskip("transformers", reason="the transformers backend needs lmd[local]")
    from .tiny_models import byte_level_tokenizer, gpt2, llama, sentencepiece_like_tokenizer

    root = tmp_path_factory.mktemp("models")
    sp = sentencepiece_like_tokenizer()
    llama(len(sp), seed=3).save_pretrained(root / "llama")
    sp.save_pretrained(root / "llama")
    bpe = byte_level_tokenizer()
    gpt2(len(bpe), seed=1).save_pretrained(root / "gpt2")
    bpe.save_pretrained(root / "gpt2")
    return root


def local_args(model, *more) -> list:
    return ["--backend", "transformers", "--model", model, "--k", 2, "--batch-size", 2, *more]


def test_ray_gives_the_local_scores_and_resumes(ray_session, tiny, home, backend, tmp_path):
    data = write_jsonl(tmp_path / "a.jsonl", [*alpaca(23), {"instruction": "no output"}])
    local = tmp_path / "local.jsonl"
    r = run_cli(home, data, "-o", local, *local_args(tiny / "llama"))
    assert r.exit_code == 0, r.stderr
    # half of it scored by an earlier run: Ray must score only the rest
    out = tmp_path / "ray.jsonl"
    lines = local.read_text().splitlines(keepends=True)
    out.write_text("".join(lines[:10]))
    started = time.monotonic()
    ray_args = ["--engine", "ray", "--workers", 2]
    r = run_cli(home, data, "-o", out, *local_args(tiny / "llama"), *ray_args)
    print(f"--engine ray run took {time.monotonic() - started:.1f} s")
    assert r.exit_code == 0, r.stderr
    assert "Ray scored with 2 workers" in r.stderr
    assert "14 scored now" in r.stderr and "10 from an earlier run" in r.stderr
    want, got = read_jsonl(local), read_jsonl(out)
    assert [g["id"] for g in got] == [w["id"] for w in want]  # same ids, same order
    for w, g in zip(want, got, strict=True):
        assert g["score"] == pytest.approx(w["score"], abs=1e-6)
    assert out.read_text().startswith("".join(lines[:10]))  # earlier lines kept as they were
    assert backend.requests == []  # nothing went to an OpenAI server


def test_a_worker_killed_midrun_is_retried_and_a_bad_sample_named(
    ray_session, tiny, home, tmp_path
):
    """One worker dies after its first batch (the hook); Ray restarts it and retries the
    batch. One sample is longer than GPT-2's 1024 positions: it fails alone, is named, and
    is not written; everything else is, once."""
    records = alpaca(24)
    records[6]["output"] = " ".join(["poem about cats"] * 700)  # id 7: > 1024 tokens
    data = write_jsonl(tmp_path / "a.jsonl", records)
    ray_session.write_text("")  # arm the hook
    out = tmp_path / "ray.jsonl"
    args = local_args(tiny / "gpt2", "--engine", "ray", "--workers", 2, "--max-length", 4000)
    started = time.monotonic()
    r = run_cli(home, data, "-o", out, *args)
    print(f"--engine ray run with a crash took {time.monotonic() - started:.1f} s")
    assert not ray_session.exists(), "no worker died: the hook did not fire"
    assert r.exit_code == 1
    assert "1 samples could not be scored and are not in" in r.stderr
    assert "(first: id 7: IndexError" in r.stderr and "run the same command again" in r.stderr
    ids = [row["id"] for row in read_jsonl(out)]
    assert ids == [i for i in range(1, 25) if i != 7]  # complete, unique, in order
    assert all(1 <= row["score"] <= 5 for row in read_jsonl(out))
    meta = json.loads((tmp_path / "ray.jsonl.meta.json").read_text())
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
