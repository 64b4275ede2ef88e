"""The embedded model and counting tokens the server's way (issue: a real model in every loop).
Prints numbers and ratios measured in this run; asserts nothing.

(a) the embedded server's start-up (llama-cpp-python over SmolLM2-135M-Instruct, 2,048-token
    context): spawn to first answer, against `python -c pass` started the same way;
(b) counting one new 200-word text with the server's tokenize endpoint (the real server), a
    cached count, and the offline estimate;
(c) dali's added latency through a live daemon (bench_core (a)'s method, 1,000 prompts of
    history) when the backend has a tokenize endpoint and lmd counts with it, against the
    same daemon counting with the estimate;
(d) reading a 600-token prompt on one thread: lmd's embedded server (the logits of only the
    rows it reads) against llama-cpp-python's own server computing every row (`logits_all`);
(e) writing a verdict held to a JSON schema (greedy, 64 tokens at most): lmd's embedded server
    (the grammar tests the token drawn first) against llama-cpp-python's own server (the
    grammar tests every token of the vocabulary at each step); the same tokens, checked;
(f) two conversations taking turns (each a 300-token instruction and a growing history):
    lmd's embedded server (it starts each prompt from the kept state that began the same
    way) against llama-cpp-python's own server (only the last request's beginning reused).

Run: .venv/bin/python benchmarks/bench_embedded.py [--quick]
"""

from __future__ import annotations

import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.bench_core import fill_history, ms, pct  # noqa: E402
from tests.daemons import LiveDaemon, configure  # noqa: E402
from tests.fake_backend import FakeBackend  # noqa: E402

QUICK = "--quick" in sys.argv


def bench_startup() -> None:
    from daemon.backends.embedded import EmbeddedServer, bundled_model_path

    runs = 3 if QUICK else 7
    starts, pythons = [], []
    for _ in range(runs):
        t = time.perf_counter()
        subprocess.run([sys.executable, "-c", "pass"], check=True)
        pythons.append(time.perf_counter() - t)
        server = EmbeddedServer(bundled_model_path(), n_ctx=2048)
        t = time.perf_counter()
        server.start()
        starts.append(time.perf_counter() - t)
        server.stop()
    s, p = statistics.median(starts), statistics.median(pythons)
    print(f"(a) embedded server start-up, median of {runs}: {ms(s)} (min {ms(min(starts))})")
    print(f"    python -c pass: {ms(p)}; ratio {s / p:.1f}x")


def bench_counting() -> None:
    from daemon.backends import tokens
    from daemon.backends.embedded import EmbeddedServer, bundled_model_path

    server = EmbeddedServer(bundled_model_path(), n_ctx=2048, n_threads=1).start()
    try:
        counter = tokens.ServerCounter(
            server.url.removesuffix("/v1"), "/extras/tokenize", "input", server.key, "m"
        )
        n = 50 if QUICK else 300
        texts = [
            f"note {i}: " + "the quick brown fox jumps over the lazy dog " * 22 for i in range(n)
        ]
        counter(texts[0])  # connect
        fresh, cached, estimate = [], [], []
        for text in texts[1:]:
            t = time.perf_counter()
            counter(text)
            fresh.append(time.perf_counter() - t)
            t = time.perf_counter()
            counter(text)
            cached.append(time.perf_counter() - t)
            t = time.perf_counter()
            tokens.estimate(text)
            estimate.append(time.perf_counter() - t)
        f, c, e = (statistics.median(x) for x in (fresh, cached, estimate))
        print(f"(b) counting a new 200-word text ({n - 1} texts)")
        print(f"    server tokenize (new text) p50 {ms(f)}  p95 {ms(pct(fresh, 95))}")
        print(f"    server count, cached       p50 {ms(c)}")
        print(f"    offline estimate           p50 {ms(e)}  (tokenize {f / e:.0f}x the estimate)")
    finally:
        server.stop()


def dali_latency(backend: FakeBackend, tmp: Path, tokenize: bool, n: int) -> tuple[list, list]:
    import asyncio

    import httpx
    import openai

    backend.capabilities["tokenize"] = tokenize
    home = tmp / ("tok" if tokenize else "est")
    configure(home, openai_chat_endpoint=backend.url, openai_model="fake-model", llm_max_retries=0)
    fill_history(home, "bench", 1_000)
    daemon = LiveDaemon(home, {"LMD_TOKENIZER": "estimate"})
    loop = asyncio.new_event_loop()
    direct = openai.AsyncOpenAI(base_url=backend.url, api_key="x", max_retries=0)
    messages = [{"role": "user", "content": "hi"}]

    def call_direct() -> None:
        loop.run_until_complete(
            direct.chat.completions.create(model="fake-model", messages=messages)
        )

    try:
        http = httpx.Client(base_url=daemon.url, headers={"X-Session": "bench"})
        http.get("/backend")  # the probe ran: the counter is in place when it has tokenize
        for _ in range(20):
            call_direct()
            http.post("/v1", content="dali hi")
        base, through = [], []
        for i in range(n):
            t = time.perf_counter()
            call_direct()
            base.append(time.perf_counter() - t)
            t = time.perf_counter()
            r = http.post("/v1", content=f"dali hi {i}")  # a new text each time: counted anew
            through.append(time.perf_counter() - t)
            assert r.status_code == 200
        loop.run_until_complete(direct.close())
        loop.close()
    finally:
        daemon.stop()
    return base, through


def bench_dali(tmp: Path) -> None:
    n = 100 if QUICK else 400
    backend = FakeBackend().start()
    try:
        added = {}
        for tokenize in (False, True):
            base, through = dali_latency(backend, tmp, tokenize, n)
            added[tokenize] = pct(through, 50) - pct(base, 50)
            counted = sum(r.path.endswith("/tokenize") for r in backend.probes)
        print(f"(c) dali through lmd, {n} requests, 1,000 prompts of history")
        print(f"    added p50, counting with the estimate:        {ms(added[False])}")
        print(f"    added p50, counting with the server's tokenize: {ms(added[True])}")
        print(f"    cost of server counting per turn: {ms(added[True] - added[False])} "
              f"({counted} tokenize calls in all)")  # fmt: skip
    finally:
        backend.stop()


def compared(title: str, ours: tuple[str, float, str], plain: tuple[str, float, str]) -> None:
    """A measurement of lmd's embedded server against llama-cpp-python's own, and the ratio."""
    print(title)
    for label, seconds, note in (ours, plain):
        print(f"    {label} {ms(seconds)}{note}")
    print(f"    ratio {plain[1] / ours[1]:.2f}x")


def bench_prompt_reading() -> None:
    import json
    import urllib.request
    from unittest import mock

    from daemon.backends import embedded
    from tests.real_model import PLAIN_LLAMA_SERVER

    def read(server: embedded.EmbeddedServer, i: int) -> tuple[float, int]:
        text = f"Note {i}: " + "the cat sat on the mat and looked at the dog " * 60
        body = json.dumps({"prompt": text, "max_tokens": 1, "temperature": 0}).encode()
        headers = {"Authorization": f"Bearer {server.key}", "Content-Type": "application/json"}
        req = urllib.request.Request(server.url + "/completions", body, headers)
        t = time.perf_counter()
        with urllib.request.urlopen(req, timeout=300) as r:
            used = json.loads(r.read())["usage"]["prompt_tokens"]
        return time.perf_counter() - t, used

    runs = 2 if QUICK else 5
    path = embedded.bundled_model_path()
    ours = embedded.EmbeddedServer(path, n_ctx=2048, n_threads=1).start()
    with mock.patch.object(embedded, "_server_program", lambda: PLAIN_LLAMA_SERVER):
        plain = embedded.EmbeddedServer(path, n_ctx=2048, n_threads=1).start()
    try:
        times: dict[str, list[float]] = {"ours": [], "plain": []}
        for i in range(runs):  # alternated, so a change of machine speed hits both
            for name, server in (("ours", ours), ("plain", plain)):
                took, used = read(server, i)
                times[name].append(took)
        o, p = statistics.median(times["ours"]), statistics.median(times["plain"])
        compared(
            f"(d) reading a {used}-token prompt on one thread, median of {runs}",
            ("lmd's embedded server (rows it reads):", o, f" ({used / o:.0f} tokens/s)"),
            ("every row (logits_all):               ", p, f" ({used / p:.0f} tokens/s)"),
        )
        bench_constrained(ours, plain, runs)
        bench_interleaved(ours, plain, runs)
    finally:
        ours.stop()
        plain.stop()


def bench_constrained(ours, plain, runs: int) -> None:
    import json
    import urllib.request

    from plugins.elo.judge import VERDICT_SCHEMA

    def write(server, i: int) -> tuple[float, dict]:
        question = f"Question {i}: what is {i} + {i}? Answer 1: {2 * i}. Answer 2: {2 * i + 1}."
        body = {
            "messages": [{"role": "user", "content": question + " Which answer is better?"}],
            "response_format": {"type": "json_object", "schema": VERDICT_SCHEMA},
            "max_tokens": 64,
            "temperature": 0,
        }
        headers = {"Authorization": f"Bearer {server.key}", "Content-Type": "application/json"}
        req = urllib.request.Request(server.url + "/chat/completions", json.dumps(body).encode(),
                                     headers)  # fmt: skip
        t = time.perf_counter()
        with urllib.request.urlopen(req, timeout=300) as r:
            reply = json.loads(r.read())
        return time.perf_counter() - t, reply

    times: dict[str, list[float]] = {"ours": [], "plain": []}
    tokens = 0
    for i in range(runs):
        got = {}
        for name, server in (("ours", ours), ("plain", plain)):
            took, got[name] = write(server, i)
            times[name].append(took)
        same = got["ours"]["choices"][0]["message"] == got["plain"]["choices"][0]["message"]
        tokens += got["ours"]["usage"]["completion_tokens"]
        if not same:
            print(f"    run {i}: the two servers wrote different verdicts (a defect)")
    o, p = statistics.median(times["ours"]), statistics.median(times["plain"])
    compared(
        f"(e) a verdict held to a JSON schema, {tokens / runs:.0f} tokens, median of {runs}",
        ("lmd's embedded server (grammar on the drawn token):", o, ""),
        ("the grammar on every token:                         ", p, ""),
    )


def bench_interleaved(ours, plain, runs: int) -> None:
    import json
    import urllib.request

    rules = {
        "a": "You are a careful shell assistant. " + "Answer in one short line. " * 50,
        "b": "You are a friendly poet who rhymes. " + "Keep every answer gentle. " * 50,
    }

    def turn(server, who: str, history: list[dict]) -> float:
        body = {"messages": [{"role": "system", "content": rules[who]}, *history],
                "max_tokens": 8, "temperature": 0}  # fmt: skip
        headers = {"Authorization": f"Bearer {server.key}", "Content-Type": "application/json"}
        req = urllib.request.Request(server.url + "/chat/completions", json.dumps(body).encode(),
                                     headers)  # fmt: skip
        t = time.perf_counter()
        with urllib.request.urlopen(req, timeout=300) as r:
            reply = json.loads(r.read())["choices"][0]["message"]["content"] or ""
        history.append({"role": "assistant", "content": reply})
        return time.perf_counter() - t

    times: dict[str, list[float]] = {"ours": [], "plain": []}
    for name, server in (("ours", ours), ("plain", plain)):
        histories: dict[str, list[dict]] = {"a": [], "b": []}
        for i in range(runs + 1):
            for who in ("a", "b"):
                histories[who].append({"role": "user", "content": f"Question {i} for {who}."})
                took = turn(server, who, histories[who])
                if i:  # the first of each: both read the whole instruction
                    times[name].append(took)
    o, p = statistics.median(times["ours"]), statistics.median(times["plain"])
    compared(
        f"(f) two conversations taking turns, {len(times['ours'])} turns, median",
        ("lmd's embedded server (kept states):     ", o, ""),
        ("only the last request's beginning reused:", p, ""),
    )


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        bench_startup()
        bench_counting()
        bench_dali(Path(tmp))
        bench_prompt_reading()


if __name__ == "__main__":
    main()
