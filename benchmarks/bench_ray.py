"""SelectIT on Ray against the plain local engine, in one run, as a user runs them.

A tiny random Llama (built here, saved to a temp dir) rates N samples x k prompts; each line
below is one `lmd selectit` process, wall time from start to exit:
  local            --backend transformers (torch's default threads)
  local, 1 thread  the same with OMP_NUM_THREADS=1 (what each Ray worker gets)
  ray, 1 worker    --engine ray --workers 1 (starts a local Ray, num_cpus = the machine's)
  ray, 2 workers   --engine ray --workers 2
Ray's fixed overhead is measured apart: ray.init and ray.shutdown of a local Ray
(num_cpus=2) in a fresh process, and a 2-sample --engine ray run (Ray, a worker pool, the
model loaded once, shut down). The outputs are checked to agree within 1e-6.

    .venv/bin/python benchmarks/bench_ray.py [--samples 600] [--k 2] [--batch-size 8]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

RAY_START = """
import logging, time
t = time.perf_counter()
import ray
ray.init(num_cpus=2, include_dashboard=False, logging_level=logging.ERROR, log_to_driver=False)
t1 = time.perf_counter()
ray.shutdown()
print(t1 - t, time.perf_counter() - t1)
"""


def ray_daemons() -> set[int]:
    out = subprocess.run(["ps", "-eo", "pid,comm"], capture_output=True, text=True).stdout
    rows = [line.split() for line in out.splitlines()[1:]]
    return {int(r[0]) for r in rows if r[-1] in ("raylet", "gcs_server")}


def build(tmp: Path, samples: int, hidden: int, layers: int) -> tuple[Path, Path, Path]:
    """The model directory, the dataset, and a 2-sample dataset."""
    from tests.plugins.selectit.tiny_models import llama, sentencepiece_like_tokenizer

    tok = sentencepiece_like_tokenizer()
    llama(len(tok), seed=0, hidden=hidden, layers=layers).save_pretrained(tmp / "model")
    tok.save_pretrained(tmp / "model")
    rng = random.Random(0)
    words = "explain why the sky is blue and write a short poem about cats please".split()
    rows = []
    for i in range(samples):
        n = rng.choice([5, 10, 20, 40, 80, 160])  # mixed lengths, as real datasets have
        text = " ".join(rng.choice(words) for _ in range(n))
        rows.append(json.dumps({"instruction": f"Task {i}.", "output": text}) + "\n")
    (tmp / "data.jsonl").write_text("".join(rows))
    (tmp / "two.jsonl").write_text("".join(rows[:2]))
    return tmp / "model", tmp / "data.jsonl", tmp / "two.jsonl"


def lmd(args: list, env: dict | None = None) -> float:
    """Wall seconds of one `lmd selectit ...` process."""
    start = time.perf_counter()
    r = subprocess.run(
        [sys.executable, "-m", "daemon.cli", "selectit", *map(str, args)],
        env={**os.environ, **(env or {})},
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    elapsed = time.perf_counter() - start
    if r.returncode != 0:
        raise SystemExit(f"lmd selectit failed: {r.stderr.strip()}")
    return elapsed


def scores(path: Path) -> list[float]:
    return [json.loads(line)["score"] for line in path.read_text().splitlines()]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--samples", type=int, default=600)
    p.add_argument("--k", type=int, default=2)
    p.add_argument("--batch-size", type=int, default=8)
    p.add_argument("--hidden", type=int, default=128)
    p.add_argument("--layers", type=int, default=4)
    a = p.parse_args()
    try:
        import ray  # noqa: F401
        import torch  # noqa: F401
        import transformers  # noqa: F401
    except ImportError:
        print("skipped: needs pip install 'lmd[local,ray]'")
        return
    before = ray_daemons()
    path = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
    base_env = {"PYTHONPATH": path, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    os.environ.update(base_env)
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        model, data, two = build(tmp, a.samples, a.hidden, a.layers)
        home = tmp / "home"
        common = ["--backend", "transformers", "--model", model, "--k", a.k]
        common += ["--batch-size", a.batch_size, "--home", home, "--no-progress"]
        out = {name: tmp / f"{name}.jsonl" for name in ("local", "local1", "ray1", "ray2")}
        local = lmd([data, "-o", out["local"], *common])
        local1 = lmd([data, "-o", out["local1"], *common], {"OMP_NUM_THREADS": "1"})
        ray1 = lmd([data, "-o", out["ray1"], *common, "--engine", "ray", "--workers", 1])
        ray2 = lmd([data, "-o", out["ray2"], *common, "--engine", "ray", "--workers", 2])
        smallest = lmd([two, "-o", tmp / "two.out", *common, "--engine", "ray", "--workers", 1])
        local_small = lmd([two, "-o", tmp / "two.local", *common])
        r = subprocess.run([sys.executable, "-c", RAY_START], capture_output=True, text=True)
        init, shutdown = map(float, r.stdout.split()[-2:])
        want = scores(out["local"])
        worst = max(
            abs(x - y) for name in ("local1", "ray1", "ray2") for x, y in
            zip(want, scores(out[name]), strict=True)
        )  # fmt: skip
    deadline = time.monotonic() + 15
    while ray_daemons() - before and time.monotonic() < deadline:
        time.sleep(0.1)
    left = ray_daemons() - before
    n = a.samples
    print(f"SelectIT, tiny Llama (hidden {a.hidden}, {a.layers} layers) on CPU, {os.cpu_count()} "
          f"cores: {n} samples x k={a.k}, batch {a.batch_size}; wall time of each `lmd selectit` "
          "process")  # fmt: skip
    for name, t in (
        ("local", local),
        ("local, 1 thread", local1),
        ("ray, 1 worker", ray1),
        ("ray, 2 workers", ray2),
    ):
        print(f"    {name:<16} {t:7.1f} s  {n / t:7.1f} samples/s  ratio to local {local / t:.2f}")
    print(f"    ray 2 workers vs 1: {ray1 / ray2:.2f}x")
    print(f"    Ray's fixed overhead: ray.init {init:.1f} s, ray.shutdown {shutdown:.1f} s (local "
          f"Ray, num_cpus=2); a 2-sample run takes {smallest:.1f} s on Ray against "
          f"{local_small:.1f} s locally: {smallest - local_small:.1f} s of Ray start, worker "
          "pool (torch imported in each worker) and shutdown")  # fmt: skip
    print(f"    largest score difference from local: {worst:.1e}; Ray processes left: {len(left)}")


if __name__ == "__main__":
    main()
