"""Run one command for marat and learn where it left the working directory.

The core runner gives each command a fresh bash; to make `cd` persist we ask bash to write its
final directory to a temp file from an EXIT trap (which also fires after `exit 3` or an error),
so a command that floods its output cannot push the answer out of view.
"""

from __future__ import annotations

import os
import shlex
import tempfile
from dataclasses import dataclass
from pathlib import Path

from daemon.runner import CommandResult, run_command, usable_cwd

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


async def execute(command: str, cwd: str, timeout: float, max_chars: int) -> Execution:
    """Run `command` with bash in `cwd`; never raises for the command's own failures."""
    fd, cwd_file = tempfile.mkstemp(prefix="lmd-marat-cwd-")
    os.close(fd)
    script = f"trap 'pwd > {shlex.quote(cwd_file)} 2>/dev/null' EXIT\n{command}"
    try:
        result = await run_command(script, cwd, timeout, max_chars, env={**os.environ, **QUIET_ENV})
        result.command = command
        try:
            after = Path(cwd_file).read_text(encoding="utf-8", errors="replace").strip()
        except OSError:
            after = ""
    finally:
        try:
            os.unlink(cwd_file)
        except OSError:
            pass
    # A timed-out command was killed before its trap ran: stay where we were.
    if not after or not Path(after).is_absolute():
        after = cwd
    note = None
    if not Path(after).is_dir():
        after, note = usable_cwd(after)
    return Execution(result, after, note)
