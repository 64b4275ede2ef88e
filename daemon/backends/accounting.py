"""What the backend said about one turn's calls: tokens used and why the last answer ended.

A turn sets a fresh `TurnUsage` (`begin_turn`); every call of the LLM client in that task adds
to it. The OpenAI-compatible endpoint reports it as `usage` and `finish_reason`, and a reply cut
by the length limit is said to be cut, instead of passing as complete.
"""

from __future__ import annotations

from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any


@dataclass
class TurnUsage:
    prompt_tokens: int = 0
    completion_tokens: int = 0
    calls: int = 0
    measured: bool = True  # False once a call came back without the server's own counts
    finish_reason: str | None = None  # of the last call: stop, length, tool_calls, ...

    @property
    def cut(self) -> bool:
        return self.finish_reason == "length"

    def to_json(self) -> dict:
        return {
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
            "total_tokens": self.prompt_tokens + self.completion_tokens,
        }


_CURRENT: ContextVar[TurnUsage | None] = ContextVar("lmd_turn_usage", default=None)


def begin_turn() -> TurnUsage:
    """A fresh account for the calls made from here on in this task."""
    usage = TurnUsage()
    _CURRENT.set(usage)
    return usage


def current() -> TurnUsage | None:
    return _CURRENT.get()


def record(usage: Any, finish_reason: str | None, estimate: tuple[int, int] | None = None) -> None:
    """Add one call: the server's `usage` object when it sent one, else `estimate`
    (prompt, completion) counted here."""
    turn = _CURRENT.get()
    if turn is None:
        return
    turn.calls += 1
    turn.finish_reason = finish_reason
    prompt = getattr(usage, "prompt_tokens", None) if usage is not None else None
    completion = getattr(usage, "completion_tokens", None) if usage is not None else None
    if isinstance(prompt, int) and isinstance(completion, int):
        turn.prompt_tokens += prompt
        turn.completion_tokens += completion
    else:
        turn.measured = False
        if estimate is not None:
            turn.prompt_tokens += estimate[0]
            turn.completion_tokens += estimate[1]
