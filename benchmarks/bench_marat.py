"""marat's overhead: the daemon's own time per thought-loop iteration, and the command runner
against plain `bash -c`.

    .venv/bin/python benchmarks/bench_marat.py [--iterations 40] [--requests 5] [--runs 200]

1. Loop iteration: a request whose scripted model answers `true` N times, then a Final Thought.
   Time spent waiting for the model (LLM.chat) and running the command (run_command) is
   measured and subtracted; what remains is marat's and the core's own work per iteration
   (history selection, prompt building, parsing, storing turns, audit rows, cwd tracking).
2. Runner: `true` run by `daemon.execution.runner.run_command`, by marat's `execute` (adds the cwd
   trap), by asyncio's subprocess directly, and by `subprocess.run(["bash", "-c", ...])`.
"""

from __future__ import annotations

import argparse
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
os.environ.setdefault("LMD_TOKENIZER", "estimate")

from tests.fake_backend import FakeBackend  # noqa: E402


def action(command: str) -> str:
    return f"Thought: run it.\nAction:\n```bash\n{command}\n```"


class Timer:
    """Wrap an async function and sum the seconds spent inside it."""

    def __init__(self) -> None:
        self.total = 0.0
        self.calls = 0

    def wrap(self, fn):
        async def timed(*args, **kwargs):
            start = time.perf_counter()
            try:
                return await fn(*args, **kwargs)
            finally:
                self.total += time.perf_counter() - start
                self.calls += 1

        return timed


async def bench_loop(iterations: int, requests: int) -> dict:
    import plugins.marat.execute as execute_module
    from daemon.backends.llm import LLM
    from daemon.core.daemon import Daemon
    from daemon.core.turn import Outcome, run_turn
    from tests.daemons import configure

    backend = FakeBackend().start()
    work = tempfile.mkdtemp(prefix="bench-marat-")
    home = Path(work) / "home"
    configure(
        home,
        openai_chat_endpoint=backend.url,
        openai_model="fake-model",
        llm_max_retries=0,
        marat_start_dir=work,
        marat_approval="unsafe",
        max_thought_loops=iterations + 1,
    )
    llm_timer, cmd_timer = Timer(), Timer()
    original_chat, original_run = LLM.chat, execute_module.run_command
    LLM.chat = llm_timer.wrap(original_chat)
    execute_module.run_command = cmd_timer.wrap(original_run)
    daemon = Daemon(home=home)
    per_iteration = []
    try:
        for r in range(requests + 1):  # the first request warms up imports and connections
            backend.queue(*[action("true")] * iterations, "Final Thought: done.")
            llm_timer.total = cmd_timer.total = 0.0
            llm_timer.calls = cmd_timer.calls = 0
            start = time.perf_counter()
            outcome = Outcome(session=f"bench{r}")
            async for _ in run_turn(daemon, outcome.session, "marat run true a lot", outcome):
                pass
            total = time.perf_counter() - start
            assert outcome.reply.startswith("done."), outcome.reply
            own = total - llm_timer.total - cmd_timer.total
            if r:
                per_iteration.append(own / iterations)
    finally:
        LLM.chat, execute_module.run_command = original_chat, original_run
        await daemon.close()
        backend.stop()
    return {
        "median_ms": statistics.median(per_iteration) * 1000,
        "min_ms": min(per_iteration) * 1000,
        "llm_ms": llm_timer.total / max(llm_timer.calls, 1) * 1000,
        "cmd_ms": cmd_timer.total / max(cmd_timer.calls, 1) * 1000,
    }


async def bench_runner(runs: int) -> dict:
    from daemon.execution.runner import run_command
    from plugins.marat.execute import execute

    cwd = tempfile.gettempdir()

    async def timed(make) -> float:
        samples = []
        for _ in range(runs):
            start = time.perf_counter()
            await make()
            samples.append(time.perf_counter() - start)
        return statistics.median(samples) * 1000

    async def raw_asyncio():
        proc = await asyncio.create_subprocess_exec(
            "bash", "-c", "true", cwd=cwd, stdout=asyncio.subprocess.PIPE
        )
        await proc.communicate()

    def plain():
        subprocess.run(["bash", "-c", "true"], cwd=cwd, check=True, capture_output=True)

    async def plain_async():
        plain()

    return {
        "bash -c (subprocess.run)": await timed(plain_async),
        "asyncio subprocess": await timed(raw_asyncio),
        "run_command": await timed(lambda: run_command("true", cwd, 10, 2000)),
        "marat execute": await timed(lambda: execute("true", cwd, 10, 2000)),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--iterations", type=int, default=40, help="loop iterations per request")
    ap.add_argument("--requests", type=int, default=5)
    ap.add_argument("--runs", type=int, default=200, help="runs per runner variant")
    args = ap.parse_args()

    loop = asyncio.run(bench_loop(args.iterations, args.requests))
    print(f"thought loop: {args.iterations} iterations x {args.requests} requests")
    print(f"  daemon's own time per iteration: median {loop['median_ms']:.2f} ms")
    print(f"                                   min    {loop['min_ms']:.2f} ms")
    print(f"  (excluded) model call {loop['llm_ms']:.2f} ms, command {loop['cmd_ms']:.2f} ms each")

    runner = asyncio.run(bench_runner(args.runs))
    base = runner["bash -c (subprocess.run)"]
    print(f"command runner: median of {args.runs} runs of `true`")
    for name, ms in runner.items():
        print(f"  {name:<26} {ms:7.2f} ms   x{ms / base:.2f} vs bash -c")


if __name__ == "__main__":
    main()
