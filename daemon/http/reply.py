"""The one reply path (`TurnReply`) that /v1 and /v1/chat/completions render in their own
formats: a turn answered whole or streamed, cut when its client goes away or lmd stops."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterable
from typing import TYPE_CHECKING, Any, Protocol

from daemon.core.errors import LmdError
from daemon.core.speak import speak_stream, speakable, unmark
from daemon.core.turn import Outcome, run_turn, working_directory

if TYPE_CHECKING:
    from daemon.core.daemon import Daemon

SHUTDOWN_SENTENCE = "lmd is shutting down and stopped this request; say it again once it is back."


def _current_task() -> asyncio.Task:
    """The task answering this request (a reply is always awaited inside one)."""
    task = asyncio.current_task()
    if task is None:
        raise RuntimeError("a reply is answered inside a task")
    return task


class ClientGone(LmdError):
    """The client closed its connection: the turn was stopped (the answer goes nowhere)."""

    status = 499

    def __init__(self) -> None:
        super().__init__("The client closed the connection, so I stopped the answer.")


class EventFormat(Protocol):
    """How one route writes a streamed reply as server-sent events."""

    def opening(self, first: str | None) -> Iterable[str]:
        """The events for the first chunk (None when the reply is empty)."""

    def chunk(self, text: str) -> str:
        """The event for each further chunk."""

    def closing(self, said: str) -> Iterable[str]:
        """The events after the last chunk; `said` is the whole reply."""

    def error(self, e: LmdError) -> str:
        """The event for a failure once the response has started."""


class TurnReply:
    """One turn being answered, whole or streamed: the reply path /v1 and
    /v1/chat/completions share, each rendering it in its own format.

    A whole reply is tracked as in flight, so a shutdown that cuts it still answers with a
    sentence. A stream pulls its first chunk before the response starts (`start`), so an early
    failure gets a real HTTP status. With `speak`, markdown is stripped for text-to-speech.
    """

    def __init__(
        self,
        daemon: Daemon,
        session: str,
        text: str,
        *,
        stream: bool = False,
        speak: bool = False,
        cwd: str | None = None,
        mode: str | None = None,
        say_cut: bool = True,
        receive: Any = None,
    ) -> None:
        self.daemon = daemon
        self.outcome = Outcome(session=session)
        self.speak = speak
        self.first: str | None = None
        self.receive = receive  # the request's ASGI receive: it says when the client is gone
        chunks = run_turn(
            daemon, session, text, self.outcome, stream, working_directory(cwd), mode, say_cut
        )
        self.chunks = speak_stream(chunks) if speak and stream else chunks

    async def whole(self) -> str:
        """The whole reply; with `speak`, also reported to JSON clients as `speech`."""
        daemon = self.daemon
        task = _current_task()
        daemon.inflight.add(task)
        watch = self._watch(task)
        try:
            reply = "".join([c async for c in self.chunks])
        except asyncio.CancelledError:
            if self.outcome.gone:
                task.uncancel()  # our own cut: the client is gone, nobody hears the answer
                raise ClientGone() from None
            if not daemon.stopping:
                raise
            task.uncancel()  # our own cut (see Daemon.stop_inflight): answer with a sentence
            raise LmdError(SHUTDOWN_SENTENCE, status=503) from None
        finally:
            if watch is not None:
                watch.cancel()
            daemon.inflight.discard(task)
        if self.speak:
            reply = speakable(reply)  # verbatim spans (a command to approve) pass untouched
            self.outcome.extra = {**self.outcome.extra, "speech": reply}
        return reply  # with its verbatim marks for unfence(); JSON reads outcome.reply

    async def start(self) -> str | None:
        """Pull the first chunk (None for an empty reply) before the response begins. Once
        it has begun, the streaming response itself stops the turn when the client leaves."""
        task = _current_task()
        watch = self._watch(task)
        try:
            self.first = await anext(self.chunks, None)
        except asyncio.CancelledError:
            if not self.outcome.gone:
                raise
            task.uncancel()
            raise ClientGone() from None
        finally:
            if watch is not None:
                watch.cancel()
        return self.first

    def _watch(self, task: asyncio.Task | None) -> asyncio.Task | None:
        """A task that cancels `task` (the turn) when the client closes its connection: an
        answer nobody waits for must not keep the model, or the session, busy."""
        if self.receive is None or task is None:
            return None

        async def watch() -> None:
            while (await self.receive())["type"] != "http.disconnect":
                pass  # the body was read whole before the turn: nothing else can come
            self.outcome.gone = True
            task.cancel()

        return asyncio.create_task(watch())

    async def events(self, form: EventFormat) -> AsyncIterator[str]:
        """The started stream as server-sent events in `form`, ending with [DONE]."""
        said = [self.first or ""]
        try:
            for event in form.opening(None if self.first is None else unmark(self.first)):
                yield event
            async for chunk in self.chunks:
                said.append(chunk)
                yield form.chunk(unmark(chunk))
            for event in form.closing(unmark("".join(said))):
                yield event
        except LmdError as e:
            yield form.error(e)
        finally:
            await self.chunks.aclose()
        yield "data: [DONE]\n\n"
