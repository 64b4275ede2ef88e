"""Keeping the embedded model server alive for the daemon: start it in the background (the
daemon listens at once), let requests wait for it, restart it with one logged sentence when it
dies, back off between tries when it keeps failing (never giving up for good: what failed may
come right, a file replaced, memory freed), and stop it with the daemon.

A request that arrives while the server is down hears one plain sentence: what happened, and
when it is tried again; the details (the server's own words) go to the log and to
`lmd doctor`, which reads `state()` through GET /backend.
"""

from __future__ import annotations

import asyncio
import logging
import time
from pathlib import Path
from typing import Any

from daemon.backends.embedded import EmbeddedServer, engine_version
from daemon.core.errors import BackendError, LmdError

log = logging.getLogger("lmd.embedded")

# After a failure, the next try waits FIRST_BACKOFF seconds, doubling with each failure in a
# row up to MAX_BACKOFF; a server that answered for STABLE_SECS resets the count.
FIRST_BACKOFF = 1.0
MAX_BACKOFF = 60.0
STABLE_SECS = 120.0


class Supervisor:
    """One embedded server for the daemon's life."""

    def __init__(
        self,
        model_path: Path,
        n_ctx: int,
        n_threads: int,
        alias: str,
        slots: int = 0,
        start_timeout: float = 120.0,
    ) -> None:
        self.server = EmbeddedServer(
            model_path, n_ctx=n_ctx, n_threads=n_threads, alias=alias, slots=slots
        )
        self.server.folder()  # its socket's path is known now: clients are made before it answers
        self.start_timeout = start_timeout
        self.down: str | None = None  # why it is not serving now: every request hears this
        self.failures = 0  # failures in a row (starts that failed, crashes)
        self.retry_at = 0.0  # when the next start is tried (monotonic), while down
        self.started_at = 0.0
        self.ready_after: float | None = None  # seconds the last start took
        self.restarts = 0
        self.last_words = ""  # the server's own words at its last failure (for the log)
        self.props: dict = {}  # what the running server said of itself (GET /props)
        self._ready = asyncio.Event()
        self._changed = asyncio.Event()  # set (and replaced) whenever an attempt ends
        self.starting = True
        self.restarting = False  # the first start after a crash of a server that answered
        self.cannot_start = False  # the last try failed in a way only the user can mend
        self._stopping = False
        self._task: asyncio.Task | None = None

    # -- what the daemon's LLM client needs ---------------------------------------------------
    @property
    def url(self) -> str:
        return self.server.url

    @property
    def uds(self) -> str | None:
        return self.server.uds

    @property
    def key(self) -> str:
        return self.server.key

    @property
    def alias(self) -> str:
        return self.server.alias

    @property
    def model_path(self) -> Path:
        return self.server.model_path

    @property
    def identity(self) -> str:
        """What its capabilities and context window are kept under: the model file, not the
        process (a restarted server is the same backend)."""
        return f"embedded:{self.model_path}"

    async def wait_ready(self) -> None:
        """Return once the server answers (waiting while it starts); BackendError (one
        sentence) while it is down between tries."""
        deadline = time.monotonic() + self.start_timeout
        while not self._ready.is_set():
            # after a crash of a server that was answering, the restart is awaited (it takes
            # a second or two); a server that could not start is said at once
            if self.down and not self.starting and not self.restarting:
                raise BackendError(self._down_sentence())
            try:
                await asyncio.wait_for(self._changed.wait(), deadline - time.monotonic())
            except TimeoutError:
                raise BackendError(
                    f"The embedded model is still starting after {self.start_timeout:g} "
                    "seconds; try again in a moment, or run `lmd doctor`."
                ) from None

    async def wait_restarted(self) -> None:
        """After a request lost its connection: wait until a server answers again (the one
        that died this instant may not have been noticed yet); BackendError while down."""
        if self._ready.is_set() and not self._stopping and not self.server.alive():
            self._ready.clear()  # its watcher says so in a moment, and starts another
        await self.wait_ready()

    def _change(self) -> None:
        changed, self._changed = self._changed, asyncio.Event()
        changed.set()

    def _down_sentence(self) -> str:
        if self.cannot_start:  # trying again will not help until the user changes something
            return self.down or ""
        wait = max(0, round(self.retry_at - time.monotonic()))
        when = f"in {wait} seconds" if wait > 1 else "now"
        return f"{self.down} I am starting it again {when}; try again then, or run `lmd doctor`."

    def unreachable(self, started: float) -> str | None:
        """The sentence for a request started at `started` (monotonic) that lost its
        connection, if we know why."""
        if self.server.started_at > started:  # the server it talked to died; another runs
            return (
                "The embedded model server stopped unexpectedly while answering; it is running "
                "again, so try again."
            )
        if self._stopping:
            return None
        if self.down or not self.server.alive():  # the watcher may not have seen it yet
            when = max(0, round(self.retry_at - time.monotonic())) if self.down else 0
            again = f"in {when} seconds" if when > 1 else "now"
            return (
                "The embedded model server stopped unexpectedly while answering; I am starting "
                f"it again {again}, so try again in a moment, or run `lmd doctor`."
            )
        return None

    def state(self) -> dict[str, Any]:
        """For `lmd doctor` (GET /backend): running, starting or down, and why."""

        if self._ready.is_set():
            status = "running"
        elif self.down:
            status = "down"
        else:
            status = "starting"
        return {
            "status": status,
            "engine": engine_version(),
            "model_file": str(self.model_path),
            "slots": self.props.get("total_slots") or self.server.n_slots,
            "context_per_slot": (self.props.get("default_generation_settings") or {}).get(
                "n_ctx", self.server.n_ctx
            ),
            "restarts": self.restarts,
            "failures_in_a_row": self.failures,
            "why_down": self.down,
            "last_words": self.last_words,
            "ready_after": self.ready_after,
        }

    # -- life ------------------------------------------------------------------------------
    def start(self) -> None:
        """Start in the background; must run on the daemon's event loop thread (the server's
        parent watch follows the thread that started it)."""
        self._task = asyncio.get_running_loop().create_task(self._run())

    async def _run(self) -> None:
        while not self._stopping:
            self.starting = True
            try:
                await self._start_once()
            except _NotSpawned as e:  # no engine, no model file: said as it is
                self.last_words = ""
                self.restarting, self.cannot_start = False, True
                await self._failed(e.message)
                continue
            except LmdError as e:  # it did not come up: a model it cannot load, ...
                self.last_words = self.server.last_words()
                self.restarting = False
                sentence, self.cannot_start = _not_started(
                    e.message, self.last_words, self.model_path
                )
                await self._failed(sentence)
                continue
            finally:
                self.starting = False
            self.down = None
            self.restarting = self.cannot_start = False
            self._change()
            ready_since = time.monotonic()
            proc = self.server.proc
            assert proc is not None  # spawned above
            await asyncio.to_thread(proc.wait)
            if self._stopping:
                return
            self._ready.clear()
            self.props = {}
            self.last_words = self.server.last_words()
            if time.monotonic() - ready_since > STABLE_SECS:
                self.failures = 0
            self.restarts += 1
            self.restarting = True
            await self._failed(
                f"The embedded model server stopped unexpectedly ({_plain(self.last_words)})."
            )

    async def _failed(self, sentence: str) -> None:
        """Say it once in the log (with the server's words), then wait before the next try,
        longer after each failure in a row."""
        self.failures += 1
        backoff = min(MAX_BACKOFF, FIRST_BACKOFF * 2 ** (self.failures - 1))
        self.retry_at = time.monotonic() + backoff
        self.down = sentence
        self.starting = False
        self._change()
        log.warning("%s Trying again in %g seconds. Its log: %s", sentence, backoff,
                    self.last_words)  # fmt: skip
        self.server.stop_process()
        await asyncio.sleep(backoff)

    async def _start_once(self) -> None:
        self.started_at = time.monotonic()
        try:
            self.server.spawn()  # on the loop's thread, on purpose (see start)
        except LmdError as e:
            raise _NotSpawned(e.message) from None
        deadline = self.started_at + self.start_timeout
        proc = self.server.proc
        assert proc is not None  # spawned above
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                raise LmdError("The embedded model server did not start.")
            if await asyncio.to_thread(self.server.answers):
                self.props = await asyncio.to_thread(self.server.props)
                self.ready_after = time.monotonic() - self.started_at
                self._ready.set()
                log.info("The embedded model is ready (%.1f s).", self.ready_after)
                return
            await asyncio.sleep(0.05)
        raise LmdError(f"The embedded model server did not answer within {self.start_timeout:g} s.")

    async def stop(self) -> None:
        self._stopping = True
        await asyncio.to_thread(self.server.stop)
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except (asyncio.CancelledError, Exception):  # noqa: BLE001 - it is going away
                pass


class _NotSpawned(LmdError):
    """The server could not even be started (no engine, no model file): the sentence says
    why and what to do."""


def _plain(words: str) -> str:
    """The server's last words, short enough for one sentence (a grammar dump is not)."""
    words = " ".join(words.split())
    return words if len(words) <= 160 else words[:157] + "..."


# What llama-server says when a model file cannot be loaded, and what to tell the user.
_CANNOT_LOAD = ("failed to load model", "error loading model", "gguf_init", "invalid magic",
                "failed to read", "unable to load model", "tensor", "corrupted")  # fmt: skip


def _not_started(message: str, words: str, model: Path) -> tuple[str, bool]:
    """The sentence for a server that did not start, and whether only the user can mend it.
    The server's own words go to the log and `lmd doctor`, not into the sentence."""
    lowered = words.lower()
    if any(mark in lowered for mark in _CANNOT_LOAD):
        return (
            f"The embedded model server could not load the model file {model.name}: it may "
            "be cut short, or not a model. Set embedded_model_path to another GGUF file; "
            "`lmd doctor` shows what the server said.",
            True,
        )
    if "chat template" in lowered:
        return (
            f"The embedded model server cannot read the chat template of {model.name}; set "
            "embedded_model_path to an instruct model's GGUF file.",
            True,
        )
    return f"{message} `lmd doctor` shows what the server said.", False
