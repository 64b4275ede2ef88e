"""The git repository cobol works in: finding it, running git, and keeping paths inside it."""

from __future__ import annotations

import asyncio
import os
import re
from pathlib import Path

from daemon.api import LmdError, command_env

# Git's own messages in English and no pager or password prompt, whatever the user's setup.
_GIT_ENV = {"LC_ALL": "C", "GIT_TERMINAL_PROMPT": "0", "GIT_PAGER": "cat"}


# cobol's own git calls run without asking, so a repository must not make them run its code:
# core.fsmonitor runs on status, diff and ls-files, filter drivers (.gitattributes) on status,
# diff and apply, hooks on commit. These switch all of that off for our calls.
_SAFE_GIT = ("-c", "core.fsmonitor=false", "-c", "core.hooksPath=/dev/null",
             "-c", "submodule.recurse=false")  # fmt: skip
# diff and status ask each submodule whether it is dirty by running git in it, which reads the
# submodule's own configuration (its filter drivers are not among the ones neutralised here);
# the option, unlike diff.ignoreSubmodules, cannot be undone by .gitmodules' `ignore`.
_LOOK_INTO_SUBMODULES = ("diff", "status")  # given --ignore-submodules=all


async def _run_git(
    repo: str, args: list[str], stdin: bytes | None, env: dict, split: bool = False
) -> tuple[int, bytes, bytes]:
    proc = await asyncio.create_subprocess_exec(
        "git",
        *args,
        cwd=repo,
        stdin=asyncio.subprocess.PIPE if stdin is not None else asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE if split else asyncio.subprocess.STDOUT,
        env=env,
    )
    out, err = await proc.communicate(stdin)
    return proc.returncode or 0, out, err or b""


async def git(repo: str, *args: str, stdin: bytes | None = None) -> tuple[int, str]:
    """Run `git args` in `repo`; return (exit code, stdout and stderr as text). Like every
    command, git gets an allowlisted environment (plus the user's GIT_* variables): the API
    key and the token never reach it; and no fsmonitor, hook or filter driver the repository
    configures runs (see _SAFE_GIT)."""
    code, out, _ = await git_split(repo, *args, stdin=stdin, split=False)
    return code, out.decode("utf-8", "replace")


async def git_split(
    repo: str, *args: str, stdin: bytes | None = None, split: bool = True
) -> tuple[int, bytes, bytes]:
    """Like git(), but (exit code, stdout, stderr) as bytes, kept apart (`split`): for output
    lmd reads as data, which a warning on stderr must not mix into."""
    env = command_env(repo, _GIT_ENV, [n for n in os.environ if n.startswith("GIT_")])
    code, names, _ = await _run_git(
        repo,
        [*_SAFE_GIT, "config", "--null", "--name-only", "--get-regexp", r"^filter\."],
        None,
        env,
    )
    neutral: list[str] = []
    drivers = (
        {n.rsplit(".", 1)[0] for n in names.decode("utf-8", "replace").split("\0")
         if n.count(".") >= 2}
        if code == 0
        else set()
    )  # fmt: skip
    for driver in sorted(drivers):
        for key, value in (("clean", ""), ("smudge", ""), ("process", ""), ("required", "false")):
            neutral += ["-c", f"{driver}.{key}={value}"]
    if args and args[0] in _LOOK_INTO_SUBMODULES:
        args = (args[0], "--ignore-submodules=all", *args[1:])
    return await _run_git(repo, [*_SAFE_GIT, *neutral, *args], stdin, env, split)


def chosen_directory(setting: str, cwd: str | None) -> str:
    """The directory named by `cobol_repo`, else the session's working directory."""
    where = (setting or "").strip() or (cwd or "")
    if not where:
        raise LmdError(
            "I do not know which repository to work in; send your working directory "
            "(lmd say --cwd, or the X-Cwd header) or set cobol_repo."
        )
    path = Path(where).expanduser()
    if not path.is_dir():
        raise LmdError(
            f"The directory {path} does not exist; point cobol_repo or --cwd at a repository."
        )
    return str(path)


async def find_root(directory: str) -> str:
    """The top of the git work tree containing `directory`."""
    code, out = await git(directory, "rev-parse", "--show-toplevel")
    root = out.strip()
    if code != 0 and "dubious ownership" in out:
        found = re.search(r"repository at '([^']*)'", out)
        where = found.group(1) if found else directory
        raise LmdError(
            f"git refuses the repository at {where}: another user owns it, so I will not work "
            "there either. If you trust it, run: git config --global --add safe.directory "
            f"{where}",
            status=403,
        )
    if code != 0 or not root:
        raise LmdError(
            f"{directory} is not a git repository; run git init there or point cobol_repo at one."
        )
    return str(Path(root).resolve())


async def unmerged_paths(repo: str) -> list[str]:
    """Files with unresolved merge conflicts (editing then would mix our change into theirs)."""
    code, out = await git(repo, "diff", "--name-only", "--diff-filter=U")
    return [line for line in out.splitlines() if line.strip()] if code == 0 else []


async def dirty_files(repo: str, files: list[str]) -> list[str]:
    """Which of `files` have uncommitted changes (staged or not)."""
    if not files:
        return []
    code, out = await git(repo, "status", "--porcelain", "--", *files)
    if code != 0:
        return []
    return [line[3:] for line in out.splitlines() if len(line) > 3 and line[:2] != "??"]


def inside(repo: str, relative: str) -> tuple[Path | None, str | None]:
    """Resolve `relative` under `repo`; (path, None) or (None, sentence why it is refused)."""
    name = relative.strip()
    if not name:
        return None, "An empty file name cannot be used."
    root = Path(repo).resolve()
    candidate = Path(name)
    if candidate.is_absolute():
        full = candidate.resolve()
    else:
        full = (root / candidate).resolve()
    try:
        rel = full.relative_to(root)
    except ValueError:
        return None, f"{name} is outside the repository {root}; I only work inside it."
    if ".git" in rel.parts or ".git" in Path(name).parts:
        return None, f"{name} is inside .git; I never touch git's own files."
    return full, None
