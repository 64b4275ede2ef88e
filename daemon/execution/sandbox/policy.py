"""What one sandboxed command may do: the levels, the hidden places, the limits, the writable
workspace and why a place may not be one, and what root's commands (run as nobody) can reach."""

from __future__ import annotations

import os
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

# As root, a sandboxed command runs as this unprivileged user (nobody), in its own user
# namespace: uid 0 needs no capability to write the kernel's tunables (/proc/sys: a new
# core_pattern makes the kernel run a program as root on the host), so mapping the sandbox to
# root outside is never safe, whatever else is read-only.
ROOT_RUNS_AS = 65534
# The system's own directories: never a tree that commands write, whoever runs lmd.
SYSTEM_PLACES = ("/bin", "/boot", "/dev", "/etc", "/lib", "/lib32", "/lib64", "/libx32", "/proc",
                 "/run", "/sbin", "/sys", "/usr", "/var/cache", "/var/lib", "/var/log",
                 "/var/mail", "/var/spool")  # fmt: skip


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
    writable: tuple[str, ...] = ()  # workspace-write: the tree its writes are staged over
    limits: Limits = field(default_factory=Limits)
    stage_root: str | None = None  # workspace-write: where its writes are staged (default: cache)


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
    """Why `path` may not be a tree that commands write (through staging), or None: the root,
    a place holding the home or lmd's directory, a hidden place, the home's configuration
    places (dot folders: ~/.config/git/config with core.fsmonitor runs on every git command),
    the system's own directories; as root, a place the unprivileged user cannot enter; and
    anywhere, when this machine cannot stage a command's writes."""
    real = os.path.realpath(path)
    if real == "/":
        return "the working directory is the root of the file system"
    for guarded, what in ((home, "your home directory"), (lmd_home, "lmd's own directory")):
        if guarded and _inside(guarded, real):
            return f"the working directory {path} holds {what}"
    for secret in hidden:
        if _inside(real, secret):
            return f"the working directory {path} is a hidden secret place"
    place = config_place(real, home)
    if place:
        return f"the working directory {path} is in your home's configuration places ({place})"
    place = tool_place(real)
    if place:
        return (
            f"the working directory {path} is in a folder whose files tools read and run ({place})"
        )
    for system in SYSTEM_PLACES:
        if _inside(real, system):
            return f"the working directory {path} is a system directory ({system})"
    problem = root_problem(real, READ_ONLY)
    if problem:
        return problem
    from .detection import detect  # detection builds on this module

    found = detect()
    if found.available and found.stage is None:
        return f"this machine cannot stage a command's writes: {found.stage_problem}"
    return None


def rule_problem(directory: str | None, level: str, home: str, lmd_home: str | None) -> str | None:
    """Why an allow rule at sandbox `level` for `directory` (None: everywhere) would not run
    its commands at once, as a sentence for when the rule is made (never later, when its
    command comes): as root a place the unprivileged user cannot enter, a tree its commands
    may not write, no staging on this machine; None when it will work."""
    if level not in (READ_ONLY, WORKSPACE_WRITE):
        return None
    entering = root_problem(directory, READ_ONLY) if directory is not None else None
    problem = entering
    if level == WORKSPACE_WRITE and directory is not None:
        problem = workspace_problem(directory, home, lmd_home, hidden_paths(home, lmd_home))
    elif level == WORKSPACE_WRITE:
        from .detection import detect  # detection builds on this module

        found = detect()
        if found.available and found.stage is None:
            problem = f"this machine cannot stage a command's writes: {found.stage_problem}"
    if problem is None:
        return None
    if problem == entering:
        return (
            f"I make no rule for commands there: {problem}; a project that others may enter "
            "(not under /root) can have one."
        )
    return (
        f"I make no rule that lets commands write there: {problem}. Make it in a project "
        "directory, or ask for the read-only sandbox."
    )


def tool_place(path: str) -> str | None:
    """The folder on the way to `path` (itself included) whose files tools read and run: a dot
    folder (`.git`), a protected one (`venv`, `.vscode`) or a virtual environment (it holds
    pyvenv.cfg); None. What a command writes is judged by its path inside the tree, so a tree
    inside such a folder would make `.git/config` plain `config` (an "everywhere" rule writes
    the working directory, which the model's `cd` chooses)."""
    from daemon.execution.protected import PROTECTED_DIRS, VENV_MARK

    here = "/"
    for part in Path(os.path.realpath(path)).parts[1:]:
        here = os.path.join(here, part)
        if part.startswith(".") or part in PROTECTED_DIRS:
            return here
        if os.path.isfile(os.path.join(here, VENV_MARK)):
            return here
    return None


def config_place(path: str, home: str) -> str | None:
    """The home's configuration place (a dot folder or file right under it, or beneath one)
    that `path` is in, as ~/NAME, or None."""
    real, home = os.path.realpath(path), os.path.realpath(home)
    if not home or home == "/" or not _inside(real, home) or real == home:
        return None
    first = Path(os.path.relpath(real, home)).parts[0]
    return f"~/{first}" if first.startswith(".") else None


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
    stage_root = os.path.join(lmd_home, "staged") if lmd_home else None
    return Policy(level, cwd, home, tuple(hidden), roots, limits, stage_root)


def root_problem(cwd: str, level: str) -> str | None:
    """As root, sandboxed commands run as an unprivileged user: why they cannot work in `cwd`
    (it cannot enter it), or None. Writing is not asked of it: a command's writes are staged,
    over an idmapped view in which the tree's owner appears as that user."""
    if os.geteuid() != 0 or level not in (READ_ONLY, WORKSPACE_WRITE):
        return None
    if not _others_may(cwd, os.R_OK | os.X_OK):
        return (
            f"lmd runs as root, and sandboxed commands run as the unprivileged user "
            f"{_user_name()}, who may not enter {cwd}"
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


def _user_name(uid: int = ROOT_RUNS_AS) -> str:
    import pwd

    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return f"uid {uid}"
