"""`lmd selectit`: score a dataset (here or on Ray, whole or one part), resumably; merge the
parts of a sharded run; keep the best fraction."""

from __future__ import annotations

import asyncio
import hashlib
import math
import sys
import time
from pathlib import Path
from typing import Any

import click
import yaml
from tqdm import tqdm

from daemon.api import (
    LmdError,
    command_backend,
    open_daemon_state,
    parse_shard,
    plural,
    refuse_overwrite,
)

from .config import check, resolve
from .datasets import parse_fields, read_dataset
from .engine import Result, score_samples
from .output import WHOLE, ScoresFile, file_part, summary, write_records
from .prompts import choose_templates, load_templates
from .raters import check_served, local_model, make_openai_rater, make_transformers_rater
from .ray_engine import RayPlan, score_with_ray
from .scoring import DEFAULT_SCORE
from .shards import merge_parts, run_record


def load_yaml(path: str | Path) -> dict[str, Any]:
    """The YAML file's keys, checked; rp_file is found next to the YAML file when it is there."""
    file = Path(path).expanduser()
    try:
        text = file.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise LmdError(f"The config file {file} does not exist; check the path.") from None
    except (OSError, UnicodeDecodeError) as e:
        raise LmdError(f"I could not read the config file {file} ({e}).") from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark is not None else ""
        raise LmdError(f"The config file {file} is not valid YAML{where}; fix it.") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise LmdError(f"The config file {file} must be a mapping of keys such as k: 5.")
    values = {str(key): check(str(key), value, f"in {file}") for key, value in data.items()}
    rp = values.get("rp_file")
    if rp and not Path(rp).is_absolute() and (file.parent / rp).exists():
        values["rp_file"] = str(file.parent / rp)
    return values


def default_output(dataset: Path, scorer: str | None = None, part: Any = None) -> Path:
    """alpaca.jsonl -> alpaca.selectit.jsonl beside the input; a `name` from the YAML file
    names it instead: alpaca.SelectitTokenScorer.jsonl; part 2/4: alpaca.selectit.2-of-4.jsonl."""
    name = dataset.name
    for suffix in (".jsonl", ".json"):
        if name.lower().endswith(suffix):
            name = name[: -len(suffix)]
            break
    middle = f".{part.index}-of-{part.count}" if part is not None else ""
    return dataset.with_name(f"{name}.{file_part(scorer) if scorer else 'selectit'}{middle}.jsonl")


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


class SelectitGroup(click.Group):
    """`lmd selectit DATASET ...` scores (the `score` subcommand, implied); `lmd selectit
    merge OUT PART...` merges the parts of a sharded run."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        if args and args[0] not in self.commands and args[0] != "--help":
            args = ["score", *args]
        return super().parse_args(ctx, args)


@click.group(
    "selectit",
    cls=SelectitGroup,
    options_metavar="",
    subcommand_metavar="DATASET [OPTIONS] | merge OUT PART... [OPTIONS]",
)
def selectit_group() -> None:
    """Score instruction data with SelectIT: `lmd selectit DATASET [OPTIONS]` (the same as
    `lmd selectit score DATASET`), or join the parts of a sharded run with `lmd selectit
    merge`."""


@selectit_group.command("score")
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
    "--shard",
    metavar="I/N",
    help="Score only part I of N (by a hash of the id); join the parts with `merge`.",
)
@click.option(
    "--engine",
    type=click.Choice(["local", "ray"]),
    default="local",
    show_default=True,
    help="ray: the transformers rater in a Ray actor pool (pip install 'lmd[ray]').",
)
@click.option("--address", help="Ray cluster: auto, or ray://HOST:10001 (default: a local Ray).")
@click.option("--workers", type=int, help="Ray workers, one model each (default: the CPUs).")
@click.option("--gpus-per-worker", type=float, help="GPUs per Ray worker (default 0).")
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
    sys.exit(run(**opts))


@selectit_group.command("merge")
@click.argument("output", type=click.Path(dir_okay=False, path_type=Path))
@click.argument("parts", nargs=-1, required=True, type=click.Path(dir_okay=False, path_type=Path))
@click.option(
    "--dataset",
    type=click.Path(dir_okay=False, path_type=Path),
    help="The dataset the parts read, when it has moved since.",
)
@click.option("--top", "top_fraction", type=float, help="Keep the best FRACTION (0-1].")
@click.option("--select-out", type=click.Path(path_type=Path), help="Where --top writes.")
@click.option("--force", is_flag=True, help="Replace OUTPUT (and --select-out) if they exist.")
def merge_command(
    output: Path,
    parts: tuple[Path, ...],
    dataset: Path | None,
    top_fraction: float | None,
    select_out: Path | None,
    force: bool,
) -> None:
    """Join the parts of `lmd selectit DATASET --shard I/N` runs into OUTPUT: the same file
    one run over the whole dataset writes. Every id must be in exactly one part."""
    check_top(top_fraction, select_out)
    refuse_overwrite(select_out, force)
    data, done, count = merge_parts(output, list(parts), dataset, force)
    click.echo(f"selectit: merged {count} parts, {len(data.samples)} scores in {output}.", err=True)
    if top_fraction is not None:
        kept = select_best(data, done, top_fraction, select_out)
        click.echo(f"selectit: kept the best {kept} records in {select_out}.", err=True)


def check_top(top_fraction: float | None, select_out: Path | None) -> None:
    if top_fraction is not None and not 0 < top_fraction <= 1:
        raise LmdError(f"--top must be a fraction above 0 and at most 1, not {top_fraction}.")
    if (top_fraction is None) != (select_out is None):
        raise LmdError(
            "--top and --select-out go together: give both, e.g. --top 0.2 --select-out best.jsonl."
        )


def check_engine(o: dict, backend: str) -> Any:
    """The Ray plan for --engine ray (None for local); Ray flags without it are refused."""
    names = ("address", "workers", "gpus_per_worker")
    given = ["--" + k.replace("_", "-") for k in names if o[k] is not None]
    if o["engine"] != "ray":
        if given:
            raise LmdError(f"{', '.join(given)} go with --engine ray; add it or drop them.")
        return None
    if backend != "transformers":
        raise LmdError(
            "--engine ray runs a local model (--backend transformers); the openai backend "
            "scales with --concurrency, several servers behind one endpoint, and --shard "
            "(see docs/scaling.md)."
        )
    if o["workers"] is not None and o["workers"] < 1:
        raise LmdError(f"--workers must be at least 1, not {o['workers']}.")
    gpus = o["gpus_per_worker"] or 0.0
    if gpus < 0 or not math.isfinite(gpus):
        raise LmdError(f"--gpus-per-worker must be 0 or more, not {o['gpus_per_worker']}.")

    return RayPlan(o["address"] or None, o["workers"], gpus)


def run(**o: Any) -> int:
    check_top(o["top_fraction"], o["select_out"])
    part = parse_shard(o["shard"])
    if part is not None and o["top_fraction"] is not None:
        raise LmdError(
            "--top selects from the whole dataset; give it to `lmd selectit merge` once every "
            "part is done."
        )
    _, store, settings = open_daemon_state(o["home"])
    store.close()
    file_values = load_yaml(o["config_file"]) if o["config_file"] else {}
    keys = ("k", "alpha", "rp_file", "model", "max_length", "batch_size", "backend", "api")
    keys += ("concurrency", "top_logprobs", "device", "fallback_model")
    cfg = resolve(settings, file_values, {key: o[key] for key in keys})
    plan = check_engine(o, cfg.backend)
    if cfg.backend == "transformers":
        return scored(o, cfg, plan, None, part, file_values, [])

    # the backend lmd serve would use; the line naming it comes first once scoring starts
    # (a bad dataset or option is one sentence alone)
    said: list[str] = []
    with command_backend(settings, say=said.append, model=cfg.model) as backend:
        check_served(cfg, backend.model, backend.embedded)
        return scored(o, cfg, plan, backend, part, file_values, said)


def scored(
    o: dict, cfg: Any, plan: Any, backend: Any, part: Any, file_values: dict, said: list[str]
) -> int:
    """Score the dataset (on `backend`, for the openai rater) into the scores file."""
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
    output = o["output"] or default_output(o["dataset"], file_values.get("name"), part)
    check_paths(o["dataset"], output, o["select_out"])
    refuse_overwrite(o["select_out"], o["force"])
    scores = ScoresFile(output)
    before = len(scores.load())
    scores.check_run(
        fingerprint(cfg, backend, all_templates, part),
        run_record(o["dataset"], o["fields"], o["skip_bad_lines"], o["details"]),
    )
    samples = [s for s in dataset.samples if part is None or part.owns(s.key)]
    todo = [s for s in samples if s.key not in scores.done]
    for line in said:
        click.echo(line, err=True)
    progress = sys.stderr.isatty() if o["progress"] is None else o["progress"]
    started = time.monotonic()
    stats = {"scored": 0, "measured": 0, "bounded": 0, "partly unrated": 0, "unrated": 0,
             "default": 0, "truncated": 0, "removed": 0, "skipped": 0}  # fmt: skip
    failed: list = []  # (sample, why): --engine ray reports a sample it could not rate

    try:
        if plan is None:
            asyncio.run(
                score_into(todo, templates, cfg, backend, scores, o["details"], progress, stats)
            )
        else:
            failed = score_on_ray(todo, templates, cfg, plan, scores, o["details"], progress, stats)
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
    scores.put_in_order(s.key for s in samples)
    missing = sum(not s.valid for s in samples)
    elapsed = time.monotonic() - started
    for line in summary(cfg, stats, len(samples), before, missing, elapsed, output, part):
        click.echo(line, err=True)
    if stats["unrated"] and stats["unrated"] == stats["scored"] - stats["default"]:
        raise LmdError(
            f"The model rated none of the {plural(stats['unrated'], 'sample')} (first reason: "
            f"{stats['unrated_why']}); {output} lists them without a score. Check that the "
            "model answers with a digit 1-5 (try --api completions with a base model, or "
            "other rating prompts)."
        )
    if failed:
        sample, why = failed[0]
        if len({w for _, w in failed}) == 1 and len(failed) == sum(s.valid for s in todo):
            raise LmdError(why)  # one cause for everything (the model did not load): say it once
        raise LmdError(
            f"{plural(len(failed), 'sample')} could not be scored and "
            f"{'is' if len(failed) == 1 else 'are'} not in {output} (first: id {sample.key}: "
            f"{why}); run the same command again to retry them."
        )
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
    backend: Any,
    scores: Any,
    details: bool,
    progress: bool,
    stats: dict,
) -> None:
    """Score `todo` and append each result to `scores` as soon as it is ready."""
    if not any(s.valid for s in todo):
        rater = None
    elif cfg.backend == "transformers":
        rater = await asyncio.to_thread(make_transformers_rater, cfg)
    else:
        rater = make_openai_rater(cfg, backend.client())
    bar = tqdm(total=len(todo), unit="sample", file=sys.stderr, disable=not progress)
    try:
        async for result in score_samples(todo, templates, cfg.alpha, rater):
            scores.append(result.to_json(details))
            count(stats, result)
            bar.update(1)
    finally:
        bar.close()
        if rater is not None and hasattr(rater, "llm"):
            await rater.llm.close()


def count(stats: dict, result: Any) -> None:
    """A written result in the run's summary counts."""
    stats["scored"] += 1
    stats[result.quality] = stats.get(result.quality, 0) + 1
    stats["bounded_ratings"] = stats.get("bounded_ratings", 0) + sum(
        r.absent for r in result.ratings if not r.unrated
    )
    if result.unrated:
        stats.setdefault("unrated_why", result.unrated[0])
    stats["truncated"] += result.truncated
    stats["removed"] += sum(result.removed)
    stats["skipped"] += result.skipped is not None


def score_on_ray(
    todo: list,
    templates: list[str],
    cfg: Any,
    plan: Any,
    scores: Any,
    details: bool,
    progress: bool,
    stats: dict,
) -> list:
    """Score `todo` on Ray: invalid samples here at once, the rest in the actor pool.
    Returns the (sample, why) of samples that could not be rated (not written)."""

    def keep(result: Any) -> None:
        scores.append(result.to_json(details))
        count(stats, result)

    for s in todo:
        if not s.valid:
            keep(Result(s.id, DEFAULT_SCORE, False))
    run = score_with_ray([s for s in todo if s.valid], templates, cfg, plan, keep, progress)
    if run.workers:
        click.echo(
            f"selectit: Ray scored with {plural(run.workers, 'worker')}, batches of "
            f"{run.batch_size}.",
            err=True,
        )
    return run.failures or []


def fingerprint(cfg: Any, backend: Any, templates: list[str], part: Any = None) -> dict:
    """What decides the numbers (the model that answers, by name and identity: its
    endpoint, or the embedded model's file; templates: the whole prompt file) and which
    samples: a resume must match."""
    local = cfg.backend == "transformers"
    prompts = hashlib.sha256("\n".join(templates).encode()).hexdigest()[:16]
    out = {
        "backend": cfg.backend,
        "model": local_model(cfg) if local else cfg.model or backend.model,
    }
    out.update({"k": cfg.k, "alpha": cfg.alpha, "prompts": prompts, "max_length": cfg.max_length})
    out.update({} if local else {"api": cfg.api, "identity": backend.identity})
    out["shard"] = str(part) if part is not None else WHOLE
    return out


def saved(n: int) -> str:
    return f"{n} score{'' if n == 1 else 's'} {'is' if n == 1 else 'are'} saved"


def select_best(dataset: Any, done: dict, fraction: float, path: Path) -> int:
    """Write the best `fraction` of the valid records (original fields), best first."""
    ranked = [
        (done[s.key]["score"], i, s)
        for i, s in enumerate(dataset.samples)
        if s.valid
        and s.key in done
        and "skipped" not in done[s.key]
        and done[s.key]["score"] is not None  # an unrated sample is not among the best
    ]
    ranked.sort(key=lambda t: (-t[0], t[1]))
    keep = max(1, math.floor(fraction * len(ranked))) if ranked else 0
    as_array = path.suffix.lower() == ".json"
    write_records(path, [s.record for _, _, s in ranked[:keep]], as_array)
    return keep
