"""`lmd selectit`: score a dataset, resumably, and optionally keep its best fraction."""

from __future__ import annotations

import math
import sys
import time
from pathlib import Path
from typing import Any

import click

from daemon.errors import LmdError
from daemon.paths import refuse_overwrite
from daemon.words import plural


def default_output(dataset: Path, scorer: str | None = None) -> Path:
    """alpaca.jsonl -> alpaca.selectit.jsonl beside the input; a `name` from the YAML file
    names it instead: alpaca.SelectitTokenScorer.jsonl."""
    from .output import file_part

    name = dataset.name
    for suffix in (".jsonl", ".json"):
        if name.lower().endswith(suffix):
            name = name[: -len(suffix)]
            break
    return dataset.with_name(f"{name}.{file_part(scorer) if scorer else 'selectit'}.jsonl")


def check_paths(dataset: Path, output: Path, select_out: Path | None) -> None:
    """Never write scores or a selection over the dataset, or a selection over the scores."""
    same = dataset.resolve()
    if output.resolve() == same:
        raise LmdError(f"The output {output} is the dataset itself; give another -o.")
    if select_out is not None and select_out.resolve() in (same, output.resolve()):
        raise LmdError(
            f"--select-out {select_out} would overwrite the dataset or the scores; give "
            "another file."
        )


@click.command("selectit")
@click.argument("dataset", type=click.Path(path_type=Path))
@click.option("-o", "--output", type=click.Path(path_type=Path), help="Scores file (JSONL).")
@click.option("--config", "config_file", type=click.Path(path_type=Path), help="YAML config.")
@click.option("--k", type=int, help="Rating prompts per sample (default 1).")
@click.option("--alpha", type=float, help="Penalty on the std across prompts (default 0.2).")
@click.option("--rp-file", help="Rating-prompt file, one template per line.")
@click.option("--model", help="Model id (openai) or local model directory (transformers).")
@click.option("--max-length", type=int, help="Most prompt tokens (default 2048).")
@click.option("--batch-size", type=int, help="Samples per forward pass (transformers).")
@click.option("--backend", type=click.Choice(["openai", "transformers"]), help="Rater.")
@click.option("--api", type=click.Choice(["completions", "chat"]), help="OpenAI endpoint.")
@click.option("--concurrency", type=int, help="Requests in flight (openai).")
@click.option("--top-logprobs", type=int, help="Top logprobs to ask for (openai).")
@click.option("--device", help="Torch device (transformers; default auto).")
@click.option("--fallback-model", help="Load this model if --model fails (transformers).")
@click.option("--fields", help="Map field names: instruction=prompt,output=answer,id=uid.")
@click.option("--skip-bad-lines", is_flag=True, help="Skip malformed lines instead of stopping.")
@click.option("--details", is_flag=True, help="Also write the k token scores and distributions.")
@click.option("--top", "top_fraction", type=float, help="Keep the best FRACTION (0-1].")
@click.option("--select-out", type=click.Path(path_type=Path), help="Where --top writes.")
@click.option("--force", is_flag=True, help="Let --select-out replace an existing file.")
@click.option("--progress/--no-progress", default=None, help="Progress bar (default: on a tty).")
@click.option(
    "--home",
    type=click.Path(file_okay=False, path_type=Path),
    envvar="LMD_HOME",
    help="Directory of the database (settings).",
)
def selectit_command(**opts: Any) -> None:
    """Score DATASET (JSONL or JSON; Alpaca or ShareGPT) with SelectIT.

    Writes {"id", "score"} lines to -o as it goes; running the same command again resumes.
    """
    try:
        code = run(**opts)
    except LmdError as e:
        click.echo(e.message, err=True)
        sys.exit(1)
    sys.exit(code)


def run(**o: Any) -> int:
    from daemon.cli import open_daemon_state

    from .config import load_yaml, resolve
    from .datasets import parse_fields, read_dataset
    from .output import ScoresFile, summary
    from .prompts import choose_templates, load_templates

    if o["top_fraction"] is not None and not 0 < o["top_fraction"] <= 1:
        raise LmdError(f"--top must be a fraction above 0 and at most 1, not {o['top_fraction']}.")
    if (o["top_fraction"] is None) != (o["select_out"] is None):
        raise LmdError(
            "--top and --select-out go together: give both, e.g. --top 0.2 --select-out best.jsonl."
        )
    _, store, settings = open_daemon_state(o["home"])
    store.close()
    file_values = load_yaml(o["config_file"]) if o["config_file"] else {}
    keys = ("k", "alpha", "rp_file", "model", "max_length", "batch_size", "backend", "api")
    keys += ("concurrency", "top_logprobs", "device", "fallback_model")
    cfg = resolve(settings, file_values, {key: o[key] for key in keys})
    all_templates = load_templates(cfg.rp_file or None)
    templates = choose_templates(all_templates, cfg.k)
    dataset = read_dataset(o["dataset"], parse_fields(o["fields"]), o["skip_bad_lines"])
    if dataset.skipped_lines:
        shown = ", ".join(map(str, dataset.skipped_lines[:20]))
        more = " ..." if len(dataset.skipped_lines) > 20 else ""
        click.echo(
            f"selectit: skipped {len(dataset.skipped_lines)} malformed records "
            f"(lines {shown}{more}).",
            err=True,
        )
    output = o["output"] or default_output(o["dataset"], file_values.get("name"))
    check_paths(o["dataset"], output, o["select_out"])
    refuse_overwrite(o["select_out"], o["force"])
    scores = ScoresFile(output)
    before = len(scores.load())
    scores.check_run(fingerprint(cfg, settings, all_templates))
    todo = [s for s in dataset.samples if s.key not in scores.done]
    progress = sys.stderr.isatty() if o["progress"] is None else o["progress"]
    started = time.monotonic()
    stats = {"scored": 0, "bounded": 0, "unrated": 0, "truncated": 0, "removed": 0, "skipped": 0}
    import asyncio  # here, not at the top: `lmd --help` imports this module

    try:
        asyncio.run(
            score_into(todo, templates, cfg, settings, scores, o["details"], progress, stats)
        )
    except KeyboardInterrupt:
        scores.close()
        click.echo(
            f"selectit: interrupted; {saved(len(scores.done))} in {output}. "
            "Run the same command again to resume.",
            err=True,
        )
        return 130
    except LmdError as e:
        scores.close()
        if not scores.done:
            raise
        raise LmdError(
            f"{e.message} {saved(len(scores.done))} in {output}; run the same command "
            "again to resume."
        ) from None
    scores.put_in_order(s.key for s in dataset.samples)
    missing = sum(not s.valid for s in dataset.samples)
    for line in summary(
        cfg, stats, len(dataset.samples), before, missing, time.monotonic() - started, output
    ):
        click.echo(line, err=True)
    if o["top_fraction"] is not None:
        kept = select_best(dataset, scores.done, o["top_fraction"], o["select_out"])
        click.echo(
            f"selectit: kept the best {plural(kept, 'record')} in {o['select_out']}.", err=True
        )
    return 0


async def score_into(
    todo: list,
    templates: list[str],
    cfg: Any,
    settings: Any,
    scores: Any,
    details: bool,
    progress: bool,
    stats: dict,
) -> None:
    """Score `todo` and append each result to `scores` as soon as it is ready."""
    import asyncio

    from tqdm import tqdm

    from .engine import score_samples
    from .raters import make_openai_rater, make_transformers_rater

    if not any(s.valid for s in todo):
        rater = None
    elif cfg.backend == "transformers":
        rater = await asyncio.to_thread(make_transformers_rater, cfg)
    else:
        rater = make_openai_rater(cfg, settings)
    bar = tqdm(total=len(todo), unit="sample", file=sys.stderr, disable=not progress)
    try:
        async for result in score_samples(todo, templates, cfg.alpha, rater):
            scores.append(result.to_json(details))
            stats["scored"] += 1
            stats["bounded"] += sum(r.absent for r in result.ratings)
            stats["unrated"] += sum(r.absent == len(r.probs) for r in result.ratings)
            stats["truncated"] += result.truncated
            stats["removed"] += sum(result.removed)
            stats["skipped"] += result.skipped is not None
            bar.update(1)
    finally:
        bar.close()
        if rater is not None and hasattr(rater, "llm"):
            await rater.llm.close()


def fingerprint(cfg: Any, settings: Any, templates: list[str]) -> dict:
    """What decides the numbers (templates: the whole prompt file): a resume must match."""
    import hashlib

    from .raters import local_model, openai_model

    local = cfg.backend == "transformers"
    prompts = hashlib.sha256("\n".join(templates).encode()).hexdigest()[:16]
    out = {
        "backend": cfg.backend,
        "model": local_model(cfg) if local else openai_model(cfg, settings),
    }
    out.update({"k": cfg.k, "alpha": cfg.alpha, "prompts": prompts, "max_length": cfg.max_length})
    out.update({} if local else {"api": cfg.api})
    return out


def saved(n: int) -> str:
    return f"{n} score{'' if n == 1 else 's'} {'is' if n == 1 else 'are'} saved"


def select_best(dataset: Any, done: dict, fraction: float, path: Path) -> int:
    """Write the best `fraction` of the valid records (original fields), best first."""
    from .output import write_records

    ranked = [
        (done[s.key]["score"], i, s)
        for i, s in enumerate(dataset.samples)
        if s.valid and s.key in done and "skipped" not in done[s.key]
    ]
    ranked.sort(key=lambda t: (-t[0], t[1]))
    keep = max(1, math.floor(fraction * len(ranked))) if ranked else 0
    as_array = path.suffix.lower() == ".json"
    write_records(path, [s.record for _, _, s in ranked[:keep]], as_array)
    return keep
