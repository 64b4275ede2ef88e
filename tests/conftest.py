"""Shared fixtures: the fake backend, a configured home, the in-process app, live daemons.

Plain helpers (configure, LiveDaemon, free_port, ROOT, SHARED) live in tests/daemons.py;
each area (tests/core, tests/system, tests/plugins/<name>) adds its own conftest.py.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck
from hypothesis import settings as hypothesis_settings

# The registry of lmd homes (the sandbox hides each one's token) is the user's own, under
# XDG_STATE_HOME: the tests' thousands of homes go to a registry of this run, not root's.
if "LMD_TEST_STATE" not in os.environ:
    import atexit
    import shutil
    import tempfile

    os.environ["LMD_TEST_STATE"] = os.environ["XDG_STATE_HOME"] = tempfile.mkdtemp(
        prefix="lmd-test-state-"
    )
    # the process that made it (the run's controller) removes it; its workers inherit it
    atexit.register(shutil.rmtree, os.environ["LMD_TEST_STATE"], ignore_errors=True)

from daemon.core.store import Store
from tests.daemons import IN_PROCESS, LiveDaemon, bwrap_reason, configure, configure_fake, probed_on
from tests.fake_backend import FakeBackend
from tests.scheduling import costly_first
from tests.warm_lmd import interpreter_env, put_back_interpreter_env

# Property tests must hold on a busy machine too: no per-example deadline and no "too slow"
# health check (both measure time, which load stretches); each test's own @settings keeps
# its other choices.
hypothesis_settings.register_profile(
    "lmd", deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
hypothesis_settings.load_profile("lmd")

_INTERPRETER_ENV = interpreter_env(os.environ)  # what this worker's warm processes start with


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The costliest units first (tests/scheduling.py: make test's workers get them in this
    order; a run without workers runs them in it). Tests marked `bwrap` run the real sandbox:
    skip them, saying why, where none can be had."""
    costly_first(items, config.rootpath)  # stable: the order within a unit stays
    marked = [item for item in items if item.get_closest_marker("bwrap")]
    reason = bwrap_reason() if marked else None
    for item in marked if reason else ():
        item.add_marker(pytest.mark.skip(reason=reason))


def open_to_others(path: Path) -> Path:
    """As root, sandboxed commands run as the unprivileged user nobody (daemon/execution/
    sandbox.py): pytest makes its temporary directories 0700, so let others through them."""
    if os.geteuid() != 0:
        return path
    here = Path(path).resolve()
    for d in (here, *here.parents):
        if d == Path("/") or d == Path("/tmp"):
            break
        mode = d.stat().st_mode
        if mode & 0o005 != 0o005:
            d.chmod(mode | 0o055)
    return path


@pytest.fixture(autouse=True)
def _sandbox_may_enter_tmp_path(request: pytest.FixtureRequest) -> None:
    if "tmp_path" in request.fixturenames:
        open_to_others(request.getfixturevalue("tmp_path"))


@pytest.fixture(scope="session", autouse=True)
def _sandbox_may_enter_mktemp(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    make = tmp_path_factory.mktemp

    def mktemp(basename: str, numbered: bool = True) -> Path:
        return open_to_others(make(basename, numbered))

    tmp_path_factory.mktemp = mktemp  # type: ignore[method-assign]
    yield


FOREIGN_ENV = ("ENSEMBLE", "AGGREGATION", "THINKING", "SERVER_URL", "API_TOKEN", "MODEL")


def _clean(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in list(os.environ):
        if name.startswith(("LMD_", "OPENAI_")) or name in FOREIGN_ENV:
            monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("LMD_TOKENIZER", "estimate")


@pytest.fixture(scope="session", autouse=True)
def clean_session_env() -> Iterator[None]:
    """Daemons shared by a module start before any test's own clean_env: clean for them too."""
    with pytest.MonkeyPatch.context() as mp:
        _clean(mp)
        yield


@pytest.fixture(scope="module", autouse=True)
def _interpreter_env_kept(request: pytest.FixtureRequest) -> Iterator[None]:
    """A module that leaves a PYTHON* or LD_* variable changed fails, and the variables are put
    back: every later daemon of its worker would start cold (the warm processes that daemons
    are forked from serve only the same variables; tests/warm_lmd.py), some 2 CPU-s each."""
    yield
    changed = put_back_interpreter_env(_INTERPRETER_ENV)
    if changed:
        pytest.fail(
            f"{request.node.nodeid} left {', '.join(changed)} changed in the environment; "
            "put the environment back in the fixture that changed it."
        )


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """No test sees the developer's keys, daemon or settings overrides."""
    _clean(monkeypatch)


def shared_with_workers(tmp_path_factory) -> Path | None:
    """The directory this run's xdist workers share (their base temporary directories'
    parent), or None in a run without workers."""
    if os.environ.get("PYTEST_XDIST_WORKER"):
        return tmp_path_factory.getbasetemp().parent
    return None


@pytest.fixture(scope="session")
def real_model(tmp_path_factory):
    """The real-model tier's server (tests/real_model.py), one per test worker that runs a
    file of the tier (its probe made once for the run: tests/scheduling.py)."""
    from tests.real_model import probe_once, start_real_model

    server = start_real_model()
    probe_once(server, shared_with_workers(tmp_path_factory))
    yield server
    server.stop()


@pytest.fixture(scope="session")
def small_model(tmp_path_factory):
    """The same server with a 256-token context: overflows without minutes of reading (this
    CPU reads some 130 tokens a second on one thread)."""
    from tests.real_model import probe_once, start_real_model

    server = start_real_model(n_ctx=256)
    probe_once(server, shared_with_workers(tmp_path_factory))
    yield server
    server.stop()


@pytest.fixture(scope="session")
def python_server(tmp_path_factory):
    """llama-cpp-python's own server over the bundled model: the other llama.cpp server, which
    lmd stays true against as a configured endpoint (tests/real_model.py)."""
    from tests.real_model import PythonServer, model_path, probe_once

    server = PythonServer(model_path()).start()
    probe_once(server, shared_with_workers(tmp_path_factory))
    yield server
    server.stop()


@pytest.fixture
def backend() -> Iterator[FakeBackend]:
    b = FakeBackend().start()
    yield b
    b.stop()


@pytest.fixture(scope="module")
def module_backend() -> Iterator[FakeBackend]:
    """One backend for a module's tests that share a live daemon (`shared_daemon`); such a
    module overrides `backend` with `shared_backend`, which resets it before each test."""
    b = FakeBackend().start()
    yield b
    b.stop()


@pytest.fixture
def shared_backend(module_backend: FakeBackend) -> FakeBackend:
    module_backend.reset()
    return module_backend


def configure_home(h: Path, backend: FakeBackend) -> Path:
    """Settings that point at the fake backend, with no retries, and the backend's
    capabilities as lmd's probe finds them (tests/daemons.py probed_on)."""
    configure_fake(h, backend, probed=(backend.url, "fake-model", probed_on(backend)))
    backend.probe_kept_in.append(str(h / "lmd.db"))
    return h


@pytest.fixture
def home(tmp_path: Path, backend: FakeBackend) -> Path:
    """An LMD_HOME whose settings point at the fake backend, with no retries."""
    return configure_home(tmp_path / "lmd-home", backend)


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    """A migrated lmd database of its own (no daemon, no settings changed)."""
    s = Store(tmp_path / "lmd.db")
    s.migrate()
    yield s
    s.close()


@pytest.fixture(scope="module")
def shared_daemon(
    request: pytest.FixtureRequest,
    tmp_path_factory: pytest.TempPathFactory,
    module_backend: FakeBackend,
):
    """A live daemon on `module_backend` shared by a module's tests: for tests that only talk
    to it (each in its own session), where a daemon per test proves nothing more. A module's
    SHARED_DAEMON_ENV adds to its environment."""
    h = configure_home(tmp_path_factory.mktemp("shared") / "lmd-home", module_backend)
    extra = getattr(request.module, "SHARED_DAEMON_ENV", {})
    d = LiveDaemon(h, {"LMD_TOKENIZER": "estimate", **extra})
    yield d
    d.stop()
    d.log.close()


@pytest.fixture
def make_client(home: Path):
    """A factory of in-process clients: make_client(**settings) -> TestClient (lifespan on)."""
    from starlette.testclient import TestClient

    from daemon.http.app import create_app

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
