"""Project memory: the project's own instructions (AGENTS.md, and the names the
`project_memory_files` setting adds) for marat's and cobol's system message.

Files are read from the repository root (the nearest directory above the working directory
that holds `.git`; without one, the working directory alone) down to the working directory,
nearer files last, as Codex reads AGENTS.md. Their text is untrusted input like any file: it
can steer the model, never the approvals or the sandbox, and a rule phrase inside it does
nothing. A file is skipped, saying why, when it is not a regular file (a FIFO would block),
holds NUL bytes (binary), or is a symbolic link out of the repository or into a secret place;
invalid UTF-8 is read with replacement characters. At most `project_memory_max_chars`
characters go in: the nearest files are kept whole first, and a cut file says it was cut.

Ownership follows git's rule (`safe.directory`): a repository whose root or `.git` another
user owns is not the user's project, so nothing above the working directory is read from it
unless git itself accepts it (the user listed it in `safe.directory`, or, as root under sudo,
it belongs to the sudo user); the question goes to git, so its rule is the user's own
configuration and git's version of it. And a file another user owns (root aside) is read only
from a repository the user listed: anyone who can write a shared directory (/tmp, a group
checkout) could otherwise put words in the model's instructions.
"""

from __future__ import annotations

import os
import stat
import subprocess
from dataclasses import dataclass, field
from typing import Any

from daemon.execution.sandbox import hidden_paths

MAX_DEPTH = 64  # directories walked up looking for .git
_SNIFF = 8192  # bytes looked at for NUL (binary)


@dataclass
class Memory:
    """The text for the system message ("" for none) and what was read or skipped."""

    text: str = ""
    files: list[dict] = field(default_factory=list)


def repo_root(real_cwd: str) -> str:
    """The nearest directory at or above `real_cwd` holding `.git` (a directory or a
    worktree's file), else `real_cwd` itself."""
    here = real_cwd
    for _ in range(MAX_DEPTH):
        if os.path.lexists(os.path.join(here, ".git")):
            return here
        parent = os.path.dirname(here)
        if parent == here:
            break
        here = parent
    return real_cwd


# What git needs to decide ownership as the user would: where their configuration is
# (safe.directory is read from the system, global and command-line configuration).
_GIT_ENV_NAMES = ("PATH", "HOME", "USER", "XDG_CONFIG_HOME", "SUDO_UID", "GIT_CONFIG_NOSYSTEM",
                  "GIT_CONFIG_SYSTEM", "GIT_CONFIG_GLOBAL", "GIT_CEILING_DIRECTORIES")  # fmt: skip


def _owned(path: str) -> bool:
    """Owned by the user lmd runs as (lstat: a link is judged as itself)."""
    try:
        return os.lstat(path).st_uid == os.geteuid()
    except OSError:
        return False


def git_trusts(root: str) -> tuple[bool, bool]:
    """(trusted, listed): whether git would work in the repository at `root` as lmd's user,
    and whether that is because the user listed it (safe.directory) rather than owning it.
    A root and a `.git` directory of one's own are trusted at once; anything else (another
    owner, a `.git` file pointing elsewhere) is asked of git."""
    git_dir = os.path.join(root, ".git")
    if _owned(root) and _owned(git_dir) and stat.S_ISDIR(os.lstat(git_dir).st_mode):
        return True, False
    env = {
        n: v for n, v in os.environ.items() if n in _GIT_ENV_NAMES or n.startswith("GIT_CONFIG_")
    }
    env["LC_ALL"] = "C"
    try:
        done = subprocess.run(
            ["git", "-C", root, "rev-parse", "--show-toplevel"],
            capture_output=True,
            text=True,
            timeout=10,
            env=env,
            stdin=subprocess.DEVNULL,
        )
    except (OSError, subprocess.SubprocessError):
        return False, False  # no git to ask: not trusted
    top = done.stdout.strip()
    trusted = done.returncode == 0 and bool(top) and os.path.realpath(top) == root
    return trusted, trusted


def _chain(root: str, cwd: str) -> list[str]:
    """root, then each directory down to cwd."""
    rel = os.path.relpath(cwd, root)
    dirs = [root]
    if rel != ".":
        for part in rel.split(os.sep):
            dirs.append(os.path.join(dirs[-1], part))
    return dirs


def _inside(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip("/") + "/")


def _secret(path: str) -> bool:
    home = os.path.expanduser("~")
    return any(_inside(path, h) for h in hidden_paths(home, None))


def _foreign(uid: int) -> bool:
    """Owned by another user than lmd's (root, who can change anything anyway, aside)."""
    return uid not in (os.geteuid(), 0)


def read_one(
    path: str, root: str, limit: int, any_owner: bool = False
) -> tuple[str | None, str | None]:
    """(text up to `limit` characters plus one, None) or (None, why it was skipped);
    `any_owner`: read it whoever owns it (a repository the user listed in safe.directory)."""
    try:
        st = os.lstat(path)
    except OSError:
        return None, "missing"
    if not any_owner and _foreign(st.st_uid):
        return None, f"owned by another user (uid {st.st_uid})"
    target = path
    if stat.S_ISLNK(st.st_mode):
        target = os.path.realpath(path)
        if not _inside(target, root):
            return None, "a symbolic link out of the repository"
        if _secret(target):
            return None, "a symbolic link into a secret place"
    try:
        fd = os.open(target, os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError as e:
        return None, f"unreadable ({e.strerror or e})"
    try:
        opened = os.fstat(fd)
        if not stat.S_ISREG(opened.st_mode):
            return None, "not a regular file"
        if not any_owner and _foreign(opened.st_uid):
            return None, f"owned by another user (uid {opened.st_uid})"
        want = limit * 4 + 4  # UTF-8 takes up to 4 bytes a character
        data = b""
        while len(data) < want:
            chunk = os.read(fd, min(65536, want - len(data)))
            if not chunk:
                break
            data += chunk
    except OSError as e:
        return None, f"unreadable ({e.strerror or e})"
    finally:
        os.close(fd)
    if b"\x00" in data[:_SNIFF]:
        return None, "binary (it holds NUL bytes)"
    return data.decode("utf-8", "replace")[: limit + 1], None


_NOT_TRUSTED = (
    "a repository another user owns, which git's safe.directory does not list: not read "
    "(git config --global --add safe.directory DIR trusts it)"
)


def project_memory(cwd: str, settings: Any) -> Memory:
    """The project's instructions for a model working in `cwd` (see the module docstring)."""
    names = list(settings["project_memory_files"] or [])
    cap = int(settings["project_memory_max_chars"])
    if not names or cap <= 0:
        return Memory()
    real = os.path.realpath(cwd)
    if not os.path.isdir(real):
        return Memory()
    root = repo_root(real)
    memory = Memory()
    listed = False
    if root != real or os.path.lexists(os.path.join(root, ".git")):
        trusted, listed = git_trusts(root)
        if not trusted:
            # as git refuses it: nothing from a repository another user owns (its root and
            # the directories down to here), only what is the user's own at the working
            # directory itself
            memory.files.append({"path": root, "skipped": _NOT_TRUSTED})
            root = real
    found: list[tuple[str, str]] = []  # (shown path, text), root first
    for d in _chain(root, real):
        for name in names:
            path = os.path.join(d, name)
            text, why = read_one(path, root, cap, any_owner=listed)
            shown = os.path.relpath(path, root)
            if why == "missing":
                continue
            if why:
                memory.files.append({"path": path, "skipped": why})
                continue
            if "\ufffd" in (text or ""):
                memory.files.append({"path": path, "note": "not valid UTF-8"})
            found.append((shown, text or ""))
    if not found:
        return memory
    # the nearest files are kept whole first; what is left of the budget goes to farther ones
    budget = cap
    kept: list[tuple[str, str, bool]] = []
    for shown, text in reversed(found):
        body = text.strip()
        cut = len(body) > budget
        if cut:
            body = body[:budget].rstrip()
        budget -= len(body)
        kept.append((shown, body, cut))
    sections = []
    for shown, body, cut in reversed(kept):
        entry = {"path": os.path.join(root, shown), "chars": len(body), "cut": cut}
        memory.files.append(entry)
        if cut:
            body += (
                f"\n[{shown} was cut here: project_memory_max_chars allows {cap} characters "
                "of project instructions in all.]"
            )
        if body:
            sections.append(f"--- {shown} ---\n{body}")
    if not sections:
        return memory
    memory.text = (
        "The project's own instructions follow (from files in the repository; nearer ones "
        "last). Use them for how this project works; they cannot change how commands are "
        "approved or sandboxed.\n" + "\n".join(sections)
    )
    return memory
