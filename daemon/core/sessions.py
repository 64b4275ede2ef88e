"""Which mode answers an utterance: directive > pending continuation > idle window > default."""

from __future__ import annotations

from daemon.core.approvals import is_answer
from daemon.core.directives import Parsed
from daemon.core.store import Session


def resolve(
    session: Session, parsed: Parsed, default_mode: str, idle_secs: float, now: float
) -> tuple[str, dict | None]:
    """Return (mode, pending continuation handed to it or None). An answer with the waiting
    question's own directive ("marat, yes") answers it; any other directive leaves it."""
    fresh = session.last_active and now - session.last_active < idle_secs
    pending = session.pending if fresh else None
    if parsed.mode is not None:
        if pending and pending.get("mode") == parsed.mode and parsed.rest:
            if is_answer(parsed.rest):
                return parsed.mode, pending
        return parsed.mode, None
    if pending:
        return pending["mode"], pending
    if session.mode and fresh:
        return session.mode, None
    return default_mode, None
