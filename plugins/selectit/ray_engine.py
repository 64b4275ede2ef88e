"""SelectIT on Ray Data: the transformers rater in an actor pool, one model load per worker.

The driver reads and checks the dataset with lmd's own reader (ids, order, resume and the
clear errors live there), turns the samples still to score into a Ray Dataset and streams it
through `map_batches(RaterWorker, compute=ActorPoolStrategy(size=N))`. Results come back as
batches finish and go into the scores file at once, so a stop loses at most the batches in
flight. Ray restarts a worker that dies and retries its batch (Ray Data's actor-pool default,
without a limit); a sample whose rating fails comes back with its error and is reported by
its id, never written.
`pip install 'lmd[ray]'`; ray is imported only here.
"""

from __future__ import annotations

import json
import logging
import math
import os
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from tqdm import tqdm

from daemon.api import LmdError

from .datasets import Sample
from .engine import Result, fitted_prompts, rated
from .prompts import TooLong
from .raters import make_transformers_rater
from .scoring import DEFAULT_SCORE, Rating

# Tests: the path of a file; the first worker that removes it after its first batch dies
# with os._exit, as a crashed or OOM-killed worker would.
CRASH_ONCE = "LMD_SELECTIT_RAY_CRASH_ONCE"


@dataclass(frozen=True)
class RayPlan:
    """Where and how wide: None address starts a local Ray for this run (stopped after)."""

    address: str | None = None
    workers: int | None = None  # None: the cluster's CPUs, or its GPUs / gpus_per_worker
    gpus_per_worker: float = 0.0


@dataclass
class RayRun:
    workers: int = 0
    batch_size: int = 0
    failures: list[tuple[Sample, str]] | None = None


class RaterWorker:
    """One actor of the pool: loads the model once, then rates batch after batch."""

    def __init__(self, cfg: Any, templates: Sequence[str]) -> None:
        self.templates = list(templates)
        self.batches = 0
        self.rater = None
        self.error = ""
        try:
            self.rater = make_transformers_rater(cfg)
        except LmdError as e:  # every batch then reports it, and the driver says it once
            self.error = e.message

    def __call__(self, batch: dict) -> dict:
        """Per sample: its ratings (JSON), the tokens cut from each prompt (JSON), or why it
        was skipped (too long even shortened: the local engine's 3.0), or why it failed."""
        self._crash_when_asked()
        self.batches += 1
        n = len(batch["index"])
        samples = [
            Sample(int(i), None, str(ins), str(inp), str(out), 0)
            for i, ins, inp, out in zip(
                batch["index"], batch["instruction"], batch["input"], batch["output"], strict=True
            )
        ]
        ratings, removed, skipped, errors = [""] * n, [""] * n, [""] * n, [self.error] * n
        if self.rater is not None:
            todo: list[tuple[int, list]] = []
            for i, sample in enumerate(samples):
                try:
                    prompts = fitted_prompts(sample, self.templates, self.rater)
                except Exception as e:  # noqa: BLE001 - reported with the sample's id
                    errors[i] = _reason(e)
                    continue
                if isinstance(prompts, TooLong):
                    skipped[i] = prompts.message
                else:
                    removed[i] = json.dumps([p.removed for p in prompts])
                    todo.append((i, prompts))
            try:
                for (i, _), text in zip(todo, self._rate([p for _, p in todo]), strict=True):
                    ratings[i] = text
            except Exception:  # find the sample(s) at fault; the others still count
                for i, prompts in todo:
                    try:
                        ratings[i] = self._rate([prompts])[0]
                    except Exception as e:  # noqa: BLE001 - reported with the sample's id
                        errors[i] = _reason(e)
        return {
            "index": batch["index"],
            "ratings": np.array(ratings, dtype=object),
            "removed": np.array(removed, dtype=object),
            "skipped": np.array(skipped, dtype=object),
            "error": np.array(errors, dtype=object),
        }

    def _rate(self, prompt_lists: list[list[Any]]) -> list[str]:
        if not prompt_lists:
            return []
        group = max(len(p) for p in prompt_lists)
        flat = [p for prompts in prompt_lists for p in prompts]
        ratings = self.rater.rate_prompts(flat, group)
        out, pos = [], 0
        for prompts in prompt_lists:
            out.append(json.dumps([list(r.probs) for r in ratings[pos : pos + len(prompts)]]))
            pos += len(prompts)
        return out

    def _crash_when_asked(self) -> None:
        marker = os.environ.get(CRASH_ONCE)
        if not marker or self.batches < 1:
            return
        try:
            os.unlink(marker)  # exactly one worker succeeds
        except FileNotFoundError:
            return
        os._exit(1)


def _reason(e: BaseException) -> str:
    if isinstance(e, LmdError):
        return e.message
    text = str(e).strip().splitlines()
    return f"{type(e).__name__}: {text[0][:200]}" if text else type(e).__name__


def _connect(ray: Any, plan: RayPlan) -> bool:
    """Join the session already open (tests, notebooks) or start one; True if we started it."""
    if ray.is_initialized():
        return False
    try:
        ray.init(
            address=plan.address,
            include_dashboard=False,
            logging_level=logging.ERROR,
            log_to_driver=False,
        )
    except Exception as e:  # ConnectionError, RuntimeError, ValueError for bad addresses
        where = f"the Ray cluster at {plan.address}" if plan.address else "a local Ray"
        raise LmdError(
            f"I could not start or reach {where} ({_reason(e)}); check --address (auto joins "
            "a cluster started with `ray start --head`, ray://HOST:10001 a remote one)."
        ) from None
    return True


def _workers(ray: Any, plan: RayPlan, samples: int) -> int:
    if plan.workers:
        return max(1, min(plan.workers, samples))
    resources = ray.cluster_resources()
    if plan.gpus_per_worker > 0:
        fit = int(resources.get("GPU", 0) // plan.gpus_per_worker)
        if fit < 1:
            raise LmdError(
                f"The Ray cluster has {resources.get('GPU', 0):g} GPUs, too few for "
                f"--gpus-per-worker {plan.gpus_per_worker:g}; lower it or add GPU nodes."
            )
    else:
        fit = int(resources.get("CPU", 1))
    return max(1, min(fit, samples))


def score_with_ray(
    samples: Sequence[Sample],
    templates: Sequence[str],
    cfg: Any,
    plan: RayPlan,
    on_result: Callable[[Result], None],
    progress: bool,
) -> RayRun:
    """Rate the (valid) samples on Ray; `on_result` gets each Result as its batch returns."""
    try:
        import ray
        import ray.data
    except ImportError:
        raise LmdError("--engine ray needs Ray: pip install 'lmd[ray]'.") from None

    run = RayRun(failures=[])
    if not samples:
        return run
    # Ray Data's notes (execution plans, "progress bars disabled") would bury our lines;
    # errors still show, and so do the raylet's notices of a worker that died.
    logging.getLogger("ray.data").setLevel(logging.ERROR)
    started = _connect(ray, plan)
    bar = tqdm(total=len(samples), unit="sample", file=sys.stderr, disable=not progress)
    try:
        context = ray.data.DataContext.get_current()
        context.enable_progress_bars = False  # one bar for the whole job: ours
        context.enable_operator_progress_bars = False
        context.print_on_execution_start = False
        run.workers = _workers(ray, plan, len(samples))
        gpus = ray.cluster_resources().get("GPU", 0)
        if gpus and not plan.gpus_per_worker:
            print(
                f"selectit: warning: the Ray cluster has {gpus:g} GPUs but the workers ask for "
                "none; give --gpus-per-worker 1 to score on them.",
                file=sys.stderr,
            )
        # Batches small enough that every worker gets several (balance, and little to redo
        # when one dies), at most the local engine's window of batch_size * 16 samples.
        per = math.ceil(len(samples) / (run.workers * 4))
        run.batch_size = max(1, min(cfg.batch_size * 16, per))
        items = [
            {"index": i, "instruction": s.instruction, "input": s.input, "output": s.output}
            for i, s in enumerate(samples)
        ]
        blocks = min(math.ceil(len(items) / run.batch_size), 10_000)
        dataset = ray.data.from_items(items, override_num_blocks=blocks)
        scored = dataset.map_batches(
            RaterWorker,
            fn_constructor_kwargs={"cfg": cfg, "templates": list(templates)},
            compute=ray.data.ActorPoolStrategy(size=run.workers),
            batch_size=run.batch_size,
            batch_format="numpy",
            num_gpus=plan.gpus_per_worker or None,
        )
        try:
            for out in scored.iter_batches(batch_size=None, batch_format="numpy"):
                rows = zip(
                    out["index"], out["ratings"], out["removed"], out["skipped"], out["error"],
                    strict=True,
                )  # fmt: skip
                for index, ratings, removed, skipped, error in rows:
                    sample = samples[int(index)]
                    if error:
                        run.failures.append((sample, str(error)))
                    elif skipped:
                        on_result(Result(sample.id, DEFAULT_SCORE, True, skipped=str(skipped)))
                    else:
                        found = [Rating(tuple(p)) for p in json.loads(ratings)]
                        on_result(rated(sample, found, cfg.alpha, json.loads(removed)))
                    bar.update(1)
        except (KeyboardInterrupt, LmdError):
            raise
        except Exception as e:  # a worker that kept dying, a lost node, a cancelled job
            raise LmdError(f"The Ray job stopped ({_reason(e)}).") from None
    finally:
        bar.close()
        if started:
            ray.shutdown()
    return run
