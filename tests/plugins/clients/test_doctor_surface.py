"""`lmd doctor` on the daemon's surface: a token on a running lmd's command line (visible to
every user in `ps`), a token file or database others can read, and a private setup."""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

from tests.daemons import closed_port

LMD = str(Path(sys.executable).parent / "lmd")


def alone() -> list[str]:
    """A prefix that runs a command in a PID namespace of its own with its own /proc, where it
    sees no other test's lmd (test_server's `serve --token abc`, refused within a second, was
    once seen by the token check of a test running beside it); empty where none can be had."""
    if os.geteuid() == 0 and shutil.which("unshare"):
        probe = subprocess.run(["unshare", "--pid", "--fork", "--mount-proc", "true"])
        if probe.returncode == 0:
            return ["unshare", "--pid", "--fork", "--mount-proc"]
    return []


def doctor(home: Path, isolated: bool = True, **env: str) -> dict[str, dict]:
    environ = {k: v for k, v in os.environ.items() if not k.startswith(("LMD_", "OPENAI_"))}
    environ.update({"LMD_TOKENIZER": "estimate", "LMD_URL": f"http://127.0.0.1:{closed_port()}"})
    environ.update(env)
    done = subprocess.run(
        [*(alone() if isolated else []), LMD, "doctor", "--offline", "--json", "--home", str(home)],
        capture_output=True,
        text=True,
        timeout=60,
        env=environ,
    )
    return {f["check"]: f for f in json.loads(done.stdout)}


def test_a_private_setup_is_ok(home):
    (home / "token").write_text("a-private-token-0123456789\n")
    (home / "token").chmod(0o600)
    found = doctor(home)
    assert found["files"]["status"] == "ok"
    assert found["token"] == {
        "check": "token",
        "status": "ok",
        "message": f"The token is in {home / 'token'}, readable by you only.",
    }


def test_loose_files_are_warned_about(home):
    (home / "token").write_text("a-private-token-0123456789\n")
    (home / "token").chmod(0o644)
    os.chmod(home, 0o755)
    found = doctor(home)
    assert found["files"]["status"] == "warn"
    assert f"Other users can read {home} (755)" in found["files"]["message"]
    assert f"{home / 'token'} (644)" in found["files"]["message"]
    assert found["token"]["status"] == "warn"
    assert found["token"]["message"] == (
        f"The token file {home / 'token'} is readable by other users (mode 644); run "
        f"`chmod 600 {home / 'token'}`."
    )


@contextlib.contextmanager
def disguised_lmd(home: Path) -> Iterator[int]:
    """A process that looks like `lmd serve --home HOME --token abc` in `ps` (an older lmd,
    or a wrapper), running while the block runs; its pid."""
    code = (
        f'exec -a lmd {sys.executable} -c "import time; time.sleep(60)" '
        f"serve --home {home} --token abc"
    )
    fake = subprocess.Popen(["bash", "-c", code])
    try:
        deadline = time.time() + 10
        cmdline = Path(f"/proc/{fake.pid}/cmdline")
        while not cmdline.read_bytes().startswith(b"lmd\0") and time.time() < deadline:
            time.sleep(0.01)  # until bash has exec'd the disguised python
        yield fake.pid
    finally:
        fake.kill()
        fake.wait()


def test_a_token_on_a_running_lmds_command_line_is_warned_about(home, tmp_path):
    """An older lmd (or a wrapper) started as `lmd serve --token ...`: anyone sees it."""
    with disguised_lmd(home) as pid:
        found = doctor(home, isolated=False)  # it must see the fake
    assert found["token"]["status"] == "warn"
    # another test's lmd may be named beside it: the sentence, and the fake among the pids
    said = re.fullmatch(
        r"A running lmd \(pid ([\d, ]+)\) got its token on the command line, where every "
        r"user sees it in `ps`; restart it with --token-file FILE or LMD_TOKEN, and pick a "
        r"new token\.",
        found["token"]["message"],
    )
    assert said and str(pid) in said.group(1).split(", "), found["token"]["message"]


def test_a_token_on_another_homes_lmd_is_not_this_homes_warning(home, tmp_path):
    """A daemon of another home (a test's, another project's) is not what this home's doctor
    warns about: its token opens another database."""
    with disguised_lmd(tmp_path / "elsewhere") as pid:
        found = doctor(home, isolated=False)
    assert found["token"]["status"] == "ok" and str(pid) not in found["token"]["message"]
