"""Whether a sandbox can be had here, found out once per process, and in words why (not):
bubblewrap on Linux (with its features, the seccomp filter, cgroups, Landlock, and as root
setpriv), sandbox-exec on macOS, none elsewhere."""

from __future__ import annotations

import dataclasses
import os
import platform
import re
import shutil
import stat
import subprocess
import sys
import tempfile
from dataclasses import dataclass

from .bwrap import prepare_bwrap
from .cgroups import memory_cgroup_base, pids_cgroup_base
from .environment import command_env
from .helpers import find_helper
from .landlock import landlock_helper
from .policy import NONE, READ_ONLY, WORKSPACE_WRITE, Limits, Policy, _user_name
from .seccomp import seccomp_program
from .staging import Stage, discard, new_stage

APT_HINT = "install the bubblewrap package (apt install bubblewrap, or dnf install bubblewrap)"


@dataclass(frozen=True)
class Availability:
    """Whether a sandbox can be had here, and in words why (not)."""

    kind: str  # bwrap | seatbelt | none
    reason: str  # a sentence: what is used, or why there is none
    remedy: str = ""  # a sentence: how to get one
    binary: str | None = None
    features: frozenset[str] = frozenset()  # bwrap options this version knows
    seccomp: bool = False
    pids_cgroup: str | None = None  # root only: where per-command pids cgroups are made
    warnings: tuple[str, ...] = ()
    setpriv: str | None = None  # root only: how commands become ROOT_RUNS_AS before bwrap
    memory_cgroup: str | None = None  # where per-command memory cgroups are made, if anywhere
    landlock: str | None = None  # the Landlock applier run first inside the sandbox, if any
    stage: str | None = None  # lmd-stage: how a writing command's writes are staged, if at all
    stage_problem: str = ""  # why they cannot be (then no command writes without a yes)

    @property
    def available(self) -> bool:
        return self.kind != NONE

    def sentence(self) -> str:
        """One line for the start-up message and `lmd doctor`."""
        if not self.available:
            return f"no sandbox: {self.reason} To get one, {self.remedy}."
        text = self.reason
        if self.warnings:
            text += " " + " ".join(self.warnings)
        return text


_cache: dict[tuple, Availability] = {}


def bwrap_binary() -> str | None:
    """LMD_BWRAP names the bubblewrap binary (a path or a name on PATH); default `bwrap`."""
    wanted = os.environ.get("LMD_BWRAP") or "bwrap"
    found = shutil.which(wanted)
    return os.path.realpath(found) if found else None


def detect(refresh: bool = False) -> Availability:
    """Find out (once per process, per LMD_BWRAP) whether a sandbox can be had."""
    key = (sys.platform, os.environ.get("LMD_BWRAP"), os.geteuid())
    if not refresh and key in _cache:
        return _cache[key]
    if sys.platform.startswith("linux"):
        found = _detect_bwrap()
    elif sys.platform == "darwin":
        found = detect_seatbelt()
    else:
        found = Availability(
            NONE,
            f"lmd knows no command sandbox for {platform.system() or sys.platform}.",
            "run lmd on Linux with bubblewrap or on macOS",
        )
    _cache[key] = found
    return found


def _detect_bwrap() -> Availability:
    binary = bwrap_binary()
    if binary is None:
        named = os.environ.get("LMD_BWRAP")
        where = (
            f"LMD_BWRAP names {named}, which does not exist" if named else "bwrap is not installed"
        )
        return Availability(NONE, f"{where}.", APT_HINT)
    try:
        helptext = subprocess.run(
            [binary, "--help"], capture_output=True, text=True, timeout=30
        ).stdout
    except (OSError, subprocess.SubprocessError) as e:
        return Availability(NONE, f"{binary} does not run ({e}).", APT_HINT)
    features = frozenset(re.findall(r"^\s+(--[\w-]+)", helptext, re.M))
    seccomp = seccomp_program() is not None and "--seccomp" in features
    setpriv = None
    if os.geteuid() == 0:
        setpriv = shutil.which("setpriv")
        if setpriv is None:
            return Availability(
                NONE,
                "lmd runs as root, and a sandbox that runs commands as root leaves the kernel's "
                "tunables writable; sandboxed commands run as an unprivileged user, which "
                "needs setpriv (util-linux), and it is not installed.",
                "install util-linux (apt install util-linux), or run lmd as an ordinary user",
                binary=binary,
            )
    found = Availability(
        "bwrap",
        "",
        binary=binary,
        features=features,
        seccomp=seccomp,
        pids_cgroup=pids_cgroup_base() if os.geteuid() == 0 else None,
        setpriv=setpriv,
        memory_cgroup=memory_cgroup_base(),
    )
    landlock, landlock_problem = landlock_helper(bool(setpriv))
    problem = _probe(found)
    if problem is None and landlock:
        with_landlock = dataclasses.replace(found, landlock=landlock)
        failed = _probe(with_landlock)
        if failed is None:
            found = with_landlock
        else:
            landlock_problem = f"Landlock does not work inside bwrap here ({failed})"
    stage, stage_problem = _probe_staging(found) if problem is None else (None, "")
    found = dataclasses.replace(found, stage=stage, stage_problem=stage_problem)
    if problem:
        return Availability(
            NONE,
            f"bwrap cannot build its sandbox here ({problem}).",
            "allow unprivileged user namespaces (sysctl kernel.unprivileged_userns_clone=1, or "
            "kernel.apparmor_restrict_unprivileged_userns=0 on Ubuntu); inside Docker, run the "
            "container with --security-opt seccomp=unconfined --security-opt "
            "apparmor=unconfined, or start lmd outside the container",
            binary=binary,
        )
    warnings = []
    if not seccomp:
        warnings.append(
            "Unix sockets are not blocked (no seccomp filter for this machine or bwrap)."
        )
    if found.landlock is None:
        whose = "root's (writable by nobody)" if setpriv else "yours"
        warnings.append(
            f"Named pipes (FIFOs) and device files of {whose} outside the hidden places and the "
            f"private /tmp can still be opened for writing: {landlock_problem}."
        )
    if found.stage is None:
        warnings.append(
            "A command's writes cannot be staged here, so no command writes anything without "
            f"your yes (rules at workspace-write ask instead): {stage_problem}."
        )
    if os.geteuid() == 0 and found.pids_cgroup is None:
        warnings.append(
            "lmd runs as root and no pids cgroup can be made, so the process limit is not "
            "enforced (the kernel ignores it for root); run lmd as an ordinary user."
        )
    if "--size" not in features:
        warnings.append(
            "This bwrap cannot cap the size of a tmpfs (--size came with bubblewrap 0.8), so the "
            "sandbox's private /tmp is bounded only by the command's memory limit, its /dev is "
            "bubblewrap's own (uncapped, read-only), and it gets no /dev/shm; install a newer "
            "bubblewrap."
        )
    how = "a pids cgroup" if found.pids_cgroup else "a per-sandbox rlimit"
    memory = (
        "a memory cgroup for the whole command"
        if found.memory_cgroup
        # no cgroup can be made here (an ordinary user without a delegated one)
        else "the whole command's, watched by lmd 20 times a second"
    )
    reason = (
        f"Commands that run without asking run in a bubblewrap sandbox ({binary}; processes "
        f"limited by {how}, memory {memory})."
    )
    if setpriv:
        reason = reason[:-2] + f"; as root, they run as the unprivileged user {_user_name()})."
    if found.landlock:
        reason = reason[:-2] + (
            "; Landlock refuses opening for writing, named pipes included, outside its writable "
            "places)."
        )
    if found.stage:
        reason = reason[:-2] + (
            "; a command that may write a tree writes a staged copy, and lmd keeps only what "
            "its rule allows)."
        )
    return Availability(
        "bwrap",
        reason,
        binary=binary,
        features=features,
        seccomp=seccomp,
        pids_cgroup=found.pids_cgroup,
        warnings=tuple(warnings),
        setpriv=setpriv,
        memory_cgroup=found.memory_cgroup,
        landlock=found.landlock,
        stage=found.stage,
        stage_problem=found.stage_problem,
    )


def scratch_parent() -> str | None:
    """Where lmd's own scratch folders for sandboxed runs go (None: the temporary directory).
    As root, commands run as an unprivileged user, who must pass through the folder's
    parents: a private TMPDIR (0700, as some services and containers set it) would shut it
    out, so the first of TMPDIR, /tmp and /var/tmp that everyone may pass through."""
    if os.geteuid() != 0:
        return None
    for candidate in (tempfile.gettempdir(), "/tmp", "/var/tmp"):
        if _passable(candidate):
            return candidate
    return None


def _passable(path: str) -> bool:
    """Whether every folder from / down to `path` lets others pass through (o+x)."""
    here = os.path.realpath(path)
    while True:
        try:
            st = os.stat(here)
        except OSError:
            return False
        if not stat.S_ISDIR(st.st_mode) or not st.st_mode & stat.S_IXOTH:
            return False
        parent = os.path.dirname(here)
        if parent == here:
            return True
        here = parent


def _probe(found: Availability) -> str | None:
    """Run `true` under the full policy; the error bwrap printed, or None when it worked."""
    with tempfile.TemporaryDirectory(prefix="lmd-sandbox-probe-", dir=scratch_parent()) as tmp:
        os.chmod(tmp, 0o755)  # as root, the unprivileged user must enter it
        return _run_probe(found, Policy(READ_ONLY, tmp, tmp, limits=Limits()), ["true"])


def _probe_staging(found: Availability) -> tuple[str | None, str]:
    """lmd-stage and "" when a staged write works here (it lands in the stage, not in the
    tree), else None and why not."""
    helper, missing = find_helper("stage")
    if helper is None:
        return None, missing
    with_stage = dataclasses.replace(found, stage=helper)
    with tempfile.TemporaryDirectory(prefix="lmd-stage-probe-", dir=scratch_parent()) as tmp:
        os.chmod(tmp, 0o755)
        tree = os.path.join(tmp, "tree")
        os.mkdir(tree, 0o755)
        try:
            stage = new_stage(tree, os.path.join(tmp, "staged"))
        except OSError as e:
            return None, f"no staging directory can be made ({e})"
        try:
            policy = Policy(WORKSPACE_WRITE, tree, tree, writable=(tree,), limits=Limits())
            argv = ["/bin/sh", "-c", "echo staged > probe"]
            problem = _run_probe(with_stage, policy, argv, stage)
            if problem is None and (
                os.path.lexists(os.path.join(tree, "probe"))
                or not os.path.isfile(os.path.join(stage.upper, "probe"))
            ):
                problem = "the overlay did not hold the write"
        finally:
            discard(stage.dir)
    return (None, f"lmd-stage does not work here ({problem})") if problem else (helper, "")


def _run_probe(
    found: Availability, policy: Policy, argv: list[str], stage: Stage | None = None
) -> str | None:
    """Run `argv` under `policy`; the error the sandbox printed, or None when it worked."""
    prepared = prepare_bwrap(policy, argv, found, stage)
    try:
        done = subprocess.run(
            prepared.argv,
            cwd=policy.cwd,
            capture_output=True,
            text=True,
            # a probe that merely waits for a busy machine (load 20 on 2 cores) must not
            # make the sandbox, or staging, look unavailable for the daemon's whole life
            timeout=60,
            pass_fds=prepared.pass_fds,
            env=command_env(policy.cwd),
            start_new_session=True,
        )
    except (OSError, subprocess.SubprocessError) as e:
        return str(e)
    finally:
        prepared.close()
    if done.returncode == 0:
        return None
    lines = [ln.strip() for ln in done.stderr.splitlines() if ln.strip()]
    return (lines[-1] if lines else f"exit code {done.returncode}").removeprefix("bwrap: ")


def detect_seatbelt() -> Availability:
    binary = "/usr/bin/sandbox-exec"  # never from PATH: a planted one would run everything
    if not os.access(binary, os.X_OK):
        return Availability(NONE, "sandbox-exec is missing.", "use a macOS that has it")
    try:
        done = subprocess.run(
            [binary, "-p", "(version 1)(allow default)", "/usr/bin/true"],
            capture_output=True,
            timeout=10,
        )
    except (OSError, subprocess.SubprocessError) as e:
        return Availability(NONE, f"sandbox-exec does not run ({e}).", "check the macOS install")
    if done.returncode != 0:
        return Availability(
            NONE,
            "sandbox-exec refuses to run here (inside another sandbox?).",
            "run lmd outside other sandboxes",
        )
    return Availability(
        "seatbelt",
        "Commands that run without asking run under sandbox-exec (Seatbelt).",
        binary=binary,
        warnings=("The process count is not limited on macOS.",),
    )
