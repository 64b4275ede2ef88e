"""Run a bash command for a mode: own process group, no terminal or stdin, a timeout that
kills the whole group, and output cut on a character boundary with a visible marker."""

from __future__ import annotations

import asyncio
import os
import signal
import time
from dataclasses import dataclass
from pathlib import Path

# Read at most this many bytes per character we keep, so a flood cannot fill memory.
_BYTES_PER_CHAR = 4
_GRACE_SECS = 0.3  # after bash exits, how long background jobs may hold the pipe open


@dataclass
class CommandResult:
    command: str
    cwd: str
    exit_code: int | None  # None when killed by the timeout
    output: str  # stdout and stderr interleaved, decoded, possibly cut
    duration: float
    timed_out: bool = False
    truncated: bool = False

    def describe(self) -> str:
        """An observation for the model and the user."""
        if self.timed_out:
            status = f"timed out after {self.duration:.0f} seconds and was killed"
        else:
            status = f"exit code {self.exit_code}"
        body = self.output if self.output.strip() else "(no output)"
        return f"{status}\n{body}"


def cut(text: str, limit: int, unread_bytes: int = 0) -> tuple[str, bool]:
    """Keep at most `limit` characters and say how much was cut (bytes never decoded too)."""
    if len(text) <= limit and not unread_bytes:
        return text, False
    parts = []
    if len(text) > limit:
        parts.append(f"{len(text) - limit} more characters")
    if unread_bytes:
        parts.append(f"{unread_bytes} more bytes")
    return text[:limit] + f"\n[output cut: {' and '.join(parts)}]", True


def usable_cwd(cwd: str | None) -> tuple[str, str | None]:
    """The directory to run in; when it vanished, its nearest existing parent and a note."""
    path = Path(cwd or Path.home()).expanduser()
    if path.is_dir():
        return str(path), None
    probe = path
    while not probe.is_dir():
        probe = probe.parent
    return str(probe), f"The directory {path} no longer exists; I am in {probe} instead."


def _kill_group(proc: asyncio.subprocess.Process) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


async def run_command(
    command: str,
    cwd: str,
    timeout: float,
    max_chars: int,
    env: dict | None = None,
) -> CommandResult:
    """Run `command` with bash in `cwd`; never raises for the command's own failures."""
    start = time.monotonic()
    proc = await asyncio.create_subprocess_exec(
        "bash",
        "-c",
        command,
        cwd=cwd,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
        start_new_session=True,  # own process group, no controlling terminal
        env=env,
    )
    cap = max_chars * _BYTES_PER_CHAR + _BYTES_PER_CHAR
    chunks: list[bytes] = []
    size = 0
    overflow = 0

    async def read_all() -> None:
        nonlocal size, overflow
        assert proc.stdout is not None
        while True:
            data = await proc.stdout.read(65536)
            if not data:
                return
            if size < cap:
                keep = data[: cap - size]
                chunks.append(keep)
                size += len(keep)
                overflow += len(data) - len(keep)
            else:
                overflow += len(data)  # keep draining so the command never blocks on a full pipe

    reader = asyncio.create_task(read_all())
    timed_out = False
    try:
        await asyncio.wait_for(proc.wait(), timeout)
    except TimeoutError:
        timed_out = True
        _kill_group(proc)
        await proc.wait()
    except asyncio.CancelledError:
        _kill_group(proc)
        reader.cancel()
        raise
    try:
        await asyncio.wait_for(asyncio.shield(reader), _GRACE_SECS)
    except TimeoutError:
        pass
    # Background jobs the command left do not outlive it: nothing to babysit.
    _kill_group(proc)
    if not reader.done():
        try:
            await asyncio.wait_for(reader, 1.0)
        except (TimeoutError, asyncio.CancelledError):
            reader.cancel()
    text = b"".join(chunks).decode("utf-8", errors="replace").replace("\x00", "\\0")
    output, truncated = cut(text, max_chars, overflow)
    return CommandResult(
        command=command,
        cwd=cwd,
        exit_code=None if timed_out else proc.returncode,
        output=output,
        duration=time.monotonic() - start,
        timed_out=timed_out,
        truncated=truncated,
    )
