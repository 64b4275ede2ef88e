"""Choosing and building the rater a configuration asks for."""

from __future__ import annotations

from typing import Any

from .config import Config

# The spec's default foundation model (a Hub id: loadable only where it was downloaded).
DEFAULT_LOCAL_MODEL = "meta-llama/Llama-3.1-8B"


def openai_model(cfg: Config, settings: Any) -> str:
    return cfg.model or settings["openai_model"]


def local_model(cfg: Config) -> str:
    """The transformers backend's model: --model / selectit_model, else the spec's default."""
    return cfg.model or DEFAULT_LOCAL_MODEL


def make_openai_rater(cfg: Config, settings: Any, llm: Any = None) -> Any:
    """An OpenAIRater on the daemon's backend (a fresh client when `llm` is None)."""
    from daemon.api import LLM, api_key, endpoint_from

    from .openai_backend import OpenAIRater

    model = openai_model(cfg, settings)
    if llm is None:
        llm = LLM(
            endpoint_from(settings),
            api_key(),
            settings["llm_timeout_secs"],
            settings["llm_max_retries"],
            model,
        )
    return OpenAIRater(llm, model, cfg.api, cfg.top_logprobs, cfg.concurrency, cfg.max_length)


def make_transformers_rater(cfg: Config, sort_by_length: bool = True) -> Any:
    from .transformers_backend import TransformersRater

    return TransformersRater.load(
        local_model(cfg),
        cfg.device,
        fallback=cfg.fallback_model,
        batch_size=cfg.batch_size,
        max_length=cfg.max_length,
        sort_by_length=sort_by_length,
    )
