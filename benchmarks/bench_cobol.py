"""How much cobol's git work adds to a turn: focus, rewrite (model + git apply --check + apply +
record) and undo, against a plain dali chat turn, all in-process against the fake backend.

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

from tests.daemons import configure  # noqa: E402
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
        with TestClient(create_app(home=home), base_url="http://127.0.0.1:8420") as client:

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


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 30)
