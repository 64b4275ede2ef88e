"""Shared fixtures: the fake backend, a configured home, the in-process app, live daemons.

Plain helpers (configure, LiveDaemon, free_port, ROOT, SHARED) live in tests/daemons.py;
each area (tests/core, tests/system, tests/plugins/<name>) adds its own conftest.py.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.daemons import IN_PROCESS, LiveDaemon, configure
from tests.fake_backend import FakeBackend


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """No test sees the developer's keys, daemon or settings overrides."""
    for name in list(os.environ):
        if name.startswith(("LMD_", "OPENAI_")) or name in (
            "ENSEMBLE",
            "AGGREGATION",
            "THINKING",
            "SERVER_URL",
            "API_TOKEN",
            "MODEL",
        ):
            monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("LMD_TOKENIZER", "estimate")


@pytest.fixture
def backend() -> Iterator[FakeBackend]:
    b = FakeBackend().start()
    yield b
    b.stop()


@pytest.fixture
def home(tmp_path: Path, backend: FakeBackend) -> Path:
    """An LMD_HOME whose settings point at the fake backend, with no retries."""
    h = tmp_path / "lmd-home"
    configure(
        h,
        openai_chat_endpoint=backend.url,
        openai_model="fake-model",
        llm_max_retries=0,
        llm_timeout_secs=10,
    )
    return h


@pytest.fixture
def make_client(home: Path):
    """A factory of in-process clients: make_client(**settings) -> TestClient (lifespan on)."""
    from starlette.testclient import TestClient

    from daemon.app import create_app

    clients = []

    def make(
        pm=None, token: str | None = None, peer: bool = True, **settings: object
    ) -> TestClient:
        """`peer`: the in-process client counts as the daemon's own user (as the kernel says
        of the owner's processes on a live daemon); False lets only the token in."""
        if settings:
            configure(home, **settings)
        app = create_app(home=home, pm=pm, token=token, peer_check=IN_PROCESS if peer else None)
        client = TestClient(app, base_url="http://127.0.0.1:8420")
        client.__enter__()
        clients.append(client)
        return client

    yield make
    for c in clients:
        c.__exit__(None, None, None)


@pytest.fixture
def client(make_client):
    return make_client()


@pytest.fixture
def live(home: Path):
    """A factory of live daemons: live(env=..., args=...) -> LiveDaemon; all stopped after."""
    daemons: list[LiveDaemon] = []

    def start(env: dict | None = None, args: list[str] | None = None) -> LiveDaemon:
        d = LiveDaemon(home, {"LMD_TOKENIZER": "estimate", **(env or {})}, args)
        daemons.append(d)
        return d

    yield start
    for d in daemons:
        d.stop()
        d.log.close()
