"""Private files stay private: LMD_HOME 0700, the database, its WAL files and the token 0600
(loose ones fixed on start with one log line); the token file's life (created, reused, given
by LMD_TOKEN or --token-file, refused when others can read it); outputs follow the umask."""

from __future__ import annotations

import logging
import os
import re
import stat
import subprocess
import sys

import pytest

from daemon.core.errors import LmdError
from daemon.core.home import TOKEN_SHAPE
from daemon.core.paths import write_atomic
from daemon.core.private import secure_home, server_token
from tests.daemons import ROOT, free_port


def mode(path) -> int:
    return stat.S_IMODE(os.lstat(path).st_mode)


def serve(home, *args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    """`lmd serve` that is expected to stop by itself (a refusal)."""
    bind = [] if "--bind" in args else ["--bind", f"127.0.0.1:{free_port()}"]
    return subprocess.run(
        [sys.executable, "-m", "daemon.cli", "serve", "--home", str(home), *bind, *args],
        capture_output=True,
        text=True,
        timeout=30,
        cwd=ROOT,
        env={**os.environ, **(env or {})},
    )


def test_loose_home_and_files_are_fixed_on_start_with_one_log_line(home, live):
    (home / "token").write_text("an-old-token-that-is-long-enough\n")
    for name in ("lmd.db-wal", "lmd.db-shm"):
        (home / name).touch()
        os.chmod(home / name, 0o644)
    os.chmod(home, 0o755)
    for name, loose in (("lmd.db", 0o644), ("token", 0o644), ("lmd.db-wal", 0o666)):
        os.chmod(home / name, loose)
    d = live()
    assert mode(home) == 0o700
    for name in ("lmd.db", "lmd.db-wal", "lmd.db-shm", "token"):
        assert mode(home / name) == 0o600, name
    lines = [line for line in d.output().splitlines() if "others could read" in line]
    assert len(lines) == 1, d.output()
    assert lines[0].endswith(
        f"others could read lmd's private files; fixed: {home} 755 -> 700, "
        "lmd.db 644 -> 600, lmd.db-wal 666 -> 600, lmd.db-shm 644 -> 600, token 644 -> 600"
    )
    # The old token is still the token.
    assert (home / "token").read_text() == "an-old-token-that-is-long-enough\n"


def test_in_process_daemons_tighten_too(home):
    from starlette.testclient import TestClient

    from daemon.http.app import create_app

    os.chmod(home, 0o750)
    os.chmod(home / "lmd.db", 0o640)
    with TestClient(create_app(home=home), base_url="http://127.0.0.1:8420"):
        assert mode(home) == 0o700 and mode(home / "lmd.db") == 0o600


def test_a_home_owned_by_another_user_is_refused(tmp_path):
    if os.geteuid() != 0:
        pytest.skip("giving a directory to another user needs root")
    home = tmp_path / "theirs"
    home.mkdir()
    os.chown(home, 65534, 65534)
    with pytest.raises(LmdError) as e:
        secure_home(home)
    assert e.value.message == (
        f"{home} belongs to another user (uid 65534); lmd keeps private history there, so "
        "give it a directory of your own with --home or LMD_HOME."
    )


def test_the_token_file_is_created_private_and_kept(tmp_path, caplog):
    home = tmp_path / "new-home"
    with caplog.at_level(logging.INFO, logger="lmd.home"):
        token, source = server_token(home, environ={})
    assert source == str(home / "token") and mode(home) == 0o700
    assert (home / "token").read_text() == token + "\n" and mode(home / "token") == 0o600
    assert TOKEN_SHAPE.fullmatch(token) and len(token) == 43  # 32 random bytes
    assert f"created a new token in {home / 'token'}" in caplog.text
    assert token not in caplog.text  # the log names the file, never the token
    caplog.clear()
    assert server_token(home, environ={}) == (token, source)  # kept across restarts
    assert "created" not in caplog.text


def test_an_explicit_token_is_written_where_clients_look(tmp_path):
    home = tmp_path / "home"
    assert server_token(home, environ={"LMD_TOKEN": " from-the-env-0123 "}) == (
        "from-the-env-0123",
        "LMD_TOKEN",
    )
    assert (home / "token").read_text() == "from-the-env-0123\n"
    secret = tmp_path / "secret-token"
    secret.write_text("  a-token-from-a-file-42  \n")
    secret.chmod(0o600)
    token, source = server_token(home, secret, environ={"LMD_TOKEN": "loses-to-the-file"})
    assert (token, source) == ("a-token-from-a-file-42", f"the file {secret}")
    assert (home / "token").read_text() == "a-token-from-a-file-42\n"
    assert mode(home / "token") == 0o600


def test_token_file_option_end_to_end(live, home, tmp_path, backend):
    """`--token-file` and `--no-peer-auth`: only the token gets in, and `lmd say` finds it in
    LMD_HOME/token by itself; from another LMD_HOME it cannot."""
    from click.testing import CliRunner

    from daemon.cli import cli

    secret = tmp_path / "secret-token"
    secret.write_text("a-token-from-a-file-42\n")
    secret.chmod(0o600)
    d = live(args=["--token-file", str(secret), "--no-peer-auth"])
    assert (home / "token").read_text() == "a-token-from-a-file-42\n"
    backend.queue("heard you")
    said = CliRunner().invoke(
        cli, ["say", "dali hi"], env={"LMD_URL": d.url, "LMD_HOME": str(home)}
    )
    assert said.stdout == "heard you\n", said.stderr
    elsewhere = {"LMD_URL": d.url, "LMD_HOME": str(tmp_path / "elsewhere")}
    said = CliRunner().invoke(cli, ["say", "dali hi"], env=elsewhere)
    assert said.exit_code == 1 and said.stderr.startswith("This lmd needs its token")


@pytest.mark.parametrize(
    ("content", "file_mode", "sentence"),
    [
        ("a-fine-token-0123456789", 0o644, "is readable by other users (mode 644); run `chmod"),
        ("", 0o600, "is empty; put a long random token in it"),
        ("two words here", 0o600, "holds characters an HTTP header cannot carry"),
        ("tok\x1b[31men-0123456789", 0o600, "holds characters an HTTP header cannot carry"),
        (None, None, "does not exist; create it, or leave the option out"),
        ("symlink", 0o600, "cannot be read"),
    ],
    ids=["loose", "empty", "spaces", "escape", "missing", "symlink"],
)
def test_bad_token_files_are_refused(tmp_path, content, file_mode, sentence):
    path = tmp_path / "tok"
    if content == "symlink":
        real = tmp_path / "real"
        real.write_text("a-fine-token-0123456789")
        real.chmod(0o600)
        path.symlink_to(real)
    elif content is not None:
        path.write_text(content)
        path.chmod(file_mode)
    with pytest.raises(LmdError) as e:
        server_token(tmp_path / "home", path, environ={})
    assert e.value.message.startswith(f"The token file {path} ")
    assert sentence in e.value.message


@pytest.mark.parametrize(
    "value", ["has space-0123456789", "tab\there-0123456789", "é-0123456789abc"]
)
def test_bad_lmd_token_is_refused(tmp_path, value):
    with pytest.raises(LmdError) as e:
        server_token(tmp_path / "home", environ={"LMD_TOKEN": value})
    assert e.value.message.startswith("LMD_TOKEN holds characters an HTTP header cannot carry")


def test_serve_refuses_a_bad_token_with_exit_2(home, tmp_path):
    loose = tmp_path / "tok"
    loose.write_text("a-fine-token-0123456789")
    loose.chmod(0o640)
    done = serve(home, "--token-file", str(loose))
    assert done.returncode == 2
    assert done.stderr == (
        f"The token file {loose} is readable by other users (mode 640); run "
        f"`chmod 600 {loose}` and start again.\n"
    )


def test_outputs_follow_the_umask_and_secrets_do_not(tmp_path):
    old = os.umask(0o022)
    try:
        write_atomic(tmp_path / "report.html", "<html></html>")
        assert mode(tmp_path / "report.html") == 0o644
        os.umask(0o077)
        write_atomic(tmp_path / "private.csv", "a,b\n")
        assert mode(tmp_path / "private.csv") == 0o600
        os.umask(0o022)
        (tmp_path / "kept.csv").write_text("old")
        os.chmod(tmp_path / "kept.csv", 0o640)
        write_atomic(tmp_path / "kept.csv", "new")  # a replaced file keeps its mode
        assert mode(tmp_path / "kept.csv") == 0o640
        assert (tmp_path / "kept.csv").read_text() == "new"
        write_atomic(tmp_path / "token", "s3cret", secret=True)
        assert mode(tmp_path / "token") == 0o600
    finally:
        os.umask(old)
    assert not [p for p in os.listdir(tmp_path) if re.search(r"\.tmp$", p)]  # no leftovers
