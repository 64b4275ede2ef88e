"""SelectIT throughput.

(a) openai backend: N samples x k prompts against a fake server (its own process) with fixed
    latency; samples/s against the limit concurrency / (k * latency), and against a raw httpx
    client doing the same requests (the transport's own ceiling), measured in the same run.
(b) transformers backend on a tiny random Llama: samples/s with length-sorted batches against
    unsorted batches (the baseline).

    .venv/bin/python benchmarks/bench_selectit.py [--samples 2000] [--k 5] [--only a|b]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

SERVER = """
import sys, time, math
sys.path.insert(0, {root!r})
from tests.fake_backend import FakeBackend, Reply
b = FakeBackend()
b.latency = {latency}
top = [("4", math.log(0.6)), (" 5", math.log(0.4))]
b.default = Reply("4", logprobs=[("4", math.log(0.6), top)])
b.start()
print(b.url, flush=True)
sys.stdin.read()
"""


def start_server(latency: float) -> tuple[subprocess.Popen, str]:
    code = SERVER.format(root=str(ROOT), latency=latency)
    proc = subprocess.Popen(
        [sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    return proc, proc.stdout.readline().strip()


async def raw_ceiling(url: str, requests: int, concurrency: int) -> tuple[float, float]:
    """(requests/s, client CPU ms per request) of a bare httpx client, same concurrency."""
    import httpx

    gate = asyncio.Semaphore(concurrency)
    body = {"model": "m", "prompt": "x", "max_tokens": 1, "logprobs": 20}
    limits = httpx.Limits(max_connections=256, max_keepalive_connections=64)
    async with httpx.AsyncClient(limits=limits, timeout=30) as client:

        async def one() -> None:
            async with gate:
                (await client.post(url + "/completions", json=body)).raise_for_status()

        start, cpu = time.perf_counter(), time.process_time()
        await asyncio.gather(*(one() for _ in range(requests)))
        wall, cpu = time.perf_counter() - start, time.process_time() - cpu
        return requests / wall, cpu / requests * 1000


def bench_a(samples: int, k: int, latency: float, concurrency: int) -> None:
    import openai  # noqa: F401  (imported before timing: the run's CPU is its requests')
    from click.testing import CliRunner

    from daemon.cli import cli

    proc, url = start_server(latency)
    n_raw = min(samples * k, 1000)
    try:
        # The raw ceiling before and after selectit: the machine's load may change meanwhile.
        raw_before = asyncio.run(raw_ceiling(url, n_raw, concurrency))
        with tempfile.TemporaryDirectory() as tmp:
            home, data, out = Path(tmp) / "home", Path(tmp) / "a.jsonl", Path(tmp) / "s.jsonl"
            os.environ["LMD_OPENAI_CHAT_ENDPOINT"] = url
            os.environ["LMD_LLM_MAX_RETRIES"] = "0"
            os.environ["LMD_TOKENIZER"] = "estimate"
            rows = [
                {"instruction": f"Do task {i}.", "output": f"Answer {i}." * (i % 7 + 1)}
                for i in range(samples)
            ]
            data.write_text("".join(json.dumps(r) + "\n" for r in rows))
            args = ["selectit", str(data), "-o", str(out), "--k", str(k), "--no-progress"]
            args += ["--concurrency", str(concurrency), "--home", str(home)]
            start, cpu = time.perf_counter(), time.process_time()
            result = CliRunner().invoke(cli, args, catch_exceptions=False)
            elapsed, cpu = time.perf_counter() - start, time.process_time() - cpu
            assert result.exit_code == 0, result.stderr
            assert sum(1 for _ in out.open()) == samples
        raw_after = asyncio.run(raw_ceiling(url, n_raw, concurrency))
    finally:
        proc.stdin.close()
        proc.wait(10)
    rate = samples / elapsed
    limit = concurrency / (k * latency)
    raw = (raw_before[0] + raw_after[0]) / 2
    raw_cpu = (raw_before[1] + raw_after[1]) / 2
    cpu_ms = cpu / (samples * k) * 1000
    print(f"(a) openai backend: {samples} samples x k={k}, latency {latency * 1000:.0f} ms, "
          f"concurrency {concurrency}")  # fmt: skip
    print(f"    selectit        {rate:8.1f} samples/s  ({samples * k / elapsed:.0f} requests/s, "
          f"{elapsed:.1f} s)")  # fmt: skip
    print(f"    limit           {limit:8.1f} samples/s  = {concurrency}/({k}*{latency}s)")
    print(f"    raw httpx       {raw / k:8.1f} samples/s  ({raw:.0f} requests/s, same server, "
          "mean of before and after)")  # fmt: skip
    print(f"    ratio to limit  {rate / limit:8.2f}  (target >= 0.8)")
    print(f"    ratio to raw    {rate / (raw / k):8.2f}")
    print(f"    client CPU      {cpu_ms:8.2f} ms/request (raw httpx {raw_cpu:.2f}; "
          f"ratio {cpu_ms / raw_cpu:.2f}) - at 640 requests/s the limit needs "
          f"{640 * cpu_ms / 1000:.1f} cores")  # fmt: skip


def bench_b(samples: int, k: int, batch_size: int) -> None:
    import random

    import torch

    from plugins.selectit.prompts import build_prompt, load_templates
    from plugins.selectit.transformers_backend import TransformersRater
    from tests.plugins.selectit.tiny_models import llama, sentencepiece_like_tokenizer

    torch.set_num_threads(1)
    tok = sentencepiece_like_tokenizer()
    model = llama(len(tok), hidden=64, layers=2)
    rng = random.Random(0)
    templates = load_templates()[:k]
    words = "explain why the sky is blue and write a short poem about cats please".split()
    prompts = []
    for i in range(samples):
        n = rng.choice([5, 10, 20, 40, 80, 160])  # mixed lengths, as real datasets have
        text = " ".join(rng.choice(words) for _ in range(n))
        prompts += [build_prompt(t, f"Task {i}.", text) for t in templates]

    def run(sort: bool) -> tuple[float, TransformersRater]:
        rater = TransformersRater(model, tok, batch_size=batch_size, sort_by_length=sort)
        start = time.perf_counter()
        rater.rate_prompts(prompts, group=k)
        return samples / (time.perf_counter() - start), rater

    run(True)  # warm-up
    unsorted, r0 = run(False)
    sorted_, r1 = run(True)
    print(f"(b) transformers backend, tiny Llama on CPU: {samples} samples x k={k}, "
          f"batch {batch_size} samples")  # fmt: skip
    print(f"    unsorted        {unsorted:8.1f} samples/s  (padding tokens {r0.padded_tokens})")
    print(f"    length-sorted   {sorted_:8.1f} samples/s  (padding tokens {r1.padded_tokens})")
    print(f"    ratio           {sorted_ / unsorted:8.2f}")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--samples", type=int, default=2000)
    p.add_argument("--k", type=int, default=5)
    p.add_argument("--latency", type=float, default=0.05)
    p.add_argument("--concurrency", type=int, default=32)
    p.add_argument("--local-samples", type=int, default=96)
    p.add_argument("--only", choices=["a", "b"])
    a = p.parse_args()
    if a.only != "b":
        bench_a(a.samples, a.k, a.latency, a.concurrency)
    if a.only != "a":
        try:
            import torch  # noqa: F401
            import transformers  # noqa: F401
        except ImportError:
            print("(b) skipped: torch and transformers are not installed (pip install lmd[local])")
            return
        bench_b(a.local_samples, 1, 8)


if __name__ == "__main__":
    main()
