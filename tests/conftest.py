"""Shared fixtures: the fake backend, a configured home, the in-process app, a live daemon."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from fake_backend import FakeBackend, Reply  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
SHARED = ROOT.parent / "shared"

__all__ = [
    "Reply",
    "FakeBackend",
    "configure",
    "free_port",
    "LiveDaemon",
    "SHARED",
    "ROOT",
    "IN_PROCESS",
]


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


def configure(home: Path, **settings: object) -> None:
    """Write settings into home's database, validated like `lmd settings set`."""
    from daemon.core import collect
    from daemon.plugins import get_plugin_manager
    from daemon.store import Store

    registry = collect(get_plugin_manager())
    store = Store(Path(home) / "lmd.db")
    store.migrate(registry.migrations)
    for name, value in settings.items():
        spec = registry.specs[name]
        store.set_setting(name, spec.dump(spec.parse(value)))
    store.close()


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


def IN_PROCESS(scope: dict) -> bool:  # noqa: N802
    """The peer check for in-process clients: they are the owner (there is no socket)."""
    return True


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class LiveDaemon:
    """A real `lmd serve` process on a free port."""

    def __init__(self, home: Path, env: dict | None = None, args: list[str] | None = None):
        self.home = home
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        full_env = {**os.environ, **(env or {})}
        self.log = open(home.parent / f"lmd-serve-{self.port}.log", "w+b")  # noqa: SIM115
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "daemon.cli",
                "serve",
                "--bind",
                f"127.0.0.1:{self.port}",
                "--home",
                str(home),
                *(args or []),
            ],
            env=full_env,
            stdout=self.log,
            stderr=subprocess.STDOUT,
            cwd=ROOT,
        )
        self.wait_ready()

    def wait_ready(self, timeout: float = 20.0) -> None:
        deadline = time.time() + timeout
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"lmd serve exited early:\n{self.output()}")
            try:
                with urllib.request.urlopen(self.url + "/healthz", timeout=1) as r:
                    if r.status == 200:
                        return
            except OSError:
                time.sleep(0.05)
        raise RuntimeError(f"lmd serve did not become ready:\n{self.output()}")

    def output(self) -> str:
        self.log.flush()
        self.log.seek(0)
        return self.log.read().decode("utf-8", "replace")

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 20.0) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        return self.proc.returncode


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
