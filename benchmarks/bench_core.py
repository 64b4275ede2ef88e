"""Core benchmarks (issue: the daemon core). Prints numbers and ratios; asserts nothing.

(a) the daemon's added latency for a dali request (10,000 prompts of history in the session)
    against a backend answering instantly, vs calling that backend directly with openai;
(b) 64 concurrent requests on 64 sessions against a 100 ms backend, vs one request;
(c) context selection with 1,000,000 rows in `prompts`, vs the same with 1,000 rows;
(d) `lmd --help` and `lmd say` wall time vs `python -c pass`;
(e) the guard's cost per request: the token check, the kernel's word on the client's socket
    (netlink, and the /proc/net/tcp fallback), vs passing the request straight through.

Run: .venv/bin/python benchmarks/bench_core.py [--quick]
"""

from __future__ import annotations

import asyncio
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.daemons import LiveDaemon, configure  # noqa: E402
from tests.fake_backend import FakeBackend  # noqa: E402

QUICK = "--quick" in sys.argv


def pct(values: list[float], p: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, int(p / 100 * len(values)))]


def ms(x: float) -> str:
    return f"{x * 1000:.2f} ms"


def fill_history(home: Path, session: str, n: int, other_rows: int = 0) -> None:
    from daemon.core.store import Store

    store = Store(home / "lmd.db")
    store.migrate()
    now = time.time()
    rows = [
        (
            session,
            "user" if i % 2 == 0 else "assistant",
            f"message number {i} " * 5,
            25,
            1000.0,
            "default",
            "dali",
            now - (n - i) * 30,
        )
        for i in range(n)
    ]
    rows += [
        (f"other{i % 1000}", "user", f"filler {i}", 3, 1000.0, "default", "dali", now)
        for i in range(other_rows)
    ]
    with store.transaction() as db:
        db.conn.executemany(
            "INSERT INTO prompts (session, role, content, tokens, karma, kind, mode, created_at)"
            " VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
            rows,
        )
    store.close()


def bench_latency(backend: FakeBackend, tmp: Path) -> None:
    import httpx
    import openai

    n = 100 if QUICK else 400
    home = tmp / "a"
    configure(home, openai_chat_endpoint=backend.url, openai_model="fake-model", llm_max_retries=0)
    fill_history(home, "bench", 10_000)
    daemon = LiveDaemon(home, {"LMD_TOKENIZER": "estimate"})
    # The baseline is the client the daemon itself uses (AsyncOpenAI), driven from a loop
    # in this process, alternating with requests through the daemon.
    loop = asyncio.new_event_loop()
    direct = openai.AsyncOpenAI(base_url=backend.url, api_key="x", max_retries=0)
    messages = [{"role": "user", "content": "hi"}]

    def call_direct() -> None:
        loop.run_until_complete(
            direct.chat.completions.create(model="fake-model", messages=messages)
        )

    try:
        http = httpx.Client(base_url=daemon.url, headers={"X-Session": "bench"})
        for _ in range(20):  # warm up both paths
            call_direct()
            http.post("/v1", content="dali hi")
        base, through = [], []
        for _ in range(n):
            t = time.perf_counter()
            call_direct()
            base.append(time.perf_counter() - t)
            t = time.perf_counter()
            r = http.post("/v1", content="dali hi")
            through.append(time.perf_counter() - t)
            assert r.status_code == 200
        sent = len(backend.chat_requests[-1]["messages"])
        loop.run_until_complete(direct.close())
        loop.close()
    finally:
        daemon.stop()
    b50, b95 = pct(base, 50), pct(base, 95)
    d50, d95 = pct(through, 50), pct(through, 95)
    print(f"(a) {n} dali requests, 10,000 prompts of history ({sent} messages sent per call)")
    print(f"    direct AsyncOpenAI   p50 {ms(b50)}  p95 {ms(b95)}")
    print(f"    through lmd /v1      p50 {ms(d50)}  p95 {ms(d95)}")
    print(
        f"    added by lmd         p50 {ms(d50 - b50)}  p95 {ms(d95 - b95)}"
        f"  (ratio p50 {d50 / b50:.2f}x; target: added p50 < 2 ms)"
    )


def bench_concurrency(tmp: Path) -> None:
    """The backend runs in its own process and the 64 clients share one asyncio loop, so the
    benchmark's own CPU (threads, GIL) is not charged to the daemon."""
    import httpx

    backend = subprocess.Popen(
        [sys.executable, str(ROOT / "tests" / "fake_backend.py"), "--latency", "0.1"],
        stdout=subprocess.PIPE,
        text=True,
    )
    url = backend.stdout.readline().strip()
    home = tmp / "b"
    configure(home, openai_chat_endpoint=url, openai_model="fake-model", llm_max_retries=0)
    daemon = LiveDaemon(home, {"LMD_TOKENIZER": "estimate"})

    async def run() -> tuple[float, float]:
        # One client per session: httpcore's pool does work per request that grows with the
        # connections it holds, so one shared client would charge us, not the daemon.
        clients = [httpx.AsyncClient(base_url=daemon.url, timeout=30) for _ in range(64)]
        try:
            await asyncio.gather(*(c.post("/v1", content="dali warm up") for c in clients))
            singles = []
            for _ in range(5):
                t = time.perf_counter()
                await clients[0].post("/v1", content="dali one", headers={"X-Session": "one"})
                singles.append(time.perf_counter() - t)
            rounds = []
            for _ in range(5):
                t = time.perf_counter()
                replies = await asyncio.gather(
                    *(
                        c.post("/v1", content=f"dali hi {i}", headers={"X-Session": f"s{i}"})
                        for i, c in enumerate(clients)
                    )
                )
                rounds.append(time.perf_counter() - t)
                assert [r.status_code for r in replies].count(200) == 64
        finally:
            await asyncio.gather(*(c.aclose() for c in clients))
        return statistics.median(singles), statistics.median(rounds)

    try:
        one, many = asyncio.run(run())
    finally:
        daemon.stop()
        backend.terminate()
        backend.wait()
    print("(b) 64 concurrent requests on 64 sessions, backend latency 100 ms (own process)")
    print(
        f"    one request {ms(one)}; 64 at once {ms(many)} (median of 5)"
        f"  ratio {many / one:.2f}x (target < 1.5x)"
    )


def bench_selection(tmp: Path) -> None:
    from daemon.core import karma
    from daemon.core.core_settings import CORE_SETTINGS
    from daemon.core.store import Store

    defaults = {s.name: s.default for s in CORE_SETTINGS}
    params = karma.Params.from_settings(defaults)
    results = {}
    for total in (1_000, 1_000_000):
        home = tmp / f"c{total}"
        fill_history(
            home,
            "target",
            1_000 if total == 1_000 else 10_000,
            other_rows=0 if total == 1_000 else total - 10_000,
        )
        store = Store(home / "lmd.db")
        store.migrate()
        times = []
        for _ in range(200):
            t = time.perf_counter()
            recent = store.recent("target", defaults["recent_history_limit"])
            chosen = karma.select(
                recent,
                params,
                time.time(),
                defaults["max_tokens"],
                defaults["min_score_to_include_prompt"],
            )
            times.append(time.perf_counter() - t)
        count = store.db.execute("SELECT count(*) FROM prompts").fetchone()[0]
        results[total] = (statistics.median(times), pct(times, 95), count, len(chosen))
        store.close()
    small, big = results[1_000], results[1_000_000]
    print(f"(c) context selection (newest {defaults['recent_history_limit']} + karma)")
    print(f"    {small[2]:>9,} rows: p50 {ms(small[0])}  p95 {ms(small[1])}")
    print(
        f"    {big[2]:>9,} rows: p50 {ms(big[0])}  p95 {ms(big[1])}"
        f"  ratio {big[0] / small[0]:.2f}x (target < 10 ms)  kept {big[3]} prompts"
    )


def bench_startup(tmp: Path, backend: FakeBackend) -> None:
    py = sys.executable
    env = {**os.environ, "LMD_TOKENIZER": "estimate"}
    env.pop("PYTHONDONTWRITEBYTECODE", None)  # without .pyc files every run recompiles lmd

    home = tmp / "d"
    configure(home, openai_chat_endpoint=backend.url, openai_model="fake-model")
    daemon = LiveDaemon(home, {"LMD_TOKENIZER": "estimate"})
    lmd = str(Path(py).with_name("lmd"))
    commands = {
        "pass": [py, "-c", "pass"],
        "help": [lmd, "--help"],
        "say": [lmd, "say", "--url", daemon.url, "dali", "hi"],
    }
    times: dict[str, list[float]] = {k: [] for k in commands}
    try:
        # interleaved, so a change of load on a shared machine falls on all three alike
        for _ in range(21):
            for name, args in commands.items():
                t = time.perf_counter()
                subprocess.run(args, capture_output=True, env=env, cwd=ROOT)
                times[name].append(time.perf_counter() - t)
    finally:
        daemon.stop()
    base, helptime, say = (statistics.median(times[k]) for k in ("pass", "help", "say"))
    print(f"(d) start-up wall time (median of 21, interleaved; load {os.getloadavg()[0]:.1f})")
    print(f"    python -c pass {ms(base)}")
    print(f"    lmd --help     {ms(helptime)}  ratio {helptime / base:.2f}x (target <= 3x)")
    print(f"    lmd say        {ms(say)}  ratio {say / base:.2f}x (target <= 3x; with the reply)")


def bench_guard() -> None:
    """The Guard around a do-nothing app, on the scope of a real loopback connection."""
    import socket

    from daemon.http import peer
    from daemon.http.guard import Guard, same_user

    async def app(scope, receive, send):
        pass

    async def send(message):
        pass

    server = socket.create_server(("127.0.0.1", 0))
    client = socket.create_connection(server.getsockname())
    conn, addr = server.accept()
    scope = {
        "type": "http",
        "method": "POST",
        "path": "/v1",
        "client": addr,
        "server": conn.getsockname(),
        "headers": [
            (b"host", b"127.0.0.1:8420"),
            (b"user-agent", b"curl/8.5.0"),
            (b"accept", b"*/*"),
            (b"content-length", b"7"),
            (b"content-type", b"application/x-www-form-urlencoded"),
        ],
    }
    with_token = {
        **scope,
        "headers": [*scope["headers"], (b"authorization", b"Bearer " + b"t" * 43)],
    }
    n = 2000 if QUICK else 20000
    loop = asyncio.new_event_loop()

    def per_call(call, sc) -> float:
        for _ in range(200):
            loop.run_until_complete(call(sc, None, send))
        t = time.perf_counter()
        for _ in range(n):
            loop.run_until_complete(call(sc, None, send))
        return (time.perf_counter() - t) / n

    proc_only = lambda sc: peer.proc_uid(sc["client"], sc["server"]) == os.geteuid()  # noqa: E731
    cases = [
        ("no guard (the app alone)", app, scope),
        ("token", Guard(app, None, "t" * 43, True, None), with_token),
        ("kernel: netlink", Guard(app, None, None, True, same_user), scope),
        ("kernel: /proc/net/tcp", Guard(app, None, None, True, proc_only), scope),
    ]
    times = {}
    for name, call, sc in cases:
        if "proc" in name:
            n_saved, n = n, max(200, n // 50)  # about 1,000 times slower; fewer rounds
            times[name] = per_call(call, sc)
            n = n_saved
        else:
            times[name] = per_call(call, sc)
    loop.close()
    for s in (client, conn, server):
        s.close()
    with open("/proc/net/tcp") as f4, open("/proc/net/tcp6") as f6:
        sockets = len(f4.readlines()) + len(f6.readlines()) - 2
    base = times["no guard (the app alone)"]
    print(f"(e) the guard per request ({sockets} TCP sockets on this machine)")
    for name, t in times.items():
        print(f"    {name:<26} {t * 1e6:8.1f} us  (+{(t - base) * 1e6:.1f} us)")


def main() -> None:
    with tempfile.TemporaryDirectory() as d, FakeBackend() as backend:
        tmp = Path(d)
        bench_latency(backend, tmp)
        bench_concurrency(tmp)
        bench_selection(tmp)
        bench_startup(tmp, backend)
    bench_guard()


if __name__ == "__main__":
    main()
