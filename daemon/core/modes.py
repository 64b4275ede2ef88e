"""What a mode is, and the context it is handed for one utterance.

A mode reaches the world only through its Context: settings, history, the LLM, the store,
the session. `respond(ctx)` is an async generator of text chunks; the core joins them for
plain and JSON replies and forwards them as server-sent events when the client streams.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from daemon.backends import tokens
from daemon.core import karma
from daemon.core.approvals import new_question, public

if TYPE_CHECKING:
    from daemon.backends.llm import LLM
    from daemon.core.daemon import Daemon
    from daemon.core.settings import Settings
    from daemon.core.store import Prompt, Session, Store


# Imported on first use: plugins import this module (for Mode) when `lmd --help` lists their
# commands, and the token counter and karma are not needed for that.
def _tokens():
    return tokens


def _karma():
    return karma


def record_turn(
    store: Store,
    settings: Settings,
    session: str,
    role: str,
    content: str,
    kind: str,
    mode: str | None,
    **fields: Any,
) -> int:
    """Store one turn with its token count and the karma its kind gets now."""
    return store.add_prompt(
        session,
        role,
        content,
        tokens=_tokens().count(content, settings["openai_model"]),
        karma=_karma().karma_for(kind, settings),
        kind=kind,
        mode=mode,
        **fields,
    )


@dataclass(frozen=True)
class Mode:
    """A mode: its name is its directive; aliases are extra spoken forms."""

    name: str
    respond: Callable[[Context], AsyncIterator[str]]
    description: str = ""
    aliases: tuple[str, ...] = ()
    plugin: str = ""


@dataclass
class Context:
    """Everything a mode may use for one utterance."""

    daemon: Daemon
    session: Session
    mode: str
    text: str  # the utterance without its directive
    raw: str  # the utterance as received
    settings: Settings
    user_prompt_id: int
    streaming: bool = False
    pending: dict | None = None  # this mode's pending continuation, when resumed
    now: float = field(default_factory=time.time)
    extra: dict[str, Any] = field(default_factory=dict)  # added to the JSON reply
    reply_kind: str = "default"  # karma kind of the stored reply
    reply_meta: dict[str, Any] = field(default_factory=dict)
    cwd_given: bool = False  # the client sent its working directory with this utterance

    @property
    def store(self) -> Store:
        return self.daemon.store

    @property
    def llm(self) -> LLM:
        return self.daemon.llm(self.settings)

    @property
    def state(self) -> dict:
        """This mode's own per-session state, saved after the reply."""
        return self.session.state.setdefault(self.mode, {})

    def history(self) -> list[Prompt]:
        """The session's prompts chosen by karma for the next model call, oldest first: this
        mode's own, and of the other modes only their turns (what was said and answered),
        never their protocol steps."""
        s = self.settings
        recent = self.store.recent(self.session.name, s["recent_history_limit"], self.mode)
        karma = _karma()
        return karma.select(
            recent,
            karma.Params.from_settings(s),
            time.time(),
            self.daemon.history_budget(s),
            s["min_score_to_include_prompt"],
        )

    def messages(self) -> list[dict]:
        """The karma-chosen history as OpenAI chat messages."""
        return [{"role": p.role, "content": p.content} for p in self.history()]

    def add_prompt(
        self, role: str, content: str, kind: str = "default", meta: dict | None = None
    ) -> int:
        """Store a step of this mode's own work in the session (a thought, an observation, a
        format correction): only this mode's contexts take it (`history`)."""
        return record_turn(
            self.store,
            self.settings,
            self.session.name,
            role,
            content,
            kind,
            self.mode,
            meta=meta,
            step=True,
        )

    def set_karma(self, ids: list[int], kind: str) -> None:
        self.store.set_karma(ids, kind, _karma().karma_for(kind, self.settings))

    def set_pending(self, pending: dict | None) -> None:
        """Wait for the user's next utterance (e.g. an approval); None clears it. The question
        gets its identity and remembers that this request's client heard it (a question kept
        open, with its id, keeps it: daemon.core.approvals)."""
        if pending is None:
            self.session.pending = None
        else:
            pending = {**pending, "mode": self.mode, "created_at": time.time()}
            self.session.pending = new_question(pending)
        self.extra["pending"] = public(self.session.pending)

    def keep_pending(self, pending: dict) -> None:
        """The question stays open as it was (its id, its time); this request's client has
        now heard it (an answer lmd could not use, or a question said again)."""
        self.session.pending = new_question(pending)
        self.extra["pending"] = public(self.session.pending)
