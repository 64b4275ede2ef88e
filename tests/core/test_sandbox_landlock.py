"""Landlock: a read-only mount does not stop opening a named pipe (FIFO) for writing, so the
sandbox applies Landlock before the command runs. A FIFO of the daemon's user outside the
sandbox's writable places refuses the writer, and its reader sees nothing; /tmp and (at
workspace-write) the workspace stay writable. Run as root (commands run as nobody), as a
second, ordinary Unix user, and directly when the suite runs as an ordinary user."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from daemon.execution import sandbox
from daemon.execution.sandbox import landlock

pytestmark = pytest.mark.bwrap

# Runs as whoever lmd runs as: makes a FIFO outside the workspace, keeps a reader on it, runs
# one sandboxed command that tries to write it and writes /tmp and the workspace, and prints
# what the command said and what the reader got.
SCRIPT = r"""
import os, subprocess, sys
sys.path.insert(0, os.environ["SANDBOX_DIR"])
from daemon.execution import sandbox
from daemon.execution.sandbox.staging import discard, new_stage
found = sandbox.detect()
assert found.kind == "bwrap", found
if found.landlock is None:
    print("NO LANDLOCK:", found.sentence())
    sys.exit(3)
work = os.environ["WORK"]
outside, ws = os.path.join(work, "outside"), os.path.join(work, "ws")
os.makedirs(outside, exist_ok=True)
os.makedirs(os.path.join(ws, "a"), exist_ok=True)
os.makedirs(os.path.join(ws, "b"), exist_ok=True)
for d in (ws, os.path.join(ws, "a"), os.path.join(ws, "b")):
    os.chmod(d, 0o777)  # as root, the command runs as nobody
fifo = os.path.join(outside, "pipe")
os.mkfifo(fifo)
os.chmod(fifo, 0o666)  # open to anyone (past the umask): only the sandbox stands in the way
reader = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)  # a writer's open then never blocks
pol = sandbox.Policy("workspace-write", ws, work, writable=(ws,), limits=sandbox.Limits())
cmd = (f"echo planted > {fifo}; echo fifo=$?; "
       "echo t > /tmp/t && cat /tmp/t && echo tmp=ok; "
       "echo w > a/f && mv a/f b/f && cat b/f && echo ws=ok; "
       "echo n > /dev/null && echo null=ok")
stage = new_stage(ws, os.path.join(work, "staged"))  # its writes land in the stage
p = sandbox.prepare(pol, ["bash", "-c", cmd], found, stage)
r = subprocess.run(p.argv, pass_fds=p.pass_fds, capture_output=True, text=True, cwd=ws,
                   env=sandbox.command_env(ws), timeout=30)
p.close()
discard(stage.dir)
try:
    got = os.read(reader, 100)
except BlockingIOError:
    got = b""
print(r.stdout + r.stderr)
print("reader got:", repr(got))
"""


def attempt(run_as: list[str], python: str, sandbox_dir: Path) -> str:
    """Run SCRIPT (as `run_as`, e.g. setpriv to another user) in a fresh directory that others
    may enter; its output."""
    # Not under /tmp: there the sandbox binds the tree holding the working directory back into
    # its private /tmp, which is writable as a whole (see docs/sandbox.md); pytest's is 0700.
    work = Path(tempfile.mkdtemp(prefix="lmd-landlock-", dir="/var/tmp"))
    try:
        work.chmod(0o777)
        done = subprocess.run(
            [*run_as, python, "-c", SCRIPT],
            capture_output=True,
            text=True,
            cwd="/",
            env={"PATH": os.environ["PATH"], "SANDBOX_DIR": str(sandbox_dir), "WORK": str(work)},
            timeout=90,
        )
    finally:
        shutil.rmtree(work, ignore_errors=True)
    if done.returncode == 3:
        pytest.skip(done.stdout.strip())
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def assert_refused(out: str) -> None:
    assert "pipe: Permission denied" in out and "fifo=1" in out, out
    assert "reader got: b''" in out, out
    assert "tmp=ok" in out and "ws=ok" in out and "null=ok" in out, out
    assert "\nw\n" in out  # the file moved between two directories of the workspace


def test_a_fifo_of_lmds_own_user_refuses_a_sandboxed_writer():
    """As root, commands run as nobody; the FIFO is root's but open to anyone (0666)."""
    root = Path(sandbox.__file__).resolve().parents[3]
    assert_refused(attempt([], sys.executable, root))


def test_a_fifo_of_an_ordinary_users_daemon_refuses_a_sandboxed_writer(request):
    """lmd run by an ordinary user: the FIFO is that user's own (no uid change stops it)."""
    if os.geteuid() != 0 or not shutil.which("setpriv") or not os.path.exists("/usr/bin/python3"):
        pytest.skip("needs root, setpriv and /usr/bin/python3 to act as a second user")
    name = "lmdsbx"
    if subprocess.run(["id", name], capture_output=True).returncode != 0:
        if subprocess.run(["useradd", "-M", "-s", "/bin/sh", name]).returncode != 0:
            pytest.skip("useradd failed")
    # lmd's core and its Landlock applier as files the second user can read and run (the venv
    # lives under /root)
    found = sandbox.detect()
    if found.landlock is None:
        pytest.skip(found.sentence())
    copy = Path(tempfile.mkdtemp(prefix="lmd-landlock-src-"))
    request.addfinalizer(lambda: shutil.rmtree(copy, ignore_errors=True))
    daemon_dir = Path(sandbox.__file__).resolve().parents[2]
    shutil.copytree(daemon_dir, copy / "daemon", ignore=shutil.ignore_patterns("__pycache__"))
    # the helpers root's detection found (beside their source, or in /var/cache/lmd), beside
    # the copy's source: the second user has no home to build them in
    for helper in (Path(found.landlock), Path(found.stage or "")):
        if helper.name:
            shutil.copy2(helper, copy / "daemon" / "execution" / "sandbox" / helper.name)
    for p in [copy, *copy.rglob("*")]:
        helper = p.name.startswith(("lmd-landlock-", "lmd-stage-"))
        p.chmod(0o755 if p.is_dir() or helper else 0o644)
    setpriv = ["setpriv", f"--reuid={name}", f"--regid={name}", "--clear-groups"]
    out = attempt(setpriv, "/usr/bin/python3", copy)
    assert_refused(out)


def test_without_landlock_the_sandbox_says_fifos_are_not_covered(tmp_path, monkeypatch):
    """An applier that does not build (here: a source the compiler rejects) leaves today's
    sandbox, and the description lmd doctor prints says what is not covered."""
    broken = tmp_path / "landlock.c"
    broken.write_text("#error this kernel's headers are too old\n")
    monkeypatch.setattr(landlock, "LANDLOCK_SOURCE", broken)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    try:
        found = sandbox.detect(refresh=True)
    finally:
        monkeypatch.undo()
        sandbox.detect(refresh=True)
    assert found.available and found.landlock is None
    said = found.sentence()
    assert "Named pipes (FIFOs)" in said and "can still be opened for writing" in said
    assert "does not build" in said and "too old" in said
    pol = sandbox.Policy("read-only", str(tmp_path), str(tmp_path))
    prepared = sandbox.prepare(pol, ["true"], found)
    prepared.close()
    assert not any("lmd-landlock" in a for a in prepared.argv)


@pytest.mark.skipif(os.geteuid() != 0, reason="commands run as nobody only when lmd is root")
def test_as_root_an_applier_nobody_cannot_reach_is_built_where_nobody_can(tmp_path, monkeypatch):
    """lmd installed under /root (a 0700 place): nobody could not run an applier built next
    to it or in root's cache, so it is built in /var/cache/lmd."""
    private = tmp_path / "private"
    private.mkdir(mode=0o700)
    source = private / "lib" / "landlock.c"
    source.parent.mkdir()
    shutil.copy(sandbox.LANDLOCK_SOURCE, source)
    monkeypatch.setattr(landlock, "LANDLOCK_SOURCE", source)
    monkeypatch.setenv("XDG_CACHE_HOME", str(private / "cache"))
    helper, problem = sandbox.landlock_helper(unprivileged=True)
    assert problem == "" and helper is not None
    assert helper.startswith("/var/cache/lmd/lmd-landlock-"), helper
