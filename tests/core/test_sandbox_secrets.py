"""Secrets stay unreadable from a sandboxed command: shell histories and the common secret
files, every lmd home this user's daemons have used (not only the running one), and a token
file given with --token-file wherever it lies. Read back with cat, rev, tac and base64."""

from __future__ import annotations

import asyncio

import pytest

from daemon.core.private import known_homes, register_home
from daemon.execution import sandbox
from daemon.execution.runner import run_command

pytestmark = pytest.mark.bwrap

KEY = "sk-live-3f9a8b7c6d5e4f3a2b1c0d9e8f7a6b5c"


class Settings(dict):
    """The settings policy_from_settings reads."""


def settings() -> Settings:
    return Settings(
        sandbox_hide_paths=[],
        sandbox_memory_mb=512,
        sandbox_cpu_secs=10,
        sandbox_file_size_mb=64,
        sandbox_max_processes=64,
    )


def test_histories_other_homes_and_token_files_are_hidden(tmp_path, monkeypatch):
    home = tmp_path / "me"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("XDG_STATE_HOME", str(home / ".local" / "state"))
    secrets = {
        home / ".bash_history": f"curl -H 'Authorization: Bearer {KEY}' api\n",
        home / ".zsh_history": f": 1:0;export OPENAI_API_KEY={KEY}\n",
        home / ".local/share/fish/fish_history": f"- cmd: set -x KEY {KEY}\n",
        home / ".pgpass": f"db:5432:*:me:{KEY}\n",
        home / ".npmrc": f"//registry.npmjs.org/:_authToken={KEY}\n",
        tmp_path / "second-home" / "token": f"{KEY}\n",  # another daemon's LMD_HOME
        tmp_path / "etc" / "lmd.token": f"{KEY}\n",  # a --token-file outside any home
    }
    for path, text in secrets.items():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    register_home(tmp_path / "second-home", tmp_path / "etc" / "lmd.token")
    assert str((tmp_path / "second-home").resolve()) in known_homes()
    work = home / "project"
    work.mkdir()
    for d in (tmp_path, home, work):
        d.chmod(0o755)  # as root the command runs as nobody: let it in, as a user's home is
    policy = sandbox.policy_from_settings(
        settings(), sandbox.READ_ONLY, str(work), str(tmp_path / "running-home"), str(home)
    )
    reads = " ; ".join(
        f"{tool} {path} 2>&1" for path in secrets for tool in ("cat", "rev", "tac", "base64")
    )
    out = asyncio.run(run_command(reads, str(work), 20, 100_000, sandbox=policy)).output
    assert KEY not in out and KEY[::-1] not in out
    import base64

    assert base64.b64encode(KEY.encode()).decode()[:20] not in out
    # and they are still there for the user
    assert all(path.read_text() == text for path, text in secrets.items())


def test_the_registry_of_homes_forgets_deleted_ones(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    first, second = tmp_path / "first", tmp_path / "second"
    first.mkdir()
    second.mkdir()
    register_home(first)
    assert known_homes() == [str(first.resolve())]
    first.rmdir()
    register_home(second)
    assert known_homes() == [str(second.resolve())]
    mode = (tmp_path / "state" / "lmd" / "homes").stat().st_mode & 0o777
    assert mode == 0o600


def test_the_running_daemons_token_file_is_hidden_without_the_registry(tmp_path, monkeypatch):
    """The registry cannot be written (a read-only home, a full disk): the daemon's own token
    file, given with --token-file outside any home, stays hidden all the same."""
    from daemon.core import private

    blocked = tmp_path / "state"
    blocked.write_text("a file where the registry's folder would go\n")
    monkeypatch.setenv("XDG_STATE_HOME", str(blocked))
    monkeypatch.setattr(private, "_REGISTERED", [])
    token_file = tmp_path / "etc" / "lmd.token"
    token_file.parent.mkdir()
    token_file.write_text(f"{KEY}\n")
    register_home(tmp_path / "running-home", token_file)
    assert known_homes() == []  # nothing could be listed
    for d in (tmp_path, token_file.parent):
        d.chmod(0o755)  # as root the command runs as nobody: only the hiding may stop it
    token_file.chmod(0o644)
    policy = sandbox.policy_from_settings(settings(), sandbox.READ_ONLY, str(tmp_path))
    out = asyncio.run(
        run_command(
            f"cat {token_file} 2>&1; rev {token_file}", str(tmp_path), 20, 4000, sandbox=policy
        )  # fmt: skip
    ).output
    assert KEY not in out and KEY[::-1] not in out
