"""What one sandboxed command may do: the levels, the hidden places, the limits, the places a
workspace may not be, and what root's commands (run as nobody) can reach."""

from __future__ import annotations

import os
import pwd
from dataclasses import dataclass, field
from pathlib import Path

from daemon.core.home import default_home
from daemon.core.private import known_homes, registered_here

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
    ".local/state/lmd",  # the list of lmd homes and token files (private.register_home)
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


def config_place(path: str, home: str) -> str | None:
    """The home's configuration place (a dot folder or file right under it, or beneath one)
    that `path` is in, as ~/NAME, or None."""
    real, home = os.path.realpath(path), os.path.realpath(home)
    if not home or home == "/" or not _inside(real, home) or real == home:
        return None
    first = Path(os.path.relpath(real, home)).parts[0]
    return f"~/{first}" if first.startswith(".") else None


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
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return f"uid {uid}"
