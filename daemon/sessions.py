"""Which mode answers an utterance: directive > pending continuation > idle window > default."""

from __future__ import annotations

from daemon.directives import Parsed
from daemon.store import Session


def resolve(
    session: Session, parsed: Parsed, default_mode: str, idle_secs: float, now: float
) -> tuple[str, dict | None]:
    """Return (mode, pending continuation handed to it or None)."""
    fresh = session.last_active and now - session.last_active < idle_secs
    if parsed.mode is not None:
        return parsed.mode, None
    if session.pending and fresh:
        return session.pending["mode"], session.pending
    if session.mode and fresh:
        return session.mode, None
    return default_mode, None
