"""One utterance, walked through: parse, resolve the mode, store, respond, store.

The user's turn is stored before any model call, so a failing backend never loses it.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncGenerator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from daemon.backends.accounting import TurnUsage, begin_turn
from daemon.core import approvals, directives, sessions
from daemon.core.errors import BackendError, LmdError
from daemon.core.modes import Context, record_turn
from daemon.core.speak import unmark
from daemon.spoken import answers

if TYPE_CHECKING:
    from daemon.core.daemon import Daemon

log = logging.getLogger("lmd.turn")

CUT_SENTENCE = "The daemon stopped before this was finished; say it again."
GONE_SENTENCE = "The client closed the connection before the answer began, so I stopped it."
LENGTH_NOTE = (
    "\n\n(The answer was cut off here: it reached the model's length limit. Say "
    '"go on" to hear more.)'
)
# A model call that came back without a word (end of sequence first, or the whole length limit
# spent on hidden reasoning) is said, not passed off as a silent reply.
EMPTY_SENTENCE = (
    "The language model ended its answer at once, without a word; say it again, or in other words."
)
EMPTY_CUT_SENTENCE = (
    "The language model reached its length limit without a word of answer; raise "
    "reply_max_tokens, or ask for something shorter."
)


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
    usage: TurnUsage = field(default_factory=TurnUsage)  # what the backend counted
    gone: bool = False  # the client closed its connection: the turn was cancelled

    @property
    def question(self) -> str | None:
        """The id of the question this reply asks (sent as X-Lmd-Question), if any."""
        return (self.pending or {}).get("id")

    def to_json(self) -> dict:
        out = {
            "mode": self.mode,
            "reply": self.reply,
            "session": self.session,
            "prompt_ids": {"user": self.user_prompt_id, "reply": self.reply_prompt_id},
            "pending": approvals.public(self.pending),
            **self.extra,
        }
        if self.usage.cut:
            out["finish_reason"] = "length"
        return out


async def run_turn(
    daemon: Daemon,
    session_name: str,
    text: str,
    outcome: Outcome,
    streaming: bool = False,
    cwd: str | None = None,
    mode_override: str | None = None,
    say_cut: bool = True,
) -> AsyncGenerator[str, None]:
    """Answer one utterance; yields the reply's chunks and fills `outcome`. With
    `say_cut`, a reply the backend cut at its length limit ends with a sentence saying so, and a
    model answer without a word is a failure that says so (the OpenAI endpoint passes both
    through as the backend sent them). An agent's request speaks in a session of its own."""
    session_name = outcome.session = approvals.own_session(session_name)
    async with daemon.locks.hold(session_name):
        outcome.usage = begin_turn()
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
        unasked = answers.nothing_waiting(
            parsed.rest, session, mode_name, parsed.mode is not None, pending,
            settings["end_session_after_idle_secs"], now, store,
        )  # fmt: skip

        def store_turn(role: str, content: str, kind: str, **kw: Any) -> int:
            return record_turn(store, settings, session_name, role, content, kind, mode_name, **kw)

        unheard = pending is not None and not approvals.heard(pending)
        if pending is not None and unheard and approvals.is_answer(parsed.rest):
            # An answer from a client that did not hear this question (another client's, or
            # one that changed since): it answers nothing; the question is said to it.
            yield await _ask_again(store, session, pending, parsed.rest, outcome, store_turn)
            return
        session.pending = None  # handed to the mode now; it may set a new one

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

        if unasked is not None:
            # A bare yes or no (or "yes, always here") that no question waits for: said so,
            # in any mode, without a model call.
            outcome.user_prompt_id = await in_thread(store_turn, "user", parsed.rest, "decorative")
            outcome.reply_prompt_id = await in_thread(
                store_turn, "assistant", unasked, "decorative"
            )
            session.last_active = now
            await in_thread(store.save_session, session)
            outcome.reply = unasked
            yield unasked
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
            cwd_given=bool(cwd),
        )
        chunks: list[str] = []
        finished = False

        def keep_cut(why: str) -> None:
            """What was said before the answer stopped, kept marked as cut and why."""
            if chunks and outcome.reply_prompt_id is None:
                outcome.reply_prompt_id = store_turn(
                    "assistant",
                    unmark("".join(chunks)),
                    ctx.reply_kind,
                    status="cut",
                    meta={**(ctx.reply_meta or {}), "cut_by": why},
                )
                store.save_session(session)

        try:
            async for chunk in mode.respond(ctx):
                if chunk:
                    chunks.append(chunk)
                    yield chunk
            if say_cut and not chunks and outcome.usage.calls:
                raise BackendError(EMPTY_CUT_SENTENCE if outcome.usage.cut else EMPTY_SENTENCE)
            finished = True
        except LmdError as e:
            keep_cut("error")  # the words before a failure are not lost with it
            _record_failure(store, outcome, store_turn, e.message, session, not chunks)
            raise
        except asyncio.CancelledError:
            # The client closed its connection (or shutdown's grace ran out): what was said
            # is kept, marked as cut; an answer not begun is said to have stopped.
            gone = outcome.gone or not daemon.stopping
            if session.pending is not None:  # asked, but the client may not have heard it
                session.pending = approvals.not_heard(session.pending)
            if chunks:
                keep_cut("client" if gone else "shutdown")
            else:
                sentence = GONE_SENTENCE if gone else CUT_SENTENCE
                _record_failure(store, outcome, store_turn, sentence, session)
            raise
        except Exception as e:
            log.exception("mode %s failed", mode_name)
            message = f"The {mode_name} mode failed unexpectedly ({type(e).__name__}); try again."
            keep_cut("error")
            _record_failure(store, outcome, store_turn, message, session, not chunks)
            raise LmdError(message, status=500) from e
        finally:
            if not finished:
                keep_cut("client")  # the generator closed early (its reader went away)
        status = "ok"
        if outcome.usage.cut:
            # The model stopped at the length limit, not because it was done: say so, and
            # keep it marked (a later "go on" has the cut reply in its context).
            status = "cut"
            if say_cut and chunks:
                chunks.append(LENGTH_NOTE)
                yield LENGTH_NOTE
        reply = unmark("".join(chunks))
        outcome.reply = reply
        if session.pending is not None and "asked" not in session.pending:
            # what the client heard, marks and all, to say again to a client that did not
            session.pending["asked"] = "".join(chunks)
        outcome.pending = session.pending
        outcome.extra = ctx.extra
        if reply:
            outcome.reply_prompt_id = await in_thread(
                store_turn,
                "assistant",
                reply,
                ctx.reply_kind,
                meta=ctx.reply_meta or None,
                status=status,
            )
        session.last_active = time.time()
        await in_thread(store.save_session, session)


async def in_thread(fn: Any, *args: Any, **kwargs: Any) -> Any:
    """Run a database write (and its token count) off the event loop: when another program
    holds the lock, SQLite waits up to 30 s, and only this request should wait with it."""
    return await asyncio.to_thread(fn, *args, **kwargs)


async def _ask_again(store, session, pending: dict, said: str, outcome: Outcome, store_turn) -> str:
    """Say the waiting question to a client that answered it unheard; from now on it has
    heard it (its next yes answers it), and the question stays as it was."""
    reply = approvals.not_heard_reply(pending)
    session.pending = approvals.new_question(pending)
    session.last_active = time.time()
    outcome.user_prompt_id = await in_thread(store_turn, "user", said, "decorative")
    outcome.reply_prompt_id = await in_thread(store_turn, "assistant", unmark(reply), "decorative")
    await in_thread(store.save_session, session)
    outcome.reply, outcome.pending = unmark(reply), session.pending
    return reply


def _record_failure(
    store, outcome: Outcome, store_turn, message: str, session, failed: bool = True
) -> None:
    """The error row; with `failed`, the utterance is marked failed (out of later contexts:
    nothing of its answer was said)."""
    if failed:
        store.update_prompt(outcome.user_prompt_id, status="failed")
    reply_id = store_turn("error", message, "none", status="error")
    if outcome.reply_prompt_id is None:
        outcome.reply_prompt_id = reply_id
    session.last_active = time.time()
    store.save_session(session)


def working_directory(cwd: str | None) -> str | None:
    """The client's working directory (X-Cwd or ?cwd=): an absolute path, or None."""
    if cwd and ("\x00" in cwd or not Path(cwd).is_absolute()):
        raise LmdError("The working directory must be an absolute path.")
    return cwd or None
