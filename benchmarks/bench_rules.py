"""What reading commands into what runs costs, timed: the bash grammar alone (the baseline), the
effective reading on top of it (daemon/agent/effective.py), a whole rules decision, and the
question's read-back (daemon/agent/readback.py), on commands a model proposes and on hostile
ones.

    .venv/bin/python benchmarks/bench_rules.py [--n 200]

Ratios are against the grammar alone in the same run. Each command is made unique per round
(a trailing argument), so no cache answers.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from daemon.agent import effective, rules  # noqa: E402
from daemon.agent.readback import describe_command  # noqa: E402
from daemon.core.store import Store  # noqa: E402
from daemon.execution.bash import simple_commands  # noqa: E402

COMMANDS = {
    "plain": ["git commit -m 'fix the parser'", "ls -la", "make -j4 test", "pytest -q"],
    "compound": ["git add -A && git commit -m x && git push origin main", "cat a | grep b | wc"],
    "wrapped": [
        "timeout 9 sh -c 'rm -f notes.txt'",
        "env FOO=1 nice -n 5 git push",
        "find . -name '*.pyc' -exec rm -f {} \\;".replace("{}", "x"),
    ],
    "long": ["touch " + "a" * 10_000, "echo " + "a " * 2_000],
}


def timed(fn, commands: list[str], n: int, tag: str) -> float:
    """Median microseconds of fn over one command, fresh text each round (and each `tag`)."""
    samples = []
    for i in range(n):
        started = time.perf_counter()
        for command in commands:
            fn(f"{command} {tag}{i}")
        samples.append((time.perf_counter() - started) / len(commands) * 1e6)
    return statistics.median(samples)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--n", type=int, default=200)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        store = Store(Path(tmp) / "lmd.db")
        store.migrate()
        for i in range(20):  # a user's rules beside the 14 built-in ones
            rules.add_rule(store, "allow", f"prog{i} sub", origin="cli")

        def decide(command: str) -> object:
            return rules.decide(store, cwd=tmp, session="s", command=command)

        heads = ("grammar", "effective", "decide", "read-back")
        print(f"{'commands':<10} " + " ".join(f"{h:>18}" for h in heads))
        for kind, commands in COMMANDS.items():
            base = timed(simple_commands, commands, args.n, "g")
            cells = [f"{base:8.0f} us"]
            for tag, fn in (("e", effective.read), ("d", decide), ("r", describe_command)):
                t = timed(fn, commands, args.n, tag)
                cells.append(f"{t:8.0f} us {t / base:5.1f}x")
            print(f"{kind:<10} " + " ".join(f"{c:>18}" for c in cells))
        store.close()


if __name__ == "__main__":
    main()
