"""The OS sandbox for commands that run without a spoken yes.

A string check cannot tell what a bash command will do; the operating system can stop it. On
Linux every such command runs under bubblewrap (`bwrap`): the whole file system read-only, a
private empty /tmp, a fresh /proc in its own pid namespace, no network (its own network
namespace), no capabilities, no new privileges, Unix sockets and kernel keyrings refused by a
seccomp filter, the places that hold credentials hidden, and limits on memory, CPU time, file
size and processes. On macOS `sandbox-exec` runs a generated Seatbelt profile with the same
intent (untested here). Anywhere else there is no sandbox, and modes ask before every command.

`detect()` finds out once per process whether a sandbox can be had and why not; `prepare()`
turns a policy and an argv into the wrapped argv the runner starts.
"""

from __future__ import annotations

import atexit
import dataclasses
import hashlib
import itertools
import os
import platform
import re
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

LEVELS = ("read-only", "workspace-write", "off")
READ_ONLY, WORKSPACE_WRITE, OFF = LEVELS
NONE = "none"  # how an approved (or unsandboxed) command ran, in the audit

# Credentials and session secrets under the home directory, hidden from every sandboxed
# command (the daemon's home, LMD_HOME, and the `sandbox_hide_paths` setting come on top).
SECRET_HOME_PATHS = (
    ".ssh",
    ".gnupg",
    ".aws",
    ".config/gcloud",
    ".netrc",
    ".docker",
    ".kube",
    ".git-credentials",
    ".config/gh",
    ".azure",
    ".password-store",
    ".local/share/keyrings",
    ".pypirc",
    ".mozilla",
    ".config/google-chrome",
    ".config/chromium",
    ".config/lmd",  # `lmd service install`'s environment file holds OPENAI_API_KEY
    ".local/state/lmd",  # the list of lmd homes and token files (home.register_home)
    # files that hold passwords and tokens
    ".pgpass",
    ".my.cnf",
    ".npmrc",
    ".yarnrc",
    ".cargo/credentials",
    ".cargo/credentials.toml",
    ".m2/settings.xml",
    ".gradle/gradle.properties",
    ".terraform.d/credentials.tfrc.json",
    ".vault-token",
    ".boto",
    ".s3cfg",
    ".config/rclone",
    ".config/hub",
    ".cache/huggingface/token",
    ".huggingface/token",
    ".oci",
    ".env",
    # shell and REPL histories: keys typed on a command line end up there
    ".bash_history",
    ".zsh_history",
    ".zhistory",
    ".histfile",
    ".local/share/fish/fish_history",
    ".python_history",
    ".psql_history",
    ".mysql_history",
    ".sqlite_history",
    ".node_repl_history",
    ".rediscli_history",
    ".irb_history",
    ".lesshst",
    ".viminfo",
)

# Environment variables that must never reach a command, whatever the passthrough says.
NEVER_PASSED = frozenset({"OPENAI_API_KEY", "LMD_TOKEN"})

APT_HINT = "install the bubblewrap package (apt install bubblewrap, or dnf install bubblewrap)"

# As root, a sandboxed command runs as this unprivileged user (nobody), in its own user
# namespace: uid 0 needs no capability to write the kernel's tunables (/proc/sys: a new
# core_pattern makes the kernel run a program as root on the host), so mapping the sandbox to
# root outside is never safe, whatever else is read-only.
ROOT_RUNS_AS = 65534
# Parts of a fresh /proc that are kernel interfaces rather than processes: read-only always
# (Docker's list; the unprivileged uid cannot write them anyway, this is the second line).
READ_ONLY_PROC = ("/proc/sys", "/proc/sysrq-trigger", "/proc/irq", "/proc/bus", "/proc/fs")
SHM_MB = 64  # /dev/shm, the one writable place under /dev


# -- policy ------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Limits:
    """Per-process limits inside the sandbox (the process count is per sandbox)."""

    memory_mb: int = 2048
    cpu_secs: int = 600
    file_size_mb: int = 1024
    max_processes: int = 256

    def ulimit_line(self, processes: bool = True) -> str:
        """One bash line setting the limits (soft and hard, so the command cannot raise them).

        Memory is the data segment (RLIMIT_DATA: heap and private writable mappings), not the
        address space: runtimes such as V8 or the JVM reserve far more address space than they
        ever use. The process count is set here, inside the sandbox's own user namespace, where
        the kernel counts only the sandbox's processes."""
        parts = [f"-d {self.memory_mb * 1024}", f"-f {self.file_size_mb * 1024}"]  # KiB
        if processes:
            parts.append(f"-u {self.max_processes}")
        # CPU: the soft limit sends SIGXCPU ("CPU time limit exceeded"), the hard one a second
        # later SIGKILL for a command that ignores it.
        cpu = f"-t {self.cpu_secs + 1} && ulimit -S -t {self.cpu_secs}"
        return f"ulimit {' '.join(parts)} {cpu} || exit 125"


@dataclass(frozen=True)
class Policy:
    """What one sandboxed command may do."""

    level: str  # read-only | workspace-write
    cwd: str
    home: str
    hidden: tuple[str, ...] = ()  # paths replaced by something empty and read-only
    writable: tuple[str, ...] = ()  # workspace-write: the working directory
    limits: Limits = field(default_factory=Limits)
    found: tuple[str, ...] | None = None  # protected_inside as with_protected() found it

    @property
    def protected_inside(self) -> tuple[str, ...]:
        """Inside a writable root, what other tools run on their own stays read-only: every
        `.git` at any depth, the hooks path, build, task and package files (see
        daemon/execution/protected.py). A sandboxed build must not plant a hook, a config
        (core.fsmonitor) or a Makefile rule that a later, approved command would run.
        What with_protected() found, or looked for now."""
        return self.found if self.found is not None else self.find_protected()

    def find_protected(self) -> tuple[str, ...]:
        """protected_inside as the disk holds it now (a walk of the writable roots)."""
        from daemon.execution.protected import protected_in

        found: list[str] = []
        for root in self.writable:
            found += protected_in(root)
        return tuple(found)

    def with_protected(self) -> Policy:
        """This policy with protected_inside looked for once, now (a walk of the workspace
        reads the disk: a caller on the event loop runs this in a thread)."""
        return dataclasses.replace(self, found=self.find_protected())


def hidden_paths(home: str, lmd_home: str | None, extra: list[str] | tuple[str, ...] = ()) -> list:
    """The secret places to hide: well-known ones under `home`, LMD_HOME, the user's extra ones
    and the session runtime directory (sockets of ssh-agent, gpg-agent, D-Bus). Symlinks are
    hidden at both ends."""
    from daemon.home import default_home, known_homes, registered_here

    wanted = [os.path.join(home, rel) for rel in SECRET_HOME_PATHS]
    if lmd_home:
        wanted.append(str(lmd_home))
    # every lmd home and token file this user's daemons used (this daemon's own even where the
    # list could not be written), and the default home
    wanted += [*registered_here(), *known_homes(), str(default_home())]
    wanted += [os.path.expanduser(str(p)) for p in extra]
    runtime = os.environ.get("XDG_RUNTIME_DIR") or f"/run/user/{os.getuid()}"
    wanted.append(runtime)
    found: list[str] = []
    for path in wanted:
        for p in (os.path.abspath(path), os.path.realpath(path)):
            if p not in found and p != "/" and os.path.lexists(p):
                found.append(p)
    return found


def _inside(path: str, root: str) -> bool:
    path, root = os.path.realpath(path), os.path.realpath(root)
    return path == root or path.startswith(root.rstrip("/") + "/")


def workspace_problem(path: str, home: str, lmd_home: str | None, hidden: list[str]) -> str | None:
    """Why `path` may not be made writable, or None. A writable home would let a command plant
    ~/.bashrc or ~/.config/autostart entries that run later outside any sandbox."""
    real = os.path.realpath(path)
    if real == "/":
        return "the working directory is the root of the file system"
    for guarded, what in ((home, "your home directory"), (lmd_home, "lmd's own directory")):
        if guarded and _inside(guarded, real):
            return f"the working directory {path} holds {what}"
    for secret in hidden:
        if _inside(real, secret):
            return f"the working directory {path} is a hidden secret place"
    return None


def policy_from_settings(
    settings: Any,
    level: str,
    cwd: str,
    lmd_home: str | None = None,
    home: str | None = None,
    writable: str | None = None,
) -> Policy:
    """The policy the settings ask for, for a command running in `cwd`; at workspace-write
    the writable place is `writable` (an approval rule's directory) or else `cwd`."""
    home = home or os.path.expanduser("~")
    hidden = hidden_paths(home, lmd_home, settings["sandbox_hide_paths"])
    limits = Limits(
        memory_mb=settings["sandbox_memory_mb"],
        cpu_secs=settings["sandbox_cpu_secs"],
        file_size_mb=settings["sandbox_file_size_mb"],
        max_processes=settings["sandbox_max_processes"],
    )
    roots: tuple[str, ...] = ()
    if level == WORKSPACE_WRITE:
        root = writable or cwd
        problem = workspace_problem(root, home, lmd_home, hidden)
        if problem:
            raise ValueError(problem)
        roots = (os.path.realpath(root),)
    problem = root_problem(cwd, level)
    if problem:
        raise ValueError(problem)
    return Policy(level, cwd, home, tuple(hidden), roots, limits)


def root_problem(cwd: str, level: str) -> str | None:
    """As root, sandboxed commands run as an unprivileged user: why they cannot work in `cwd`
    (it cannot enter it, or a build could not write it), or None."""
    if os.geteuid() != 0 or level not in (READ_ONLY, WORKSPACE_WRITE):
        return None
    who = _user_name()
    if not _others_may(cwd, os.R_OK | os.X_OK):
        return (
            f"lmd runs as root, and sandboxed commands run as the unprivileged user {who}, "
            f"who may not enter {cwd}"
        )
    if level == WORKSPACE_WRITE and not _others_may(cwd, os.W_OK):
        return (
            f"lmd runs as root, and a sandboxed build runs as the unprivileged user {who}, "
            f"who may not write {cwd}"
        )
    return None


def _others_may(path: str, mode: int) -> bool:
    """Whether a user who owns nothing there may do `mode` on `path` (every directory on the
    way must let others through)."""
    real = os.path.realpath(path)
    parts = Path(real).parts
    for i in range(1, len(parts)):
        try:
            st = os.stat(os.path.join(*parts[:i]))
        except OSError:
            return False
        if not st.st_mode & 0o001:
            return False
    try:
        st = os.stat(real)
    except OSError:
        return False
    bits = {os.R_OK: 0o004, os.W_OK: 0o002, os.X_OK: 0o001}
    return all(st.st_mode & bit for flag, bit in bits.items() if mode & flag)


# -- detection ---------------------------------------------------------------------------------
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
        found = _detect_seatbelt()
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
            [binary, "--help"], capture_output=True, text=True, timeout=5
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
        pids_cgroup=_pids_cgroup_base() if os.geteuid() == 0 else None,
        setpriv=setpriv,
        memory_cgroup=_memory_cgroup_base(),
    )
    landlock, landlock_problem = landlock_helper(bool(setpriv))
    problem = _probe(found)
    if problem is None and landlock:
        with_landlock = dataclasses.replace(found, landlock=landlock)
        landlock_problem = _probe(with_landlock)
        if landlock_problem is None:
            found = with_landlock
        else:
            landlock_problem = f"Landlock does not work inside bwrap here ({landlock_problem})"
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
    if os.geteuid() == 0 and found.pids_cgroup is None:
        warnings.append(
            "lmd runs as root and no pids cgroup can be made, so the process limit is not "
            "enforced (the kernel ignores it for root); run lmd as an ordinary user."
        )
    if "--size" not in features:
        bound = "the command's memory cgroup" if found.memory_cgroup else "the machine's memory"
        warnings.append(
            "This bwrap cannot cap the size of a tmpfs (--size came with bubblewrap 0.8), so the "
            f"sandbox's private /tmp is bounded only by {bound}, and it gets no /dev/shm; "
            "install a newer bubblewrap."
        )
    if found.memory_cgroup is None:
        warnings.append(
            "No memory cgroup can be made here, so memory is limited per process, not per "
            "command (a pipeline of several memory-hungry processes can use more); run lmd "
            "as root or in a session with a delegated cgroup (systemd-run --user --scope -p "
            "Delegate=yes) for a limit on the whole command."
        )
    how = "a pids cgroup" if found.pids_cgroup else "a per-sandbox rlimit"
    memory = "a memory cgroup for the whole command" if found.memory_cgroup else "per process"
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
    )


# -- Landlock ---------------------------------------------------------------------------------
LANDLOCK_SOURCE = Path(__file__).with_name("landlock.c")


def landlock_helper(unprivileged: bool = False) -> tuple[str | None, str]:
    """The Landlock applier (landlock.c, compiled on first use next to its source, or else in
    the user's cache directory; as root, or else in /var/cache/lmd) and "", or None and why
    there is none. `unprivileged`: lmd is root and commands run as ROOT_RUNS_AS, who must be
    able to run it (a venv under /root is closed to them)."""
    try:
        source = LANDLOCK_SOURCE.read_bytes()
    except OSError as e:
        return None, f"lmd's Landlock applier {LANDLOCK_SOURCE} is missing ({e.strerror})"
    name = f"lmd-landlock-{hashlib.sha256(source).hexdigest()[:12]}"
    cache = os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache")
    places = [LANDLOCK_SOURCE.parent, Path(cache, "lmd")]
    if unprivileged:
        places.append(Path("/var/cache/lmd"))

    def usable(path: Path) -> bool:
        return os.access(path, os.X_OK) and (not unprivileged or _others_may(str(path), os.X_OK))

    helper = next((p / name for p in places if usable(p / name)), None)
    if helper is None:
        compiler = shutil.which("cc") or shutil.which("gcc") or shutil.which("clang")
        if compiler is None:
            return None, "no C compiler (cc) to build lmd's Landlock applier"
        problems = []
        for place in places:
            built = (place / name).exists()  # there, but closed to the unprivileged user
            problem = "" if built else _compile(compiler, place / name)
            if not problem and usable(place / name):
                helper = place / name
                break
            problems.append(problem or f"the unprivileged user {_user_name()} may not run it")
        else:
            return None, f"lmd's Landlock applier does not build ({'; '.join(problems)})"
    try:
        abi = subprocess.run([str(helper), "--abi"], capture_output=True, text=True, timeout=5)
        version = int(abi.stdout.strip() or 0)
    except (OSError, ValueError, subprocess.SubprocessError) as e:
        return None, f"lmd's Landlock applier does not run ({e})"
    if version < 2:
        return None, "this kernel has no Landlock (ABI 2, Linux 5.19, or later)"
    return str(helper), ""


def _compile(compiler: str, target: Path) -> str:
    """Build landlock.c into `target` (atomically: a half-written binary never runs); the
    compiler's first error, or ""."""
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(dir=target.parent) as tmp:
            out = os.path.join(tmp, target.name)
            # static where the C library allows it: no dynamic loading, 0.3 ms less per command
            for static in (["-static"], []):
                done = subprocess.run(
                    [compiler, "-O2", *static, "-o", out, str(LANDLOCK_SOURCE)],
                    capture_output=True,
                    text=True,
                    timeout=60,
                )
                if done.returncode == 0:
                    break
            if done.returncode != 0:
                lines = [ln.strip() for ln in done.stderr.splitlines() if ln.strip()]
                errors = [ln for ln in lines if "error" in ln] or lines
                return errors[0] if errors else f"exit code {done.returncode}"
            os.chmod(out, 0o755)
            os.replace(out, target)
    except (OSError, subprocess.SubprocessError) as e:
        return str(e)
    return ""


def landlock_writable(policy: Policy) -> list[str]:
    """Where a sandboxed command may open files for writing, as seen inside the sandbox: the
    private /tmp, bwrap's own minimal /dev (null, tty, pts, shm), the sandbox's fresh /proc
    (its kernel parts stay read-only mounts) and, at workspace-write, the workspace."""
    return ["/tmp", "/dev", "/proc", *policy.writable]


def _user_name(uid: int = ROOT_RUNS_AS) -> str:
    import pwd

    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return f"uid {uid}"


def _probe(found: Availability) -> str | None:
    """Run `true` under the full policy; the error bwrap printed, or None when it worked."""
    with tempfile.TemporaryDirectory(prefix="lmd-sandbox-probe-") as tmp:
        os.chmod(tmp, 0o755)  # as root, the unprivileged user must enter it
        policy = Policy(READ_ONLY, tmp, tmp, limits=Limits())
        prepared = prepare(policy, ["true"], found)
        try:
            done = subprocess.run(
                prepared.argv,
                cwd=tmp,
                capture_output=True,
                text=True,
                timeout=10,
                pass_fds=prepared.pass_fds,
                env=command_env(tmp),
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


def _detect_seatbelt() -> Availability:
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


# -- pids cgroup (root) ------------------------------------------------------------------------
_counter = itertools.count(1)


def _own_cgroup(controller: str) -> str | None:
    """This process's cgroup path for a v1 controller, or the v2 path for "" ."""
    try:
        lines = Path("/proc/self/cgroup").read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        _, controllers, path = line.split(":", 2)
        if controller in controllers.split(","):
            return path
    return None


def _pids_cgroup_base() -> str | None:
    """A directory where per-command pids cgroups can be made (root only), or None.

    The kernel ignores RLIMIT_NPROC for root, so as root the process count is bounded by a
    pids cgroup: cgroup v1's pids hierarchy, or a v2 cgroup that has pids delegated."""
    candidates = []
    v1 = _own_cgroup("pids")
    if v1 is not None and os.path.isdir("/sys/fs/cgroup/pids"):
        candidates.append(os.path.join("/sys/fs/cgroup/pids", v1.lstrip("/")))
    v2 = _own_cgroup("")
    for mount in ("/sys/fs/cgroup", "/sys/fs/cgroup/unified"):
        if v2 is not None and os.path.isfile(os.path.join(mount, "cgroup.subtree_control")):
            here = os.path.join(mount, v2.lstrip("/"))
            try:
                if "pids" in Path(here, "cgroup.subtree_control").read_text().split():
                    candidates.append(here)
            except OSError:
                pass
    for parent in candidates:
        base = os.path.join(parent, "lmd-sandbox")
        try:
            os.makedirs(base, exist_ok=True)
            _remove_orphans(base)
            probe = PidsGroup(base, 8)
            probe.close()
            return base
        except OSError:
            continue
    return None


def _memory_cgroup_base() -> str | None:
    """A directory where per-command memory cgroups can be made, or None: cgroup v1's memory
    hierarchy, or a v2 cgroup with memory delegated (root, or a user whose session cgroup is
    delegated to them)."""
    candidates = []
    v1 = _own_cgroup("memory")
    if v1 is not None and os.path.isdir("/sys/fs/cgroup/memory"):
        candidates.append(os.path.join("/sys/fs/cgroup/memory", v1.lstrip("/")))
    v2 = _own_cgroup("")
    for mount in ("/sys/fs/cgroup", "/sys/fs/cgroup/unified"):
        if v2 is not None and os.path.isfile(os.path.join(mount, "cgroup.subtree_control")):
            here = os.path.join(mount, v2.lstrip("/"))
            try:
                if "memory" in Path(here, "cgroup.subtree_control").read_text().split():
                    candidates.append(here)
            except OSError:
                pass
    for parent in candidates:
        base = os.path.join(parent, "lmd-sandbox")
        try:
            os.makedirs(base, exist_ok=True)
            _remove_orphans(base)
            probe = MemoryGroup(base, 64)
            probe.close()
            return base
        except OSError:
            continue
    return None


ORPHAN_AGE = 60.0  # seconds an empty cgroup of a pid not seen here is left alone


def _remove_orphans(base: str) -> None:
    """Empty cgroups left by daemons that died (kill -9) before removing them. A young one is
    left: its daemon may live in another PID namespace (a container, or `unshare --pid`, on
    the same cgroup tree) where its pid is not seen, and a cgroup is empty between its
    creation and its command's joining it (removing it then failed that command)."""
    now = time.time()
    for name in os.listdir(base):
        parts = name.split("-")
        if len(parts) == 3 and parts[0] == "cmd" and parts[1].isdigit():
            if not os.path.exists(f"/proc/{parts[1]}"):
                path = os.path.join(base, name)
                try:
                    if now - os.stat(path).st_mtime < ORPHAN_AGE:
                        continue
                    os.rmdir(path)
                except OSError:
                    pass  # still holds a process (or already gone): leave it


class PidsGroup:
    """One command's pids cgroup: created with a ceiling, emptied and removed after."""

    def __init__(self, base: str, max_pids: int) -> None:
        self.path = os.path.join(base, f"cmd-{os.getpid()}-{next(_counter)}")
        os.mkdir(self.path)
        try:
            Path(self.path, "pids.max").write_text(str(max_pids))
        except OSError:
            os.rmdir(self.path)
            raise
        self.procs = os.path.join(self.path, "cgroup.procs")

    def close(self) -> None:
        """Kill what is left; remove the cgroup now, or (while the kernel still reaps the
        killed processes) on a later call: the event loop must not wait for it."""
        try:
            pids = [int(p) for p in Path(self.procs).read_text().split()]
        except OSError:
            pids = []
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        _stale.append(self.path)
        sweep_cgroups()


class MemoryGroup(PidsGroup):
    """One command's memory cgroup: the whole tree's memory, not each process's."""

    def __init__(self, base: str, max_mb: int) -> None:
        self.path = os.path.join(base, f"cmd-{os.getpid()}-{next(_counter)}")
        os.mkdir(self.path)
        limit = str(max_mb * 1024 * 1024)
        try:
            if os.path.exists(os.path.join(self.path, "memory.max")):  # cgroup v2
                Path(self.path, "memory.max").write_text(limit)
                Path(self.path, "memory.swap.max").write_text("0")
            else:  # v1; memsw (swap included) only where the kernel accounts swap
                Path(self.path, "memory.limit_in_bytes").write_text(limit)
                swap = Path(self.path, "memory.memsw.limit_in_bytes")
                if swap.exists():
                    swap.write_text(limit)
        except OSError:
            os.rmdir(self.path)
            raise
        self.procs = os.path.join(self.path, "cgroup.procs")


_stale: list[str] = []


def sweep_cgroups(wait: float = 0.0) -> None:
    """Remove the emptied per-command cgroups (waiting up to `wait` seconds for the rest)."""
    deadline = time.monotonic() + wait
    while _stale:
        for path in list(_stale):
            try:
                os.rmdir(path)
            except FileNotFoundError:
                pass
            except OSError:
                continue
            _stale.remove(path)
        if not _stale or time.monotonic() >= deadline:
            return
        time.sleep(0.01)


atexit.register(sweep_cgroups, 2.0)


# -- seccomp -----------------------------------------------------------------------------------
# Per machine: the audit arch and the numbers of the calls the filter looks at.
_SYSCALLS = {
    "x86_64": {
        "arch": 0xC000003E,
        "socket": 41,
        "clone": 56,
        "denied": (248, 249, 250, 272),  # add_key, request_key, keyctl, unshare
    },
    "aarch64": {
        "arch": 0xC00000B7,
        "socket": 198,
        "clone": 220,
        "denied": (217, 218, 219, 97),
    },
}
_IO_URING = (425, 426, 427)  # the same on every machine
_CLONE3 = 435
_EPERM, _ENOSYS, _EAFNOSUPPORT, _AF_UNIX = 1, 38, 97, 1
_CLONE_NEWUSER = 0x10000000
_X32_BIT = 0x40000000
_RET_ALLOW, _RET_ERRNO = 0x7FFF0000, 0x00050000
_LD, _JEQ, _JGE, _JSET, _RET = 0x20, 0x15, 0x35, 0x45, 0x06


def _assemble(items: list[tuple]) -> bytes:
    """Classic BPF from (code, jt, jf, k) with jump targets given as label names (None: the
    next instruction) and ("label", name) markers."""
    labels, pos = {}, 0
    for item in items:
        if item[0] == "label":
            labels[item[1]] = pos
        else:
            pos += 1
    out, pos = [], 0
    for item in items:
        if item[0] == "label":
            continue
        code, jt, jf, k = item

        def offset(target: str | None, here: int = pos) -> int:
            return 0 if target is None else labels[target] - here - 1

        out.append(struct.pack("=HBBI", code, offset(jt), offset(jf), k))
        pos += 1
    return b"".join(out)


def seccomp_program(machine: str | None = None) -> bytes | None:
    """A seccomp filter (bwrap --seccomp) refusing what the namespaces do not cover:

    - Unix-domain sockets (docker.sock, the D-Bus session bus or an agent socket would open a
      way out of the sandbox) and io_uring (it can make sockets past the filter);
    - new user namespaces (unshare, clone with CLONE_NEWUSER; clone3 says ENOSYS so the C
      library falls back to clone): a kernel attack surface the command has no use for;
    - the kernel keyrings (shared across namespaces).

    Other machines get None (and bwrap's --disable-userns instead)."""
    name = (machine or platform.machine()).lower()
    name = {"amd64": "x86_64", "arm64": "aarch64"}.get(name, name)
    if name not in _SYSCALLS:
        return None
    calls = _SYSCALLS[name]
    items: list[tuple] = [
        (_LD, None, None, 4),  # seccomp_data.arch
        (_JEQ, None, "eperm", calls["arch"]),  # another ABI (e.g. i386 on x86_64): refuse
        (_LD, None, None, 0),  # seccomp_data.nr
    ]
    if name == "x86_64":
        items.append((_JGE, "eperm", None, _X32_BIT))  # the x32 ABI
    for nr in (*calls["denied"], *_IO_URING):
        items.append((_JEQ, "eperm", None, nr))
    items += [
        (_JEQ, "enosys", None, _CLONE3),
        (_JEQ, "clone", None, calls["clone"]),
        (_JEQ, "socket", "allow", calls["socket"]),
        ("label", "socket"),
        (_LD, None, None, 16),  # args[0] (low 32 bits): the address family
        (_JEQ, "noaf", "allow", _AF_UNIX),
        ("label", "clone"),
        (_LD, None, None, 16),  # args[0]: the clone flags
        (_JSET, "eperm", "allow", _CLONE_NEWUSER),
        ("label", "allow"),
        (_RET, None, None, _RET_ALLOW),
        ("label", "eperm"),
        (_RET, None, None, _RET_ERRNO | _EPERM),
        ("label", "noaf"),
        (_RET, None, None, _RET_ERRNO | _EAFNOSUPPORT),
        ("label", "enosys"),
        (_RET, None, None, _RET_ERRNO | _ENOSYS),
    ]
    return _assemble(items)


# -- wrapping ----------------------------------------------------------------------------------
@dataclass
class Prepared:
    """The argv to start, the fds it must inherit, and what to undo afterwards."""

    argv: list[str]
    pass_fds: tuple[int, ...] = ()
    env: dict[str, str] = field(default_factory=dict)  # on top of the command's environment
    cgroup: PidsGroup | None = None
    _fds: list[int] = field(default_factory=list)
    memory: MemoryGroup | None = None

    def started(self) -> None:
        """The child has the fds now: close the parent's copies."""
        for fd in self._fds:
            try:
                os.close(fd)
            except OSError:
                pass
        self._fds.clear()

    def close(self) -> None:
        """Kill whatever is left in the command's cgroup and remove it."""
        self.started()
        for group in (self.cgroup, self.memory):
            if group is not None:
                group.close()
        self.cgroup = self.memory = None


def prepare(policy: Policy, argv: list[str], found: Availability | None = None) -> Prepared:
    """Wrap `argv` (e.g. ["bash", "-c", script]) in the sandbox for `policy`."""
    found = found or detect()
    if found.kind == "bwrap":
        return _prepare_bwrap(policy, argv, found)
    if found.kind == "seatbelt":
        tmp = tempfile.mkdtemp(prefix="lmd-sandbox-")
        profile = seatbelt_profile(policy, tmp)
        return Prepared(
            [found.binary or "/usr/bin/sandbox-exec", "-p", profile, "--", *argv],
            env={"TMPDIR": tmp + "/"},
        )
    raise RuntimeError(f"No sandbox is available: {found.reason}")


def bwrap_args(
    policy: Policy,
    features: frozenset[str] | set[str] = frozenset(),
    seccomp_fd: int | None = None,
    empty_fd: Callable[[], int] | None = None,
    unprivileged: bool = False,
) -> list[str]:
    """bwrap's options for `policy` (mount order matters: later mounts cover earlier ones).
    `empty_fd` gives a new descriptor that reads as an empty file, one per hidden file (bwrap
    reads and closes each; a shared one failed every command once two files were hidden).
    `unprivileged`: bwrap runs as ROOT_RUNS_AS (lmd is root), and sees only what others may."""
    a = ["--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc"]
    for part in READ_ONLY_PROC:
        if os.path.exists(part):
            a += ["--ro-bind", part, part]
    # /dev: bwrap's minimal one (null, zero, full, random, urandom, tty, pts, fd links),
    # read-only but for a small /dev/shm; no tmpfs without a size cap (a bwrap before 0.8
    # cannot cap one: then there is no /dev/shm)
    if "--size" in features:
        a += ["--size", str(SHM_MB * 1024 * 1024), "--tmpfs", "/dev/shm"]
    a += ["--remount-ro", "/dev"]
    if "--size" in features:
        a += ["--size", str(max(64, policy.limits.file_size_mb) * 1024 * 1024)]
    a += ["--tmpfs", "/tmp"]
    # /tmp is private, but when the working directory or home lives in it, the directory tree
    # of /tmp holding it comes back (read-only), so `cd ..` and siblings still work. So does
    # lmd's own installation (a clone or venv in /tmp): a command sees the same programs
    # wherever lmd was installed.
    here = (policy.cwd, policy.home, *_own_install())
    for top in dict.fromkeys(_tmp_tree(p) for p in here):
        if top and not (unprivileged and not _others_may(top, os.X_OK)):
            a += ["--ro-bind", top, top]
    for root in policy.writable:
        a += ["--bind", root, root]
    for inner in policy.protected_inside:
        a += ["--ro-bind", inner, inner]
    for secret in policy.hidden:
        if unprivileged and not _others_may(os.path.dirname(secret), os.X_OK):
            continue  # the unprivileged user cannot reach it anyway (nor could bwrap cover it)
        if os.path.isdir(secret) and not os.path.islink(secret):
            a += ["--tmpfs", secret, "--remount-ro", secret]
        elif os.path.lexists(secret) and not os.path.islink(secret):
            # An empty file, so a program reading its config (wget and ~/.netrc) still runs.
            if empty_fd is not None:
                a += ["--ro-bind-data", str(empty_fd()), secret]
            else:
                a += ["--ro-bind", "/dev/null", secret]  # unreadable on a nodev mount
    a += ["--chdir", policy.cwd]
    a += ["--unshare-user", "--unshare-ipc", "--unshare-pid", "--unshare-net", "--unshare-uts"]
    a += ["--unshare-cgroup-try"]
    if seccomp_fd is None and "--disable-userns" in features:
        # No nested user namespace (the seccomp filter refuses them more cheaply).
        a.append("--disable-userns")
    a += ["--die-with-parent", "--new-session", "--cap-drop", "ALL"]
    if seccomp_fd is not None:
        a += ["--seccomp", str(seccomp_fd)]
    return a


def _own_install() -> tuple[str, ...]:
    """Where lmd runs from: its Python environment and the folder holding its packages."""
    return (sys.prefix, sys.base_prefix, str(Path(__file__).resolve().parent.parent))


def _tmp_tree(path: str) -> str | None:
    """/tmp/a for /tmp/a/b/c; None outside /tmp (and for /tmp itself, which stays private)."""
    parts = Path(os.path.realpath(path)).parts
    if len(parts) > 2 and parts[1] == "tmp":
        return os.path.join("/", parts[1], parts[2])
    return None


def _prepare_bwrap(policy: Policy, argv: list[str], found: Availability) -> Prepared:
    fds: list[int] = []
    seccomp_fd = None
    program = seccomp_program() if found.seccomp else None
    if program is not None:
        read, write = os.pipe()
        os.write(write, program)  # a few hundred bytes: fits the pipe buffer
        os.close(write)
        fds.append(read)
        seccomp_fd = read
    empty_fd = None
    if "--ro-bind-data" in found.features:

        def empty_fd() -> int:
            read, write = os.pipe()  # closed at once: reading gives an empty file
            os.close(write)
            fds.append(read)
            return read

    bwrap = found.binary or "bwrap"
    args = bwrap_args(policy, found.features, seccomp_fd, empty_fd, bool(found.setpriv))
    if argv and "/" not in argv[0]:
        argv = [shutil.which(argv[0]) or argv[0], *argv[1:]]  # no PATH walk inside bwrap
    if found.landlock:
        # first inside the sandbox: after bwrap's mounts (Landlock forbids mounting), before
        # the command
        argv = [found.landlock, *landlock_writable(policy), "--", *argv]
    wrapped = [bwrap, *args, "--", *argv]
    if found.setpriv:
        # As root: become the unprivileged user before bwrap, so uid 0 never enters the
        # sandbox (bwrap then builds it as that user, in a user namespace of its own).
        uid = str(ROOT_RUNS_AS)
        wrapped = [found.setpriv, f"--reuid={uid}", f"--regid={uid}", "--clear-groups", "--",
                   *wrapped]  # fmt: skip
    cgroup = memory = None
    if found.pids_cgroup:
        try:
            cgroup = PidsGroup(found.pids_cgroup, policy.limits.max_processes)
        except OSError:
            cgroup = None
    if found.memory_cgroup:
        try:
            memory = MemoryGroup(found.memory_cgroup, policy.limits.memory_mb)
        except OSError:
            memory = None
    joins = [g.procs for g in (cgroup, memory) if g is not None]
    if joins:
        # Join the cgroups before bwrap starts, so nothing it forks is ever outside them.
        script = 'for f in "$@"; do [ "$f" = -- ] && break; echo $$ > "$f"; done; '
        script += 'while [ "$1" != -- ]; do shift; done; shift; exec "$@"'
        wrapped = ["/bin/sh", "-c", script, "sh", *joins, "--", *wrapped]
    return Prepared(wrapped, tuple(fds), {"TMPDIR": "/tmp"}, cgroup, fds, memory)


def wrap_script(
    policy: Policy, command: str, setup: str = "", found: Availability | None = None
) -> str:
    """`command` after one line that sets the limits (and runs `setup`), so the command's own
    lines are numbered from 2 as without the sandbox. (On macOS the process count stays
    unlimited: there RLIMIT_NPROC counts all of the user's processes, not the sandbox's.)"""
    found = found or detect()
    first = policy.limits.ulimit_line(processes=found.kind == "bwrap")
    return f"{first}; {setup}\n{command}" if setup else f"{first}\n{command}"


# -- Seatbelt (macOS) --------------------------------------------------------------------------
def _sb(path: str) -> str:
    return '"' + path.replace("\\", "\\\\").replace('"', '\\"') + '"'


def seatbelt_profile(policy: Policy, tmpdir: str) -> str:
    """A Seatbelt (SBPL) profile for `policy`: read everything but the hidden places, write
    only the private temp dir (and the workspace at workspace-write, not its .git), no network.
    Later rules win over earlier ones."""
    lines = [
        "(version 1)",
        "(deny default)",
        "(allow process-exec)",
        "(allow process-fork)",
        "(allow signal (target same-sandbox))",
        "(allow process-info* (target same-sandbox))",
        "(allow sysctl-read)",
        "(allow file-read*)",
        '(allow file-write-data (literal "/dev/null") (literal "/dev/zero"))',
        '(allow file-read* file-write* (regex #"^/dev/tty"))',
        "(allow ipc-posix-sem)",
        "(allow ipc-posix-shm)",
        "(allow user-preference-read)",
        '(allow mach-lookup (global-name "com.apple.system.opendirectoryd.libinfo"))',
        '(allow mach-lookup (global-name "com.apple.system.notification_center"))',
        f"(allow file-write* (subpath {_sb(os.path.realpath(tmpdir))}))",
    ]
    for root in policy.writable:
        lines.append(f"(allow file-write* (subpath {_sb(os.path.realpath(root))}))")
    for inner in policy.protected_inside:
        lines.append(f"(deny file-write* (subpath {_sb(os.path.realpath(inner))}))")
    for secret in policy.hidden:
        lines.append(f"(deny file-read* file-write* (subpath {_sb(os.path.realpath(secret))}))")
    lines.append("(deny network*)")
    return "\n".join(lines) + "\n"


# -- the command's environment -----------------------------------------------------------------
ENV_ALLOWLIST = ("PATH", "HOME", "USER", "LOGNAME", "LANG", "LANGUAGE", "TZ", "TERM", "SHELL")


def command_env(
    cwd: str, extra: dict | None = None, passthrough: list[str] | tuple[str, ...] = ()
) -> dict[str, str]:
    """An allowlisted environment: the basics, LC_*, TMPDIR, the names the user passes through
    (`command_env_passthrough`), then `extra`. The API key and the daemon token never."""
    env = {
        k: v
        for k, v in os.environ.items()
        if k in ENV_ALLOWLIST or k.startswith("LC_") or k == "TMPDIR"
    }
    for name in passthrough:
        if name in os.environ:
            env[name] = os.environ[name]
    env.setdefault("PATH", os.defpath)
    env["PWD"] = cwd
    env.update(extra or {})
    for name in NEVER_PASSED:
        env.pop(name, None)
    return env


# -- did the sandbox stop it? ------------------------------------------------------------------
_SIGNS = (
    (re.compile(r"Read-only file system"), "the file system is read-only there"),
    (
        re.compile(
            r"Network is unreachable|Temporary failure in name resolution|Could not resolve|"
            r"Name or service not known|nodename nor servname|unable to resolve host|"
            r"Connection refused|Address family not supported|No route to host"
        ),
        "it has no network",
    ),
    (re.compile(r"File size limit exceeded"), "it hit the file size limit"),
    (re.compile(r"CPU time limit exceeded"), "it hit the CPU time limit"),
    (
        re.compile(
            r"Cannot allocate memory|MemoryError|memory exhausted|bad_alloc|out of memory",
            re.I,
        ),
        "it hit the memory limit",
    ),
    (re.compile(r"fork: (retry: )?Resource temporarily unavailable"), "it hit the process limit"),
)
_SIGNAL_EXITS = {128 + 25: "it hit the file size limit", 128 + 24: "it hit the CPU time limit"}


def blocked_reason(policy: Policy, command: str, output: str, exit_code: int | None) -> str | None:
    """Why the sandbox (probably) stopped a command, judged from its output: None when nothing
    says so. Errs towards "blocked": the cost is one question to the user."""
    for pattern, reason in _SIGNS:
        if pattern.search(output):
            return reason
    if os.geteuid() == 0 and "Permission denied" in output:
        # as root the command ran as an unprivileged user: root's files are closed to it
        return f"it ran as the unprivileged user {_user_name()}, who may not do that"
    if exit_code in _SIGNAL_EXITS:
        return _SIGNAL_EXITS[exit_code]
    home = policy.home.rstrip("/")
    for secret in policy.hidden:
        short = "~" + secret[len(home) :] if home and secret.startswith(home + "/") else secret
        if secret in command or secret in output or short in command:
            return f"{short} is hidden from it"
    return None


def describe_level(level: str) -> str:
    if level == WORKSPACE_WRITE:
        return "a sandbox that may write only the working directory and has no network"
    return "a read-only sandbox without network"
