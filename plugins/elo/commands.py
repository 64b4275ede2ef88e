"""`lmd elo ...`: arrange, answer, judge, merge, ablation, agreement, label, leaderboard, report,
matrix, import, convert.

Module-level click commands in one group. A command raises LmdError with its sentence; the
`lmd` group turns it into that sentence on stderr and exit status 1 (daemon/cli.py), so no
command handles it itself. Heavy modules are imported inside the commands.
"""

from __future__ import annotations

import csv
import functools
import getpass
import io
import json
import os
import sqlite3
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

import click

from daemon.api import (
    LmdError,
    Settings,
    csv_cell,
    default_home,
    home_option,
    open_daemon_state,
    parse_shard,
    plural,
    refuse_overwrite,
)

from .answers import answer_questions, merge
from .arrange import arrange as arrange_battles
from .backends import lmd_backend, resolve
from .checks import battle_agreement, family_warning, rating_agreement
from .config import SETTINGS
from .files import (
    ARRANGE_COLUMNS,
    check_arrangement,
    is_valid,
    read_battles,
    read_qa,
    read_question_source,
    read_table,
    write_qa,
    write_table,
    write_text,
)
from .judge import GPT4_PROMPT, ORDER_COLUMNS, consistency, judge_rows, order_pairs, pending_orders
from .label import label as label_rows
from .leaderboard import Options, compute, options_from, ordered, render
from .ratings import matrices
from .report import render_page
from .rows import columns_of, full_rows, judged_only, resume_rows
from .shards import (
    answer_record,
    check_single_output,
    judge_record,
    merge_parts,
    only_battles_of,
    only_part,
    start_part,
)
from .store import add_battles
from .winners import normalise_winner

# numpy's OpenBLAS starts a thread per core for every large matrix product, and on a machine
# whose cores are busy (a model server, other jobs) those threads spin: the style-control
# bootstrap took 3.6 s of CPU with them and 1.5 s on one thread. numpy is imported lazily, so
# this is set before it loads; a value the user set wins. Here, in the `lmd elo` command,
# not in the plugin: the daemon's bash commands would inherit it.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

FORMATS = ("table", "csv", "json", "markdown")
FILE = click.Path(dir_okay=False, path_type=Path)


def output_option(help: str, **kwargs: Any):
    """The -o/--output FILE option every writing command shares."""
    return click.option("-o", "--output", type=FILE, help=help, **kwargs)


def qa_option(help: str):
    """The --qa FILE option: where the answers are when the battles file has none."""
    return click.option("--qa", "qa_file", type=FILE, help=help)


def force_option(f):
    """--force: replace an existing output file (without it, an existing file is refused)."""
    return click.option("--force", is_flag=True, help="Replace the output file if it exists.")(f)


def shard_option(what: str):
    return click.option(
        "--shard",
        metavar="I/N",
        help=f"Only part I of N of the {what} (by a stable hash); merge with `lmd elo merge`.",
    )


def models_option(f):
    return click.option("--models", "models_file", help="Models file (default: elo_models_file).")(
        f
    )


def concurrency_option(f):
    return click.option("--concurrency", "-j", type=int, help="Calls in flight (elo_concurrency).")(
        f
    )


# -- the rating options, shared by leaderboard, report and matrix ---------------------------
@dataclass(frozen=True)
class RatingFlags:
    """The rating flags as given (None: not given, the elo_* setting applies)."""

    method: str | None = None
    bootstrap: int | None = None
    seed: int | None = None
    k: float | None = None
    scale: float | None = None
    base: float | None = None
    initial: float | None = None
    anchor: str | None = None
    style_control: bool = False
    skip_invalid: bool = False
    home: Path | None = None

    def options(self, bootstrap: int | None = None) -> Any:
        """leaderboard.Options from the flags over the elo_* settings; `bootstrap` replaces
        the --bootstrap flag when the command decides the rounds itself."""
        return options_from(
            load_elo_settings(self.home),
            method=self.method,
            bootstrap=self.bootstrap if bootstrap is None else bootstrap,
            seed=self.seed,
            k=self.k,
            scale=self.scale,
            base=self.base,
            initial=self.initial,
            anchor=self.anchor,
            style=self.style_control,
        )


_RATING_OPTIONS = [
    click.option("--method", type=click.Choice(["bt", "online"]), help="Rating method."),
    click.option("--bootstrap", type=int, help="Bootstrap rounds for intervals (0: none)."),
    click.option("--seed", type=int, help="Seed of the bootstrap (same seed, same numbers)."),
    click.option("--k", "k", type=float, help="Online Elo K factor."),
    click.option("--scale", type=float, help="Rating points per factor BASE of odds."),
    click.option("--base", type=float, help="Base of the odds (10 for Elo)."),
    click.option("--initial", type=float, help="Starting rating and BT mean."),
    click.option("--anchor", help="Pin one model's rating, e.g. gpt-4=1200."),
    click.option(
        "--style-control",
        is_flag=True,
        help="Hold length and markdown (headers, lists, bold) equal: Bradley–Terry with them "
        "as covariates; prints their coefficients.",
    ),
    click.option("--skip-invalid", is_flag=True, help="Leave out rows with unknown winners."),
    home_option,
]
_RATING_NAMES = [f.name for f in fields(RatingFlags)]


def rating_options(f):
    """Add the rating flags; the command receives them as one `rating: RatingFlags`."""

    @functools.wraps(f)
    def wrapper(**kwargs: Any) -> Any:
        flags = RatingFlags(**{name: kwargs.pop(name) for name in _RATING_NAMES})
        return f(rating=flags, **kwargs)

    for option in reversed(_RATING_OPTIONS):
        wrapper = option(wrapper)
    return wrapper


# -- settings ---------------------------------------------------------------------------------
def load_settings(home: Path | None) -> Any:
    _, store, settings = open_daemon_state(home)
    store.close()
    return settings


def load_elo_settings(home: Path | None) -> Any:
    """Only the elo_* settings, read straight from the table (sqlite3, no migrations):
    the rating commands then start in a fraction of the time."""
    path = (home or default_home()) / "lmd.db"
    stored: dict[str, str] = {}
    if path.exists():
        try:
            with sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=5) as db:
                stored = dict(
                    db.execute("SELECT name, value FROM settings WHERE substr(name, 1, 4) = 'elo_'")
                )
        except sqlite3.Error:
            stored = {}  # no settings table yet: the defaults apply
    return Settings({s.name: s for s in SETTINGS}, stored)


# -- helpers ---------------------------------------------------------------------------------
def _note_skipped(judged: Any) -> None:
    if judged.skipped_bad:
        click.echo(
            f"Left out {plural(len(judged.skipped_bad), 'row')} with unknown winners or a model "
            f"battling itself (first at line {judged.skipped_bad[0]}).",
            err=True,
        )


def read_prompt(path: Path) -> str:
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        raise LmdError(f"The prompt file {path} cannot be read as UTF-8 text.") from None
    for field in ("{question}", "{model1_answer}", "{model2_answer}"):
        if field not in text:
            raise LmdError(f"The prompt file {path} lacks {field}; put it where it belongs.")
    return text


def _note_board(board: dict, rows: list[dict]) -> None:
    """The fit's notes (ratings it cannot pin down) and the judge-family warning, on stderr;
    the warning also goes into the board, for the page."""
    judges = {r.get("judge") or "" for r in rows} - {""}
    warning = family_warning(judges, board["ratings"]) if judges else None
    if warning:
        board.setdefault("notes", []).append(warning)
    for note in board.get("notes", []):
        click.echo(note, err=True)


# -- the commands -----------------------------------------------------------------------------
@click.group()
def elo() -> None:
    """The Elo arena: arrange battles, answer, judge, rate and show leaderboards."""


@elo.command()
@click.argument("qa_file", type=FILE)
@output_option("Where to write the battles (default stdout).", default="-")
@click.option(
    "--existing",
    multiple=True,
    type=FILE,
    help="Battles already arranged or judged; their pairs are not arranged again.",
)
@click.option("--shuffle", is_flag=True, help="Shuffle the battle order.")
@force_option
@click.option("--seed", type=int, help="Seed of --shuffle.")
@click.option(
    "--order-from", type=FILE, help="Follow another arrangement's order (and orientation)."
)
def arrange(
    qa_file: Path,
    output: Path,
    existing: tuple[Path, ...],
    shuffle: bool,
    seed: int | None,
    order_from: Path | None,
    force: bool,
) -> None:
    """All pairs of models that answered each question (question, model_a, model_b)."""
    refuse_overwrite(output, force)

    qa = read_qa(qa_file)
    tables = [read_table(p, allow_empty=True) for p in existing if Path(p).exists()]
    tables = [t for t in tables if t.rows]
    reference = read_table(order_from) if order_from else None
    result = arrange_battles(qa, tables, shuffle, seed, reference)
    write_table(output, ARRANGE_COLUMNS, result.battles)
    note = f"Arranged {plural(len(result.battles), 'battle')}"
    if result.already:
        were = "was" if result.already == 1 else "were"
        note += f"; {plural(result.already, 'pair')} {were} arranged already"
    if result.unavailable:
        note += (
            f"; {plural(len(result.unavailable), 'battle')} of {order_from} "
            f"{'has' if len(result.unavailable) == 1 else 'have'} no answers here "
            f"(first at line {result.unavailable[0]})"
        )
    click.echo(note + ".", err=True)


@elo.command()
@click.argument("questions_file", type=FILE)
@click.option("--model", "-m", required=True, help="Model name (see the models file).")
@output_option("Q&A file to write (existing answers are kept).", required=True)
@models_option
@concurrency_option
@click.option("--system", default="", help="A system prompt for the model.")
@shard_option("questions")
@home_option
def answer(
    questions_file: Path,
    model: str,
    output: Path,
    models_file: str | None,
    concurrency: int | None,
    system: str,
    shard: str | None,
    home: Path | None,
) -> None:
    """Ask MODEL every question it has not answered yet; resumable."""
    part = parse_shard(shard)
    settings = load_settings(home)
    given = read_question_source(questions_file, lambda said: click.echo(said, err=True))
    said: list[str] = []  # the backend's line, said once the files are found sound
    with lmd_backend(settings, said.append) as backend:
        endpoint = resolve(model, settings, models_file, backend, said.append)
        _answer(questions_file, endpoint, output, concurrency, system, part, given, settings, said)


def _answer(
    questions_file: Path,
    endpoint: Any,
    output: Path,
    concurrency: int | None,
    system: str,
    part: Any,
    given: Any,
    settings: Any,
    said: list[str],
) -> None:
    if part is None:
        check_single_output(output)
    else:
        given = only_part(given, part)
        start_part(output, answer_record(part, questions_file, endpoint, system))
    qa = given
    if output.exists() and output.resolve() != Path(questions_file).resolve():
        # a part's own earlier output (start_part writes its header): it may own no question
        qa = merge(read_qa(output, allow_empty=part is not None), given)
    for line in said:
        click.echo(line, err=True)
    run = answer_questions(
        qa,
        endpoint,
        concurrency or settings["elo_concurrency"],
        save=lambda q: write_qa(output, q),
        system=system,
    )
    where = f" (part {part})" if part else ""
    click.echo(
        f"{endpoint.name} answered {run.answered} of {plural(run.asked, 'question')}{where}.",
        err=True,
    )
    if run.failures:
        question, why = run.failures[0]
        raise LmdError(
            f"{plural(len(run.failures), 'question')} got no answer (first: {why}); "
            "run the same command again to retry them."
        )


@elo.command()
@click.argument("battles_file", type=FILE)
@output_option("Judged battles to write (resumes from it).", required=True)
@qa_option("Q&A file with the answers (when the battles file has none).")
@click.option("--judge-model", help="The judging model (default: elo_judge_model).")
@models_option
@concurrency_option
@click.option(
    "--prompt-file",
    type=FILE,
    help="Your own judge prompt with {question}, {model1_answer}, {model2_answer}.",
)
@click.option(
    "--one-order",
    is_flag=True,
    help="Judge each battle once, answer A first (default: both orders, A/B and B/A).",
)
@shard_option("battles")
@home_option
def judge(
    battles_file: Path,
    output: Path,
    qa_file: Path | None,
    judge_model: str | None,
    models_file: str | None,
    concurrency: int | None,
    prompt_file: Path | None,
    one_order: bool,
    shard: str | None,
    home: Path | None,
) -> None:
    """Let an LLM judge each battle in both orders: winner, responses, justification,
    is_valid. Two verdicts that disagree make a tie; --one-order asks once."""
    part = parse_shard(shard)
    settings = load_settings(home)
    prompt = read_prompt(prompt_file) if prompt_file else GPT4_PROMPT
    table = read_table(battles_file)
    check_arrangement(table)
    said: list[str] = []  # the backend's line, said once the files are found sound
    with lmd_backend(settings, said.append) as backend:
        name = settings["elo_judge_model"] if judge_model is None else judge_model
        endpoint = resolve(name, settings, models_file, backend, said.append)
        _judge(battles_file, output, qa_file, endpoint, concurrency, prompt, one_order, part, table,
               settings, said)  # fmt: skip


def _judge(
    battles_file: Path,
    output: Path,
    qa_file: Path | None,
    endpoint: Any,
    concurrency: int | None,
    prompt: str,
    one_order: bool,
    part: Any,
    table: Any,
    settings: Any,
    said: list[str],
) -> None:
    both = not one_order
    if part is None:
        check_single_output(output)
    else:
        table = only_battles_of(table, part)
        start_part(output, judge_record(part, battles_file, qa_file, endpoint, prompt, both))
    rows = full_rows(table, read_qa(qa_file) if qa_file else None) if table.rows else []
    if both:
        for r in rows:
            for c in ORDER_COLUMNS:
                r.setdefault(c, "")
    earlier, todo = resume_rows(rows, output, endpoint.name)
    swapped_todo = None
    if both:  # a battle judged before in one order (or cut off) gets only what it lacks
        todo = [i for i, r in enumerate(rows) if False in pending_orders(r, both)]
        swapped_todo = [i for i, r in enumerate(rows) if True in pending_orders(r, both)]
    columns = columns_of(rows)
    for line in said:
        click.echo(line, err=True)

    def save() -> None:
        write_table(output, columns, earlier + judged_only(rows))

    run = judge_rows(
        rows,
        endpoint,
        todo,
        concurrency or settings["elo_concurrency"],
        save,
        prompt,
        swapped_todo=swapped_todo,
    )
    where = f" of part {part}" if part else ""
    asked = set(todo) | set(swapped_todo or ())
    before = len(rows) - len(asked)
    orders = f" in both orders ({plural(run.judged, 'verdict')})" if both else ""
    battles = len(asked) - len({i for i, _ in run.failures}) if both else run.judged
    click.echo(
        f"{endpoint.name} judged {plural(battles, 'battle')}{where}{orders} ({run.invalid} "
        f"without a usable verdict); {before} {'was' if before == 1 else 'were'} judged before.",
        err=True,
    )
    if both:
        said = position_bias_sentence(rows)
        if said:
            click.echo(said, err=True)
    warning = family_warning(
        [endpoint.name, endpoint.model], [m for r in rows for m in (r["model_a"], r["model_b"])]
    )
    if warning:
        click.echo(warning, err=True)
    if run.failures:
        failed = len({i for i, _ in run.failures})
        raise LmdError(
            f"{plural(failed, 'battle')} "
            f"{'was' if failed == 1 else 'were'} not judged "
            f"(first: {run.failures[0][1]}); run the same command again to retry them."
        )


def position_bias_sentence(rows: list[dict]) -> str | None:
    """The position-bias figures of battles judged in both orders, as `ablation` gives them."""
    report = consistency(*order_pairs(rows))
    lines = []
    for name, st in report.items():
        if not st["battles"]:
            continue
        first = st["first_position_wins"]
        lines.append(
            f"Position bias of {name}: the two orders agree on {st['agreement']:.1%} of "
            f"{plural(st['battles'], 'battle')} (a disagreement counts as a tie); the answer "
            "shown first won "
            + ("no decisive verdict" if first is None else f"{first:.1%}")
            + f" of {plural(st['decisive_verdicts'], 'decisive verdict')} (50% is no bias)."
        )
    return "\n".join(lines) or None


@elo.command("merge")
@click.argument("output", type=FILE)
@click.argument("parts", nargs=-1, required=True, type=FILE)
@click.option(
    "--input",
    "input_file",
    type=FILE,
    help="The questions or battles file the parts ran on, when it has moved since.",
)
@qa_option("The Q&A file the judge parts used, when it has moved since.")
def merge_command(
    output: Path, parts: tuple[Path, ...], input_file: Path | None, qa_file: Path | None
) -> None:
    """Merge the parts of a sharded `lmd elo answer` or `lmd elo judge` run into OUTPUT.

    Checks that the parts come from one run and cover every question or battle once, and
    writes OUTPUT exactly as the same command without --shard would have (OUTPUT keeps what
    it had, as it does for that command).
    """
    click.echo(merge_parts(output, list(parts), input_file, qa_file), err=True)


@elo.command()
@click.argument("judged_file", type=FILE)
@output_option("Write the swapped-order verdicts here (and resume from it).")
@click.option(
    "--consistent-out", type=FILE, help="Write only the battles whose verdict survives the swap."
)
@click.option("--judge-model", help="Judge to re-ask (default: each row's judge).")
@models_option
@concurrency_option
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
@force_option
@home_option
def ablation(
    judged_file: Path,
    output: Path | None,
    consistent_out: Path | None,
    judge_model: str | None,
    models_file: str | None,
    concurrency: int | None,
    as_json: bool,
    force: bool,
    home: Path | None,
) -> None:
    """Re-judge with answers A and B swapped; report agreement and position bias."""
    refuse_overwrite(consistent_out, force, "--force")

    settings = load_settings(home)
    table = read_table(judged_file)
    table.require("model_a", "model_b", "winner", "question", "answer_a", "answer_b")
    original = []
    for r in table.rows:  # valid verdicts only, with canonical winner labels
        winner = normalise_winner(r["winner"])
        if is_valid(r) and winner:
            original.append({**r, "winner": winner, "is_valid": "true"})
    if not original:
        raise LmdError(f"{judged_file} has no valid verdicts to re-judge.")
    if all((r.get("gpt_4_response_ba") or "").strip() for r in original):
        # judged in both orders already: the figures are in the file, nothing is asked

        click.echo(
            f"{judged_file} was judged in both orders; the figures come from its two verdicts "
            "per battle, and no judge is asked.",
            err=True,
        )
        _print_consistency(consistency(*order_pairs(original)), as_json)
        if consistent_out:
            keep = [r for r in original if r.get("winner_ab") == r.get("winner_ba")]
            write_table(consistent_out, columns_of(original), keep)
        return
    swapped = [{**r, "judge": "", "gpt_4_response": "", "winner": ""} for r in original]
    columns = columns_of(swapped)
    by_judge: dict[str, list[int]] = {}
    for i, r in enumerate(original):
        name = judge_model or r.get("judge") or settings["elo_judge_model"]
        by_judge.setdefault(name, []).append(i)
    with lmd_backend(settings) as backend:
        failures = _rejudge(by_judge, swapped, output, columns, settings, models_file,
                            concurrency, backend)  # fmt: skip
    pairs = [
        (o, s)
        for o, s in zip(original, swapped, strict=True)
        if s.get("winner") or s.get("gpt_4_response")
    ]
    report = consistency([o for o, _ in pairs], [s for _, s in pairs])
    if consistent_out:
        keep = [o for o, s in pairs if s.get("is_valid") == "true" and o["winner"] == s["winner"]]
        write_table(consistent_out, columns_of(original), keep)
    _print_consistency(report, as_json)
    if failures:
        raise LmdError(
            f"{plural(failures, 'battle')} {'was' if failures == 1 else 'were'} not re-judged; "
            "run the same command with -o to resume."
        )


def _rejudge(
    by_judge: dict[str, list[int]],
    swapped: list[dict],
    output: Path | None,
    columns: list[str],
    settings: Any,
    models_file: str | None,
    concurrency: int | None,
    backend: Any,
) -> int:
    """Ask each judge its battles in the swapped order; the number that failed."""
    failures = 0
    for name, indexes in by_judge.items():
        endpoint = resolve(name, settings, models_file, backend)
        _, todo = resume_rows(swapped, output, endpoint.name)
        wanted = set(indexes)
        todo = [i for i in todo if i in wanted]
        run = judge_rows(
            swapped,
            endpoint,
            todo,
            concurrency or settings["elo_concurrency"],
            (lambda: write_table(output, columns, judged_only(swapped))) if output else None,
            swapped=True,
        )
        failures += len(run.failures)
    return failures


def _print_consistency(report: dict, as_json: bool) -> None:
    if as_json:
        click.echo(json.dumps(report, indent=2))
        return
    click.echo(f"{'judge':<24} {'battles':>8} {'agree':>7} {'1st pos. wins':>14}")
    for name, st in report.items():
        agree = "-" if st["agreement"] is None else f"{st['agreement']:.1%}"
        first = st["first_position_wins"]
        first_text = "-" if first is None else f"{first:.1%}"
        click.echo(f"{name:<24} {st['battles']:>8} {agree:>7} {first_text:>14}")


@elo.command()
@click.argument("battles_file", type=FILE)
@output_option("Labelled battles (resumes from it).", required=True)
@qa_option("Q&A file with the answers (when the battles file has none).")
@click.option("--name", help="Your name for the judge column (default: your login).")
def label(battles_file: Path, output: Path, qa_file: Path | None, name: str | None) -> None:
    """Judge battles yourself: a, b, t (tie), x (both bad), s (skip), q (quit)."""
    table = read_table(battles_file)
    check_arrangement(table)
    rows = full_rows(table, read_qa(qa_file) if qa_file else None)
    person = name or getpass.getuser()
    earlier, todo = resume_rows(rows, output, None)
    columns = columns_of(rows)
    if not todo:
        click.echo("Every battle is labelled already.")
        return
    result = label_rows(
        rows, todo, person, lambda: write_table(output, columns, earlier + judged_only(rows))
    )
    click.echo(
        f"Labelled {result.labelled}, skipped {result.skipped}; "
        f"{len(todo) - result.labelled} left for next time."
    )


@elo.command()
@click.argument("battles_file", type=FILE)
@rating_options
@click.option("--format", "fmt", type=click.Choice(FORMATS), default="table")
@click.option("--json", "as_json", is_flag=True, help="Same as --format json.")
@output_option("Write to a file instead of stdout.")
@force_option
def leaderboard(
    battles_file: Path,
    rating: RatingFlags,
    fmt: str,
    as_json: bool,
    output: Path | None,
    force: bool,
) -> None:
    """Ratings of a battles file (model_a, model_b, winner) by Bradley–Terry or online Elo."""
    refuse_overwrite(output, force)

    opts = rating.options(bootstrap=rating.bootstrap or 0)  # intervals only when asked
    judged = read_battles(battles_file, rating.skip_invalid)
    _note_skipped(judged)
    board, _, _ = compute(judged.rows, opts, str(battles_file))
    _note_board(board, judged.rows)
    text = render(board, "json" if as_json else fmt)
    if output:
        write_text(output, text + "\n")
    else:
        click.echo(text)


@elo.command()
@click.argument("battles_file", type=FILE)
@rating_options
@output_option("The HTML page to write.", required=True)
@qa_option("Q&A file, for the answers-per-model plots.")
@click.option("--title", default="Elo leaderboard", help="Page title.")
@force_option
def report(
    battles_file: Path,
    rating: RatingFlags,
    output: Path,
    qa_file: Path | None,
    title: str,
    force: bool,
) -> None:
    """A self-contained HTML page: table, CI whiskers, heatmaps, scatter, history."""
    refuse_overwrite(output, force)

    opts = rating.options()
    judged = read_battles(battles_file, rating.skip_invalid)
    _note_skipped(judged)
    board, battles, ratings = compute(judged.rows, opts, str(battles_file))
    _note_board(board, judged.rows)
    qa = read_qa(qa_file) if qa_file else None
    page = render_page(
        board, battles, ratings, judged.rows, opts.params, title, str(battles_file), qa
    )
    write_text(output, page)
    click.echo(f"Wrote {output} ({plural(len(judged.rows), 'battle')}).", err=True)


@elo.command()
@click.argument("battles_file", type=FILE)
@click.option(
    "--kind",
    type=click.Choice(["win-rate", "battles", "predicted"]),
    default="win-rate",
    help="Observed win rate (ties half), battle counts, or win rate the ratings predict.",
)
@rating_options
@output_option("Write to a file instead of stdout.")
@force_option
def matrix(
    battles_file: Path, kind: str, rating: RatingFlags, output: Path | None, force: bool
) -> None:
    """A models × models matrix as CSV: row model against column model, best first."""
    refuse_overwrite(output, force)

    opts = rating.options(bootstrap=0)  # point ratings only
    judged = read_battles(battles_file, rating.skip_invalid)
    _note_skipped(judged)
    board, battles, ratings = compute(judged.rows, opts)
    mats = matrices(battles, ratings, opts.params)
    values = mats[{"win-rate": "win_rate", "battles": "battles", "predicted": "predicted"}[kind]]
    models = ordered(board)
    order = [battles.models.index(m) for m in models]
    text = io.StringIO()
    w = csv.writer(text, lineterminator="\n")
    w.writerow(["model", *map(csv_cell, models)])  # model names: no formula cells
    for i, m in zip(order, models, strict=True):
        cells = []
        for j in order:
            v = values[i, j]
            cells.append("" if v != v else (f"{int(v)}" if kind == "battles" else f"{v:.4f}"))
        w.writerow([csv_cell(m), *cells])
    if output:
        write_text(output, text.getvalue())
    else:
        click.echo(text.getvalue().rstrip("\n"))


@elo.command()
@click.argument("judged_file", type=FILE)
@click.argument("human_file", type=FILE)
@click.option("--judge", "judge_name", help="Only the rows of this judge in JUDGED_FILE.")
@click.option("--json", "as_json", is_flag=True, help="Print the figures as JSON.")
@click.option("--skip-invalid", is_flag=True, help="Leave out rows with unknown winners.")
def agreement(
    judged_file: Path, human_file: Path, judge_name: str | None, as_json: bool, skip_invalid: bool
) -> None:
    """How far an LLM judge agrees with people: per battle (agreement and Cohen's kappa, with
    and without ties) where both files judged the same battles (question and pair of models),
    and per model (rank correlation of the Bradley–Terry ratings of the two files)."""
    judged = read_battles(judged_file, skip_invalid)
    human = read_battles(human_file, skip_invalid)
    rows = judged.rows
    if judge_name:
        rows = [r for r in rows if (r.get("judge") or "") == judge_name]
        if not rows:
            raise LmdError(f"{judged_file} has no verdicts of the judge {judge_name}.")
    found = battle_agreement(rows, human.rows)
    if not found.battles:
        lacking = [
            str(f)
            for f, t in ((judged_file, rows), (human_file, human.rows))
            if not any((r.get("question") or "").strip() for r in t)
        ]
        found.notes.append(
            "No battle is in both files, so there is no per-battle agreement"
            + (
                f" ({' and '.join(lacking)} {'has' if len(lacking) == 1 else 'have'} no "
                "questions to match battles by)"
                if lacking
                else ""
            )
            + "; the ratings are compared below."
        )
    elif found.kappa is None:
        found.notes.append(
            "Every matched battle has one and the same verdict on both sides, "
            "so Cohen's kappa is undefined."
        )
    mine = compute(rows, Options())[0]["ratings"]
    theirs = compute(human.rows, Options())[0]["ratings"]
    rating_agreement(mine, theirs, found)
    for note in found.notes:
        click.echo(note, err=True)
    if as_json:
        click.echo(json.dumps(found.to_dict(), indent=2))
        return

    def share(v: float | None) -> str:
        return "-" if v is None else f"{v:.1%}"

    def num(v: float | None) -> str:
        return "-" if v is None else f"{v:.3f}"

    if found.battles:
        click.echo(
            f"Per battle ({plural(found.battles, 'battle')} in both files): agreement "
            f"{share(found.agreement)}, Cohen's kappa {num(found.kappa)} (ties one class); "
            f"without ties ({plural(found.decisive, 'battle')} both called for a side): "
            f"agreement {share(found.agreement_decisive)}, kappa {num(found.kappa_decisive)}."
        )
    click.echo(
        f"Per model ({plural(found.models, 'model')} rated in both): Spearman "
        f"{num(found.spearman)}, model pairs in the same order {share(found.pair_order)}."
    )


@elo.command("import")
@click.argument("battles_file", type=FILE)
@click.option("--skip-invalid", is_flag=True, help="Leave out rows with unknown winners.")
@home_option
def import_(battles_file: Path, skip_invalid: bool, home: Path | None) -> None:
    """Load judged battles into the daemon's database (shown at /elo)."""
    judged = read_battles(battles_file, skip_invalid)
    _note_skipped(judged)
    _, store, _ = open_daemon_state(home)
    try:
        n = add_battles(store, judged.rows)
    finally:
        store.close()
    click.echo(f"Imported {plural(n, 'battle')}.")


@elo.command()
@click.argument("source", type=FILE)
@click.argument("target", type=FILE)
@force_option
def convert(source: Path, target: Path, force: bool) -> None:
    """Q&A between CSV (question + one column per model) and the JSON form
    {question: [{"model", "answer"}]}; the file endings choose the direction."""
    refuse_overwrite(target, force)

    qa = read_qa(source)
    write_qa(target, qa)
    click.echo(
        f"Wrote {plural(len(qa.questions), 'question')} and "
        f"{plural(len(qa.models), 'model')} to {target}."
    )
