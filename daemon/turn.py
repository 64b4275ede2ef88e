"""One utterance, walked through: parse, resolve the mode, store, respond, store.

The user's turn is stored before any model call, so a failing backend never loses it.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from . import directives, sessions
from .errors import LmdError
from .modes import Context, record_turn

if TYPE_CHECKING:
    from .core import Daemon

log = logging.getLogger("lmd.turn")

CUT_SENTENCE = "The daemon stopped before this was finished; say it again."


@dataclass
class Outcome:
    """What the JSON reply reports about a finished turn."""

    session: str
    mode: str | None = None
    reply: str = ""
    user_prompt_id: int | None = None
    reply_prompt_id: int | None = None
    pending: dict | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict:
        return {
            "mode": self.mode,
            "reply": self.reply,
            "session": self.session,
            "prompt_ids": {"user": self.user_prompt_id, "reply": self.reply_prompt_id},
            "pending": self.pending,
            **self.extra,
        }


async def run_turn(
    daemon: Daemon,
    session_name: str,
    text: str,
    outcome: Outcome,
    streaming: bool = False,
    cwd: str | None = None,
    mode_override: str | None = None,
) -> AsyncIterator[str]:
    """Answer one utterance; yields the reply's chunks and fills `outcome`."""
    async with daemon.locks.hold(session_name):
        settings = daemon.settings()
        store = daemon.store
        now = time.time()
        session = store.session(session_name)
        if cwd:
            session.cwd = cwd
        parsed = directives.parse(text, daemon.directive_table(settings))
        if mode_override and parsed.mode is None:
            parsed = directives.Parsed(mode_override, parsed.rest, None)
        mode_name, pending = sessions.resolve(
            session,
            parsed,
            settings["default_prompt"],
            settings["end_session_after_idle_secs"],
            now,
        )
        if mode_name not in daemon.modes and mode_name != settings["default_prompt"]:
            # The session's last mode (or its pending question) belongs to a plugin that is
            # gone: answer as after a pause.
            mode_name, pending = settings["default_prompt"], None
        mode = daemon.modes.get(mode_name)
        if mode is None:
            raise LmdError(
                f"The setting default_prompt names the mode {mode_name!r}, which is not "
                f"loaded; start with a directive ({', '.join(sorted(daemon.modes))}), or "
                f"set default_prompt to one of them with `lmd settings set default_prompt "
                "...`.",
                status=503,
            )
        outcome.mode = mode_name
        session.pending = None  # handed to the mode now; it may set a new one

        def store_turn(role: str, content: str, kind: str, **kw: Any) -> int:
            return record_turn(store, settings, session_name, role, content, kind, mode_name, **kw)

        if parsed.mode is not None and not parsed.rest:
            # A directive alone switches the session's mode.
            session.mode, session.last_active = mode_name, now
            outcome.user_prompt_id = await in_thread(
                store_turn, "user", parsed.word or mode_name, "decorative"
            )
            reply = f"Switched to {mode_name} mode."
            outcome.reply_prompt_id = await in_thread(store_turn, "assistant", reply, "decorative")
            await in_thread(store.save_session, session)
            outcome.reply = reply
            yield reply
            return

        outcome.user_prompt_id = await in_thread(store_turn, "user", parsed.rest, "default")
        session.mode, session.last_active = mode_name, now
        ctx = Context(
            daemon=daemon,
            session=session,
            mode=mode_name,
            text=parsed.rest,
            raw=text,
            settings=settings,
            user_prompt_id=outcome.user_prompt_id,
            streaming=streaming,
            pending=pending,
            now=now,
        )
        chunks: list[str] = []
        finished = False
        try:
            async for chunk in mode.respond(ctx):
                if chunk:
                    chunks.append(chunk)
                    yield chunk
            finished = True
        except LmdError as e:
            _record_failure(store, outcome, store_turn, e.message, session)
            raise
        except asyncio.CancelledError:
            # Shutdown's grace ran out (or the task was cancelled): say so in the history.
            if not chunks:
                _record_failure(store, outcome, store_turn, CUT_SENTENCE, session)
            raise
        except Exception as e:
            log.exception("mode %s failed", mode_name)
            message = f"The {mode_name} mode failed unexpectedly ({type(e).__name__}); try again."
            _record_failure(store, outcome, store_turn, message, session)
            raise LmdError(message, status=500) from e
        finally:
            if not finished and chunks and outcome.reply_prompt_id is None:
                # The client went away mid-stream: keep what was said, marked as cut.
                outcome.reply_prompt_id = store_turn(
                    "assistant", "".join(chunks), ctx.reply_kind, status="partial"
                )
                store.save_session(session)
        reply = "".join(chunks)
        outcome.reply = reply
        outcome.pending = session.pending
        outcome.extra = ctx.extra
        if reply:
            outcome.reply_prompt_id = await in_thread(
                store_turn, "assistant", reply, ctx.reply_kind, meta=ctx.reply_meta or None
            )
        session.last_active = time.time()
        await in_thread(store.save_session, session)


async def in_thread(fn: Any, *args: Any, **kwargs: Any) -> Any:
    """Run a database write (and its token count) off the event loop: when another program
    holds the lock, SQLite waits up to 30 s, and only this request should wait with it."""
    return await asyncio.to_thread(fn, *args, **kwargs)


def _record_failure(store, outcome: Outcome, store_turn, message: str, session) -> None:
    store.update_prompt(outcome.user_prompt_id, status="failed")
    outcome.reply_prompt_id = store_turn("error", message, "none", status="error")
    session.last_active = time.time()
    store.save_session(session)
