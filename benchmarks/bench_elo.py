"""Elo arena speed: online Elo, Bradley–Terry, style control, their bootstraps, the CLI,
scaling, and FastChat's own rating code side by side.

    .venv/bin/python benchmarks/bench_elo.py            # everything (a few minutes)
    .venv/bin/python benchmarks/bench_elo.py --quick    # skip the 2M-battle scaling run
    .venv/bin/python benchmarks/bench_elo.py --fastchat ~/src/FastChat   # + FastChat HEAD

Each number comes with a baseline measured in the same run (the straightforward way of
doing the same thing) and the ratio. Uses the shared arena file when ../shared is there,
else a synthetic one of the same size.

FastChat: give a checkout of https://github.com/lm-sys/FastChat with --fastchat (or
$FASTCHAT_DIR; `git clone --depth 1 https://github.com/lm-sys/FastChat`). Its
fastchat/serve/monitor/rating_systems.py is loaded by path (nothing else of FastChat is
imported) and needs pandas, scipy and tqdm: `pip install -e .[bench]`. Its ratings are
checked against lmd's on the same data and its functions timed in the same run.

Style control needs answers; the shared file has none, so the benchmark gives every battle
style counts drawn from a seeded generator (a verbosity per model, Poisson counts); lmd and
FastChat get the very same counts.
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
# BLAS on one thread, as lmd's Elo plugin sets it (plugins/elo/__init__.py), before numpy
# loads: FastChat's code runs under the same setting.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
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
    compiled_loop,
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


def load_fastchat(where: str | None):
    """FastChat HEAD's rating_systems module, loaded by path; None (said why) when absent."""
    import importlib.util

    if not where:
        print("FastChat: not compared (give a checkout with --fastchat or $FASTCHAT_DIR)")
        return None
    path = Path(where).expanduser() / "fastchat" / "serve" / "monitor" / "rating_systems.py"
    if not path.exists():
        print(f"FastChat: not compared ({path} does not exist)")
        return None
    spec = importlib.util.spec_from_file_location("fastchat_rating_systems", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its multiprocessing pools pickle functions by module
    try:
        spec.loader.exec_module(module)
    except ImportError as e:
        print(f"FastChat: not compared ({e}; pip install -e .[bench])")
        return None
    commit = subprocess.run(
        ["git", "-C", str(Path(where).expanduser()), "log", "-1", "--format=%h %cs"],
        capture_output=True,
        text=True,
    ).stdout.strip()
    import hashlib

    digest = hashlib.sha256(path.read_bytes()).hexdigest()[:12]
    print(f"FastChat: {path} ({commit or 'not a git checkout'}; file sha256 {digest})")
    return module


def style_counts_for(battles: Battles, seed: int = 7) -> np.ndarray:
    """Seeded style counts per battle (A, B) x (length, headers, lists, bold): each model has
    its own verbosity and formatting habit, as real answers would."""
    rng = np.random.default_rng(seed)
    m, n = len(battles.models), len(battles)
    verbosity = rng.uniform(80, 400, m)
    habit = rng.uniform(0.0, 3.0, (m, 3))
    counts = np.zeros((n, 2, 4))
    for side, idx in ((0, battles.a), (1, battles.b)):
        counts[:, side, 0] = rng.poisson(verbosity[idx])
        counts[:, side, 1:] = rng.poisson(habit[idx])
    return counts


def fastchat_frame(rows: list[tuple[str, str, str]], counts: np.ndarray | None = None):
    import pandas as pd

    df = pd.DataFrame(rows, columns=["model_a", "model_b", "winner"])
    if counts is not None:
        names = [
            ("sum_assistant_a_tokens", 0, 0),
            ("header_count_a", 0, 1),
            ("list_count_a", 0, 2),
            ("bold_count_a", 0, 3),
            ("sum_assistant_b_tokens", 1, 0),
            ("header_count_b", 1, 1),
            ("list_count_b", 1, 2),
            ("bold_count_b", 1, 3),
        ]
        df["conv_metadata"] = [{name: int(c[side, f]) for name, side, f in names} for c in counts]
    return df


def compare_fastchat(fc, battles: Battles, rows: list, r: int) -> None:
    """FastChat HEAD's functions on the same battles: agreement, then time side by side."""
    import io
    from contextlib import redirect_stderr

    from plugins.elo.style import style_control

    print(f"\nside by side with FastChat HEAD (rating_systems.py), {len(rows)} battles")
    df = fastchat_frame(rows)
    models = battles.models

    def worst(theirs: dict, ours: np.ndarray) -> float:
        mine = dict(zip(models, ours, strict=True))
        return max(abs(float(theirs[m]) - mine[m]) for m in models)

    # online Elo in file order: the same arithmetic, so equal to rounding
    diff = worst(fc.compute_elo(df), online_elo(battles))
    print(f"  online Elo, file order: largest difference {diff:.2e} points (tolerance 1e-6)")
    show(
        "  online Elo, one pass",
        best_of(lambda: online_elo(battles)),
        None,
        best_of(lambda: fc.compute_elo(df), 3),
    )
    bt = fc.compute_bt(df)
    diff = worst(bt, bradley_terry(battles))
    print(f"  Bradley–Terry: largest difference {diff:.3f} points (tolerance 0.05)")
    show(
        "  Bradley–Terry fit",
        best_of(lambda: bradley_terry(battles)),
        None,
        best_of(lambda: fc.compute_bt(df), 3),
    )
    quiet = io.StringIO()  # FastChat's tqdm bars
    with redirect_stderr(quiet):
        base = best_of(lambda: fc.compute_bootstrap_bt(df, num_round=r), 1)
    show(
        f"  Bradley–Terry bootstrap, {r} rounds",
        best_of(lambda: bt_bootstrap(battles, r), 3),
        None,
        base,
    )
    np.random.seed(1)
    theirs = fc.compute_bootstrap_elo(df, num_round=r)
    ours = online_elo_bootstrap(battles, r, seed=1)
    mine = dict(zip(models, np.median(ours, axis=0), strict=True))
    gap = max(abs(float(theirs[m].median()) - mine[m]) for m in models)
    print(f"  online Elo bootstrap medians: largest difference {gap:.1f} points (resampling noise)")
    theirs_time = best_of(lambda: fc.compute_bootstrap_elo(df, num_round=r), 1)
    loop = "compiled loop" if compiled_loop() else "numpy loop: the C loop was not built"
    show(
        f"  online Elo bootstrap, {r} rounds ({loop}; target >= 5x)",
        best_of(lambda: online_elo_bootstrap(battles, r, seed=1), 3),
        None,
        theirs_time,
    )
    show(
        f"  online Elo bootstrap, {r} rounds (numpy loop, for an install without a compiler)",
        best_of(lambda: online_elo_bootstrap(battles, r, seed=1, compiled=False), 3),
        None,
        theirs_time,
    )

    counts = style_counts_for(battles)
    sdf = fastchat_frame(rows, counts)
    their_ratings, their_coef = fc.compute_style_control(sdf)
    fit = style_control(battles, counts)
    diff = worst(their_ratings, fit.ratings)
    features = ("length", "headers", "lists", "bold")
    coef = max(
        abs(float(c) - fit.coefficients[f]) for f, c in zip(features, their_coef, strict=True)
    )
    print(
        f"  style control: ratings differ by at most {diff:.4f} points (tolerance 0.05), "
        f"coefficients by {coef:.2e} (tolerance 1e-4)"
    )
    # Which is nearer the optimum of FastChat's own objective: its gradient at both answers
    import math

    matchups, feats, outcomes, names = fc.preprocess_for_style(sdf)
    order = [models.index(m) for m in names]
    ours = np.concatenate(
        [(fit.ratings[order] - 1000.0) / 400.0, [fit.coefficients[f] for f in features]]
    )
    theirs = np.concatenate(
        [(np.array([their_ratings[m] for m in names]) - 1000.0) / 400.0, their_coef]
    )
    for who, params in (("FastChat's", theirs), ("lmd's", ours)):
        loss, grad = fc.contextual_bt_loss_and_grad(
            params, len(names), matchups, feats, outcomes, math.log(10.0), 0.5, 0.25
        )
        print(
            f"    FastChat's objective at {who} answer: {loss:.6f}, "
            f"largest gradient {np.abs(grad).max():.1e}"
        )
    print(
        "    coefficients lmd     "
        + "  ".join(f"{f} {c:+.4f}" for f, c in fit.coefficients.items())
    )
    print(
        "    coefficients FastChat "
        + "  ".join(
            f"{f} {float(c):+.4f}"
            for f, c in zip(("length", "headers", "lists", "bold"), their_coef, strict=True)
        )
    )
    show(
        "  style-controlled BT fit",
        best_of(lambda: style_control(battles, counts)),
        None,
        best_of(lambda: fc.compute_style_control(sdf), 3),
    )
    few = 20
    with redirect_stderr(quiet):
        np.random.seed(1)
        base = scaled(
            best_of(lambda: fc.compute_bootstrap_style_control(sdf, num_round=few), 1), r / few
        )
    show(
        f"  style-controlled BT bootstrap, {r} rounds",
        best_of(lambda: style_control(battles, counts, rounds=r, seed=1), 3),
        2.0,
        base,
    )
    print(f"    (FastChat's bootstrap timed on {few} rounds and scaled to {r})")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="skip the 2M-battle scaling run")
    parser.add_argument("--rounds", type=int, default=1000)
    parser.add_argument(
        "--fastchat",
        default=os.environ.get("FASTCHAT_DIR"),
        help="a FastChat checkout to compare with (default: $FASTCHAT_DIR)",
    )
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

    from plugins.elo.style import style_control

    counts = style_counts_for(battles)
    show(
        f"style-controlled BT + {r} bootstrap rounds",
        best_of(lambda: style_control(battles, counts, rounds=r, seed=1), 3),
        2.0,
    )

    fc = load_fastchat(args.fastchat)
    if fc is not None:
        compare_fastchat(fc, battles, rows, r)

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
