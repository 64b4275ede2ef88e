"""How many requests a batch job (LM_SCORE over rows or an ensemble, SelectIT, the arena's
answers and verdicts) keeps in flight at once on a backend.

The `batch_concurrency` setting decides when it is set (above 0); otherwise the backend's
capability probe does: a llama.cpp server says how many parallel slots it has (GET /props),
and more requests than slots only wait in its queue, while fewer leave slots idle. A backend
that does not say (a hosted API, vLLM) gets DEFAULT_CONCURRENCY: more than one, so a server
that batches is used, and few enough that one answering one at a time only queues them.
"""

from __future__ import annotations

from typing import Any

DEFAULT_CONCURRENCY = 4


async def batch_concurrency(llm: Any) -> int:
    """Requests to keep in flight at once on the backend behind `llm`
    (daemon.backends.llm.LLM): the `batch_concurrency` setting where it is above 0, else the
    server's slots, else DEFAULT_CONCURRENCY."""
    chosen = getattr(llm, "batch_concurrency", 0)
    if isinstance(chosen, int) and chosen > 0:
        return chosen
    try:
        caps = await llm.capabilities()
    except Exception:  # noqa: BLE001 - a probe that fails leaves the default
        return DEFAULT_CONCURRENCY
    slots = getattr(caps, "slots", 0)
    return slots if isinstance(slots, int) and slots > 0 else DEFAULT_CONCURRENCY
