"""The embedded model: with no backend configured, `lmd serve` answers with the bundled
SmolLM2-135M-Instruct on llama-cpp-python's server, which it starts, restarts and stops; with a
backend configured nothing of this starts. Real processes throughout."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest

from daemon.backends.embedded import SERVER_PROGRAM
from daemon.backends.supervisor import Supervisor
from tests.daemons import ROOT, LiveDaemon, configure, free_port, lmd_in_process, say, wait_for

pytestmark = pytest.mark.slow


def embedded_home(tmp_path: Path, **settings: object) -> Path:
    """A home with no backend configured: the embedded model answers (a small context keeps
    the server quick to start)."""
    home = tmp_path / "lmd-home"
    configure(home, embedded_context=2048, embedded_threads=1, **settings)
    return home


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


def server_pids(daemon_pid: int) -> list[int]:
    pids = []
    for child in children(daemon_pid):
        try:
            cmdline = Path(f"/proc/{child}/cmdline").read_bytes()
        except OSError:
            continue
        if SERVER_PROGRAM.encode() in cmdline:
            pids.append(child)
    return pids


def cpu_ticks(pid: int) -> int:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])  # utime + stime


def get_json(url: str) -> dict:
    with urllib.request.urlopen(url, timeout=60) as r:
        return json.loads(r.read())


def test_no_backend_configured_means_the_bundled_model_answers(tmp_path):
    home = embedded_home(tmp_path)
    d = LiveDaemon(home, {"LMD_TOKENIZER": "estimate"})
    try:
        # the README's first line, as a newcomer types it: the bundled model's words
        ran = lmd_in_process("say", "dali", "hello", "--url", d.url, "--session", "s1")
        assert ran.returncode == 0, ran.stderr
        assert ran.stdout.strip() and "language model" not in ran.stdout
        backend = get_json(d.url + "/backend")
        assert backend["model"] == "smollm2-135m-instruct"
        assert backend["endpoint"].startswith("http://127.0.0.1:")
        assert backend["capabilities"]["tool_choice"] is True, backend  # probed, on the real server
        out = d.output()
        assert "lmd backend: the embedded model smollm2-135m-instruct" in out
        assert "no backend is configured" in out
        (server,) = server_pids(d.proc.pid)
        # its key is in a private file, not on its command line
        cmdline = Path(f"/proc/{server}/cmdline").read_bytes()
        assert b"api_key" not in cmdline and b"--config_file" in cmdline
        argv = cmdline.split(b"\0")
        conf = Path(argv[argv.index(b"--config_file") + 1].decode())
        assert conf.stat().st_mode & 0o777 == 0o600
        assert conf.parent.stat().st_mode & 0o777 == 0o700
        # doctor names it
        ran = lmd_in_process("doctor", "--offline", "--home", str(home))
        assert "backend: The embedded model smollm2-135m-instruct" in ran.stdout
    finally:
        d.stop()
    assert wait_for(lambda: not Path(f"/proc/{server}").exists(), 10)  # stopped with lmd


def test_a_crash_mid_answer_is_said_and_the_server_comes_back(tmp_path):
    home = embedded_home(tmp_path)
    d = LiveDaemon(home, {"LMD_TOKENIZER": "estimate"})
    try:
        assert say(d.url, "warm", "dali hi", timeout=120)[0] == 200
        (server,) = server_pids(d.proc.pid)
        before = cpu_ticks(server)
        answer: list = []

        def ask() -> None:
            text = "dali Write a very long story about a lighthouse keeper, in many chapters."
            answer.append(say(d.url, "s2", text, timeout=120))

        import threading

        t = threading.Thread(target=ask)
        t.start()
        # the server is generating once it burns CPU: then kill it, mid-answer
        assert wait_for(lambda: cpu_ticks(server) - before > 20, 60, interval=0.02)
        os.kill(server, signal.SIGKILL)
        t.join(120)
        status, reply, _ = answer[0]
        assert status == 502
        assert "The embedded model server stopped unexpectedly" in reply
        assert "while answering" in reply and "try again" in reply
        assert wait_for(lambda: "(killed by signal 9)" in d.output(), 10)
        # the next turn is answered by the restarted server
        status, reply, _ = say(d.url, "s3", "dali hi", timeout=120)
        assert status == 200, reply
        assert "stopped unexpectedly" in d.output() and "Starting it again" in d.output()
        (again,) = server_pids(d.proc.pid)
        assert again != server
    finally:
        d.stop()


def test_the_server_dies_with_a_killed_daemon_and_the_next_removes_its_folder(tmp_path):
    home = embedded_home(tmp_path)
    d = LiveDaemon(home, {"LMD_TOKENIZER": "estimate"})
    assert wait_for(lambda: server_pids(d.proc.pid), 30)
    (server,) = server_pids(d.proc.pid)
    argv = Path(f"/proc/{server}/cmdline").read_bytes().split(b"\0")
    folder = Path(argv[argv.index(b"--config_file") + 1].decode()).parent
    d.proc.send_signal(signal.SIGKILL)
    d.proc.wait()
    assert wait_for(lambda: not Path(f"/proc/{server}").exists(), 10)
    # nobody cleaned up: its folder (configuration with the key, log) is still there, until
    # the next embedded server starts
    assert (folder / "server.json").exists()
    from daemon.backends.embedded import EmbeddedServer, bundled_model_path

    nxt = EmbeddedServer(bundled_model_path(), n_ctx=256, n_threads=1)
    nxt.spawn()
    try:
        assert not folder.exists()
        assert Path(nxt._dir.name).exists() and nxt._dir.name != str(folder)
    finally:
        nxt.stop()


def test_only_abandoned_server_folders_are_removed(tmp_path):
    """A folder whose lock a live process holds, one without a lock file (being made, or an
    older lmd's), a link and another user's folder stay; only a free one goes."""
    import fcntl

    from daemon.backends.embedded import FOLDER_PREFIX, LOCK_NAME, remove_abandoned_folders

    def folder(name: str, locked: bool | None) -> Path:
        f = tmp_path / (FOLDER_PREFIX + name)
        f.mkdir(mode=0o700)
        (f / "server.json").write_text("{}")
        if locked is not None:
            (f / LOCK_NAME).touch()
        return f

    held = folder("held", True)
    free = folder("free", False)
    unlocked = folder("nolock", None)
    other = folder("other", False) if os.geteuid() == 0 else None  # make test runs as root
    if other is not None:
        os.chown(other, 65534, 65534)  # nobody's
    link = tmp_path / (FOLDER_PREFIX + "link")
    link.symlink_to(free.parent / "elsewhere")
    (free.parent / "elsewhere").mkdir()
    (free.parent / "elsewhere" / LOCK_NAME).touch()
    holder = os.open(held / LOCK_NAME, os.O_RDONLY)
    fcntl.flock(holder, fcntl.LOCK_EX)  # as a running daemon holds it
    try:
        assert remove_abandoned_folders(tmp_path) == [free]
    finally:
        os.close(holder)
    assert held.exists() and unlocked.exists() and link.exists()
    assert (free.parent / "elsewhere").exists()
    assert other is None or other.exists()
    assert remove_abandoned_folders(tmp_path) == [held]  # its daemon is gone now


def test_a_configured_backend_starts_no_embedded_model(home, backend):
    d = LiveDaemon(home, {"LMD_TOKENIZER": "estimate"})
    try:
        status, reply, _ = say(d.url, "s", "dali hi")
        assert (status, reply) == (200, "ok")
        assert get_json(d.url + "/backend")["endpoint"] == backend.url
        assert server_pids(d.proc.pid) == []
        assert "openai_chat_endpoint is set" in d.output()
    finally:
        d.stop()


@pytest.mark.parametrize(
    ("env", "settings", "said"),
    [
        ({}, {}, "embedded"),
        ({"OPENAI_API_KEY": "sk-x"}, {}, "endpoint"),
        ({"OPENAI_BASE_URL": "http://127.0.0.1:9/v1"}, {}, "endpoint"),
        ({}, {"openai_chat_endpoint": "http://127.0.0.1:9/v1"}, "endpoint"),
        ({"OPENAI_API_KEY": "sk-x"}, {"backend": "embedded"}, "embedded"),
        ({}, {"backend": "endpoint"}, "endpoint"),
    ],
)
def test_which_backend_make_run_prepares(tmp_path, env, settings, said):
    home = tmp_path / "h"
    configure(home, **settings)
    ran = lmd_in_process("backend", "--which", "--home", str(home), env=env)
    assert ran.returncode == 0 and ran.stdout == said + "\n"


def test_a_missing_or_foreign_model_file_is_one_sentence(tmp_path):
    not_gguf = tmp_path / "model.bin"
    not_gguf.write_bytes(b"\x7fELF not a model")
    home = tmp_path / "h"
    for path, said in [
        (tmp_path / "nothing.gguf", "does not exist; set embedded_model_path to a GGUF file"),
        (not_gguf, "is not a GGUF file"),
    ]:
        ran = lmd_in_process(
            "settings", "set", "embedded_model_path", str(path), "--home", str(home)
        )
        assert ran.returncode == 1 and said in ran.stderr
        # the same value from the environment stops `lmd serve` with the sentence
        proc = subprocess.run(
            [sys.executable, "-m", "daemon.cli", "serve", "--bind", f"127.0.0.1:{free_port()}",
             "--home", str(home)],
            env={**os.environ, "LMD_EMBEDDED_MODEL_PATH": str(path)},
            capture_output=True, text=True, timeout=60, cwd=ROOT,
        )  # fmt: skip
        assert proc.returncode == 2 and said in proc.stderr  # serve's code for configuration


def test_a_model_the_server_cannot_load_is_said_not_retried_forever(tmp_path):
    broken = tmp_path / "broken.gguf"
    broken.write_bytes(b"GGUF" + b"\0" * 64)  # the magic, then nothing a loader can use
    home = embedded_home(tmp_path, embedded_model_path=str(broken))
    d = LiveDaemon(home, {"LMD_TOKENIZER": "estimate"})
    try:
        status, reply, _ = say(d.url, "s", "dali hi", timeout=120)
        assert status == 502
        assert "The embedded model server failed 3 times in a row" in reply
        assert "embedded_model_path" in reply
        assert server_pids(d.proc.pid) == []
        status, again, _ = say(d.url, "s", "dali hi", timeout=30)
        assert (status, again) == (502, reply)  # the same sentence, at once
    finally:
        d.stop()


def test_a_taken_port_is_stepped_around(tmp_path):
    """The server's port is taken between choosing it and binding it: the supervisor starts it
    again on another."""
    from daemon.backends.embedded import bundled_model_path

    async def run() -> tuple[str, int]:
        sup = Supervisor(bundled_model_path(), 2048, 1, "smollm2-135m-instruct")
        with socket.socket() as taken:
            taken.bind(("127.0.0.1", 0))
            taken.listen()
            sup.server.port = taken.getsockname()[1]
            sup.start()
            try:
                await sup.wait_ready()
                return sup.url, taken.getsockname()[1]
            finally:
                await sup.stop()

    url, taken_port = asyncio.run(run())
    assert not url.startswith(f"http://127.0.0.1:{taken_port}/")
