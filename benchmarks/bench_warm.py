"""What the test harness's fork server saves: a daemon forked warm vs started cold.

Each round starts one `lmd serve` (on a home served by the stand-in backend), waits until it
answers, has it answer one dali turn, and stops it: once as a fresh `python -m daemon.cli`
(cold) and once forked from a warm process (tests/forkserver.py through tests/warm_lmd.py).
CPU-seconds are read from the kernel: a cold daemon's from wait4(), a warm one's from its
own /proc/PID/stat just before it is stopped. Rounds alternate, so a machine's changing speed
touches both sides alike. Prints the median of each and the ratio.

    .venv/bin/python benchmarks/bench_warm.py [--rounds 8]
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.conftest import configure_home  # noqa: E402
from tests.daemons import free_port  # noqa: E402
from tests.fake_backend import FakeBackend  # noqa: E402
from tests.warm_lmd import WarmLmd  # noqa: E402

TICK = os.sysconf("SC_CLK_TCK")


def proc_cpu(pid: int) -> float:
    """User + system CPU-seconds of a live process (its own, not its children's)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK


def wait_ready(url: str) -> None:
    while True:
        try:
            urllib.request.urlopen(url + "/healthz", timeout=5)
            return
        except OSError:
            continue


def one_turn(url: str, home: Path) -> None:
    token = (home / "token").read_text().strip()
    request = urllib.request.Request(url + "/v1", data=b"dali hello", method="POST")
    request.add_header("Authorization", f"Bearer {token}")
    urllib.request.urlopen(request, timeout=60).read()


def round_cold(home: Path, env: dict[str, str]) -> float:
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    argv = [sys.executable, "-m", "daemon.cli", "serve", "--bind", f"127.0.0.1:{port}"]
    with open(os.devnull, "wb") as null:
        proc = subprocess.Popen([*argv, "--home", str(home)], env=env, cwd=ROOT, stdout=null,
                                stderr=subprocess.STDOUT)  # fmt: skip
    wait_ready(url)
    one_turn(url, home)
    os.kill(proc.pid, signal.SIGTERM)
    _, _, usage = os.wait4(proc.pid, 0)
    return usage.ru_utime + usage.ru_stime


def round_warm(warm: WarmLmd, home: Path, env: dict[str, str]) -> float:
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    argv = ["serve", "--bind", f"127.0.0.1:{port}", "--home", str(home)]
    with open(os.devnull, "wb") as null:
        child = warm.start_child(argv, env, ROOT, null.fileno())
    wait_ready(url)
    one_turn(url, home)
    spent = proc_cpu(child.pid)
    child.terminate()
    child.wait()
    return spent


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=8)
    rounds = parser.parse_args().rounds
    backend = FakeBackend().start()
    scratch = Path(tempfile.mkdtemp(prefix="bench-warm-"))
    env = {**os.environ, "LMD_TOKENIZER": "estimate"}
    warm = WarmLmd(scratch / "warm", dict(os.environ), profile="tests.warm_lmd:SERVE").start()
    cold, forked = [], []
    try:
        for i in range(rounds):
            for side, runs in (("cold", cold), ("warm", forked)):
                home = scratch / f"{side}-{i}"
                configure_home(home, backend)
                if side == "cold":
                    runs.append(round_cold(home, env))
                else:
                    runs.append(round_warm(warm, home, env))
    finally:
        warm.stop()
        backend.stop()
    c, w = statistics.median(cold), statistics.median(forked)
    print(f"daemon ready + one dali turn, CPU-seconds (median of {rounds}):")
    print(f"  started cold  {c:.3f}")
    print(f"  forked warm   {w:.3f}")
    print(f"  cold / warm   {c / w:.1f}x")


if __name__ == "__main__":
    main()
