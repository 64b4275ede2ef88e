"""From battle rows to a leaderboard: ratings, bootstrap summary, and its renderings."""

from __future__ import annotations

import csv
import io
import json
import math
from dataclasses import dataclass
from typing import Any

import numpy as np

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
from .style import identifiability_notes, style_control, style_counts

METHODS = ("bt", "online")


@dataclass
class Options:
    method: str = "bt"
    params: EloParams | None = None
    bootstrap: int = 0
    seed: int | None = None
    anchor: tuple[str, float] | None = None
    style: bool = False  # Bradley–Terry with length and markdown as covariates


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
    style: bool = False,
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
        style=style,
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


def compute(
    rows: list[dict], opts: Options, source: str = "the battles"
) -> tuple[dict[str, Any], Battles, Any]:
    """The leaderboard JSON, the battle arrays and the point ratings (array, model order)."""
    if opts.method not in METHODS:
        raise LmdError(f"The method {opts.method!r} is unknown; use bt or online.")
    if opts.bootstrap < 0:
        raise LmdError("The number of bootstrap rounds cannot be negative; use 0 or more.")
    if opts.style and opts.method != "bt":
        raise LmdError(
            "Style control is a Bradley–Terry fit; use it with --method bt (the default)."
        )
    battles = Battles.from_rows((r["model_a"], r["model_b"], r["winner"]) for r in rows)
    params = opts.params or EloParams()
    samples = None
    style: dict[str, Any] | None = None
    if opts.style:
        fit = style_control(battles, style_counts(rows, source), params, opts.bootstrap, opts.seed)
        ratings, samples, notes = fit.ratings, fit.samples, fit.notes
        style = {"features": list(fit.coefficients), "coefficients": fit.coefficients}
        if fit.coefficient_samples is not None:
            lo, hi = np.percentile(fit.coefficient_samples, [2.5, 97.5], axis=0)
            style["ci"] = {f: [0.0, 0.0] for f in fit.features.constant}
            for k, f in enumerate(fit.features.kept):
                style["ci"][f] = [float(lo[k]), float(hi[k])]
    else:
        fit_ = bradley_terry if opts.method == "bt" else online_elo
        ratings = fit_(battles, params)
        notes = identifiability_notes(battles) if opts.method == "bt" else []
    if opts.anchor:
        ratings = anchor(ratings, battles.models, *opts.anchor)
    counts = battles.counts()
    out: dict[str, Any] = {
        "method": opts.method,
        "ratings": {m: float(r) for m, r in zip(battles.models, ratings, strict=True)},
        "battles": {m: int(c) for m, c in zip(battles.models, counts, strict=True)},
    }
    if style is not None:
        out["style_control"] = style
    if notes:
        out["notes"] = notes
    if opts.bootstrap:
        if samples is None:
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


def style_lines(board: dict[str, Any]) -> list[str]:
    """The style coefficients, one line each, for the terminal and the page."""
    style = board.get("style_control")
    if not style:
        return []
    out = [
        "Style coefficients (log-odds per standard deviation of the feature; > 0: the "
        "longer / more formatted answer is preferred, style alone):"
    ]
    for f in style["features"]:
        c = style["coefficients"][f]
        ci = style.get("ci", {}).get(f)
        span = f"  95% CI {ci[0]:+.3f} – {ci[1]:+.3f}" if ci else ""
        out.append(f"  {f:<8} {c:+.3f}  (odds x{math.exp(c):.2f}){span}")
    return out


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
        keys = ("method", "ratings", "battles", "median", "ci", "rank", "style_control", "notes")
        public = {k: board.get(k) for k in keys}
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
        style = style_lines(board)
        return "\n".join(lines + ([""] + style if style else []))
    widths = [max(len(h), *(len(b[i]) for b in body)) for i, h in enumerate(head)]
    right = {0, 2, 3, 4, 5, 6} if has_ci else {0, 2, 3, 4}

    def line(cells: list[str]) -> str:
        return "  ".join(
            c.rjust(w) if i in right else c.ljust(w)
            for i, (c, w) in enumerate(zip(cells, widths, strict=True))
        ).rstrip()

    title = "Bradley–Terry" if board["method"] == "bt" else "online Elo"
    if board.get("style_control"):
        title += " with style control"
    if has_ci:
        title += f", {board['bootstrap']} bootstrap rounds"
    total = sum(board["battles"].values()) // 2
    out = [f"{title}; {plural(total, 'battle')}, {plural(len(rows), 'model')}", line(head)]
    out.append("  ".join("-" * w for w in widths))
    out += [line(b) for b in body]
    return "\n".join(out + style_lines(board))
