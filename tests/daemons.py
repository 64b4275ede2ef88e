"""The harness every test area (and the benchmarks) shares: configure a home, run a real
`lmd serve` on a free port, install throwaway plugins, watch processes, look at what a sandboxed
command left behind."""

from __future__ import annotations

import hashlib
import http.client
import json
import os
import signal
import socket
import stat
import subprocess
import sys
import textwrap
import threading
import time
import types
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, NamedTuple

ROOT = Path(__file__).resolve().parent.parent
SHARED = ROOT.parent / "shared"  # the workplace's real data; absent in a user's checkout


# As root, sandboxed commands run as the unprivileged user nobody (daemon/execution/sandbox.py),
# who cannot reach a Python under /root (pyenv): they get the system's.
SANDBOX_PYTHON = (
    "/usr/bin/python3"
    if os.geteuid() == 0 and os.path.exists("/usr/bin/python3")
    else sys.executable
)


def writable_by_others(path: Path) -> Path:
    """As root, let a sandboxed build (running as nobody) write this tree."""
    if os.geteuid() == 0:
        for p in [path, *Path(path).rglob("*")]:
            if not p.is_symlink():
                p.chmod(p.stat().st_mode | (0o007 if p.is_dir() else 0o006))
    return path


_FRESH_DB: list[bytes] = []  # a database lmd made and migrated in this process, empty


def configure(home: Path, probed: tuple[str, str, str] | None = None, **settings: object) -> None:
    """Write settings into home's database, validated like `lmd settings set`, and `probed`
    (endpoint, model, capabilities as JSON) as a daemon that probed that backend keeps it. A
    new home's database starts as a copy of one lmd made and migrated in this process (the
    migration is the costly part of a fresh database, and a run makes a thousand homes), with
    the mode lmd gives its own; lmd's migration then runs on it as on any existing home."""
    from daemon.core.registry import collect
    from daemon.core.store import Store
    from daemon.plugins import get_plugin_manager

    registry = collect(get_plugin_manager())
    path = Path(home) / "lmd.db"
    if not path.exists():
        if not _FRESH_DB:
            import tempfile

            with tempfile.TemporaryDirectory() as scratch:
                fresh = Store(Path(scratch) / "lmd.db")
                fresh.migrate(registry.migrations, registry.specs)
                fresh.close()
                _FRESH_DB.append((Path(scratch) / "lmd.db").read_bytes())
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600)
        with os.fdopen(fd, "wb") as f:
            f.write(_FRESH_DB[0])
    store = Store(path)
    store.migrate(registry.migrations, registry.specs)
    for name, value in settings.items():
        spec = registry.specs[name]
        store.set_setting(name, spec.dump(spec.parse(value)))
    if probed is not None:
        store.save_capabilities(*probed)
    store.close()


def configure_fake(
    home: Path, backend: Any, probed: tuple[str, str, str] | None = None, **settings: object
) -> None:
    """configure() pointing `home` at the stand-in `backend` (tests/fake_backend.py): its
    model, no retries, 10 s a request; `settings` add to these or replace them."""
    fake: dict[str, object] = {
        "openai_chat_endpoint": backend.url,
        "openai_model": "fake-model",
        "llm_max_retries": 0,
        "llm_timeout_secs": 10,
    }
    configure(home, probed, **{**fake, **settings})


def run_probe(url: str, model: str = "fake-model", key: str = "sk-x", timeout: float = 10):
    """lmd's capability probe of the server at `url`, run once, outside any cache."""
    import asyncio

    from daemon.backends.capabilities import probe
    from daemon.backends.llm import LLM

    async def go():
        llm = LLM(url, key, 30, 0, model)
        try:
            return await probe(llm, timeout=timeout)
        finally:
            await llm.close()

    return asyncio.run(go())


_PROBED: dict[str, str] = {}  # a stand-in's capability profile -> what lmd's probe found


def probed_on(backend) -> str:
    """What lmd's probe finds on `backend`, as JSON, for configure(probed=...): a daemon on a
    fresh home would send the probe's ten requests (some 40 ms of this CPU) first, and a run
    makes a thousand. Found by a real probe of a stand-in with the same profile, once per test
    process; a home that keeps it is listed on the backend, which drops it there when its
    profile changes (FakeBackend.forget_probes), so a test that changes the profile before a
    daemon starts has that daemon probe for itself. tests/core/test_capabilities.py tests the
    probe."""
    from tests.fake_backend import FakeBackend

    profile = json.dumps(dict(backend.capabilities), sort_keys=True)
    if profile not in _PROBED:
        with FakeBackend() as other:
            other.capabilities = dict(backend.capabilities)
            _PROBED[profile] = run_probe(other.url).to_json()
    return _PROBED[profile]


def IN_PROCESS(scope: dict) -> bool:  # noqa: N802
    """The peer check for in-process apps: their clients are the owner (there is no socket)."""
    return True


def free_port() -> int:
    """A loopback port free now, for something to listen on at once (another test's daemon
    may take it a moment later: for a port where nothing may listen, closed_port())."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


_CLOSED: list[socket.socket] = []


def closed_port() -> int:
    """A loopback port where nothing listens while this process lives: it stays bound here
    without listen(), so a connection is refused and no other process can take it (a port
    from free_port() was once taken by a daemon of another test, which then answered)."""
    if not _CLOSED:
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        _CLOSED.append(s)
    return _CLOSED[0].getsockname()[1]


_WARM_SERVE: list = []  # this test process's warm lmd for daemons, started by the first


def warm_serve():
    """A process that imported what `lmd serve` imports, to fork daemons from: a daemon costs
    about 1.9 CPU-seconds started cold, most of it imports, and a run starts some eighty
    (tests/warm_lmd.py). The start itself (a fresh interpreter, its imports, its exit codes)
    is tested with cold starts in tests/core/test_server.py, test_perms.py and test_cli.py.
    LMD_TEST_COLD_DAEMONS=1 starts every daemon cold; None then."""
    if os.environ.get("LMD_TEST_COLD_DAEMONS") == "1":
        return None
    warm = _WARM_SERVE[0] if _WARM_SERVE else None
    if warm is None or warm.proc is None or warm.proc.poll() is not None:
        import atexit
        import shutil
        import tempfile

        from tests.warm_lmd import WarmLmd

        directory = Path(tempfile.mkdtemp(prefix="lmd-serve-warm-"))
        warm = WarmLmd(directory, dict(os.environ), profile="tests.warm_lmd:SERVE").start()
        _WARM_SERVE[:] = [warm]
        atexit.register(shutil.rmtree, directory, True)
        atexit.register(warm.stop)
    return warm


class LiveDaemon:
    """A real `lmd serve` process on a free port (forked from warm_serve() where it can be)."""

    def __init__(
        self,
        home: Path,
        env: dict | None = None,
        args: list[str] | None = None,
        user: str | None = None,
        warm=None,
    ):
        """`user`: start it cold as that Unix user instead (as root: setpriv, the system's
        Python with this venv's packages; see as_user_argv). `warm`: fork it from this warm
        process (a WarmLmd with PRELOAD_SERVE, of another user too) rather than this
        worker's own."""
        self.home = home
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        full_env = {**os.environ, **(env or {})}
        self.log = open(home.parent / f"lmd-serve-{self.port}.log", "w+b")  # noqa: SIM115
        argv = ["serve", "--bind", f"127.0.0.1:{self.port}", "--home", str(home), *(args or [])]
        if warm is None:
            warm = warm_serve() if user is None else None
        elif warm.forkable(full_env):
            user = None  # the warm process runs as that user already
        if user is not None:
            prefix, extra = as_user_argv(user)
            self.proc = subprocess.Popen(
                [*prefix, "-m", "daemon.cli", *argv],
                env={**full_env, **extra, "PYTHONPATH": _join(full_env.get("PYTHONPATH"), extra)},
                stdout=self.log,
                stderr=subprocess.STDOUT,
                cwd=ROOT,
            )
        elif warm is not None and warm.forkable(full_env):
            self.proc = warm.start_child(argv, full_env, ROOT, self.log.fileno())
        else:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "daemon.cli", *argv],
                env=full_env,
                stdout=self.log,
                stderr=subprocess.STDOUT,
                cwd=ROOT,
            )
        self.wait_ready()

    def wait_ready(self, timeout: float = 60.0) -> None:
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
        # Nobody holds this daemon yet (the constructor raises): stop it, or it outlives the run.
        self.proc.kill()
        self.proc.wait()
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


def second_user() -> tuple[str | None, str]:
    """An ordinary Unix user to run a daemon as (made with useradd if missing), or None and
    what is missing. As root only; the user must reach this checkout and the system Python."""
    import shutil

    missing = [
        what
        for what, ok in [
            ("root", os.geteuid() == 0),
            ("setpriv", shutil.which("setpriv")),
            ("useradd", shutil.which("useradd")),
            (f"/usr/bin/python{sys.version_info[0]}.{sys.version_info[1]}", _system_python()),
        ]
        if not ok
    ]
    if missing:
        return None, "an ordinary user's daemon needs " + ", ".join(missing)
    name = "lmdsbx"  # the same user as tests/core/test_sandbox.py's
    if subprocess.run(["id", name], capture_output=True).returncode != 0:
        made = subprocess.run(["useradd", "-M", "-s", "/bin/sh", name], capture_output=True)
        if made.returncode != 0:
            return None, f"useradd {name} failed: {made.stderr.decode()[-200:]}"
    probe = subprocess.run(
        [*as_user_argv(name)[0], "-c", "import starlette, hypercorn, daemon.cli"],
        env={**os.environ, **as_user_argv(name)[1]},
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    if probe.returncode != 0:
        return None, f"{name} cannot import lmd from {ROOT}: {probe.stderr.strip()[-200:]}"
    return name, ""


def _system_python() -> str | None:
    """The system's Python of this minor version (the venv's may live under /root, which an
    ordinary user cannot enter; the same minor version loads the venv's compiled wheels)."""
    path = f"/usr/bin/python{sys.version_info[0]}.{sys.version_info[1]}"
    return path if os.path.exists(path) else None


def as_user_argv(user: str) -> tuple[list[str], dict[str, str]]:
    """The argv prefix running Python as `user`, and the environment it needs."""
    import sysconfig

    from daemon.backends.engine_build import built_program

    argv = ["setpriv", f"--reuid={user}", f"--regid={user}", "--clear-groups"]
    return [*argv, _system_python() or "python3"], {
        "PYTHONPATH": os.pathsep.join([str(ROOT), sysconfig.get_paths()["purelib"]]),
        "PYTHONDONTWRITEBYTECODE": "1",
        # the system's Python has another prefix: the engine this environment built
        "LMD_LLAMA_SERVER": str(built_program()),
    }


def _join(first: str | None, extra: dict[str, str]) -> str:
    return os.pathsep.join(p for p in [first or "", extra["PYTHONPATH"]] if p)


def say(url: str, session: str, text: str, timeout: float = 30.0) -> tuple[int, str, str]:
    """POST one utterance; (status, reply or error sentence, error kind)."""
    req = urllib.request.Request(
        url + "/v1",
        data=text.encode(),
        headers={"X-Session": session, "Accept": "application/json"},
        method="POST",
    )
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, json.loads(r.read())["reply"], ""
    except urllib.error.HTTPError as e:
        body = e.read().decode("utf-8", "replace")
        try:
            kind = json.loads(body).get("kind", "error")
        except ValueError:
            kind = "unreadable"
        return e.code, body, f"http_{e.code}_{kind}"
    except (OSError, ValueError, http.client.HTTPException) as e:  # refused, reset, cut
        return 0, str(e), "connection"


class Ran(NamedTuple):
    """What a CLI run left: like subprocess.CompletedProcess, so tests read either alike."""

    returncode: int
    stdout: str
    stderr: str


def lmd_in_process(*args: str, input: str | None = None, env: dict | None = None) -> Ran:
    """`lmd ARGS` through click's CliRunner: the same command code without starting Python and
    importing the app again (about a second a command). The real entry point, its exit codes
    and its light imports are tested as processes in tests/core/test_cli.py."""
    from click.testing import CliRunner

    from daemon.cli import cli

    done = CliRunner().invoke(cli, [str(a) for a in args], input=input, env=env)
    if done.exception and not isinstance(done.exception, SystemExit):
        raise done.exception  # a crash is a failing test, not an exit code 1
    return Ran(done.exit_code, done.stdout, done.stderr)


# -- throwaway plugins
SAMPLE_PLUGIN = ROOT / "tests" / "sample_plugin"  # a complete third-party plugin


def echo_plugin_manager():
    """The built-in plugins plus the sample plugin, registered in-process."""
    import importlib.util

    from daemon.plugins import load_plugins

    spec = importlib.util.spec_from_file_location("lmd_echo", SAMPLE_PLUGIN / "lmd_echo.py")
    lmd_echo = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(lmd_echo)
    pm = load_plugins()
    pm.register(lmd_echo, name="echo")
    return pm


_SAMPLE_INSTALLED: list[Path] = []  # the pip-installed sample, built once per test run


def install_sample(site: Path) -> None:
    """pip-install the sample plugin (tests/sample_plugin, its own pyproject.toml) into
    `site`; put `site` on PYTHONPATH (plugin_env) for a daemon or `lmd` to find it."""
    import atexit
    import importlib.util
    import shutil
    import tempfile

    if not _SAMPLE_INSTALLED:
        work = Path(tempfile.mkdtemp(prefix="lmd-echo-"))
        atexit.register(shutil.rmtree, work, True)
        source = work / "lmd-echo"  # a copy: pip builds inside the source tree
        shutil.copytree(SAMPLE_PLUGIN, source, ignore=shutil.ignore_patterns("__pycache__"))
        # Offline when setuptools is at hand (the build backend the sample names).
        has_setuptools = importlib.util.find_spec("setuptools") is not None
        offline = ["--no-build-isolation", "--no-index"] if has_setuptools else []
        subprocess.run(
            [sys.executable, "-m", "pip", "install", "-q", "--no-deps", *offline,
             "--target", str(work / "site"), str(source)],
            check=True, capture_output=True, text=True,
        )  # fmt: skip
        _SAMPLE_INSTALLED.append(work / "site")
    shutil.copytree(_SAMPLE_INSTALLED[0], site, dirs_exist_ok=True)


def plugin_module(name: str, source: str) -> types.ModuleType:
    """An in-process plugin module from source (register it with pm.register(module))."""
    module = types.ModuleType(name)
    exec(compile(textwrap.dedent(source), f"<{name}>", "exec"), module.__dict__)
    return module


def install_plugin(site: Path, module: str, source: str, entry: str | None = None) -> None:
    """Install `module` as a distribution in `site` (put it on PYTHONPATH for `lmd serve`)."""
    site.mkdir(parents=True, exist_ok=True)
    (site / f"{module}.py").write_text(textwrap.dedent(source))
    dist = site / f"{module}-0.0.1.dist-info"
    dist.mkdir(exist_ok=True)
    (dist / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {module}\nVersion: 0.0.1\n")
    (dist / "entry_points.txt").write_text(f"[lmd]\n{entry or module} = {module}\n")


# A mode that runs its words as a bash command through daemon.execution.runner (as marat will).
COMMAND_MODE = """
from daemon.hookspecs import hookimpl
from daemon.core.modes import Mode


async def respond(ctx):
    from daemon.execution.runner import run_command

    result = await run_command(ctx.text, ctx.session.cwd or "/", 60, 2000)
    yield result.describe()


@hookimpl
def register_modes(register):
    register(Mode("runcmd", respond, description="Run the words as a command (test only)."))
"""


def plugin_env(site: Path) -> dict:
    """Environment for a live daemon that sees the plugin installed in `site`."""
    path = os.pathsep.join([str(site), os.environ.get("PYTHONPATH", "")]).strip(os.pathsep)
    return {"PYTHONPATH": path}


# -- processes ------------------------------------------------------------------------------------
def group_alive(pgid: int) -> bool:
    """Whether any process of the group still exists (zombies count as gone)."""
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # killpg succeeds while zombies remain; look for a live member.
    for stat_file in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat_file.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[2]) == pgid and fields[0] != "Z":
            return True
    return False


def children(pid: int) -> list[int]:
    """The processes whose parent is `pid`."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
                found.append(int(entry.name))
    return found


def cmdline(pid: int) -> bytes:
    """The process's command line, its words ended by NUL bytes (empty once it is gone)."""
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return b""


@contextmanager
def peak_while(measure: Callable[[], int], every: float) -> Iterator[dict[str, int]]:
    """The most `measure()` returned, sampled in a thread every `every` seconds while the
    block runs: the dict's "most", complete once the block has ended."""
    peak = {"most": 0}
    done = threading.Event()

    def sample() -> None:
        while not done.is_set():
            peak["most"] = max(peak["most"], measure())
            time.sleep(every)

    sampler = threading.Thread(target=sample)
    sampler.start()
    try:
        yield peak
    finally:
        done.set()
        sampler.join()


def wait_for(predicate, timeout: float, interval: float = 0.05) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(interval)
    return predicate()


# Headless Chromium for page tests: no GPU, no first-run or background traffic (a test's
# loopback listener must see only what the page itself does).
CHROMIUM_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


def apt_tool(name: str, package: str | None = None) -> str:
    """The path of a system tool (chromium, curl), installed with apt when missing (CI runs
    as root on a fresh machine); skips the test, saying why, where that is impossible."""
    import shutil

    import pytest

    found = shutil.which(name) or (name == "chromium" and shutil.which("chromium-browser"))
    if found:
        return found
    if os.geteuid() != 0 or not shutil.which("apt-get"):
        pytest.skip(f"{name} is not installed and cannot be installed here (needs root + apt)")
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    for cmd in (["apt-get", "update"], ["apt-get", "install", "-y", package or name]):
        done = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=900)
        if done.returncode != 0:
            pytest.skip(f"could not install {name} ({' '.join(cmd)} failed): {done.stderr[-300:]}")
    return shutil.which(name) or pytest.skip(f"{name} installed but not on PATH")


# -- the command sandbox --------------------------------------------------------------------------
def bwrap_reason() -> str | None:
    """Why the real sandbox cannot be used here, or None when it can (tests marked `bwrap`
    skip with this reason: see tests/conftest.py)."""
    from daemon.execution import sandbox

    found = sandbox.detect()
    if found.kind != "bwrap":
        return f"needs bubblewrap: {found.reason} ({found.remedy})"
    return None


def tree_hash(root: Path) -> dict[str, str]:
    """Every entry under `root`: file contents, modes, symlink targets, empty dirs."""
    found: dict[str, str] = {}
    for dirpath, dirnames, filenames in os.walk(root, followlinks=False):
        for name in sorted(dirnames + filenames):
            p = Path(dirpath) / name
            rel = str(p.relative_to(root))
            st = p.lstat()
            mode = stat.S_IMODE(st.st_mode)
            if stat.S_ISLNK(st.st_mode):
                found[rel] = f"link {os.readlink(p)}"
            elif stat.S_ISDIR(st.st_mode):
                found[rel] = f"dir {mode:o}"
            elif stat.S_ISREG(st.st_mode):
                found[rel] = f"file {mode:o} {hashlib.sha256(p.read_bytes()).hexdigest()}"
            else:
                found[rel] = f"other {st.st_mode:o}"
    return found


class Listener:
    """A TCP listener on 127.0.0.1 that records every connection it accepts."""

    def __init__(self) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.port = self.sock.getsockname()[1]
        self.connections: list[tuple[str, int]] = []
        self._stop = False
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        self.sock.settimeout(0.1)
        while not self._stop:
            try:
                conn, addr = self.sock.accept()
            except OSError:
                continue
            self.connections.append(addr)
            conn.close()

    def close(self) -> None:
        self._stop = True
        self._thread.join(2)
        self.sock.close()


def processes_with(marker: str) -> list[str]:
    """Command lines of live (non-zombie) processes that mention `marker`."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            cmdline = (
                (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode("utf-8", "replace")
            )
            state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if marker in cmdline and state != "Z":
            found.append(f"{entry.name}: {cmdline.strip()}")
    return found
