"""Keeping the embedded model server alive for the daemon: start it in the background (the
daemon listens at once), let requests wait for it, restart it with one logged sentence when it
dies, give up with a sentence when it cannot stay up, and stop it with the daemon."""

from __future__ import annotations

import asyncio
import logging
import time
from pathlib import Path

from daemon.backends.embedded import EmbeddedServer, free_port
from daemon.core.errors import BackendError, LmdError

log = logging.getLogger("lmd.embedded")

# Crashes this close together, without a single answer in between, mean it will not stay up.
GIVE_UP_AFTER = 3
CRASH_WINDOW_SECS = 120.0


class Supervisor:
    """One embedded server for the daemon's life."""

    def __init__(
        self,
        model_path: Path,
        n_ctx: int,
        n_threads: int,
        alias: str,
        start_timeout: float = 120.0,
    ) -> None:
        self.server = EmbeddedServer(model_path, n_ctx=n_ctx, n_threads=n_threads, alias=alias)
        self.server.port = free_port()  # known now: clients are made before it answers
        self.start_timeout = start_timeout
        self.failed: str | None = None  # why it cannot run: every request hears this
        self.crashed: str | None = None  # the last crash, said to the turn it cut off
        self.started_at = 0.0
        self.ready_after: float | None = None  # seconds the last start took
        self.restarts = 0
        self.last_crash_words = ""
        self._ready = asyncio.Event()
        self._stopping = False
        self._task: asyncio.Task | None = None
        self._crashes: list[float] = []

    # -- what the daemon's LLM client needs ---------------------------------------------------
    @property
    def url(self) -> str:
        return self.server.url

    @property
    def key(self) -> str:
        return self.server.key

    @property
    def alias(self) -> str:
        return self.server.alias

    @property
    def model_path(self) -> Path:
        return self.server.model_path

    async def wait_ready(self) -> None:
        """Return once the server answers; BackendError (one sentence) when it cannot."""
        if self.failed:
            raise BackendError(self.failed)
        if self._ready.is_set():
            return
        try:
            await asyncio.wait_for(self._ready.wait(), self.start_timeout)
        except TimeoutError:
            raise BackendError(
                f"The embedded model is still starting after {self.start_timeout:g} seconds; "
                "try again in a moment, or run `lmd doctor`."
            ) from None
        if self.failed:
            raise BackendError(self.failed)

    def unreachable(self, url: str) -> str | None:
        """The sentence for a request to `url` that lost its connection, if we know why."""
        if self.failed:
            return self.failed
        if url != self.url:  # the server it talked to died; another one is (being) started
            why = f" ({self.last_crash_words})" if self.last_crash_words else ""
            return (
                f"The embedded model server stopped unexpectedly{why} while answering; it is "
                "running again, so try again."
            )
        if self.crashed:
            return self.crashed + " It is starting again; try again in a moment."
        if not self._stopping and not self.server.alive():
            # it died this instant: the watcher has not said so yet
            return (
                "The embedded model server stopped unexpectedly while answering. It is "
                "starting again; try again in a moment."
            )
        return None

    # -- life ------------------------------------------------------------------------------
    def start(self) -> None:
        """Start in the background; must run on the daemon's event loop thread (the server's
        parent watch follows the thread that started it)."""
        self._task = asyncio.get_running_loop().create_task(self._run())

    async def _run(self) -> None:
        while not self._stopping:
            try:
                await self._start_once()
            except LmdError as e:  # it did not come up: a taken port, a model it cannot load
                if self._give_up(e.message):
                    return
                log.warning("%s Trying again.", e.message)
                self.server.port = free_port()  # the last one may be taken
                continue
            self.crashed = None
            await asyncio.to_thread(self.server.proc.wait)
            if self._stopping:
                return
            self._ready.clear()
            self.last_crash_words = self.server.last_words()
            self.crashed = (
                f"The embedded model server stopped unexpectedly ({self.last_crash_words})."
            )
            if self._give_up(self.crashed):
                return
            log.warning("%s Starting it again.", self.crashed)
            self.restarts += 1
            self.server.port = free_port()

    def _give_up(self, last: str) -> bool:
        """Count a failure; True (and the sentence every request hears) when it is one of
        GIVE_UP_AFTER in a row within CRASH_WINDOW_SECS."""
        now = time.monotonic()
        self._crashes = [t for t in self._crashes if now - t < CRASH_WINDOW_SECS] + [now]
        if len(self._crashes) < GIVE_UP_AFTER:
            return False
        self._fail(
            f"The embedded model server failed {GIVE_UP_AFTER} times in a row; the last time: "
            f"{last.rstrip('.')}. Run `lmd doctor`, set embedded_model_path to another GGUF "
            "file, or configure another backend with openai_chat_endpoint."
        )
        return True

    async def _start_once(self) -> None:
        self.started_at = time.monotonic()
        self.server.spawn()  # on the loop's thread, on purpose (see start)
        deadline = self.started_at + self.start_timeout
        while time.monotonic() < deadline:
            if self.server.proc.poll() is not None:
                raise LmdError(
                    f"The embedded model server did not start: {self.server.last_words()}."
                )
            if await asyncio.to_thread(self.server.answers):
                self.ready_after = time.monotonic() - self.started_at
                self._ready.set()
                log.info("The embedded model is ready (%.1f s).", self.ready_after)
                return
            await asyncio.sleep(0.05)
        self.server.stop()
        raise LmdError(
            f"The embedded model server did not answer within {self.start_timeout:g} seconds: "
            f"{self.server.last_words()}."
        )

    def _fail(self, sentence: str) -> None:
        self.failed = sentence
        log.error("%s", sentence)
        self._ready.set()  # waiters wake up and hear the sentence

    async def stop(self) -> None:
        self._stopping = True
        await asyncio.to_thread(self.server.stop)
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except (asyncio.CancelledError, Exception):  # noqa: BLE001 - it is going away
                pass
