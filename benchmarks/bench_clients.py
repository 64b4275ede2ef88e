"""Client paths, timed: the OpenAI endpoint against plain /v1, and CLI / pyz start-up.

    .venv/bin/python benchmarks/bench_clients.py [--n 40] [--pyz dist/lmd.pyz]

A live daemon (a real `lmd serve`) answers from the fake backend, so the numbers are the
daemon's own overhead per request plus HTTP; ratios are against POST /v1 in the same run.
Start-up is compared with `python -c pass`. With --pyz (or an existing dist/lmd.pyz) the
single file's first run (unpacking) and warm runs are timed too.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.daemons import LiveDaemon, configure  # noqa: E402
from tests.fake_backend import FakeBackend  # noqa: E402

LMD = str(Path(sys.executable).parent / "lmd")


def post(url: str, body: bytes, headers: dict) -> bytes:
    req = urllib.request.Request(url, data=body, headers=headers, method="POST")
    with urllib.request.urlopen(req, timeout=30) as r:
        return r.read()


def timed(fn, n: int) -> float:
    """Median milliseconds of n calls (after one warm-up call)."""
    fn()
    times = []
    for _ in range(n):
        t = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t) * 1000)
    return statistics.median(times)


def run(argv: list[str], env: dict | None = None) -> None:
    subprocess.run(argv, check=True, capture_output=True, env=env)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--n", type=int, default=40, help="requests per variant")
    parser.add_argument("--pyz", type=Path, default=ROOT / "dist" / "lmd.pyz")
    args = parser.parse_args()
    os.environ["LMD_TOKENIZER"] = "estimate"
    backend = FakeBackend().start()
    backend.default.text = "a short answer of a few words"
    tmp = Path(tempfile.mkdtemp(prefix="bench-clients-"))
    home = tmp / "home"
    configure(home, openai_chat_endpoint=backend.url, openai_model="fake-model", llm_max_retries=0)
    daemon = LiveDaemon(home, {"LMD_LOAD_PLUGINS": "dali,clients"})
    try:
        url = daemon.url
        chat = json.dumps({"model": "lmd", "messages": [{"role": "user", "content": "hi"}]})
        stream = json.dumps({**json.loads(chat), "stream": True})
        json_h = {"Content-Type": "application/json"}
        rows = {
            "POST /v1 (text/plain)": lambda: post(url + "/v1", b"hi", {"X-Session": "b1"}),
            "POST /v1/chat/completions": lambda: post(
                url + "/v1/chat/completions", chat.encode(), {**json_h, "X-Session": "b2"}
            ),
            "POST /v1/chat/completions stream": lambda: post(
                url + "/v1/chat/completions", stream.encode(), {**json_h, "X-Session": "b3"}
            ),
        }
        import openai

        client = openai.OpenAI(base_url=url + "/v1", api_key="x", max_retries=0)
        rows["openai client, non-streaming"] = lambda: client.chat.completions.create(
            model="lmd", messages=[{"role": "user", "content": "hi"}], user="b4"
        )
        print(f"per request, median of {args.n} (fake backend, live daemon):")
        base = None
        for name, fn in rows.items():
            ms = timed(fn, args.n)
            base = base or ms
            print(f"  {name:<36} {ms:7.2f} ms   x{ms / base:.2f}")

        print("start-up, median of 5:")
        python = timed(lambda: run([sys.executable, "-c", "pass"]), 5)
        print(f"  {'python -c pass':<36} {python:7.1f} ms   x1.00")
        env = {**os.environ, "LMD_URL": url}
        for label, argv in (
            ("lmd --version", [LMD, "--version"]),
            ("lmd say hi (round trip)", [LMD, "say", "hi"]),
            ("lmd shell-init bash (loads plugins)", [LMD, "shell-init", "bash"]),
        ):
            ms = timed(lambda a=argv: run(a, env), 5)
            print(f"  {label:<36} {ms:7.1f} ms   x{ms / python:.2f}")
        if args.pyz.exists():
            shiv_root = tmp / "shiv"
            penv = {**env, "SHIV_ROOT": str(shiv_root)}
            size = args.pyz.stat().st_size / 1e6
            t = time.perf_counter()
            run([str(args.pyz), "--version"], penv)
            first = (time.perf_counter() - t) * 1000
            unpacked = sum(f.stat().st_size for f in shiv_root.rglob("*") if f.is_file()) / 1e6
            print(f"pyz {args.pyz} ({size:.1f} MB, unpacks to {unpacked:.0f} MB):")
            print(f"  {'first run (unpacks)':<36} {first:7.1f} ms   x{first / python:.2f}")
            for label, argv in (
                ("pyz --version (warm)", [str(args.pyz), "--version"]),
                ("pyz say hi (warm, round trip)", [str(args.pyz), "say", "hi"]),
            ):
                ms = timed(lambda a=argv: run(a, penv), 5)
                print(f"  {label:<36} {ms:7.1f} ms   x{ms / python:.2f}")
        else:
            print(f"(no {args.pyz}: run `make pyz` to time the single file)")
    finally:
        daemon.stop()
        daemon.log.close()
        backend.stop()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
