"""From battle rows to a leaderboard: ratings, bootstrap summary, and its renderings."""

from __future__ import annotations

import csv
import io
import json
import math
from dataclasses import dataclass
from typing import Any

from daemon.api import LmdError, csv_cell, plural

from .ratings import (
    Battles,
    EloParams,
    anchor,
    bradley_terry,
    bt_bootstrap,
    online_elo,
    online_elo_bootstrap,
    summarise,
)

METHODS = ("bt", "online")


@dataclass
class Options:
    method: str = "bt"
    params: EloParams | None = None
    bootstrap: int = 0
    seed: int | None = None
    anchor: tuple[str, float] | None = None


def options_from(
    settings: Any,
    *,
    method: str | None = None,
    bootstrap: int | None = None,
    seed: int | None = None,
    k: float | None = None,
    scale: float | None = None,
    base: float | None = None,
    initial: float | None = None,
    anchor: str | None = None,
) -> Options:
    """Options from the values given (CLI flags, query parameters) over the elo_* settings."""

    def pick(value: Any, name: str) -> Any:
        return settings[name] if value is None else value

    params = EloParams(
        k=pick(k, "elo_k"),
        scale=pick(scale, "elo_scale"),
        base=pick(base, "elo_base"),
        initial=pick(initial, "elo_initial"),
    )
    if params.scale <= 0 or params.base <= 1 or params.k < 0:
        raise LmdError("The scale must be positive, the base above 1 and K at least 0.")
    seed = pick(seed, "elo_seed")
    return Options(
        method=pick(method, "elo_method"),
        params=params,
        bootstrap=pick(bootstrap, "elo_bootstrap_rounds"),
        seed=None if seed is not None and seed < 0 else seed,
        anchor=parse_anchor(anchor),
    )


def parse_anchor(text: str | None) -> tuple[str, float] | None:
    """'MODEL=RATING' -> (model, rating)."""
    if not text:
        return None
    model, sep, value = text.rpartition("=")
    try:
        rating = float(value)
    except ValueError:
        rating = math.nan
    if not sep or not model.strip() or not math.isfinite(rating):
        raise LmdError(f"The anchor {text!r} must look like MODEL=RATING, e.g. gpt-4=1200.")
    return model.strip(), rating


def compute(rows: list[dict], opts: Options) -> tuple[dict[str, Any], Battles, Any]:
    """The leaderboard JSON, the battle arrays and the point ratings (array, model order)."""
    import numpy as np

    if opts.method not in METHODS:
        raise LmdError(f"The method {opts.method!r} is unknown; use bt or online.")
    if opts.bootstrap < 0:
        raise LmdError("The number of bootstrap rounds cannot be negative; use 0 or more.")
    battles = Battles.from_rows((r["model_a"], r["model_b"], r["winner"]) for r in rows)
    params = opts.params or EloParams()
    fit = bradley_terry if opts.method == "bt" else online_elo
    ratings = fit(battles, params)
    if opts.anchor:
        ratings = anchor(ratings, battles.models, *opts.anchor)
    counts = battles.counts()
    out: dict[str, Any] = {
        "method": opts.method,
        "ratings": {m: float(r) for m, r in zip(battles.models, ratings, strict=True)},
        "battles": {m: int(c) for m, c in zip(battles.models, counts, strict=True)},
    }
    if opts.bootstrap:
        boot = bt_bootstrap if opts.method == "bt" else online_elo_bootstrap
        samples = boot(battles, opts.bootstrap, params, seed=opts.seed)
        if opts.anchor:
            samples = anchor(samples, battles.models, *opts.anchor)
        s = summarise(samples, battles.models)
        out.update(median=s.median, ci=s.ci, rank=s.rank, bootstrap=opts.bootstrap)
    wins = np.bincount(battles.a, battles.s, len(battles.models)) + np.bincount(
        battles.b, 1.0 - battles.s, len(battles.models)
    )
    out["win_rate"] = {
        m: float(w / c) for m, w, c in zip(battles.models, wins, counts, strict=True)
    }
    return out, battles, ratings


def ordered(board: dict[str, Any]) -> list[str]:
    return sorted(board["ratings"], key=lambda m: (-board["ratings"][m], m))


def rows_of(board: dict[str, Any]) -> list[dict[str, Any]]:
    """One dict per model, best first: rank, model, rating, ci_low, ci_high, battles, win_rate."""
    out = []
    for place, model in enumerate(ordered(board), 1):
        ci = board.get("ci", {}).get(model)
        out.append(
            {
                "rank": board["rank"][model] if "rank" in board else place,
                "model": model,
                "rating": round(board["ratings"][model], 1),
                "median": round(board["median"][model], 1) if "median" in board else "",
                "ci_low": round(ci[0], 1) if ci else "",
                "ci_high": round(ci[1], 1) if ci else "",
                "battles": board["battles"][model],
                "win_rate": round(board["win_rate"][model], 3),
            }
        )
    return out


def render(board: dict[str, Any], fmt: str) -> str:
    """The leaderboard as a terminal table, CSV, Markdown or JSON."""
    if fmt == "json":
        public = {k: board.get(k) for k in ("method", "ratings", "battles", "median", "ci", "rank")}
        public = {k: v for k, v in public.items() if v is not None}
        return json.dumps(public, indent=2, ensure_ascii=False)
    rows = rows_of(board)
    has_ci = "ci" in board
    if fmt == "csv":
        text = io.StringIO()
        cols = ["rank", "model", "rating", "median", "ci_low", "ci_high", "battles", "win_rate"]
        if not has_ci:
            cols = [c for c in cols if c not in ("median", "ci_low", "ci_high")]
        w = csv.DictWriter(text, cols, extrasaction="ignore", lineterminator="\n")
        w.writeheader()
        w.writerows([{k: csv_cell(v) for k, v in r.items()} for r in rows])  # model names
        return text.getvalue().rstrip("\n")
    head = ["Rank", "Model", "Rating", "Median", "95% CI", "Battles", "Win rate"]
    body = [
        [
            str(r["rank"]),
            r["model"],
            f"{r['rating']:.1f}",
            f"{r['median']:.1f}" if has_ci else "",
            f"{r['ci_low']:.1f} – {r['ci_high']:.1f}" if has_ci else "",
            str(r["battles"]),
            f"{r['win_rate']:.1%}",
        ]
        for r in rows
    ]
    if not has_ci:
        del head[3:5]
        for b in body:
            del b[3:5]
    if fmt == "markdown":
        lines = ["| " + " | ".join(head) + " |", "|" + "|".join("---" for _ in head) + "|"]
        lines += ["| " + " | ".join(b) + " |" for b in body]
        return "\n".join(lines)
    widths = [max(len(h), *(len(b[i]) for b in body)) for i, h in enumerate(head)]
    right = {0, 2, 3, 4, 5, 6} if has_ci else {0, 2, 3, 4}

    def line(cells: list[str]) -> str:
        return "  ".join(
            c.rjust(w) if i in right else c.ljust(w)
            for i, (c, w) in enumerate(zip(cells, widths, strict=True))
        ).rstrip()

    title = "Bradley–Terry" if board["method"] == "bt" else "online Elo"
    if has_ci:
        title += f", {board['bootstrap']} bootstrap rounds"
    total = sum(board["battles"].values()) // 2
    out = [f"{title}; {plural(total, 'battle')}, {plural(len(rows), 'model')}", line(head)]
    out.append("  ".join("-" * w for w in widths))
    out += [line(b) for b in body]
    return "\n".join(out)
