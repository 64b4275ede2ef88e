"""Run one command for marat and learn where it left the working directory.

The core runner gives each command a fresh bash; to make `cd` persist we ask bash to write its
final directory to an inherited pipe from an EXIT trap (which also fires after `exit 3` or an
error), so a command that floods its output cannot push the answer out of view. A pipe, not a
temp file: inside the sandbox /tmp is private and nothing else is writable.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from daemon.api import CommandResult, run_command, usable_cwd

if TYPE_CHECKING:
    from daemon.api import Policy

# No command gets a terminal: pagers and editors must not wait for one.
QUIET_ENV = {
    "PAGER": "cat",
    "GIT_PAGER": "cat",
    "GIT_EDITOR": "true",
    "GIT_TERMINAL_PROMPT": "0",
    "TERM": "dumb",
}


@dataclass
class Execution:
    result: CommandResult
    cwd_after: str  # where the next command of the session starts
    note: str | None = None  # e.g. "the directory vanished, I am in its parent"


def start_dir(session_cwd: str | None, configured: str) -> tuple[str, str | None]:
    """The directory to run in: the session's, else the configured start, else home."""
    wanted = session_cwd or os.path.expanduser(configured or "~")
    if not session_cwd and not Path(wanted).is_dir():
        wanted = str(Path.home())
    return usable_cwd(wanted)


async def execute(
    command: str,
    cwd: str,
    timeout: float,
    max_chars: int,
    *,
    sandbox: Policy | None = None,
    secrets: Sequence[str] = (),
    passthrough: Sequence[str] = (),
    keep_staged: bool = False,
) -> Execution:
    """Run `command` with bash in `cwd` (in the sandbox when a policy is given); never raises
    for the command's own failures."""
    read, write = os.pipe()
    try:
        result = await run_command(
            command,
            cwd,
            timeout,
            max_chars,
            env=QUIET_ENV,
            sandbox=sandbox,
            secrets=secrets,
            passthrough=passthrough,
            setup=f"trap 'pwd >&{write} 2>/dev/null' EXIT",
            pass_fds=(write,),
            keep_staged=keep_staged,
        )
    finally:
        os.close(write)
        after = _last_line(read)
        os.close(read)
    # A timed-out command was killed before its trap ran: stay where we were.
    if result.timed_out or not after or not Path(after).is_absolute():
        after = cwd
    note = None
    if not Path(after).is_dir():
        after, note = usable_cwd(after)
    return Execution(result, after, note)


def _last_line(fd: int) -> str:
    """The last line written to the pipe (the trap's), without waiting for more."""
    os.set_blocking(fd, False)
    data = b""
    while len(data) < 65536:
        try:
            chunk = os.read(fd, 65536)
        except BlockingIOError:
            break
        if not chunk:
            break
        data += chunk
    lines = data.decode("utf-8", "replace").splitlines()
    return lines[-1].strip() if lines else ""
