"""`lmd elo ...`: arrange, answer, judge, ablation, label, leaderboard, report, import."""

from __future__ import annotations

import functools
import getpass
import json
import sys
from pathlib import Path
from typing import Any

import click

from daemon.cli import home_option
from daemon.errors import LmdError
from daemon.paths import refuse_overwrite
from daemon.words import plural

FORMATS = ("table", "csv", "json", "markdown")


def friendly(f):
    """Turn an LmdError into its sentence on stderr and exit status 1."""

    @functools.wraps(f)
    def wrapper(*args, **kwargs):
        try:
            return f(*args, **kwargs)
        except LmdError as e:
            click.echo(e.message, err=True)
            sys.exit(1)

    return wrapper


FILE = click.Path(dir_okay=False, path_type=Path)


def output_option(help: str, **kwargs: Any):
    """The -o/--output FILE option every writing command shares."""
    return click.option("-o", "--output", type=FILE, help=help, **kwargs)


def qa_option(help: str):
    """The --qa FILE option: where the answers are when the battles file has none."""
    return click.option("--qa", "qa_file", type=FILE, help=help)


def load_settings(home: Path | None) -> Any:
    from daemon.cli import open_daemon_state

    _, store, settings = open_daemon_state(home)
    store.close()
    return settings


def load_elo_settings(home: Path | None) -> Any:
    """Only the elo_* settings, read straight from the table (sqlite3, no migrations):
    the rating commands then start in a fraction of the time."""
    import sqlite3

    from daemon.core import default_home
    from daemon.settings import Settings

    from . import SETTINGS

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


def _battle_options(f):
    """Options shared by leaderboard and report."""
    opts = [
        click.option("--method", type=click.Choice(["bt", "online"]), help="Rating method."),
        click.option("--bootstrap", type=int, help="Bootstrap rounds for intervals (0: none)."),
        click.option("--seed", type=int, help="Seed of the bootstrap (same seed, same numbers)."),
        click.option("--k", "k", type=float, help="Online Elo K factor."),
        click.option("--scale", type=float, help="Rating points per factor BASE of odds."),
        click.option("--base", type=float, help="Base of the odds (10 for Elo)."),
        click.option("--initial", type=float, help="Starting rating and BT mean."),
        click.option("--anchor", help="Pin one model's rating, e.g. gpt-4=1200."),
        click.option("--skip-invalid", is_flag=True, help="Leave out rows with unknown winners."),
        home_option,
    ]
    for o in reversed(opts):
        f = o(f)
    return f


def force_option(f):
    """--force: replace an existing output file (without it, an existing file is refused)."""
    return click.option("--force", is_flag=True, help="Replace the output file if it exists.")(f)


def _options(settings: Any, method, bootstrap, seed, k, scale, base, initial, anchor):
    from .leaderboard import Options, parse_anchor
    from .ratings import EloParams

    def pick(value, name):
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


def _note_skipped(judged: Any) -> None:
    if judged.skipped_bad:
        click.echo(
            f"Left out {plural(len(judged.skipped_bad), 'row')} with unknown winners or a model "
            "battling "
            f"itself (first at line {judged.skipped_bad[0]}).",
            err=True,
        )


def _full_rows(table: Any, qa: Any) -> list[dict[str, str]]:
    """Arranged battles with every column; answers come from the file or from `qa`."""
    from .files import FULL_COLUMNS, EloFileError

    has_answers = "answer_a" in table.columns and "answer_b" in table.columns
    if not has_answers and qa is None:
        raise EloFileError(
            f"{table.path} has no answer_a/answer_b columns; give the Q&A file with --qa."
        )
    rows, missing = [], []
    for line, r in zip(table.lines, table.rows, strict=True):
        row = {c: r.get(c, "") for c in FULL_COLUMNS}
        row.update({c: v for c, v in r.items() if c not in row})
        row["model_a"], row["model_b"] = r["model_a"].strip(), r["model_b"].strip()
        if qa is not None and not (row["answer_a"].strip() and row["answer_b"].strip()):
            row["answer_a"] = row["answer_a"] or qa.answer(row["model_a"], r["question"])
            row["answer_b"] = row["answer_b"] or qa.answer(row["model_b"], r["question"])
        if not row["answer_a"].strip() or not row["answer_b"].strip():
            missing.append(line)
        rows.append(row)
    if missing:
        raise EloFileError(
            f"{plural(len(missing), 'battle')} {'lacks' if len(missing) == 1 else 'lack'} an "
            f"answer (first at line {missing[0]} of {table.path}); "
            "fill the answers with `lmd elo answer` first."
        )
    return rows


def _resume(rows: list[dict], out: Path | None, judge: str | None) -> tuple[list[dict], list[int]]:
    """Copy verdicts already in `out` into rows.

    Returns the earlier rows of `out` that are not among `rows` (kept, so one judged file
    can grow as models and questions are added) and the indexes still to judge.
    """
    from .arrange import battle_key
    from .files import read_table

    done: dict[tuple, dict] = {}
    others: list[dict] = []
    if out is not None and out.exists() and out.stat().st_size:
        previous = read_table(out, allow_empty=True)
        previous.require("model_a", "model_b")
        for r in previous.rows:
            key = battle_key(r.get("question", ""), r["model_a"], r["model_b"])
            judged = r.get("winner", "").strip() or r.get("gpt_4_response", "").strip()
            if judged and (judge is None or r.get("judge") == judge) and key not in done:
                done[key] = r
            else:
                others.append(r)
    todo = []
    for i, row in enumerate(rows):
        key = battle_key(row["question"], row["model_a"], row["model_b"])
        old = done.pop(key, None)
        if old and old["model_a"].strip() == row["model_a"]:
            row.update({k: v for k, v in old.items() if k in row})
        else:
            if old:
                others.append(old)
            todo.append(i)
    return others + list(done.values()), todo


def _judged(rows: list[dict]) -> list[dict]:
    return [r for r in rows if r.get("winner") or r.get("gpt_4_response")]


def _columns(rows: list[dict]) -> list[str]:
    from .files import FULL_COLUMNS

    extra = [c for r in rows[:1] for c in r if c not in FULL_COLUMNS]
    return FULL_COLUMNS + extra


def register(cli: click.Group) -> None:
    @cli.group()
    def elo() -> None:
        """The Elo arena: arrange battles, answer, judge, rate and show leaderboards."""

    @elo.command()
    @click.argument("qa_file", type=click.Path(dir_okay=False, path_type=Path))
    @output_option("Where to write the battles (default stdout).", default="-")
    @click.option(
        "--existing",
        multiple=True,
        type=click.Path(dir_okay=False, path_type=Path),
        help="Battles already arranged or judged; their pairs are not arranged again.",
    )
    @click.option("--shuffle", is_flag=True, help="Shuffle the battle order.")
    @force_option
    @click.option("--seed", type=int, help="Seed of --shuffle.")
    @click.option(
        "--order-from",
        type=click.Path(dir_okay=False, path_type=Path),
        help="Follow another arrangement's order (and orientation).",
    )
    @friendly
    def arrange(qa_file, output, existing, shuffle, seed, order_from, force) -> None:
        """All pairs of models that answered each question (question, model_a, model_b)."""
        refuse_overwrite(output, force)
        from .arrange import arrange as run
        from .files import ARRANGE_COLUMNS, read_qa, read_table, write_table

        qa = read_qa(qa_file)
        tables = [read_table(p, allow_empty=True) for p in existing if Path(p).exists()]
        tables = [t for t in tables if t.rows]
        reference = read_table(order_from) if order_from else None
        result = run(qa, tables, shuffle, seed, reference)
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
    @click.argument("questions_file", type=click.Path(dir_okay=False, path_type=Path))
    @click.option("--model", "-m", required=True, help="Model name (see the models file).")
    @output_option("Q&A file to write (existing answers are kept).", required=True)
    @click.option("--models", "models_file", help="Models file (default: elo_models_file).")
    @click.option("--concurrency", "-j", type=int, help="Calls in flight (elo_concurrency).")
    @click.option("--system", default="", help="A system prompt for the model.")
    @home_option
    @friendly
    def answer(questions_file, model, output, models_file, concurrency, system, home) -> None:
        """Ask MODEL every question it has not answered yet; resumable."""
        from .answers import answer_questions, merge
        from .backends import resolve
        from .files import read_qa, read_question_source, write_qa

        settings = load_settings(home)
        qa = given = read_question_source(questions_file, lambda said: click.echo(said, err=True))
        if output.exists() and output.resolve() != Path(questions_file).resolve():
            qa = merge(read_qa(output), given)
        endpoint = resolve(model, settings, models_file)
        run = answer_questions(
            qa,
            endpoint,
            concurrency or settings["elo_concurrency"],
            save=lambda q: write_qa(output, q),
            system=system,
        )
        click.echo(f"{model} answered {run.answered} of {plural(run.asked, 'question')}.", err=True)
        if run.failures:
            question, why = run.failures[0]
            raise LmdError(
                f"{plural(len(run.failures), 'question')} got no answer (first: {why}); "
                "run the same command again to retry them."
            )

    @elo.command()
    @click.argument("battles_file", type=click.Path(dir_okay=False, path_type=Path))
    @output_option("Judged battles to write (resumes from it).", required=True)
    @qa_option("Q&A file with the answers (when the battles file has none).")
    @click.option("--judge-model", help="The judging model (default: elo_judge_model).")
    @click.option("--models", "models_file", help="Models file (default: elo_models_file).")
    @click.option("--concurrency", "-j", type=int, help="Calls in flight (elo_concurrency).")
    @click.option(
        "--prompt-file",
        type=click.Path(dir_okay=False, path_type=Path),
        help="Your own judge prompt with {question}, {model1_answer}, {model2_answer}.",
    )
    @home_option
    @friendly
    def judge(
        battles_file, output, qa_file, judge_model, models_file, concurrency, prompt_file, home
    ) -> None:
        """Let an LLM judge each battle: winner, response, justification, is_valid."""
        from .backends import resolve
        from .files import check_arrangement, read_qa, read_table, write_table
        from .judge import GPT4_PROMPT, judge_rows

        settings = load_settings(home)
        prompt = _prompt(prompt_file) if prompt_file else GPT4_PROMPT
        table = read_table(battles_file)
        check_arrangement(table)
        rows = _full_rows(table, read_qa(qa_file) if qa_file else None)
        endpoint = resolve(judge_model or settings["elo_judge_model"], settings, models_file)
        earlier, todo = _resume(rows, output, endpoint.name)
        columns = _columns(rows)

        def save() -> None:
            write_table(output, columns, earlier + _judged(rows))

        run = judge_rows(
            rows, endpoint, todo, concurrency or settings["elo_concurrency"], save, prompt
        )
        click.echo(
            f"{endpoint.name} judged {plural(run.judged, 'battle')} ({run.invalid} without a "
            f"usable verdict); {len(rows) - len(todo)} "
            f"{'was' if len(rows) - len(todo) == 1 else 'were'} judged before.",
            err=True,
        )
        if run.failures:
            raise LmdError(
                f"{plural(len(run.failures), 'battle')} "
                f"{'was' if len(run.failures) == 1 else 'were'} not judged "
                f"(first: {run.failures[0][1]}); "
                "run the same command again to retry them."
            )

    @elo.command()
    @click.argument("judged_file", type=click.Path(dir_okay=False, path_type=Path))
    @output_option("Write the swapped-order verdicts here (and resume from it).")
    @click.option(
        "--consistent-out",
        type=click.Path(dir_okay=False, path_type=Path),
        help="Write only the battles whose verdict survives the swap.",
    )
    @click.option("--judge-model", help="Judge to re-ask (default: each row's judge).")
    @click.option("--models", "models_file", help="Models file (default: elo_models_file).")
    @click.option("--concurrency", "-j", type=int, help="Calls in flight (elo_concurrency).")
    @click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
    @force_option
    @home_option
    @friendly
    def ablation(
        judged_file,
        output,
        consistent_out,
        judge_model,
        models_file,
        concurrency,
        as_json,
        force,
        home,
    ) -> None:
        """Re-judge with answers A and B swapped; report agreement and position bias."""
        refuse_overwrite(consistent_out, force, "--force")
        from .backends import resolve
        from .files import is_valid, read_table, write_table
        from .judge import consistency, judge_rows
        from .ratings import normalise_winner

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
        swapped = [{**r, "judge": "", "gpt_4_response": "", "winner": ""} for r in original]
        columns = _columns(swapped)
        by_judge: dict[str, list[int]] = {}
        for i, r in enumerate(original):
            by_judge.setdefault(
                judge_model or r.get("judge") or settings["elo_judge_model"], []
            ).append(i)
        failures = 0
        for name, indexes in by_judge.items():
            endpoint = resolve(name, settings, models_file)
            _, todo = _resume(swapped, output, endpoint.name)
            wanted = set(indexes)
            todo = [i for i in todo if i in wanted]
            run = judge_rows(
                swapped,
                endpoint,
                todo,
                concurrency or settings["elo_concurrency"],
                (lambda: write_table(output, columns, _judged(swapped))) if output else None,
                swapped=True,
            )
            failures += len(run.failures)
        pairs = [
            (o, s)
            for o, s in zip(original, swapped, strict=True)
            if s.get("winner") or s.get("gpt_4_response")
        ]
        report = consistency([o for o, _ in pairs], [s for _, s in pairs])
        if consistent_out:
            keep = [
                o for o, s in pairs if s.get("is_valid") == "true" and o["winner"] == s["winner"]
            ]
            write_table(consistent_out, _columns(original), keep)
        if as_json:
            click.echo(json.dumps(report, indent=2))
        else:
            click.echo(f"{'judge':<24} {'battles':>8} {'agree':>7} {'1st pos. wins':>14}")
            for name, st in report.items():
                agree = "-" if st["agreement"] is None else f"{st['agreement']:.1%}"
                first = (
                    "-"
                    if st["first_position_wins"] is None
                    else (f"{st['first_position_wins']:.1%}")
                )
                click.echo(f"{name:<24} {st['battles']:>8} {agree:>7} {first:>14}")
        if failures:
            raise LmdError(
                f"{plural(failures, 'battle')} {'was' if failures == 1 else 'were'} not re-judged; "
                "run the same command with -o to resume."
            )

    @elo.command()
    @click.argument("battles_file", type=click.Path(dir_okay=False, path_type=Path))
    @output_option("Labelled battles (resumes from it).", required=True)
    @qa_option("Q&A file with the answers (when the battles file has none).")
    @click.option("--name", help="Your name for the judge column (default: your login).")
    @friendly
    def label(battles_file, output, qa_file, name) -> None:
        """Judge battles yourself: a, b, t (tie), x (both bad), s (skip), q (quit)."""
        from .files import check_arrangement, read_qa, read_table, write_table
        from .label import label as run

        table = read_table(battles_file)
        check_arrangement(table)
        rows = _full_rows(table, read_qa(qa_file) if qa_file else None)
        person = name or getpass.getuser()
        earlier, todo = _resume(rows, output, None)
        columns = _columns(rows)
        if not todo:
            click.echo("Every battle is labelled already.")
            return
        result = run(
            rows, todo, person, lambda: write_table(output, columns, earlier + _judged(rows))
        )
        click.echo(
            f"Labelled {result.labelled}, skipped {result.skipped}; "
            f"{len(todo) - result.labelled} left for next time."
        )

    @elo.command()
    @click.argument("battles_file", type=click.Path(dir_okay=False, path_type=Path))
    @_battle_options
    @click.option("--format", "fmt", type=click.Choice(FORMATS), default="table")
    @click.option("--json", "as_json", is_flag=True, help="Same as --format json.")
    @output_option("Write to a file instead of stdout.")
    @force_option
    @friendly
    def leaderboard(
        battles_file,
        method,
        bootstrap,
        seed,
        k,
        scale,
        base,
        initial,
        anchor,
        skip_invalid,
        home,
        fmt,
        as_json,
        output,
        force,
    ) -> None:
        """Ratings of a battles file (model_a, model_b, winner) by Bradley–Terry or online Elo."""
        refuse_overwrite(output, force)
        from .files import read_battles, write_text
        from .leaderboard import compute, render

        opts = _options(
            load_elo_settings(home), method, bootstrap or 0, seed, k, scale, base, initial, anchor
        )
        judged = read_battles(battles_file, skip_invalid)
        _note_skipped(judged)
        board, _, _ = compute(judged.rows, opts)
        text = render(board, "json" if as_json else fmt)
        if output:
            write_text(output, text + "\n")
        else:
            click.echo(text)

    @elo.command()
    @click.argument("battles_file", type=click.Path(dir_okay=False, path_type=Path))
    @_battle_options
    @output_option("The HTML page to write.", required=True)
    @qa_option("Q&A file, for the answers-per-model plots.")
    @click.option("--title", default="Elo leaderboard", help="Page title.")
    @force_option
    @friendly
    def report(
        battles_file,
        method,
        bootstrap,
        seed,
        k,
        scale,
        base,
        initial,
        anchor,
        skip_invalid,
        home,
        output,
        qa_file,
        title,
        force,
    ) -> None:
        """A self-contained HTML page: table, CI whiskers, heatmaps, scatter, history."""
        refuse_overwrite(output, force)
        from .files import read_battles, read_qa, write_text
        from .leaderboard import compute
        from .report import render_page

        opts = _options(
            load_elo_settings(home), method, bootstrap, seed, k, scale, base, initial, anchor
        )
        judged = read_battles(battles_file, skip_invalid)
        _note_skipped(judged)
        board, battles, ratings = compute(judged.rows, opts)
        qa = read_qa(qa_file) if qa_file else None
        page = render_page(
            board, battles, ratings, judged.rows, opts.params, title, str(battles_file), qa
        )
        write_text(output, page)
        click.echo(f"Wrote {output} ({plural(len(judged.rows), 'battle')}).", err=True)

    @elo.command()
    @click.argument("battles_file", type=click.Path(dir_okay=False, path_type=Path))
    @click.option(
        "--kind",
        type=click.Choice(["win-rate", "battles", "predicted"]),
        default="win-rate",
        help="Observed win rate (ties half), battle counts, or win rate the ratings predict.",
    )
    @_battle_options
    @output_option("Write to a file instead of stdout.")
    @force_option
    @friendly
    def matrix(
        battles_file,
        kind,
        method,
        bootstrap,
        seed,
        k,
        scale,
        base,
        initial,
        anchor,
        skip_invalid,
        home,
        output,
        force,
    ) -> None:
        """A models × models matrix as CSV: row model against column model, best first."""
        refuse_overwrite(output, force)
        import csv
        import io

        from .files import read_battles, write_text
        from .leaderboard import compute, ordered
        from .ratings import matrices

        opts = _options(load_elo_settings(home), method, 0, seed, k, scale, base, initial, anchor)
        judged = read_battles(battles_file, skip_invalid)
        _note_skipped(judged)
        board, battles, ratings = compute(judged.rows, opts)
        mats = matrices(battles, ratings, opts.params)
        values = mats[
            {"win-rate": "win_rate", "battles": "battles", "predicted": "predicted"}[kind]
        ]
        models = ordered(board)
        order = [battles.models.index(m) for m in models]
        text = io.StringIO()
        w = csv.writer(text, lineterminator="\n")
        w.writerow(["model", *models])
        for i, m in zip(order, models, strict=True):
            cells = []
            for j in order:
                v = values[i, j]
                cells.append("" if v != v else (f"{int(v)}" if kind == "battles" else f"{v:.4f}"))
            w.writerow([m, *cells])
        if output:
            write_text(output, text.getvalue())
        else:
            click.echo(text.getvalue().rstrip("\n"))

    @elo.command("import")
    @click.argument("battles_file", type=click.Path(dir_okay=False, path_type=Path))
    @click.option("--skip-invalid", is_flag=True, help="Leave out rows with unknown winners.")
    @home_option
    @friendly
    def import_(battles_file, skip_invalid, home) -> None:
        """Load judged battles into the daemon's database (shown at /elo)."""
        from daemon.cli import open_daemon_state

        from .files import read_battles
        from .store import add_battles

        judged = read_battles(battles_file, skip_invalid)
        _note_skipped(judged)
        _, store, _ = open_daemon_state(home)
        try:
            n = add_battles(store, judged.rows)
        finally:
            store.close()
        click.echo(f"Imported {plural(n, 'battle')}.")

    @elo.command()
    @click.argument("source", type=click.Path(dir_okay=False, path_type=Path))
    @click.argument("target", type=click.Path(dir_okay=False, path_type=Path))
    @force_option
    @friendly
    def convert(source, target, force) -> None:
        """Q&A between CSV (question + one column per model) and the JSON form
        {question: [{"model", "answer"}]}; the file endings choose the direction."""
        refuse_overwrite(target, force)
        from .files import read_qa, write_qa

        qa = read_qa(source)
        write_qa(target, qa)
        click.echo(
            f"Wrote {plural(len(qa.questions), 'question')} and "
            f"{plural(len(qa.models), 'model')} to {target}."
        )


def _prompt(path: Path) -> str:
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        raise LmdError(f"The prompt file {path} cannot be read as UTF-8 text.") from None
    for field in ("{question}", "{model1_answer}", "{model2_answer}"):
        if field not in text:
            raise LmdError(f"The prompt file {path} lacks {field}; put it where it belongs.")
    return text
