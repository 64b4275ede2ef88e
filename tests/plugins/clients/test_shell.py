"""`lmd shell-init`: bash (and zsh/fish when installed) source the output and call the functions
against a live daemon; the propose key binding rewrites the command line without running it."""

from __future__ import annotations

import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from plugins.clients.propose import extract_command
from plugins.clients.shell_init import render
from tests.fake_backend import Reply

LMD = str(Path(sys.executable).parent / "lmd")


def shell_init(shell: str) -> str:
    done = subprocess.run([LMD, "shell-init", shell], capture_output=True, text=True, timeout=30)
    assert done.returncode == 0, done.stderr
    return done.stdout


def run_shell(shell: str, script: str, cwd: Path, env: dict) -> subprocess.CompletedProcess:
    args = {"bash": ["bash", "--noprofile", "--norc", "-c"], "zsh": ["zsh", "-f", "-c"]}
    argv = args.get(shell, ["fish", "--no-config", "-c"])
    return subprocess.run(
        [*argv, script], cwd=cwd, env=env, capture_output=True, text=True, timeout=60
    )


def session_of(tmp_path: Path) -> str:
    """Each test's own session on the module's one live daemon."""
    return f"shell-{tmp_path.name}"


@pytest.fixture
def backend(shared_backend):
    """One backend, reset for each test, behind the module's one live daemon."""
    return shared_backend


def shell_env(url: str, tmp_path: Path, **extra: str) -> dict:
    return {
        "PATH": "/usr/bin:/bin",
        "HOME": str(tmp_path),
        "LMD_URL": url,
        "LMD_SESSION": session_of(tmp_path),
        "LMD_TOKENIZER": "estimate",
        **extra,
    }


def test_shell_init_lists_every_mode_and_the_binding():
    script = shell_init("bash")
    assert "dali() { __lmd_say dali 0" in script
    assert "bind -x '\"\\em\": __lmd_propose_line'" in script
    assert f"LMD_BIN=${{LMD_BIN:-{LMD}}}" in script
    assert "bind -x" not in render("bash", ["dali"], "/x/lmd", bind=False)
    # Modes that act in a directory get $PWD; names that would shadow commands are skipped.
    text = render("bash", ["marat", "dali", "ls", "bad-name"], "/x/lmd")
    assert "marat() { __lmd_say marat 1" in text and "dali() { __lmd_say dali 0" in text
    assert "ls()" not in text and "bad-name()" not in text
    assert "# no function for the mode 'ls'" in text


def test_bash_functions_against_live_daemon(shared_daemon, backend, tmp_path):
    d = shared_daemon
    backend.queue("A monad is a monoid in the category of endofunctors.")
    work = tmp_path / "work"
    work.mkdir()
    script = f'eval "$({LMD} shell-init bash)"\ndali what is a monad, really?\necho "exit=$?"'
    done = run_shell("bash", script, work, shell_env(d.url, tmp_path))
    assert done.stdout == "A monad is a monoid in the category of endofunctors.\nexit=0\n"
    assert backend.chat_requests[-1]["messages"][-1] == {
        "role": "user",
        "content": "what is a monad, really?",
    }


def test_bash_function_reports_a_down_daemon(tmp_path):
    script = f'eval "$({LMD} shell-init bash)"\ndali hello\necho "exit=$?"'
    done = run_shell("bash", script, tmp_path, shell_env("http://127.0.0.1:9", tmp_path))
    assert "exit=1" in done.stdout
    assert "could not reach lmd" in done.stderr and "lmd serve" in done.stderr


def test_cwd_modes_pass_the_directory(shared_daemon, backend, tmp_path):
    """marat/cobol functions send $PWD: the session's working directory is set on the daemon."""
    d = shared_daemon
    work = tmp_path / "project dir"
    work.mkdir()
    (tmp_path / "init.sh").write_text(render("bash", ["dali", "marat", "cobol"], LMD))
    # `dali` stands in for the mode here so the test does not depend on marat's behaviour;
    # the function is the marat one (pass_cwd=1).
    script = f'. "{tmp_path}/init.sh"\n__lmd_say dali 1 where am I'
    done = run_shell("bash", script, work, shell_env(d.url, tmp_path, LMD_SESSION="cwdtest"))
    assert done.returncode == 0, done.stderr
    db = sqlite3.connect(d.home / "lmd.db")
    (cwd,) = db.execute("SELECT cwd FROM sessions WHERE name = 'cwdtest'").fetchone()
    db.close()
    assert cwd == str(work)
    # And the marat function really calls with pass_cwd=1: a recording LMD_BIN shows argv.
    recorder = tmp_path / "record.sh"
    recorder.write_text('#!/bin/sh\nprintf "%s|" "$@"\n')
    recorder.chmod(0o755)
    script = f'. "{tmp_path}/init.sh"\nmarat go up -n 2 "levels"; cobol fix it; dali hi'
    env = shell_env(d.url, tmp_path, LMD_BIN=str(recorder))
    done = run_shell("bash", script, work, env)
    assert done.stdout == (
        f"say|--cwd|{work}|--|marat|go|up|-n|2|levels|"
        f"say|--cwd|{work}|--|cobol|fix|it|"
        "say|--|dali|hi|"
    )


def test_key_binding_proposes_without_running(shared_daemon, backend, tmp_path):
    d = shared_daemon
    marker = tmp_path / "ran"
    backend.queue(f"```bash\nfind . -size +10M && touch {marker}\n```")
    work = tmp_path / "w"
    work.mkdir()
    script = (
        f'eval "$({LMD} shell-init bash)"\n'
        'READLINE_LINE="list big files here"\nREADLINE_POINT=3\n'
        "__lmd_propose_line\n"
        'printf "%s\\n%s\\n" "$READLINE_LINE" "$READLINE_POINT"'
    )
    done = run_shell("bash", script, work, shell_env(d.url, tmp_path))
    proposed = f"find . -size +10M && touch {marker}"
    assert done.stdout == f"{proposed}\n{len(proposed)}\n", done.stderr
    assert not marker.exists()  # proposed, never run
    sent = backend.chat_requests[-1]["messages"]
    assert sent[-1] == {"role": "user", "content": "list big files here"}
    assert "Ubuntu 22.04" in sent[0]["content"] and str(work) in sent[0]["content"]
    # The proposal is remembered in the session, marked as from the proposer.
    db = sqlite3.connect(d.home / "lmd.db")
    rows = db.execute(
        "SELECT role, content, mode FROM prompts WHERE session = ?", (session_of(tmp_path),)
    ).fetchall()
    db.close()
    assert rows[-2:] == [
        ("user", "list big files here", "propose"),
        ("assistant", proposed, "propose"),
    ]


def test_key_binding_keeps_the_line_on_failure(shared_daemon, backend, tmp_path):
    d = shared_daemon
    backend.queue(Reply("down", status=500))
    script = (
        f'eval "$({LMD} shell-init bash)"\n'
        'READLINE_LINE="git sttaus"\n__lmd_propose_line\necho "line=$READLINE_LINE"\n'
        'READLINE_LINE="   "\n__lmd_propose_line\necho "blank=[$READLINE_LINE]"'
    )
    requests_before = len(backend.chat_requests)
    done = run_shell("bash", script, tmp_path, shell_env(d.url, tmp_path))
    assert "line=git sttaus" in done.stdout and "blank=[   ]" in done.stdout
    assert "HTTP 500" in done.stderr
    assert len(backend.chat_requests) == requests_before + 1  # the blank line sent nothing


def test_propose_route_refuses_bad_input(client, backend):
    assert client.post("/v1/propose", content=b"   ").status_code == 400
    r = client.post("/v1/propose", content=b"ls", headers={"X-Cwd": "relative/dir"})
    assert r.status_code == 400 and "absolute" in r.json()["error"]
    r = client.post("/v1/propose", content=b"\xff\xfe")
    assert r.status_code == 400 and "UTF-8" in r.json()["error"]
    assert backend.chat_requests == []


@pytest.mark.parametrize(
    "reply,command",
    [
        ("ls -la", "ls -la"),
        ("```sh\ngit status\n```\nThis shows the status.", "git status"),
        ("```\ncd src\nmake\n```", "cd src && make"),
        ("$ du -sh .", "du -sh ."),
        ("`pwd`", "pwd"),
        ("", ""),
    ],
)
def test_extract_command(reply, command):
    assert extract_command(reply) == command


@pytest.mark.skipif(not shutil.which("zsh"), reason="zsh is not installed")
def test_zsh_functions_against_live_daemon(shared_daemon, backend, tmp_path):
    d = shared_daemon
    backend.queue("zsh answer", "echo proposed")
    script = (
        f'eval "$({LMD} shell-init zsh)"\ndali hello from zsh\n'
        'BUFFER="say proposed"\n__lmd_propose_line\necho "buffer=$BUFFER cursor=$CURSOR"'
    )
    done = run_shell("zsh", script, tmp_path, shell_env(d.url, tmp_path))
    assert done.stdout == "zsh answer\nbuffer=echo proposed cursor=13\n", done.stderr
    assert backend.chat_requests[0]["messages"][-1]["content"] == "hello from zsh"


@pytest.mark.skipif(not shutil.which("fish"), reason="fish is not installed")
def test_fish_functions_against_live_daemon(shared_daemon, backend, tmp_path):
    d = shared_daemon
    backend.queue("fish answer")
    script = f"{LMD} shell-init fish | source\ndali hello from fish\necho exit=$status"
    done = run_shell("fish", script, tmp_path, shell_env(d.url, tmp_path))
    assert done.stdout == "fish answer\nexit=0\n", done.stderr
    assert backend.chat_requests[-1]["messages"][-1]["content"] == "hello from fish"


@pytest.mark.parametrize("cwd", ["relative/dir", "/tmp%00/x", "%00"])
def test_propose_refuses_a_bad_working_directory(client, backend, cwd):
    """The same check as /v1's (a NUL in ?cwd= arrives over real HTTP too)."""
    r = client.post(f"/v1/propose?cwd={cwd}", content=b"list big files", headers={"X-Session": "p"})
    assert r.status_code == 400
    assert r.json()["error"] == "The working directory must be an absolute path."
    assert backend.chat_requests == []
    assert client.app.daemon.store.session("p").cwd in (None, "")
