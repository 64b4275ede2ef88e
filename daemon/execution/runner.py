"""Run a bash command for a mode: own process group, no terminal or stdin, an allowlisted
environment, a timeout that kills the whole group, output cut on a character boundary with a
visible marker and cleaned of secrets, and (when a policy is given) the OS sandbox of
`daemon.execution.sandbox`."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

from daemon.backends.llm import api_key
from daemon.execution import sandbox as sandboxing
from daemon.execution.sandbox import memory
from daemon.execution.sandbox.staging import discard, new_stage
from daemon.execution.writes import Settled, settle

if TYPE_CHECKING:
    from daemon.execution.sandbox import Policy

# Read at most this many bytes per character we keep, so a flood cannot fill memory.
_BYTES_PER_CHAR = 4
_GRACE_SECS = 0.3  # after bash exits, how long background jobs may hold the pipe open
REDACTED = "[redacted]"
_MIN_SECRET = 8  # shorter values would mangle ordinary output; such a token is weak anyway


@dataclass
class CommandResult:
    """How one command ran: exit code, output (cut, secrets redacted), duration, timeout."""

    command: str
    cwd: str
    exit_code: int | None  # None when killed by the timeout
    output: str  # stdout and stderr interleaved, decoded, possibly cut
    duration: float
    timed_out: bool = False
    truncated: bool = False
    sandbox: str = sandboxing.NONE  # read-only | workspace-write | none
    blocked: str | None = None  # why the sandbox (probably) stopped it
    redacted: bool = False  # a secret was cut out of the output
    staged: Settled | None = None  # a command that may write: what it wrote, and what of it

    @property
    def removed(self) -> tuple[str, ...]:
        """What it wrote that lmd did not apply and did not keep for a yes (absolute places)."""
        if self.staged is None or self.staged.dir is not None:
            return ()
        roots = dict.fromkeys(c.root for c in (*self.staged.held, *self.staged.dropped))
        return tuple(os.path.join(self.staged.tree, r) for r in roots)

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


def redact(text: str, secrets: Sequence[str]) -> tuple[str, bool]:
    """Replace every secret in `text`, and a secret's beginning where the text was cut."""
    found = False
    for secret in sorted(
        {s for s in secrets if s and len(s) >= _MIN_SECRET}, key=len, reverse=True
    ):
        if secret in text:
            text, found = text.replace(secret, REDACTED), True
        for k in range(len(secret) - 1, _MIN_SECRET - 1, -1):
            if text.endswith(secret[:k]):
                text, found = text[:-k] + REDACTED, True
                break
    return text, found


def environment_secrets() -> list[str]:
    """Secrets the daemon holds in its own environment (never passed to a command)."""
    return [os.environ[n] for n in sandboxing.NEVER_PASSED if os.environ.get(n)]


def daemon_secrets(daemon: Any) -> list[str]:
    """The daemon's token and the configured API key: redacted from every command's output."""
    found = environment_secrets()
    token = getattr(daemon, "token", None)
    if token:
        found.append(str(token))
    key = api_key()
    if key and key != "sk-no-key-needed":
        found.append(key)
    return found


def usable_cwd(cwd: str | None) -> tuple[str, str | None]:
    """The directory to run in; when it vanished, its nearest existing parent and a note."""
    path = Path(cwd or Path.home()).expanduser()
    if path.is_dir():
        return str(path), None
    probe = path
    while not probe.is_dir():
        probe = probe.parent
    return str(probe), f"The directory {path} no longer exists; I am in {probe} instead."


@lru_cache(maxsize=1)
def _reaper_source() -> str:
    return (Path(__file__).with_name("reaper.py")).read_text(encoding="utf-8")


def _kill_group(proc: asyncio.subprocess.Process) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


async def _end(proc: asyncio.subprocess.Process) -> None:
    """End a command that must stop now: the reaper first (SIGTERM: it kills the whole tree,
    setsid'd processes too, then exits), then its process group for good measure."""
    if proc.returncode is None:
        try:
            proc.send_signal(signal.SIGTERM)
            await asyncio.wait_for(proc.wait(), 2.0)
        except (ProcessLookupError, TimeoutError):
            pass
    _kill_group(proc)
    await proc.wait()


async def run_command(
    command: str,
    cwd: str,
    timeout: float,
    max_chars: int,
    env: dict | None = None,
    *,
    sandbox: Policy | None = None,
    passthrough: Sequence[str] = (),
    secrets: Sequence[str] = (),
    setup: str = "",
    pass_fds: Sequence[int] = (),
    keep_staged: bool = False,
) -> CommandResult:
    """Run `command` with bash in `cwd`; never raises for the command's own failures.

    `env` adds variables to the allowlisted environment (`sandbox.command_env`), `passthrough`
    names more to copy from the daemon's; `secrets` are cut out of the output (the daemon's
    API key and token always are). `setup` is a bash line run before the command (e.g. a
    trap), `pass_fds` are inherited. With `sandbox` the command runs inside the OS sandbox
    with its limits; without it, unsandboxed (the user approved it, or chose no sandbox).
    A sandbox that may write a tree stages the command's writes and applies what the rule
    allows (daemon/execution/writes.py); `keep_staged` keeps the stage (for a yes to what was
    held, and for undo: the caller discards it), else it goes at once."""
    start = time.monotonic()
    variables = sandboxing.command_env(cwd, env, passthrough)
    stage = None
    if sandbox is not None and sandbox.writable:
        try:
            stage = await asyncio.to_thread(new_stage, sandbox.writable[0], sandbox.stage_root)
        except OSError as e:
            return _not_run(command, cwd, sandbox, f"lmd could not make a staging folder ({e})")
    prepared = None
    if sandbox is not None:
        script = sandboxing.wrap_script(sandbox, command, setup)
        prepared = sandboxing.prepare(sandbox, ["bash", "-c", script], stage=stage)
        variables.update(prepared.env)
        argv = prepared.argv
        fds = (*pass_fds, *prepared.pass_fds)
    else:
        script = f"{setup}\n{command}" if setup else command
        # under the reaper: what the command leaves behind (setsid, nohup, double forks)
        # ends with it, as the sandbox's own pid namespace ends everything inside it
        argv = [sys.executable, "-I", "-S", "-c", _reaper_source(), "bash", "-c", script]
        fds = tuple(pass_fds)
    try:
        result = await _run(argv, cwd, timeout, max_chars, variables, fds, prepared)
    except asyncio.CancelledError:
        if stage is not None:  # cut short (shutdown): nothing of it is applied
            discard(stage.dir)
        raise
    finally:
        if prepared is not None:
            prepared.close()  # nothing of the command survives it, even as root
    text, overflow, exit_code, timed_out = result
    if prepared is not None and prepared.memory_ended and sandbox is not None:
        text += (
            f"\n[lmd ended it: together its processes held more than "
            f"{sandbox.limits.memory_mb} MiB, the sandbox's memory limit]"
        )
    settled = None
    if stage is not None and sandbox is not None:
        # the whole sandbox has ended (its pid namespace, hence its mounts): what it wrote is
        # in the stage, all of it; apply what the rule allows (in a thread: it reads the disk)
        settled = await asyncio.to_thread(settle, stage, sandbox.home, keep_staged)
        said = settled.summary()
        if said:
            text += "\n" + said
    text, redacted = redact(text, [*environment_secrets(), *secrets])
    output, truncated = cut(text, max_chars, overflow)
    level = sandbox.level if sandbox is not None else sandboxing.NONE
    blocked = None
    if prepared is not None and prepared.memory_ended and sandbox is not None:
        blocked = f"it hit the memory limit ({sandbox.limits.memory_mb} MiB for the whole command)"
    elif sandbox is not None and not timed_out:
        blocked = sandboxing.blocked_reason(sandbox, command, text, exit_code)
    return CommandResult(
        command=command,
        cwd=cwd,
        exit_code=exit_code,
        output=output,
        duration=time.monotonic() - start,
        timed_out=timed_out,
        truncated=truncated,
        sandbox=level,
        blocked=blocked,
        redacted=redacted,
        staged=settled,
    )


def _not_run(command: str, cwd: str, policy: Policy, why: str) -> CommandResult:
    """A command that could not start in its sandbox: it did not run, and says why."""
    return CommandResult(
        command=command,
        cwd=cwd,
        exit_code=None,
        output=f"{why}; the command did not run.",
        duration=0.0,
        sandbox=policy.level,
        blocked=why,
    )


async def _run(
    argv: list[str],
    cwd: str,
    timeout: float,
    max_chars: int,
    env: dict,
    pass_fds: tuple[int, ...],
    prepared: Any,
) -> tuple[str, int, int | None, bool]:
    """(decoded output, bytes not read, exit code or None, timed out)."""
    proc = await asyncio.create_subprocess_exec(
        *argv,
        cwd=cwd,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
        start_new_session=True,  # own process group, no controlling terminal
        env=env,
        pass_fds=pass_fds,
    )
    if prepared is not None:
        prepared.started()
    watcher = None
    if prepared is not None and prepared.watch_mb:
        # no memory cgroup here: lmd bounds the whole command's memory by watching it
        watcher = asyncio.create_task(memory.watch(proc, prepared.watch_mb, prepared.ended))
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
        await _end(proc)
    except asyncio.CancelledError:
        # cut (shutdown): the reaper ends the tree now, the group goes a moment later
        try:
            proc.send_signal(signal.SIGTERM)
        except ProcessLookupError:
            pass
        asyncio.get_running_loop().call_later(2.0, _kill_group, proc)
        reader.cancel()
        raise
    finally:
        if watcher is not None:
            watcher.cancel()
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
    return text, overflow, None if timed_out else proc.returncode, timed_out
