"""How much cobol's git work adds to a turn: focus, rewrite (model + git's reading of the diff +
git apply --check + apply + record) and undo, against a plain dali chat turn, all in-process
against the fake backend; and git's reading of one diff (what it touches: two `git apply
--numstat` runs) against the `git apply --check` cobol ran before it.

    .venv/bin/python benchmarks/bench_cobol.py [rounds]
"""

from __future__ import annotations

import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # the tests package: the stand-in backend and the harness
os.environ.setdefault("LMD_TOKENIZER", "estimate")

from tests.daemons import IN_PROCESS, configure  # noqa: E402
from tests.fake_backend import FakeBackend, Reply  # noqa: E402
from tests.plugins.cobol.conftest import FIX_ADD, make_repo  # noqa: E402


def timed(fn, rounds: int) -> list[float]:
    out = []
    for _ in range(rounds):
        start = time.perf_counter()
        fn()
        out.append(time.perf_counter() - start)
    return out


def main(rounds: int = 30) -> None:
    from starlette.testclient import TestClient

    from daemon.http.app import create_app

    with FakeBackend() as backend, tempfile.TemporaryDirectory() as tmp:
        home = Path(tmp) / "home"
        configure(home, openai_chat_endpoint=backend.url, openai_model="fake-model")
        repo = make_repo(Path(tmp) / "repo")
        backend.handler = lambda body: Reply(FIX_ADD) if "diff" in str(body) else Reply("hi")
        headers = {"X-Cwd": str(repo), "X-Session": "bench", "Accept": "application/json"}
        app = create_app(home=home, peer_check=IN_PROCESS)  # the benchmark is the user
        with TestClient(app, base_url="http://127.0.0.1:8420") as client:

            def say(text: str) -> dict:
                r = client.post("/v1", content=text.encode(), headers=headers)
                assert r.status_code == 200, r.text
                return r.json()

            say("dali warm up")
            say("cobol focus on calc.py lines 4 to 5")
            dali = timed(lambda: say("dali hello there"), rounds)
            focus = timed(lambda: say("cobol focus on function add in calc.py"), rounds)
            rewrites, undos = [], []
            for _ in range(rounds):
                start = time.perf_counter()
                assert say("cobol rewrite add so that it adds")["reply"].startswith("Changed")
                rewrites.append(time.perf_counter() - start)
                start = time.perf_counter()
                assert say("cobol undo")["reply"].startswith("Undone")
                undos.append(time.perf_counter() - start)

    reading, checking = git_reading(rounds)
    base = statistics.median(dali)
    print(f"cobol benchmark, {rounds} rounds each, median ms per turn (ratio to a dali turn)")
    for name, samples in [
        ("dali chat (baseline)", dali),
        ("cobol focus", focus),
        ("cobol rewrite", rewrites),
        ("cobol undo", undos),
    ]:
        med = statistics.median(samples)
        print(f"  {name:22s} {med * 1000:8.1f} ms   x{med / base:5.2f}")
    check = statistics.median(checking)
    print("one diff, median ms (ratio to git apply --check)")
    for name, samples in [("git apply --check", checking), ("git's reading", reading)]:
        med = statistics.median(samples)
        print(f"  {name:22s} {med * 1000:8.1f} ms   x{med / check:5.2f}")


def git_reading(rounds: int) -> tuple[list[float], list[float]]:
    """(git's reading of FIX_ADD, git apply --check of it), seconds per run."""
    import asyncio

    from plugins.cobol import patches

    async def go(repo: str) -> tuple[list[float], list[float]]:
        diff = patches.extract_diff(FIX_ADD)
        patch = await patches.read(repo, diff)
        reading, checking = [], []
        for _ in range(rounds):
            start = time.perf_counter()
            await patches.read(repo, diff)
            reading.append(time.perf_counter() - start)
            start = time.perf_counter()
            assert await patches.check(repo, patch) is None
            checking.append(time.perf_counter() - start)
        return reading, checking

    with tempfile.TemporaryDirectory() as tmp:
        return asyncio.run(go(str(make_repo(Path(tmp) / "repo"))))


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 30)
