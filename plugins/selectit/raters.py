"""Choosing and building the rater a configuration asks for."""

from __future__ import annotations

from typing import Any

from daemon.api import LmdError

from .config import Config
from .openai_backend import OpenAIRater
from .transformers_backend import TransformersRater

# The spec's default foundation model (a Hub id: loadable only where it was downloaded).
DEFAULT_LOCAL_MODEL = "meta-llama/Llama-3.1-8B"


def openai_model(cfg: Config, llm: Any) -> str:
    """The model id asked for: --model / selectit_model, else the backend's own model."""
    return cfg.model or llm.model


def local_model(cfg: Config) -> str:
    """The transformers backend's model: --model / selectit_model, else the spec's default."""
    return cfg.model or DEFAULT_LOCAL_MODEL


def check_served(cfg: Config, model: str, embedded: bool) -> None:
    """Refuse a --model the backend would not answer as: the embedded model is one model,
    whatever id is sent, and its scores must not be filed under another's name."""
    if embedded and cfg.model and cfg.model != model:
        raise LmdError(
            f"The embedded model {model} answers here, not {cfg.model}: drop --model (or "
            f"selectit_model), or configure a server that serves {cfg.model}."
        )


def make_openai_rater(cfg: Config, llm: Any) -> Any:
    """An OpenAIRater on `llm`, the backend's client."""
    model = openai_model(cfg, llm)
    return OpenAIRater(llm, model, cfg.api, cfg.top_logprobs, cfg.concurrency, cfg.max_length)


def make_transformers_rater(cfg: Config, sort_by_length: bool = True) -> Any:
    return TransformersRater.load(
        local_model(cfg),
        cfg.device,
        fallback=cfg.fallback_model,
        batch_size=cfg.batch_size,
        max_length=cfg.max_length,
        sort_by_length=sort_by_length,
    )
