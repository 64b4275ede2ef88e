"""One self-contained HTML page: the leaderboard and its plots as inline SVG (no scripts
or styles from anywhere else)."""

from __future__ import annotations

import base64
import hashlib
import html
import math
import re
import time
from collections import Counter
from pathlib import Path
from string import Template
from typing import Any

from daemon.api import plural

from .leaderboard import ordered, rows_of, style_lines
from .ratings import Battles, EloParams, matrices, online_elo_history

TEMPLATE = Path(__file__).with_name("report.html")
PALETTE = [
    "#1f77b4",
    "#d62728",
    "#2ca02c",
    "#ff7f0e",
    "#9467bd",
    "#8c564b",
    "#e377c2",
    "#7f7f7f",
    "#bcbd22",
    "#17becf",
]


def esc(text: Any) -> str:
    return html.escape(str(text), quote=True)


def content_security_policy(page: str) -> str:
    """A policy that runs only the page's own inline scripts and lets it load, fetch or send
    nothing. Model names and answers are escaped; this makes even a slip harmless, which
    matters because GET /elo serves the page from the daemon's own origin."""
    scripts = re.findall(r"<script>(.*?)</script>", page, re.S)
    hashes = " ".join(
        "'sha256-" + base64.b64encode(hashlib.sha256(s.encode()).digest()).decode() + "'"
        for s in scripts
    )
    return (
        "default-src 'none'; style-src 'unsafe-inline'; img-src data:; "
        f"script-src {hashes or chr(39) + 'none' + chr(39)}; form-action 'none'; base-uri 'none'"
    )


def with_policy(page: str) -> str:
    """The page with its policy as a <meta> tag (it holds when the file is opened from disk)."""
    meta = f'<meta http-equiv="Content-Security-Policy" content="{content_security_policy(page)}">'
    return page.replace('<meta charset="utf-8">', '<meta charset="utf-8">' + meta, 1)


def _fmt(x: float) -> str:
    return f"{x:.1f}"


# -- plots ------------------------------------------------------------------------------------
def ratings_plot(board: dict[str, Any]) -> str:
    """Dots for ratings, whiskers for the bootstrap interval, best at the top."""
    models = ordered(board)
    ci = board.get("ci", {})
    values = [board["ratings"][m] for m in models]
    lows = [ci[m][0] if m in ci else board["ratings"][m] for m in models]
    highs = [ci[m][1] if m in ci else board["ratings"][m] for m in models]
    lo, hi = min(lows), max(highs)
    pad = max(5.0, (hi - lo) * 0.05)
    lo, hi = lo - pad, hi + pad
    left, width, row = 170, 520, 22
    height = row * len(models) + 50

    def x(v: float) -> float:
        return left + (v - lo) / (hi - lo) * width

    parts = [f'<svg viewBox="0 0 {left + width + 30} {height}" role="img" class="plot">']
    parts += _x_axis(lo, hi, x, row * len(models) + 20, 10)
    for k, m in enumerate(models):
        y = 20 + k * row
        parts.append(f'<text x="{left - 8}" y="{y + 4}" text-anchor="end">{esc(m)}</text>')
        if m in ci:
            parts.append(
                f'<line x1="{_fmt(x(lows[k]))}" x2="{_fmt(x(highs[k]))}" y1="{y}" y2="{y}" '
                'class="whisker"/>'
            )
        tip = f"{m}: {values[k]:.1f}" + (f" (95% {lows[k]:.1f}–{highs[k]:.1f})" if m in ci else "")
        parts.append(
            f'<circle cx="{_fmt(x(values[k]))}" cy="{y}" r="4" class="dot">'
            f"<title>{esc(tip)}</title></circle>"
        )
    parts.append("</svg>")
    return "".join(parts)


def _x_axis(lo: float, hi: float, x: Any, y: float, top: float, label: str = "") -> list[str]:
    out = []
    for v in _ticks(lo, hi):
        out.append(
            f'<line x1="{_fmt(x(v))}" x2="{_fmt(x(v))}" y1="{top}" y2="{y}" class="grid"/>'
            f'<text x="{_fmt(x(v))}" y="{y + 14}" text-anchor="middle">{v:g}</text>'
        )
    if label:
        mid = (x(lo) + x(hi)) / 2
        out.append(f'<text x="{_fmt(mid)}" y="{y + 30}" text-anchor="middle">{esc(label)}</text>')
    return out


def _ticks(lo: float, hi: float, n: int = 6) -> list[float]:
    span = hi - lo
    if span <= 0:
        return [lo]
    raw = span / n
    step = 10 ** math.floor(math.log10(raw))
    for f in (1, 2, 5, 10):
        if step * f >= raw:
            step *= f
            break
    start = math.ceil(lo / step) * step
    return [round(start + i * step, 10) for i in range(int((hi - start) / step) + 1)]


def heatmap(models: list[str], values: Any, kind: str) -> str:
    """A models × models grid; rows are model A, columns model B (best first)."""
    n = len(models)
    cell = max(14, min(34, 560 // max(n, 1)))
    left, top = 170, 150
    size_w, size_h = left + cell * n + 110, top + cell * n + 10
    finite = [v for row in values for v in row if v == v]
    vmax = max(finite) if finite else 1.0
    parts = [f'<svg viewBox="0 0 {size_w} {size_h}" role="img" class="plot heat">']
    for k, m in enumerate(models):
        y = top + k * cell + cell / 2 + 4
        parts.append(f'<text x="{left - 6}" y="{_fmt(y)}" text-anchor="end">{esc(m)}</text>')
        cx = left + k * cell + cell / 2 + 4
        parts.append(
            f'<text x="{_fmt(cx)}" y="{top - 6}" transform="rotate(-60 {_fmt(cx)} {top - 6})">'
            f"{esc(m)}</text>"
        )
    for i in range(n):
        for j in range(n):
            v = values[i][j]
            if v != v:  # NaN: no battles between the two
                fill, label = "#f4f4f4", "no battles"
            elif kind == "rate":
                fill, label = _diverging(v), f"{v:.0%}"
            else:
                fill, label = _sequential(v / vmax if vmax else 0.0), f"{int(v)}"
            tip = f"{models[i]} vs {models[j]}: {label}"
            parts.append(
                f'<rect x="{left + j * cell}" y="{top + i * cell}" width="{cell}" '
                f'height="{cell}" fill="{fill}"><title>{esc(tip)}</title></rect>'
            )
            if v == v and cell >= 24 and n <= 25:
                text = f"{v * 100:.0f}" if kind == "rate" else f"{int(v)}"
                dark = (kind == "rate" and abs(v - 0.5) > 0.35) or (
                    kind != "rate" and vmax and v / vmax > 0.55
                )
                parts.append(
                    f'<text x="{left + j * cell + cell / 2}" y="{top + i * cell + cell / 2 + 4}" '
                    f'text-anchor="middle" class="cell{" light" if dark else ""}">{text}</text>'
                )
    parts.append("</svg>")
    return "".join(parts)


def _diverging(v: float) -> str:
    """0 red, 0.5 white, 1 blue."""
    t = max(0.0, min(1.0, v))
    if t < 0.5:
        k = t / 0.5
        r, g, b = 214 + (255 - 214) * k, 39 + (255 - 39) * k, 40 + (255 - 40) * k
    else:
        k = (t - 0.5) / 0.5
        r, g, b = 255 - (255 - 31) * k, 255 - (255 - 119) * k, 255 - (255 - 180) * k
    return f"rgb({r:.0f},{g:.0f},{b:.0f})"


def _sequential(t: float) -> str:
    t = max(0.0, min(1.0, t))
    r, g, b = 247 - (247 - 8) * t, 251 - (251 - 69) * t, 255 - (255 - 148) * t
    return f"rgb({r:.0f},{g:.0f},{b:.0f})"


def scatter(points: list[tuple[float, float, str]]) -> str:
    """Predicted (x) against observed (y) win rate, one dot per ordered pair."""
    left, top, size = 60, 15, 400
    parts = [f'<svg viewBox="0 0 {left + size + 30} {top + size + 50}" role="img" class="plot">']

    def px(v: float) -> float:
        return left + v * size

    def py(v: float) -> float:
        return top + (1 - v) * size

    for v in (0, 0.25, 0.5, 0.75, 1):
        parts.append(
            f'<line x1="{px(v)}" x2="{px(v)}" y1="{top}" y2="{top + size}" class="grid"/>'
            f'<line x1="{left}" x2="{left + size}" y1="{py(v)}" y2="{py(v)}" class="grid"/>'
            f'<text x="{px(v)}" y="{top + size + 14}" text-anchor="middle">{v:g}</text>'
            f'<text x="{left - 6}" y="{py(v) + 4}" text-anchor="end">{v:g}</text>'
        )
    parts.append(
        f'<line x1="{px(0)}" y1="{py(0)}" x2="{px(1)}" y2="{py(1)}" class="diag"/>'
        f'<text x="{left + size / 2}" y="{top + size + 34}" text-anchor="middle">'
        "predicted win rate</text>"
        f'<text x="14" y="{top + size / 2}" transform="rotate(-90 14 {top + size / 2})" '
        'text-anchor="middle">observed win rate</text>'
    )
    for xv, yv, tip in points:
        parts.append(
            f'<circle cx="{_fmt(px(xv))}" cy="{_fmt(py(yv))}" r="3" class="dot faint">'
            f"<title>{esc(tip)}</title></circle>"
        )
    parts.append("</svg>")
    return "".join(parts)


def lines_plot(marks: list[int], series: Any, models: list[str], top_n: int = 10) -> str:
    """Online Elo ratings after every few battles, for the best `top_n` models at the end."""
    if not marks:
        return "<p>No battles.</p>"
    final = series[-1]
    chosen = sorted(range(len(models)), key=lambda k: -final[k])[:top_n]
    lo = min(float(series[:, k].min()) for k in chosen)
    hi = max(float(series[:, k].max()) for k in chosen)
    lo, hi = (lo - 5, hi + 5) if hi - lo < 10 else (lo, hi)
    left, top, w, h = 60, 15, 560, 300
    parts = [f'<svg viewBox="0 0 {left + w + 190} {top + h + 50}" role="img" class="plot">']

    def px(v: float) -> float:
        return left + v / marks[-1] * w

    def py(v: float) -> float:
        return top + (hi - v) / (hi - lo) * h

    for v in _ticks(lo, hi):
        parts.append(
            f'<line x1="{left}" x2="{left + w}" y1="{_fmt(py(v))}" y2="{_fmt(py(v))}" '
            f'class="grid"/><text x="{left - 6}" y="{_fmt(py(v) + 4)}" text-anchor="end">'
            f"{v:g}</text>"
        )
    for v in _ticks(0, marks[-1], 5):
        parts.append(
            f'<text x="{_fmt(px(v))}" y="{top + h + 16}" text-anchor="middle">{v:g}</text>'
        )
    parts.append(f'<text x="{left + w / 2}" y="{top + h + 36}" text-anchor="middle">battles</text>')
    for rank, k in enumerate(chosen):
        color = PALETTE[rank % len(PALETTE)]
        pts = " ".join(
            f"{_fmt(px(t))},{_fmt(py(float(series[i, k])))}" for i, t in enumerate(marks)
        )
        parts.append(
            f'<polyline points="{pts}" fill="none" stroke="{color}" stroke-width="1.6">'
            f"<title>{esc(models[k])}</title></polyline>"
            f'<text x="{left + w + 8}" y="{top + 14 + rank * 16}" fill="{color}">'
            f"{esc(models[k])}</text>"
        )
    parts.append("</svg>")
    return "".join(parts)


def bars(counts: dict[str, int], noun: str) -> str:
    """Horizontal bars, largest first; each bar's tip counts `noun` (singular)."""
    if not counts:
        return (
            "<p>The battles carry no questions, so this cannot be counted; "
            "give the Q&amp;A file with <code>--qa</code> or battles with a question column.</p>"
        )
    items = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))
    left, w, row = 170, 420, 18
    biggest = max(v for _, v in items) or 1
    parts = [f'<svg viewBox="0 0 {left + w + 80} {row * len(items) + 30}" class="plot">']
    for k, (name, v) in enumerate(items):
        y = 8 + k * row
        bw = v / biggest * w
        parts.append(
            f'<text x="{left - 6}" y="{y + 11}" text-anchor="end">{esc(name)}</text>'
            f'<rect x="{left}" y="{y}" width="{_fmt(bw)}" height="{row - 5}" class="bar">'
            f"<title>{esc(name)}: {esc(plural(v, noun))}</title></rect>"
            f'<text x="{_fmt(left + bw + 4)}" y="{y + 11}">{v}</text>'
        )
    parts.append("</svg>")
    return "".join(parts)


# -- the page -------------------------------------------------------------------------------
def exploration(rows: list[dict], qa: Any = None) -> dict[str, dict[str, int]]:
    """The spec's data-exploration counts: answers per model, battles per model, and how
    many models answered each question (from the Q&A file, else from the battles)."""
    battles: Counter[str] = Counter()
    answered: dict[str, set[str]] = {}
    for r in rows:
        battles[r["model_a"]] += 1
        battles[r["model_b"]] += 1
        q = r.get("question", "")
        if q:
            for side in ("a", "b"):
                answered.setdefault(r[f"model_{side}"], set()).add(q)
    if qa is not None:
        answers = {m: len(qa.answers.get(m, {})) for m in qa.models}
        per_question = Counter(len(qa.answered(q)) for q in qa.questions)
    else:
        answers = {m: len(qs) for m, qs in answered.items()}
        models_per_q: Counter[str] = Counter()
        for _m, qs in answered.items():
            for q in qs:
                models_per_q[q] += 1
        per_question = Counter(models_per_q.values())
    return {
        "answers": answers,
        "battles": dict(battles),
        "models_per_question": {plural(k, "model"): v for k, v in sorted(per_question.items())},
    }


def render_page(
    board: dict[str, Any],
    battles: Battles,
    ratings: Any,
    rows: list[dict],
    params: EloParams | None = None,
    title: str = "Elo leaderboard",
    source: str = "",
    qa: Any = None,
) -> str:
    """The whole page as one HTML string."""
    p = params or EloParams()
    models = ordered(board)
    order = [battles.models.index(m) for m in models]
    mats = matrices(battles, ratings, p)
    rate = mats["win_rate"][order][:, order].tolist()
    games = mats["battles"][order][:, order]
    games_list = [[v if v > 0 else float("nan") for v in row] for row in games.tolist()]
    pred = mats["predicted"][order][:, order]
    points = []
    for i, a in enumerate(models):
        for j, b in enumerate(models):
            if i != j and games[i, j] > 0:
                tip = (
                    f"{a} vs {b}: predicted {pred[i, j]:.0%}, observed {rate[i][j]:.0%} "
                    f"({plural(int(games[i, j]), 'battle')})"
                )
                points.append((float(pred[i, j]), float(rate[i][j]), tip))
    marks, series = online_elo_history(battles, p)
    explore = exploration(rows, qa)
    table = _table(board)
    method = "Bradley–Terry" if board["method"] == "bt" else "online Elo"
    if board.get("style_control"):
        method += " with style control"
    boot = f", {board['bootstrap']} bootstrap rounds" if "ci" in board else ""
    total = len(battles)
    notes = "".join(f'<p class="note">{esc(n)}</p>' for n in board.get("notes", []))
    style = "\n".join(style_lines(board))
    sections = [
        ("Leaderboard", notes + table),
        *([("Style coefficients", f"<pre>{esc(style)}</pre>")] if style else []),
        (f"Ratings ({method}{boot})", ratings_plot(board)),
        (
            "Win rate of the row model against the column model (ties count half)",
            heatmap(models, rate, "rate"),
        ),
        ("Battles between each pair", heatmap(models, games_list, "count")),
        ("Predicted against observed win rates", scatter(points)),
        ("Online Elo ratings over the battles (top 10)", lines_plot(marks, series, battles.models)),
        ("Answers per model", bars(explore["answers"], "answer")),
        ("Battles per model", bars(explore["battles"], "battle")),
        (
            "Questions by number of models that answered",
            bars(explore["models_per_question"], "question"),
        ),
    ]
    content = "\n".join(
        f'<section><h2>{esc(h)}</h2><div class="figure">{body}</div></section>'
        for h, body in sections
    )
    # Natural size (shrunk on narrow screens, never blown up): width/height = the viewBox.
    content = re.sub(
        r'<svg viewBox="0 0 ([\d.]+) ([\d.]+)"',
        r'<svg viewBox="0 0 \1 \2" width="\1" height="\2"',
        content,
    )
    summary = (
        f"{plural(total, 'battle')} between {plural(len(models), 'model')}; method {method}{boot}"
        + (f"; source {esc(source)}" if source else "")
        + f"; made {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}."
    )
    return with_policy(
        Template(TEMPLATE.read_text(encoding="utf-8")).substitute(
            title=esc(title), summary=summary, content=content
        )
    )


def _table(board: dict[str, Any]) -> str:
    has_ci = "ci" in board
    head = ["Rank", "Model", "Rating", *(["95% CI"] if has_ci else []), "Battles", "Win rate"]
    out = ['<table id="leaderboard"><thead><tr>']
    out += [f"<th>{h}</th>" for h in head]
    out.append("</tr></thead><tbody>")
    for r in rows_of(board):
        cells = [r["rank"], esc(r["model"]), f"{r['rating']:.1f}"]
        if has_ci:
            cells.append(f"{r['ci_low']:.1f} – {r['ci_high']:.1f}")
        cells += [r["battles"], f"{r['win_rate']:.1%}"]
        out.append("<tr>" + "".join(f"<td>{c}</td>" for c in cells) + "</tr>")
    out.append("</tbody></table>")
    return "".join(out)
