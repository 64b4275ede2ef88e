"""Run a command and end its whole process tree with it: the program behind approved
(unsandboxed) commands, run as `python -I -S -c <this file> argv...`.

It marks itself a child subreaper (Linux), so every process the command leaves behind, even
one that called setsid or double-forked, becomes its child once orphaned; when the command
exits, or on SIGTERM (the runner's timeout), it kills them all, waits for them, and exits with
the command's status. Standard library only, no imports from lmd: it runs with -I -S.
"""

import os
import signal
import sys

PR_SET_CHILD_SUBREAPER = 36


def _subreaper() -> None:
    try:
        import ctypes  # inside the try: a Python built without ctypes still reaps by group

        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    except (OSError, AttributeError):
        pass  # not Linux: the runner's process-group kill is all there is


def _children(me: int) -> list[int]:
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as f:
                stat = f.read()
        except OSError:
            continue
        fields = stat[stat.rfind(b")") + 2 :].split()
        if len(fields) > 1 and int(fields[1]) == me:
            found.append(int(entry))
    return found


def _end_all() -> None:
    """Kill every process left under us until none is (orphans keep arriving as their
    parents die), reaping each."""
    me = os.getpid()
    while True:
        left = _children(me)
        for pid in left:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        try:
            while os.waitpid(-1, os.WNOHANG)[0]:
                pass
        except ChildProcessError:
            return
        if not left and not _children(me):
            try:
                os.waitpid(-1, 0)
            except ChildProcessError:
                return


def main(argv: list[str]) -> int:
    _subreaper()
    stop = {"now": False}

    def on_term(signum, frame):  # the runner's timeout: end everything
        stop["now"] = True
        _end_all()
        os._exit(128 + signal.SIGTERM)

    signal.signal(signal.SIGTERM, on_term)
    child = os.fork()
    if child == 0:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        try:
            os.execvp(argv[0], argv)
        finally:
            os._exit(127)
    code = 0
    while True:
        try:
            pid, status = os.waitpid(-1, 0)
        except ChildProcessError:
            break
        except InterruptedError:
            continue
        if pid == child:
            code = os.waitstatus_to_exitcode(status)
            code = 128 - code if code < 0 else code
            break
    _end_all()
    return code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
