"""How many requests a batch job keeps in flight on a backend.

LM_SCORE over a table or an ensemble, SelectIT and the arena's answer and judge steps all ask
this one function, so they send as many requests at once as the backend serves well.
"""

from __future__ import annotations

from typing import Any

# Until the capability probe learns how many requests the server answers in parallel (its
# slots), batch jobs keep this many in flight: more than one, so a server that batches is
# used, and few enough that a server answering one at a time only queues them.
UNLEARNT = 4


async def batch_concurrency(llm: Any) -> int:
    """Requests a batch job sends at once to `llm`'s backend: the `batch_concurrency`
    setting where it is above 0, else what the backend serves in parallel (4 until the
    probe knows)."""
    chosen = getattr(llm, "batch_concurrency", 0) or 0
    return chosen if chosen > 0 else UNLEARNT
