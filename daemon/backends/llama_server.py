"""Start llama-server for the daemon, tied to the daemon's life.

    python lmd_llama_server.py DAEMON_PID PROGRAM [ARGUMENT...]

The daemon runs a copy of this file kept beside the server's key and socket (so it works when
lmd is a zip application too). It asks the kernel to kill this process when the daemon dies
(even by SIGKILL): a setting that outlives exec. Then it becomes llama-server (exec: the same
process id, which lmd checks at the other end of the socket before it sends the key).

No lmd import here: this runs in a bare interpreter.
"""

import ctypes
import os
import signal
import sys


def main() -> None:
    try:
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (AttributeError, OSError):
        pass  # not Linux: the daemon stops the server on its way out
    daemon, program = int(sys.argv[1]), sys.argv[2]
    if os.getppid() != daemon:
        sys.exit(0)  # the daemon died before the watch was set
    os.execv(program, [program, *sys.argv[3:]])


if __name__ == "__main__":
    main()
