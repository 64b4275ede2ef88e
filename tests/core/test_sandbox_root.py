"""As root, the sandbox holds too: commands run as an unprivileged user in their own user
namespace, the kernel's tunables stay unwritable, /dev is minimal and read-only, and a
`git status` whose repository carries a hook cannot change the host. Run as root (CI is);
an ordinary user's sandbox is tested in test_sandbox.py and the corpus."""

from __future__ import annotations

import asyncio
import os
import subprocess
from pathlib import Path

import pytest

from daemon.execution import sandbox
from daemon.execution.runner import run_command
from daemon.execution.sandbox import Limits, Policy, detection
from tests.daemons import LiveDaemon, configure, peak_while, say, tree_hash

pytestmark = [
    pytest.mark.bwrap,
    pytest.mark.skipif(os.geteuid() != 0, reason="these attacks need lmd to run as root"),
]

# A harmless global tunable to attack: read before, compared after, put back if ever changed.
TUNABLE = Path("/proc/sys/kernel/printk_ratelimit")


@pytest.fixture
def tunable():
    before = TUNABLE.read_text()
    yield before
    after = TUNABLE.read_text()
    if after != before:  # the protection failed: undo the damage, then fail
        TUNABLE.write_text(before)
        pytest.fail(f"a sandboxed command changed {TUNABLE} from {before!r} to {after!r}")


def run(cmd: str, cwd: Path, level: str = "read-only") -> str:
    pol = Policy(level, str(cwd), str(cwd), limits=Limits())
    return asyncio.run(run_command(cmd, str(cwd), 10, 4000, sandbox=pol)).output


def test_commands_run_as_an_unprivileged_user(tmp_path):
    """Seen from the host, every process of the sandbox runs as nobody, never as root."""
    import time

    marker = f"lmd-root-test-{os.getpid()}"
    pol = Policy("read-only", str(tmp_path), str(tmp_path), limits=Limits())
    prepared = sandbox.prepare(pol, ["/bin/sh", "-c", f"sleep 5 # {marker}"])
    proc = subprocess.Popen(prepared.argv, pass_fds=prepared.pass_fds, cwd=tmp_path)
    prepared.started()
    try:
        deadline = time.monotonic() + 5
        uids: set[int] = set()
        while time.monotonic() < deadline and not uids:
            for entry in Path("/proc").iterdir():
                try:
                    cmdline = (entry / "cmdline").read_text() if entry.name.isdigit() else ""
                    # the command itself, not the wrappers on the way in (root, then setpriv)
                    if marker in cmdline and "bwrap" not in cmdline:
                        status = (entry / "status").read_text()
                        uids.add(int(status.split("Uid:")[1].split()[0]))
                except OSError:
                    continue
    finally:
        proc.kill()
        proc.wait()
        prepared.close()
    assert uids == {sandbox.ROOT_RUNS_AS}
    assert run("id -u", tmp_path).strip() == str(sandbox.ROOT_RUNS_AS)


def test_the_kernels_tunables_and_dev_stay_unwritable(tmp_path, tunable):
    value = str(int(tunable) + 1)
    out = run(
        f"echo {value} > {TUNABLE}; echo rc=$?; "
        "echo x > /proc/sysrq-trigger; echo sysrq=$?; "
        "touch /dev/planted; echo dev=$?; "
        "head -c 70000000 /dev/zero > /dev/shm/big; echo shm=$?; "
        "ls /dev",
        tmp_path,
    )
    assert "rc=1" in out and "sysrq=1" in out and "dev=1" in out
    assert "shm=1" in out  # /dev/shm is capped (64 MiB)
    assert set(out.split("ls /dev")[-1].split()) >= {"null", "zero", "urandom"}
    assert not Path("/dev/planted").exists()


def test_a_host_fifo_of_roots_cannot_be_written(tmp_path):
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo, 0o600)
    reader = subprocess.Popen(["cat", str(fifo)], stdout=subprocess.PIPE)
    try:
        out = run(f"echo planted > {fifo}; echo rc=$?", tmp_path)
        assert "rc=1" in out
    finally:
        try:  # let the reader finish (unless a writer already did)
            os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
        except OSError:
            pass
        got = reader.communicate(timeout=5)[0]
    assert b"planted" not in got


def test_git_status_with_a_hook_in_the_repository_cannot_touch_the_kernel(
    tmp_path, tunable, home, backend
):
    """The observed attack: a repository whose config carries a hook (core.fsmonitor runs on
    `git status`); marat runs `git status` at once, in the sandbox."""
    from tests.plugins.marat.conftest import action, final

    repo = tmp_path / "repo"
    repo.mkdir()
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    (repo / "a.txt").write_text("a\n")
    git = ["git", "-C", str(repo), "-c", "user.email=t@example.com", "-c", "user.name=T"]
    subprocess.run([*git, "add", "a.txt"], check=True)
    subprocess.run([*git, "commit", "-qm", "start"], check=True)  # an index: the hook runs
    # the hook writes the tunable and leaves a mark in /tmp (the sandbox's own, or the host's)
    hook = f"sh -c 'echo {int(tunable) + 1} > {TUNABLE}; touch {repo}/pwned'"
    subprocess.run(["git", "-C", str(repo), "config", "core.fsmonitor", hook], check=True)
    subprocess.run(["chmod", "-R", "o+rX", str(repo)], check=True)
    before = tree_hash(repo)
    configure(home, marat_approval="unsafe", sandbox_level="read-only")
    backend.queue(action("git status"), final("Clean."))
    d = LiveDaemon(home, {"LMD_TOKENIZER": "estimate"})
    try:
        import json
        import urllib.request

        req = urllib.request.Request(
            d.url + "/v1",
            b"marat git status please",
            {"Accept": "application/json", "X-Cwd": str(repo)},
            method="POST",
        )
        with urllib.request.urlopen(req, timeout=60) as r:
            body = json.loads(r.read())
        assert body["pending"] is None  # it ran at once, sandboxed
        assert say(d.url, "other", "dali still here?")[0] == 200  # the daemon answers
    finally:
        d.stop()
    assert not (repo / "pwned").exists() and tree_hash(repo) == before


def test_memory_is_limited_for_the_whole_command_not_each_process(tmp_path):
    """Four `tail /dev/zero` in a pipeline each stay under the per-process limit; together
    they may not pass it: the command's memory cgroup holds the sum."""
    found = sandbox.detect()
    assert found.memory_cgroup, found.warnings
    limit_mb = 200
    pol = Policy("read-only", str(tmp_path), str(tmp_path), limits=Limits(memory_mb=limit_mb))

    def used() -> int:
        most = 0
        for group in Path(found.memory_cgroup).glob("cmd-*"):
            # only this command's group (other tests' commands run meanwhile, larger)
            for limit_file in ("memory.limit_in_bytes", "memory.max"):
                try:
                    mine = int((group / limit_file).read_text()) == limit_mb * 2**20
                except (OSError, ValueError):
                    continue
                break
            else:
                continue
            if not mine:
                continue
            for name in ("memory.usage_in_bytes", "memory.current"):
                try:
                    most = max(most, int((group / name).read_text()))
                except (OSError, ValueError):
                    continue
        return most

    with peak_while(used, 0.02) as peak:
        r = asyncio.run(
            run_command(
                "tail /dev/zero | tail /dev/zero | tail /dev/zero | tail /dev/zero; echo end=$?",
                str(tmp_path),
                30,
                4000,
                sandbox=pol,
            )
        )
    assert not r.timed_out and "end=" in r.output  # the cgroup ended it, not the timeout
    assert limit_mb * 0.5 * 2**20 < peak["most"] <= limit_mb * 1.02 * 2**20, peak


def test_sys_stays_unwritable(tmp_path):
    """/sys is part of the read-only root, and nobody may not write root's files there."""
    knob = Path("/sys/module/printk/parameters/time")
    if not knob.exists():
        pytest.skip(f"{knob} is not on this kernel")
    value = knob.read_text().strip()
    try:  # the same value back: root on the host may, so the sandbox's refusal means something
        knob.write_text(value)
    except OSError as e:
        pytest.skip(f"{knob} is not writable here even for root ({e})")
    out = run(f"echo {value} > {knob}; echo rc=$?", tmp_path)
    assert "rc=1" in out and knob.read_text().strip() == value


def test_a_directory_nobody_may_enter_asks_saying_why(tmp_path, make_client, backend):
    """As root, marat's read-only command would run as nobody, who cannot enter a directory
    only root may: it asks instead of running, and says why."""
    from tests.plugins.marat.conftest import action

    private = tmp_path / "private"
    private.mkdir(mode=0o700)
    backend.queue(action("ls"))
    c = make_client(marat_approval="unsafe", sandbox_level="read-only")
    r = c.post(
        "/v1",
        content="marat list the files",
        headers={"Accept": "application/json", "X-Cwd": str(private)},
    )
    body = r.json()
    assert body["pending"] is not None and body["pending"]["command"] == "ls"
    assert "who may not enter" in body["reply"] and str(private) in body["reply"]


def test_without_setpriv_there_is_no_sandbox_and_everything_asks(monkeypatch):
    """As root the sandbox needs setpriv to drop to nobody; without it, no sandbox (so every
    command asks), never a sandbox whose commands run as root."""
    which = detection.shutil.which
    monkeypatch.setattr(
        detection.shutil, "which", lambda name, *a, **k: None if name == "setpriv" else which(name)
    )
    try:
        found = sandbox.detect(refresh=True)
    finally:
        monkeypatch.undo()
        sandbox.detect(refresh=True)
    assert not found.available
    assert "needs setpriv" in found.reason and "util-linux" in found.remedy
