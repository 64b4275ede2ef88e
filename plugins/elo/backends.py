"""Where models live (a small models file) and running many backend calls concurrently.

The models file (YAML or JSON) maps a model's name to its OpenAI-compatible endpoint:

    vicuna-13b:
      base_url: http://127.0.0.1:8000/v1
      model: lmsys/vicuna-13b-v1.5     # id sent to the server (default: the name)
      api_key_env: VICUNA_API_KEY      # environment variable holding the key (optional)

A name not in the file is asked of the backend `lmd serve` would use (daemon.api.
command_backend: a configured server, with the name as the model id; else the embedded model,
which answers only under its own name). An empty name is that backend's own model.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import time
from collections.abc import Awaitable, Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from tqdm import tqdm

from daemon.api import LLM, LmdError, command_backend, default_home, shown_url


@dataclass(frozen=True)
class Endpoint:
    name: str
    base_url: str
    model: str
    api_key_env: str = ""
    timeout: float = 60.0
    retries: int = 2
    backend: Any = None  # lmd's backend (a CommandBackend) for a name not in the models file

    def api_key(self) -> str:
        if self.api_key_env:
            key = os.environ.get(self.api_key_env)
            if not key:
                raise LmdError(
                    f"The model {self.name} needs an API key in ${self.api_key_env}; set it."
                )
            return key
        return os.environ.get("OPENAI_API_KEY") or "sk-no-key-needed"

    def client(self) -> Any:
        if self.backend is not None:
            return self.backend.client(self.model, timeout=self.timeout)
        return LLM(self.base_url, self.api_key(), self.timeout, self.retries, self.model)


def load_models_file(path: str | Path | None) -> dict[str, dict]:
    """The models file as {name: {base_url, model, api_key_env}}; {} when there is none."""
    if not path:
        return {}
    p = Path(path).expanduser()
    if not p.exists():
        return {}
    try:
        text = p.read_text(encoding="utf-8")
        if p.suffix == ".json":
            data = json.loads(text)
        else:
            data = yaml.safe_load(text) or {}
    except Exception as e:  # UnicodeDecodeError, JSONDecodeError, yaml.YAMLError
        raise LmdError(
            f"The models file {p} cannot be read ({type(e).__name__}); fix it."
        ) from None
    if not isinstance(data, dict) or not all(
        isinstance(k, str) and isinstance(v, dict) and isinstance(v.get("base_url"), str)
        for k, v in data.items()
    ):
        raise LmdError(
            f"The models file {p} must map each model name to {{base_url, model, api_key_env}}."
        )
    return data


def resolve(
    name: str,
    settings: Any,
    models_file: str | Path | None = None,
    backend: Callable[[str], Any] | None = None,
    say: Callable[[str], None] | None = None,
) -> Endpoint:
    """The endpoint of model `name`: from the models file, else lmd's backend (`backend(name)`,
    the command's CommandBackend, opened only then). A line to `say` (the backend's getter
    says it for lmd's backend; default stderr) names it."""
    path = models_file or settings["elo_models_file"] or default_home() / "elo_models.yaml"
    table = load_models_file(path)
    timeout, retries = settings["llm_timeout_secs"], settings["llm_max_retries"]
    if name and name in table:
        entry = table[name]
        found = Endpoint(
            name,
            entry["base_url"].rstrip("/"),
            str(entry.get("model") or name),
            str(entry.get("api_key_env") or ""),
            timeout,
            retries,
        )
        (say or _stderr)(
            f"lmd: asking {shown_url(found.base_url)}, model {found.model} ({name} in the "
            "models file)."
        )
        return found
    if backend is None:
        raise LmdError(f"The model {name} is not in the models file {path}; add it there.")
    lmd = backend(name)
    if not lmd.serves(name):
        raise LmdError(
            f"The model {name} is not in the models file {path}, and the embedded model "
            f"answers only as {lmd.model}: name {lmd.model}, or add {name} with its server to "
            "the models file (docs/elo.md)."
        )
    return Endpoint(name or lmd.model, lmd.url, name or lmd.model, "", timeout, retries, lmd)


@contextmanager
def lmd_backend(
    settings: Any, say: Callable[[str], None] | None = None
) -> Iterator[Callable[[str], Any]]:
    """A getter of the backend lmd serve would use, opened on first need and closed at the
    end (an embedded model run for the command stops); a line to `say` (default stderr)
    names it with each model asked of it."""
    opened: list[Any] = []

    def get(name: str) -> Any:
        if not opened:
            opened.append(command_backend(settings, model=name or None, say=say or _stderr))
        else:
            (say or _stderr)(f"lmd: asking {opened[0].describe(name or None)}.")
        return opened[0]

    try:
        yield get
    finally:
        for b in opened:
            b.close()


def _stderr(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


async def run_all(
    jobs: Sequence[Callable[[], Awaitable[Any]]],
    concurrency: int,
    on_result: Callable[[int, Any], None],
    on_error: Callable[[int, Exception], None],
    desc: str,
    checkpoint: Callable[[], None] | None = None,
    every_secs: float = 2.0,
) -> None:
    """Run jobs with at most `concurrency` in flight, a progress bar, periodic checkpoints."""
    sem = asyncio.Semaphore(max(1, concurrency))
    bar = tqdm(total=len(jobs), desc=desc, unit="call", file=sys.stderr, disable=None)
    last = time.monotonic()

    async def one(i: int, job: Callable[[], Awaitable[Any]]) -> None:
        nonlocal last
        async with sem:
            try:
                result = await job()
            except LmdError as e:
                on_error(i, e)
            else:
                on_result(i, result)
        bar.update(1)
        if checkpoint is not None and time.monotonic() - last > every_secs:
            last = time.monotonic()
            checkpoint()

    try:
        await asyncio.gather(*(one(i, j) for i, j in enumerate(jobs)))
    finally:
        bar.close()
