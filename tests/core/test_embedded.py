"""The embedded model: with no backend configured, `lmd serve` answers with the bundled
SmolLM2-135M-Instruct on llama.cpp's llama-server, which it starts, restarts and stops, on a
private socket no other user can reach or take; with a backend configured nothing of this
starts. Real processes throughout."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest

from daemon.backends.embedded import KEY_NAME, SOCKET_NAME, bundled_model_path
from tests.daemons import (
    ROOT,
    LiveDaemon,
    children,
    cmdline,
    configure,
    free_port,
    lmd_in_process,
    say,
    wait_for,
)

pytestmark = pytest.mark.slow
SHORT = 32  # tokens of a reply (reply_max_tokens)


def embedded_home(tmp_path: Path, **settings: object) -> Path:
    """A home with no backend configured: the embedded model answers (a small context keeps
    the server quick to start; a busy machine gets time: the first turn waits for the start
    and the probe). Replies are short: left to the server, the tiny model's reply to "dali
    hi" can run to the end of the 2,048-token context (38 CPU-seconds were seen)."""
    home = tmp_path / "lmd-home"
    settings = {"llm_timeout_secs": 300, "reply_max_tokens": SHORT, **settings}
    configure(home, embedded_context=2048, embedded_threads=1, **settings)
    return home


def server_pids(daemon_pid: int) -> list[int]:
    """The daemon's llama-server children (the launcher execs into it: the same pid)."""
    return [child for child in children(daemon_pid) if b"--api-key-file" in cmdline(child)]


def answering_server(d: LiveDaemon, session: str) -> int:
    """The daemon's model server, once it has answered a first `dali hi` in `session`."""
    assert say(d.url, session, "dali hi", timeout=120)[0] == 200
    (server,) = server_pids(d.proc.pid)
    return server


def server_folder(pid: int) -> Path:
    """The private folder of the server `pid` (its key file's)."""
    argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    return Path(argv[argv.index(b"--api-key-file") + 1].decode()).parent


def cpu_ticks(pid: int) -> int:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])  # utime + stime


def set_setting(url: str, name: str, value: object) -> None:
    """`name` set to `value` over the daemon's HTTP API, as a client changes it mid-session."""
    req = urllib.request.Request(f"{url}/settings/{name}", str(value).encode(), method="PUT")
    with urllib.request.urlopen(req, timeout=60) as r:
        assert r.status == 200


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
        assert backend["endpoint"] == "http://localhost/v1"  # over its private socket
        assert backend["capabilities"]["json_schema"] is True, backend  # probed, for real
        engine = backend["engine"]
        assert engine["status"] == "running" and engine["engine"].startswith("llama-server")
        assert engine["slots"] == backend["slots"] >= 2
        assert engine["context_per_slot"] == backend["context_window"] == 2048
        out = d.output()
        assert "lmd backend: the embedded model smollm2-135m-instruct" in out
        assert "no backend is configured" in out and "on llama-server" in out
        (server,) = server_pids(d.proc.pid)
        # its key is in a private file, not on its command line; it listens on a socket in
        # a folder only this user may enter
        line = Path(f"/proc/{server}/cmdline").read_bytes()  # (the server must be there)
        folder = server_folder(server)
        key = (folder / KEY_NAME).read_text().strip()
        assert key.encode() not in line and b"--port" not in line
        assert (folder / KEY_NAME).stat().st_mode & 0o777 == 0o600
        assert folder.stat().st_mode & 0o777 == 0o700
        argv = line.split(b"\0")
        assert argv[argv.index(b"--host") + 1] == str(folder / SOCKET_NAME).encode()
        # nothing of the daemon's environment reaches it (llama-server reads options there)
        environ = Path(f"/proc/{server}/environ").read_bytes().split(b"\0")
        assert not [v for v in environ if v.startswith((b"LLAMA_", b"LMD_", b"OPENAI"))]
        # doctor names it
        ran = lmd_in_process("doctor", "--offline", "--home", str(home))
        assert "backend: The embedded model smollm2-135m-instruct" in ran.stdout
        assert "on llama-server" in ran.stdout
    finally:
        d.stop()
    assert wait_for(lambda: not Path(f"/proc/{server}").exists(), 10)  # stopped with lmd


def test_a_crash_mid_answer_is_said_and_the_server_comes_back(tmp_path):
    home = embedded_home(tmp_path)
    d = LiveDaemon(home, {"LMD_TOKENIZER": "estimate"})
    try:
        server = answering_server(d, "warm")
        set_setting(d.url, "reply_max_tokens", 0)  # a story long enough to be cut mid-answer
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
        set_setting(d.url, "reply_max_tokens", SHORT)
        # the next turn is answered by the restarted server
        status, reply, _ = say(d.url, "s3", "dali hi", timeout=120)
        assert status == 200, reply
        assert "stopped unexpectedly" in d.output() and "Trying again in 1 seconds" in d.output()
        (again,) = server_pids(d.proc.pid)
        assert again != server
    finally:
        d.stop()


def test_the_server_dies_with_a_killed_daemon_and_the_next_removes_its_folder(
    tmp_path, monkeypatch
):
    home = embedded_home(tmp_path)
    # a temporary directory of the test's own: another test's server start (which sweeps
    # abandoned folders) cannot take this folder first
    private = tmp_path / "t"
    private.mkdir()
    monkeypatch.setenv("TMPDIR", str(private))
    monkeypatch.setattr("tempfile.tempdir", None)
    d = LiveDaemon(home, {"LMD_TOKENIZER": "estimate", "TMPDIR": str(private)})
    assert wait_for(lambda: server_pids(d.proc.pid), 30)
    (server,) = server_pids(d.proc.pid)
    folder = server_folder(server)
    d.proc.send_signal(signal.SIGKILL)
    d.proc.wait()
    assert wait_for(lambda: not Path(f"/proc/{server}").exists(), 10)
    # nobody cleaned up: its folder (the key, the log) is still there, until the next
    # embedded server starts
    assert (folder / KEY_NAME).exists()
    from daemon.backends.embedded import EmbeddedServer

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


def test_a_model_the_server_cannot_load_is_one_sentence_and_tried_again_later(tmp_path):
    """A GGUF file cut short: the server cannot load it. Each turn hears one sentence saying
    so and what to do (no log dump); the supervisor tries again after a pause that grows, and
    `lmd doctor` reports the engine down with the server's own words."""
    whole = Path(bundled_model_path()).read_bytes()
    broken = tmp_path / "cut.gguf"
    broken.write_bytes(whole[: len(whole) // 3])  # the header and part of the tensors
    home = embedded_home(tmp_path, embedded_model_path=str(broken))
    d = LiveDaemon(home, {"LMD_TOKENIZER": "estimate"})
    try:
        status, reply, _ = say(d.url, "s", "dali hi", timeout=120)
        assert status == 502
        assert "could not load the model file cut.gguf: it may be cut short" in reply
        assert "Set embedded_model_path to another GGUF file" in reply
        assert "\\n" not in reply and str(tmp_path) not in reply  # no log, no path
        # down between tries: the next turn hears the same at once
        status, again, _ = say(d.url, "s", "dali hi", timeout=30)
        assert (status, again) == (502, reply)
        assert wait_for(lambda: d.output().count("Trying again in") >= 2, 60)
        assert (
            "Trying again in 1 seconds" in d.output() and "Trying again in 2 seconds" in d.output()
        )
        ran = lmd_in_process("doctor", env={"LMD_URL": d.url, "LMD_HOME": str(home)})
        assert (
            "[FAIL] engine: The embedded model server could not load the model file" in ran.stdout
        )
    finally:
        d.stop()


def test_no_engine_installed_is_one_sentence(tmp_path):
    home = embedded_home(tmp_path)
    missing = tmp_path / "no-such-llama-server"
    d = LiveDaemon(home, {"LMD_TOKENIZER": "estimate", "LMD_LLAMA_SERVER": str(missing)})
    try:
        status, reply, _ = say(d.url, "s", "dali hi", timeout=60)
        assert status == 502
        said = json.loads(reply)["error"]
        assert said == f"LMD_LLAMA_SERVER names {missing}, which is not a program I can run."
        assert f"but: LMD_LLAMA_SERVER names {missing}" in d.output()  # said at start too
    finally:
        d.stop()


def test_the_engine_not_built_is_one_sentence(monkeypatch, tmp_path):
    from daemon.backends import embedded, engine_build

    monkeypatch.delenv("LMD_LLAMA_SERVER", raising=False)
    monkeypatch.setattr(engine_build, "built_program", lambda prefix=None: tmp_path / "none")
    assert embedded.engine_program() is None
    said = embedded.engine_missing()
    assert said.startswith("The embedded model's engine (llama-server) is not built; run `make")


def test_a_model_without_a_chat_template_still_answers(tmp_path):
    """A GGUF file whose chat template is gone (its key renamed, same length: still a valid
    file): llama-server falls back to its default template, and lmd's turn is answered."""
    data = Path(bundled_model_path()).read_bytes()
    assert data.count(b"tokenizer.chat_template") == 1
    gone = tmp_path / "no-template.gguf"
    gone.write_bytes(data.replace(b"tokenizer.chat_template", b"tokenizer.chat_templatX"))
    home = embedded_home(tmp_path, embedded_model_path=str(gone))
    d = LiveDaemon(home, {"LMD_TOKENIZER": "estimate"})
    try:
        status, reply, _ = say(d.url, "s", "dali hi", timeout=120)
        assert status == 200 and reply.strip(), reply
    finally:
        d.stop()


def test_another_user_can_neither_reach_nor_take_the_server(tmp_path):
    """Issue 37: another local user got the server's key and the user's words by taking its
    port. Now the server listens on a socket in a folder only this user may enter: as a second
    Unix user, connecting, listing the folder, reading the key and putting a socket of one's
    own in its place all fail."""
    if os.geteuid() != 0:
        pytest.skip("needs root to act as a second Unix user")
    import shutil

    if not shutil.which("setpriv") or not os.path.exists("/usr/bin/python3"):
        pytest.skip("needs setpriv and /usr/bin/python3")
    home = embedded_home(tmp_path)
    d = LiveDaemon(home, {"LMD_TOKENIZER": "estimate"})
    try:
        server = answering_server(d, "s")
        folder = server_folder(server)
        attack = f"""
import os, socket
tried = []
def attempt(name, fn):
    try:
        fn()
        tried.append(name + ": done")
    except PermissionError:
        tried.append(name + ": refused")
folder = {str(folder)!r}
attempt("connect", lambda: socket.socket(socket.AF_UNIX).connect(folder + "/server.sock"))
attempt("list", lambda: os.listdir(folder))
attempt("key", lambda: open(folder + "/api-key").read())
attempt("bind", lambda: socket.socket(socket.AF_UNIX).bind(folder + "/other.sock"))
print("; ".join(tried))
"""
        ran = subprocess.run(
            ["setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups",
             "/usr/bin/python3", "-c", attack],
            capture_output=True, text=True, timeout=60, cwd="/",
        )  # fmt: skip
        assert ran.stdout.strip() == (
            "connect: refused; list: refused; key: refused; bind: refused"
        ), ran.stderr
        assert say(d.url, "s", "dali hi again", timeout=120)[0] == 200
    finally:
        d.stop()


IMPOSTOR = """
import os, socket, sys, time
# stands in for llama-server, but a child of it listens where the server would: the socket's
# peer is not the process lmd started
where = sys.argv[sys.argv.index("--host") + 1]
tcp = where == "127.0.0.1"
if os.fork() == 0:
    s = socket.socket(socket.AF_INET if tcp else socket.AF_UNIX)
    s.bind(("127.0.0.1", 0) if tcp else where)
    s.listen()
    if tcp:
        print(f"0.00.000.001 I srv  llama_server: listening on http://127.0.0.1:{s.getsockname()[1]}",
              flush=True)
    got = open(sys.argv[0] + ".heard", "ab")
    while True:
        conn, _ = s.accept()
        conn.settimeout(1)
        try:
            got.write(conn.recv(65536))
            got.flush()
        except OSError:
            pass
        conn.close()
time.sleep(600)
"""


@pytest.mark.parametrize("tcp", [False, True])
def test_a_server_that_is_not_the_one_started_hears_nothing(tmp_path, monkeypatch, tcp):
    """lmd checks the process behind the socket (SO_PEERCRED) or the port (/proc: the
    listening socket's owner) before it sends the key or any words: an endpoint held by
    another process is never answered as the server, and hears nothing."""
    from daemon.backends.embedded import EmbeddedServer

    program = tmp_path / "impostor"
    program.write_text(f"#!{sys.executable}\n{IMPOSTOR}")
    program.chmod(0o755)
    monkeypatch.setenv("LMD_LLAMA_SERVER", str(program))
    server = EmbeddedServer(bundled_model_path(), n_ctx=256, tcp=tcp)
    server.spawn()
    try:
        heard = Path(str(program) + ".heard")
        listening = (lambda: server._reported_port()) if tcp else (
            lambda: (server.folder() / SOCKET_NAME).exists()
        )  # fmt: skip
        assert wait_for(listening, 30)
        assert not server.answers() and not server.identified()
        assert not server.props()  # a request with the key is never sent: props() checks
        assert not heard.exists() or server.key.encode() not in heard.read_bytes()
    finally:
        os.killpg(server.proc.pid, signal.SIGKILL)
        server.stop()


def test_the_engine_killed_mid_batch_loses_nothing(tmp_path):
    """A batch job's requests in flight when the embedded server dies (killed here, as a crash
    would): the supervisor starts it again, each cut request waits for it and is asked again,
    and every one of the batch is answered."""
    import asyncio

    from daemon.backends.llm import LLM
    from daemon.backends.supervisor import Supervisor

    async def run() -> tuple[list, int, int]:
        sup = Supervisor(bundled_model_path(), 512, 1, "smollm2-135m-instruct", slots=2)
        sup.start()
        llm = LLM(sup.url, sup.key, 300, 0, sup.alias, uds=sup.uds)
        llm.before_call, llm.after_lost = sup.wait_ready, sup.wait_restarted
        llm.unreachable, llm.identity = sup.unreachable, "x"
        try:
            await sup.wait_ready()
            first = sup.server.proc.pid
            asked = [
                llm.complete(
                    [{"role": "user", "content": f"Count to twenty, number {i}."}],
                    max_tokens=48,
                    temperature=0,
                )  # fmt: skip
                for i in range(6)
            ]
            tasks = [asyncio.ensure_future(a) for a in asked]
            before = cpu_ticks(first)
            while cpu_ticks(first) - before < 10:  # it is answering
                await asyncio.sleep(0.02)
            os.kill(first, signal.SIGKILL)
            answers = await asyncio.gather(*tasks)
            return answers, first, sup.server.proc.pid
        finally:
            await llm.close()
            await sup.stop()

    answers, first, then = asyncio.run(run())
    assert then != first  # it was started again
    assert len(answers) == 6 and all(a.choices[0].message.content for a in answers)


def test_big_schemas_and_tool_lists_do_not_break_the_engine(real_model):
    """What crashed llama-cpp-python's grammar path, on llama-server: a string of maxLength
    100,000, an object nested 60 deep, an enum of 500 names, 500 tools with a call required.
    Each is answered (or, the tools, refused as too long for the context: read as an overflow,
    one sentence), and the server lives on."""
    import asyncio

    from daemon.backends.llm import LLM
    from daemon.core.errors import BackendError

    deep: dict = {"type": "string"}
    for i in range(60):
        deep = {"type": "object", "properties": {f"k{i}": deep}, "required": [f"k{i}"]}
    schemas = [
        {"type": "object", "properties": {"t": {"type": "string", "maxLength": 100000}}},
        deep,
        {"type": "object", "properties": {"a": {"enum": [f"tool_{i}" for i in range(500)]}}},
    ]
    tools = [{"type": "function", "function": {"name": f"t{i}", "description": "Lists files.",
              "parameters": {"type": "object", "properties": {"p": {"type": "string"}}}}}
             for i in range(500)]  # fmt: skip
    asked = [{"role": "user", "content": "Answer with JSON."}]

    async def go():
        llm = LLM(real_model.url, real_model.key, 300, 0, real_model.alias)
        try:
            answers = []
            for schema in schemas:
                fmt = {"type": "json_schema", "json_schema": {"name": "x", "schema": schema}}
                answers.append(await llm.chat(asked, max_tokens=8, response_format=fmt))
            try:
                said = await llm.chat(asked, max_tokens=8, tools=tools, tool_choice="required")
            except BackendError as e:
                said = e.message
            return answers, said
        finally:
            await llm.close()

    answers, said = asyncio.run(go())
    assert all(a.lstrip().startswith("{") for a in answers)
    if "tools on offer" in said:  # more than the server's window of a slot
        assert said.startswith("The 500 tools on offer do not fit in the model's context")
    assert real_model.alive() and real_model.answers()
