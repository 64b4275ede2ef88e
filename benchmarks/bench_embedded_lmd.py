"""bench_embedded.py (h): the embedded engine through lmd, against the engine's own figures.

- a dali turn's time to first token through lmd's /v1/chat/completions (streamed), against
  the same request sent straight to the daemon's own llama-server over its socket;
- four dali sessions at once through lmd, against one;
- a 100-row LM_SCORE batch (lmd's Scorer, as many requests in flight as batch_concurrency
  says) and a 50-sample SelectIT run (lmd's OpenAIRater likewise), against the engine's best
  throughput for the very same requests (recorded, then replayed straight to the engine at 1,
  2, 4 and 8 at once).
"""

from __future__ import annotations

import asyncio
import http.client
import json
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def _stream_ttft(conn_factory, path: str, headers: dict, body: dict) -> tuple[float, float]:
    """(time to the first content delta, whole time) of one streamed chat request."""
    conn = conn_factory()
    t = time.perf_counter()
    conn.request("POST", path, json.dumps(body), headers)
    answer = conn.getresponse()
    first = None
    for raw in answer:
        line = raw.strip()
        if line.startswith(b"data:") and line != b"data: [DONE]":
            delta = (json.loads(line[5:]).get("choices") or [{}])[0].get("delta") or {}
            if delta.get("content") and first is None:
                first = time.perf_counter() - t
    took = time.perf_counter() - t
    conn.close()
    return first or took, took


def _daemon_engine(daemon_pid: int) -> tuple[str, str]:
    """(socket path, key) of the daemon's own llama-server, read as its user may."""
    from tests.daemons import children, cmdline

    for pid in children(daemon_pid):
        argv = cmdline(pid).split(b"\0")
        if b"--api-key-file" in argv:
            key_file = Path(argv[argv.index(b"--api-key-file") + 1].decode())
            host = argv[argv.index(b"--host") + 1].decode()
            return host, key_file.read_text().strip()
    raise RuntimeError("the daemon runs no llama-server")


def bench_dali_through_lmd(tmp: Path, runs: int, threads: int) -> None:
    from daemon.backends.embedded import BUNDLED_ALIAS
    from daemon.backends.unix_http import UnixHTTPConnection
    from tests.daemons import LiveDaemon, configure, say

    home = tmp / "home"
    configure(home, embedded_context=2048, embedded_threads=threads, reply_max_tokens=64)
    d = LiveDaemon(home, {"LMD_TOKENIZER": "estimate"})
    try:
        assert say(d.url, "warm", "dali hi", timeout=300)[0] == 200
        sock, key = _daemon_engine(d.proc.pid)
        host, port = d.url.removeprefix("http://").split(":")
        token = (home / "token").read_text().strip()
        lmd_headers = {"Content-Type": "application/json", "Authorization": f"Bearer {token}"}
        engine_headers = {"Content-Type": "application/json", "Authorization": f"Bearer {key}"}
        ttft: dict[str, list[float]] = {"lmd": [], "engine": []}

        def body(n: int) -> dict:
            # a prompt of its own each time: a prompt the engine read a moment ago (the other
            # side's) would be answered from its cache. The engine is sent what lmd sends it
            # for this turn (dali passes no temperature on; it asks for the usage)
            return {"messages": [{"role": "user", "content": f"Tell me about lighthouses ({n})."}],
                    "max_tokens": 64, "stream": True}  # fmt: skip

        def engine_body(n: int) -> dict:
            return {**body(n), "model": BUNDLED_ALIAS, "stream_options": {"include_usage": True}}

        for i in range(runs):
            lmd = (lambda: http.client.HTTPConnection(host, int(port), timeout=600),
                   "/v1/chat/completions", lmd_headers,
                   {**body(100 + i), "model": "lmd", "user": f"b{i}"})  # fmt: skip
            own = (lambda: UnixHTTPConnection(sock, timeout=600), "/v1/chat/completions",
                   engine_headers, engine_body(200 + i))  # fmt: skip
            for name, asked in (("lmd", lmd), ("engine", own))[:: 1 if i % 2 else -1]:
                ttft[name].append(_stream_ttft(*asked)[0])  # each goes first in turn
        lmd, engine = statistics.median(ttft["lmd"]), statistics.median(ttft["engine"])
        print(f"(h) dali, time to first token (median of {runs}): through lmd {lmd * 1000:.0f} "
              f"ms, the engine's own {engine * 1000:.0f} ms: {lmd / engine:.2f}x "
              f"(goal: at most 1.10x)")  # fmt: skip

        def one_session(i: int, took: list[float]) -> None:
            body = {"model": "lmd", "user": f"c{i}-{time.monotonic_ns()}", "stream": True,
                    "messages": [{"role": "user", "content": f"Tell me about the sea ({i})."}],
                    "max_tokens": 64, "temperature": 0}  # fmt: skip
            took[i] = _stream_ttft(lambda: http.client.HTTPConnection(host, int(port), timeout=600),
                                   "/v1/chat/completions", lmd_headers, body)[1]  # fmt: skip

        def at_once(count: int) -> float:
            took = [0.0] * count
            return _all_at_once(
                [threading.Thread(target=one_session, args=(i, took)) for i in range(count)]
            )

        ones, fours = [], []
        for _ in range(max(2, runs // 2)):
            ones.append(at_once(1))
            fours.append(at_once(4))
        one, four = statistics.median(ones), statistics.median(fours)
        print(f"    four dali sessions at once through lmd: {four:.2f} s, one alone {one:.2f} s: "
              f"{four / one:.2f}x (goal: at most 1.6x)")  # fmt: skip
    finally:
        d.stop()


MARKS = [b"Rec ", b"Ent ", b"Itm ", b"Obs ", b"Doc "]


def _replay(server, recorded: list[tuple[str, bytes]], at_once: int, mark: bytes) -> float:
    """Seconds to send `recorded` (path, body) straight to `server`, `at_once` at a time, each
    body's rows renamed with `mark` (the server's prompt cache would answer the very prompts
    lmd just sent at no cost)."""
    todo = [(path, body.replace(b"Row ", mark).replace(b"row ", mark.lower()))
            for path, body in recorded]  # fmt: skip
    lock = threading.Lock()
    headers = {"Authorization": f"Bearer {server.key}", "Content-Type": "application/json"}

    def worker() -> None:
        conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=600)
        while True:
            with lock:
                if not todo:
                    break
                path, body = todo.pop()
            conn.request("POST", path, body, headers)
            answer = conn.getresponse()
            answer.read()
            if answer.status != 200:
                raise RuntimeError(f"HTTP {answer.status}")
        conn.close()

    return _all_at_once([threading.Thread(target=worker) for _ in range(at_once)])


def _all_at_once(threads: list[threading.Thread]) -> float:
    """Seconds from starting every thread to the end of the last."""
    t = time.perf_counter()
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    return time.perf_counter() - t


def _best(server, recorded: list[tuple[str, bytes]]) -> float:
    """The shortest time the engine takes for the recorded requests, sent 1, 2, 4 or 8 at a
    time (each printed)."""
    took = {c: _replay(server, recorded, c, MARKS[i]) for i, c in enumerate((1, 2, 4, 8))}
    shown = ", ".join(f"{c} at once {t:.1f} s" for c, t in took.items())
    print(f"    the same requests straight to the engine: {shown}")
    return min(took.values())


def _recording(llm) -> list[tuple[str, bytes]]:
    """The (path, body) of every request `llm` sends from now on (an httpx event hook)."""
    recorded: list[tuple[str, bytes]] = []

    async def record(request) -> None:
        recorded.append(("/v1" + request.url.path.split("/v1", 1)[1], request.content))

    llm.http.event_hooks["request"].append(record)
    return recorded


def bench_batches(threads: int) -> None:
    from daemon.backends.concurrency import batch_concurrency
    from daemon.backends.embedded import EmbeddedServer, bundled_model_path
    from daemon.backends.llm import LLM
    from plugins.lm_score.config import ScoreConfig
    from plugins.lm_score.scorer import Scorer
    from plugins.selectit.datasets import Sample
    from plugins.selectit.engine import prompts_for
    from plugins.selectit.openai_backend import OpenAIRater
    from plugins.selectit.prompts import load_templates

    server = EmbeddedServer(bundled_model_path(), n_ctx=2048, n_threads=threads, tcp=True).start()

    def timed(job) -> tuple[float, list, int, Any]:
        """Run `job(llm, width, start)` on lmd's client, `width` requests at once (as
        batch_concurrency says): its `start()`, called after its warm-up, begins the clock and
        the recording of what it sends. (Seconds from start to the job's end, the requests
        recorded, width, what the job returned.)"""

        async def run() -> tuple[float, list, int, Any]:
            llm = LLM(server.url, server.key, 600, 0, server.alias)
            width = await batch_concurrency(llm)
            begun: list = []

            def start() -> None:
                begun.extend((_recording(llm), time.perf_counter()))

            result = await job(llm, width, start)
            took = time.perf_counter() - begun[1]
            await llm.close()
            return took, begun[0], width, result

        return asyncio.run(run())

    try:

        async def lm_score(llm, width: int, start) -> list:
            config = ScoreConfig(endpoint=server.url, api_key=server.key, model=server.alias,
                                 concurrency=width, cache=False, timeout=600)  # fmt: skip
            scorer = Scorer(config, llm=llm)
            await scorer.score(["warm up", "Is this text about the weather?"])
            rows = [[f"Row {i}: the {['rain', 'sun', 'bus', 'cat'][i % 4]} was late today.",
                     "Is this text about the weather?"] for i in range(100)]  # fmt: skip
            start()
            return await scorer.score_many(rows, cache=False)

        took, recorded, width, results = timed(lm_score)
        assert not [r for r in results if isinstance(r, Exception)]
        best = _best(server, recorded)
        print(f"    100-row LM_SCORE batch through lmd ({width} at once): {100 / took:.2f} rows/s; "
              f"the engine's best for the same {len(recorded)} requests {100 / best:.2f} rows/s: "
              f"{best / took:.0%} (goal: at least 80%)")  # fmt: skip

        async def selectit(llm, width: int, start) -> list:
            rater = OpenAIRater(llm, server.alias, api="chat", concurrency=width)
            templates = load_templates()
            samples = [Sample(id=i, record={}, line=i + 1, input="",
                              instruction=f"Write one sentence about Row {i}.",
                              output=f"The number {i} is {'even' if i % 2 == 0 else 'odd'}.")
                       for i in range(50)]  # fmt: skip
            lists = [prompts_for(s, templates) for s in samples]
            await rater.rate(lists[0][0])
            start()
            return [x async for x in rater.rate_samples(lists)]

        took, recorded, width, done = timed(selectit)
        assert len(done) == 50
        best = _best(server, recorded)
        print(f"    50-sample SelectIT run through lmd ({width} at once, {len(recorded)} "
              f"ratings): {50 / took:.2f} samples/s; the engine's best {50 / best:.2f} "
              f"samples/s: {best / took:.0%} (goal: at least 80%)")  # fmt: skip
    finally:
        server.stop()


def bench_through_lmd(args) -> None:
    runs = 3 if args.quick else 7
    with tempfile.TemporaryDirectory() as tmp:
        bench_dali_through_lmd(Path(tmp), runs, args.threads)
    bench_batches(args.threads)
