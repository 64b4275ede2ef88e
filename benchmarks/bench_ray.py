"""SelectIT on Ray against the plain local engine, in one run.

A tiny random Llama (built here, saved to a temp dir) rates N samples x k prompts:
  local      the transformers rater in this process (torch's default threads, and 1 thread,
             as each Ray worker has)
  ray x1     --engine ray with 1 worker (one CPU, one model load)
  ray x2     --engine ray with 2 workers
Ray's fixed overhead is measured apart: ray.init and ray.shutdown of a local Ray
(num_cpus=2), and starting a worker pool and loading the model (a 2-sample run, before and
after; the better one), which every run pays again.

    .venv/bin/python benchmarks/bench_ray.py [--samples 400] [--k 2] [--batch-size 8]
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def ray_daemons() -> set[int]:
    out = subprocess.run(["ps", "-eo", "pid,comm"], capture_output=True, text=True).stdout
    rows = [line.split() for line in out.splitlines()[1:]]
    return {int(r[0]) for r in rows if r[-1] in ("raylet", "gcs_server")}


def build(tmp: Path, samples: int, hidden: int, layers: int) -> tuple[Path, list]:
    from plugins.selectit.datasets import to_sample
    from tests.plugins.selectit.tiny_models import llama, sentencepiece_like_tokenizer

    tok = sentencepiece_like_tokenizer()
    model = llama(len(tok), seed=0, hidden=hidden, layers=layers)
    model.save_pretrained(tmp / "model")
    tok.save_pretrained(tmp / "model")
    rng = random.Random(0)
    words = "explain why the sky is blue and write a short poem about cats please".split()
    records = []
    for i in range(samples):
        n = rng.choice([5, 10, 20, 40, 80, 160])  # mixed lengths, as real datasets have
        text = " ".join(rng.choice(words) for _ in range(n))
        records.append(to_sample({"instruction": f"Task {i}.", "output": text}, i + 1))
    return tmp / "model", records


def run_local(cfg, samples, templates) -> float:
    from plugins.selectit.engine import score_samples
    from plugins.selectit.raters import make_transformers_rater

    rater = make_transformers_rater(cfg)

    async def go() -> int:
        return sum([1 async for _ in score_samples(samples, templates, cfg.alpha, rater)])

    start = time.perf_counter()
    assert asyncio.run(go()) == len(samples)
    return time.perf_counter() - start


def run_ray(cfg, samples, templates, workers: int) -> float:
    from plugins.selectit.ray_engine import RayPlan, score_with_ray

    got: list = []
    start = time.perf_counter()
    run = score_with_ray(samples, templates, cfg, RayPlan(workers=workers), got.append, False)
    elapsed = time.perf_counter() - start
    assert len(got) == len(samples) and not run.failures, run.failures
    return elapsed


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--samples", type=int, default=400)
    p.add_argument("--k", type=int, default=2)
    p.add_argument("--batch-size", type=int, default=8)
    p.add_argument("--hidden", type=int, default=128)
    p.add_argument("--layers", type=int, default=4)
    a = p.parse_args()
    try:
        import ray
        import torch
    except ImportError:
        print("skipped: needs pip install 'lmd[local,ray]'")
        return
    from plugins.selectit.config import Config
    from plugins.selectit.prompts import load_templates

    os.environ["PYTHONPATH"] = os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])
    os.environ.update(HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
    before = ray_daemons()
    with tempfile.TemporaryDirectory() as d:
        model, samples = build(Path(d), a.samples, a.hidden, a.layers)
        cfg = Config(model=str(model), k=a.k, batch_size=a.batch_size, backend="transformers")
        templates = load_templates()[: a.k]
        threads = torch.get_num_threads()
        local = run_local(cfg, samples, templates)
        torch.set_num_threads(1)
        local1 = run_local(cfg, samples, templates)
        torch.set_num_threads(threads)
        start = time.perf_counter()
        ray.init(num_cpus=2, include_dashboard=False, logging_level=logging.ERROR,
                 log_to_driver=False)  # fmt: skip
        init = time.perf_counter() - start
        try:
            pool = run_ray(cfg, samples[:2], templates, 1)  # a pool started, a model loaded
            one = run_ray(cfg, samples, templates, 1)
            two = run_ray(cfg, samples, templates, 2)
            pool = min(pool, run_ray(cfg, samples[:2], templates, 1))
        finally:
            start = time.perf_counter()
            ray.shutdown()
            shutdown = time.perf_counter() - start
    deadline = time.monotonic() + 15
    while ray_daemons() - before and time.monotonic() < deadline:
        time.sleep(0.1)
    left = ray_daemons() - before
    n = len(samples)
    print(f"SelectIT, tiny Llama (hidden {a.hidden}, {a.layers} layers) on CPU: {n} samples x "
          f"k={a.k}, batch {a.batch_size}; each Ray worker has 1 CPU (1 torch thread)")  # fmt: skip
    print(f"    local engine    {local:7.1f} s  {n / local:7.1f} samples/s  (baseline; {threads} "
          "torch threads)")  # fmt: skip
    print(f"    local, 1 thread {local1:7.1f} s  {n / local1:7.1f} samples/s  ratio to local "
          f"{local / local1:.2f}")  # fmt: skip
    for name, t in (("ray, 1 worker", one), ("ray, 2 workers", two)):
        print(f"    {name:<15} {t:7.1f} s  {n / t:7.1f} samples/s  ratio to local {local / t:.2f}")
    print(f"    ray 2 vs 1 worker: {one / two:.2f}x")
    print(f"    Ray's fixed overhead: ray.init {init:.1f} s and ray.shutdown {shutdown:.1f} s "
          f"once; in every run, {pool:.1f} s to start the worker pool and load the model (a "
          "2-sample run, the better of two)")  # fmt: skip
    rate = [n / max(t - pool, 1e-9) for t in (one, two)]
    print(f"    net of the pool start: 1 worker {rate[0]:.1f}, 2 workers {rate[1]:.1f} samples/s "
          f"(2 vs 1: {rate[1] / rate[0]:.2f}x; local {n / local:.1f}, 1 thread "
          f"{n / local1:.1f})")  # fmt: skip
    print(f"    Ray processes left behind: {len(left)}")


if __name__ == "__main__":
    main()
