"""Elo arena speed: online Elo, Bradley–Terry, their bootstraps, the CLI, and scaling.

    .venv/bin/python benchmarks/bench_elo.py            # everything (about half a minute)
    .venv/bin/python benchmarks/bench_elo.py --quick    # skip the 2M-battle scaling run

Each number comes with a baseline measured in the same run (the straightforward way of
doing the same thing) and the ratio. Uses the shared arena file when ../shared is there,
else a synthetic one of the same size.
"""

from __future__ import annotations

import argparse
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
ARENA = ROOT.parent / "shared" / "data" / "arena" / "arena_2023_english_singleturn_battles.csv"

import numpy as np  # noqa: E402

from plugins.elo.files import read_battles  # noqa: E402
from plugins.elo.ratings import (  # noqa: E402
    Battles,
    Cells,
    PairwiseRatingEntity,
    bradley_terry,
    bradley_terry_logits,
    bt_bootstrap,
    online_elo,
    online_elo_bootstrap,
)


def best_of(fn, repeat: int = 5) -> tuple[float, float]:
    """Fastest of `repeat` runs as (CPU seconds of this process and its children, wall
    seconds). On a shared machine the CPU time is the fairer "one core" number; both print."""
    cpu, wall = [], []
    for _ in range(repeat):
        c0, w0 = _cpu(), time.perf_counter()
        fn()
        wall.append(time.perf_counter() - w0)
        cpu.append(_cpu() - c0)
    return min(cpu), min(wall)


def _cpu() -> float:
    me = resource.getrusage(resource.RUSAGE_SELF)
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime


def show(
    name: str,
    measured: tuple[float, float],
    target: float | None,
    baseline: tuple[float, float] | None = None,
    ratio_word: str = "faster",
) -> None:
    cpu, wall = measured
    line = f"{name:<42} cpu {cpu * 1000:>8.1f} ms  wall {wall * 1000:>8.1f} ms"
    if target is not None:
        line += f"  target < {target * 1000:>5.0f} ms {'ok' if cpu < target else 'MISSED'}"
    if baseline is not None:
        if ratio_word == "faster":
            ratio = f"{baseline[0] / cpu:,.1f}x faster"
        else:
            ratio = f"{cpu / baseline[0]:,.1f}x {ratio_word}"
        line += f"  baseline cpu {baseline[0] * 1000:>8.1f} ms ({ratio})"
    print(line, flush=True)


def scaled(measured: tuple[float, float], factor: float) -> tuple[float, float]:
    return measured[0] * factor, measured[1] * factor


def synthetic(n: int, m: int, seed: int = 0) -> Battles:
    rng = np.random.default_rng(seed)
    strength = rng.normal(0, 1, m)
    a = rng.integers(0, m, n)
    b = (a + 1 + rng.integers(0, m - 1, n)) % m
    p = 1 / (1 + np.exp(strength[b] - strength[a]))
    u = rng.random(n)
    s = np.where(u < 0.15, 0.5, np.where(u < 0.15 + 0.85 * p, 1.0, 0.0))
    return Battles([f"model-{i}" for i in range(m)], a, b, s)


def entity_loop(rows: list[tuple[str, str, str]]) -> dict:
    """Baseline online Elo: the spec's interface, one object per battle."""
    table: dict[str, float] = {}
    for a, b, w in rows:
        PairwiseRatingEntity(a, b, table).battle(w)
    return table


def bt_per_battle(battles: Battles, iters: int = 8) -> np.ndarray:
    """Baseline BT: Newton over every battle (no aggregation into cells)."""
    m = len(battles.models)
    theta = np.zeros(m)
    w = battles.s
    for _ in range(iters):
        p = 1 / (1 + np.exp(theta[battles.b] - theta[battles.a]))
        r = w - p
        g = np.bincount(battles.a, r, m) - np.bincount(battles.b, r, m)
        h = p * (1 - p)
        hess = np.zeros((m, m))
        np.add.at(hess, (battles.a, battles.b), h)
        hess = hess + hess.T
        hess[np.diag_indices(m)] = -hess.sum(axis=1)
        theta += np.linalg.lstsq(-hess, g, rcond=None)[0]
        theta -= theta.mean()
    return theta


def naive_bt_bootstrap(battles: Battles, rounds: int, seed: int = 0) -> np.ndarray:
    """Baseline BT bootstrap: resample battles, rebuild cells, fit from scratch each round."""
    rng = np.random.default_rng(seed)
    n = len(battles)
    out = []
    for _ in range(rounds):
        idx = rng.integers(0, n, n)
        sample = Battles(battles.models, battles.a[idx], battles.b[idx], battles.s[idx])
        out.append(bradley_terry_logits(Cells.from_battles(sample)))
    return np.array(out)


def naive_online_bootstrap(battles: Battles, rounds: int, seed: int = 0) -> np.ndarray:
    """Baseline online-Elo bootstrap: one Python pass per resampled round."""
    rng = np.random.default_rng(seed)
    n = len(battles)
    out = []
    for _ in range(rounds):
        idx = rng.integers(0, n, n)
        sample = Battles(battles.models, battles.a[idx], battles.b[idx], battles.s[idx])
        out.append(online_elo(sample))
    return np.array(out)


def cli_seconds(args: list[str], repeat: int = 3) -> tuple[float, float]:
    env = {**os.environ, "LMD_HOME": str(ROOT / ".bench-elo-home")}
    lmd = [sys.executable, "-m", "daemon.cli"]

    def run() -> None:
        subprocess.run([*lmd, *args], check=True, capture_output=True, env=env, cwd=ROOT)

    return best_of(run, repeat)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="skip the 2M-battle scaling run")
    parser.add_argument("--rounds", type=int, default=1000)
    args = parser.parse_args()
    r = args.rounds

    if ARENA.exists():
        rows = [(x["model_a"], x["model_b"], x["winner"]) for x in read_battles(ARENA).rows]
        battles = Battles.from_rows(rows)
        source = str(ARENA.name)
    else:
        battles = synthetic(25938, 20)
        names = battles.models
        labels = {1.0: "model_a", 0.0: "model_b", 0.5: "tie"}
        rows = [
            (names[a], names[b], labels[s])
            for a, b, s in zip(
                battles.a.tolist(), battles.b.tolist(), battles.s.tolist(), strict=True
            )
        ]
        source = "synthetic (../shared is absent)"
    print(f"battles: {len(battles)} between {len(battles.models)} models, from {source}")
    print(f"load average: {os.getloadavg()[0]:.2f} on {os.cpu_count()} cores\n")

    show(
        "online Elo, one pass",
        best_of(lambda: online_elo(battles)),
        0.030,
        best_of(lambda: entity_loop(rows), 3),
    )
    show(
        "Bradley–Terry fit (cells)",
        best_of(lambda: bradley_terry(battles)),
        0.020,
        best_of(lambda: bt_per_battle(battles), 3),
    )
    base = scaled(best_of(lambda: naive_bt_bootstrap(battles, 20), 1), r / 20)
    show(
        f"Bradley–Terry bootstrap, {r} rounds",
        best_of(lambda: bt_bootstrap(battles, r, seed=1), 3),
        0.300,
        base,
    )
    base = scaled(best_of(lambda: naive_online_bootstrap(battles, 5), 1), r / 5)
    show(
        f"online Elo bootstrap, {r} rounds",
        best_of(lambda: online_elo_bootstrap(battles, r, seed=1), 5),
        0.400,
        base,
    )

    if ARENA.exists():
        arena = str(ARENA)
        show(
            "`lmd elo leaderboard` (BT, 1000 rounds)",
            cli_seconds(["elo", "leaderboard", arena, "--bootstrap", "1000"]),
            1.0,
            cli_seconds(["--version"]),
            ratio_word="the bare `lmd --version`",
        )

    if not args.quick:
        print("\nscaling: 2,000,000 synthetic battles over 200 models")
        big = synthetic(2_000_000, 200, seed=5)

        def everything() -> None:
            bradley_terry(big)
            bt_bootstrap(big, r, seed=1)

        total = best_of(everything, 1)
        show(f"Bradley–Terry + {r} bootstrap rounds", total, 5.0)
        show("  of which the point fit", best_of(lambda: bradley_terry(big), 1), None)


if __name__ == "__main__":
    main()
