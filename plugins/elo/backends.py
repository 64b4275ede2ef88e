"""Where models live (a small models file) and running many backend calls concurrently.

The models file (YAML or JSON) maps a model's name to its OpenAI-compatible endpoint:

    vicuna-13b:
      base_url: http://127.0.0.1:8000/v1
      model: lmsys/vicuna-13b-v1.5     # id sent to the server (default: the name)
      api_key_env: VICUNA_API_KEY      # environment variable holding the key (optional)

A name not in the file uses the daemon's own endpoint (openai_chat_endpoint) with the name
as the model id.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from daemon.api import LmdError


@dataclass(frozen=True)
class Endpoint:
    name: str
    base_url: str
    model: str
    api_key_env: str = ""
    timeout: float = 60.0
    retries: int = 2

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
        from daemon.api import LLM

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
            import yaml

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


def resolve(name: str, settings: Any, models_file: str | Path | None = None) -> Endpoint:
    """The endpoint of model `name`: from the models file, else the daemon's endpoint."""
    from daemon.api import default_home, endpoint_from

    path = models_file or settings["elo_models_file"] or default_home() / "elo_models.yaml"
    table = load_models_file(path)
    timeout, retries = settings["llm_timeout_secs"], settings["llm_max_retries"]
    if name in table:
        entry = table[name]
        return Endpoint(
            name,
            entry["base_url"].rstrip("/"),
            str(entry.get("model") or name),
            str(entry.get("api_key_env") or ""),
            timeout,
            retries,
        )
    return Endpoint(name, endpoint_from(settings), name, "", timeout, retries)


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
    from tqdm import tqdm

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
