"""Files that other tools execute on their own, so an edit or a build that runs without a yes
must not create or change them: code planted there runs later, outside every sandbox, when the
user runs an ordinary command (`git commit`, `make`, `npm install`, `cd` with direnv, `pytest`).

The list comes from what real tools read and run:

- git: anything under a `.git` directory at any depth (hooks, `config` with core.fsmonitor,
  core.pager, aliases...), the configured `core.hooksPath`, `.gitattributes` (filter and diff
  drivers), `.gitmodules` (submodule update commands);
- build and task runners: Makefile and `*.mk`, Justfile, Taskfile, Rakefile, CMakeLists.txt,
  meson.build, build.gradle(.kts), gradlew, pom.xml, Cargo.toml and build.rs, setup.py,
  setup.cfg, pyproject.toml, tox.ini, noxfile.py;
- tests that run on their own: conftest.py (pytest imports it), pytest.ini;
- package managers' scripts: package.json (install and lifecycle scripts), .npmrc and .yarnrc
  (script-shell, node-options), Gemfile;
- the shell and editors: .envrc (direnv runs it on `cd`), mise/asdf configuration, .vscode and
  .idea task and launch files, .pre-commit-config.yaml, husky and lefthook hooks;
- Python's start-up: a virtual environment (`.venv`, `venv`, or any folder holding a
  pyvenv.cfg: its `bin/activate`, its scripts, and the `*.pth` files in site-packages, whose
  import lines every Python of that environment runs), `*.pth`, sitecustomize.py and
  usercustomize.py anywhere;
- and any executable bit, anywhere.
"""

from __future__ import annotations

import fnmatch
import os
import re
import subprocess
from pathlib import PurePosixPath

# Names matched against the file's name, at any depth.
PROTECTED_NAMES = (
    "Makefile", "makefile", "GNUmakefile", "*.mk", "Justfile", "justfile", ".justfile",
    "Taskfile.yml", "Taskfile.yaml", "Rakefile", "CMakeLists.txt", "meson.build",
    "build.gradle", "build.gradle.kts", "settings.gradle", "settings.gradle.kts", "gradlew",
    "pom.xml", "Cargo.toml", "build.rs", "setup.py", "setup.cfg", "pyproject.toml", "tox.ini",
    "noxfile.py", "conftest.py", "pytest.ini", "package.json", ".npmrc", ".yarnrc",
    ".yarnrc.yml", "Gemfile", ".envrc", ".mise.toml", "mise.toml", ".tool-versions",
    ".pre-commit-config.yaml", "lefthook.yml", ".lefthook.yml", ".gitattributes",
    ".gitmodules", "*.pth", "sitecustomize.py", "usercustomize.py",
)  # fmt: skip
# Directories whose every file is protected.
PROTECTED_DIRS = (".git", ".vscode", ".idea", ".husky", ".githooks", ".venv", "venv")
VENV_MARK = "pyvenv.cfg"  # a virtual environment of any name


def hooks_path(repo: str) -> str | None:
    """The repository's core.hooksPath relative to it (when inside it), else None."""
    try:
        done = subprocess.run(
            ["git", "-C", repo, "config", "--get", "core.hooksPath"],
            capture_output=True,
            text=True,
            timeout=5,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    value = done.stdout.strip()
    if done.returncode != 0 or not value:
        return None
    full = os.path.realpath(os.path.join(repo, os.path.expanduser(value)))
    root = os.path.realpath(repo)
    return os.path.relpath(full, root) if full.startswith(root + os.sep) else None


def why_protected(path: str, hooks: str | None = None) -> str | None:
    """Why an edit of `path` (relative to the repository) needs a yes, or None."""
    return _why(path, PurePosixPath(path.replace(os.sep, "/")).parts, hooks)


def _why(path: str, parts: tuple[str, ...] | list[str], hooks: str | None) -> str | None:
    for part in parts[:-1]:
        if part in PROTECTED_DIRS:
            return f"{path} is in {part}, whose files tools run or read as configuration"
    if hooks and (path == hooks or path.startswith(hooks.rstrip("/") + "/")):
        return f"{path} is in the repository's hooks path ({hooks}): git runs what is there"
    name = parts[-1] if parts else path
    if name in PROTECTED_DIRS:
        return f"{path} is where tools keep what they run"
    if _PROTECTED_NAME.match(name):
        return f"{path} is a file that build, test or package tools run on their own"
    return None


# PROTECTED_NAMES as one pattern: judging a staged command's 100,000 files must stay cheap
_PROTECTED_NAME = re.compile("|".join(fnmatch.translate(p) for p in PROTECTED_NAMES))


def protected_in(root: str, limit: int = 20000) -> list[str]:
    """Existing protected files and directories under `root` (absolute paths): the build
    files a yes to a build covers (cobol). Stops looking after `limit` entries. (What a
    sandboxed command writes is judged by daemon/execution/writes.py, all of it, no walk.)"""
    found: list[str] = []
    hooks = hooks_path(root)
    if hooks:
        found.append(os.path.join(root, hooks))
    seen = 0
    for here, dirs, files in os.walk(root):
        seen += len(dirs) + len(files)
        for d in list(dirs):
            if d in PROTECTED_DIRS or os.path.isfile(os.path.join(here, d, VENV_MARK)):
                found.append(os.path.join(here, d))
                dirs.remove(d)  # bound whole: nothing inside to list
            elif d in ("node_modules", "__pycache__"):
                dirs.remove(d)  # big and not what other tools run from here
        rel = os.path.relpath(here, root)
        for f in files:
            path = f if rel == "." else os.path.join(rel, f)
            if why_protected(path, hooks):
                found.append(os.path.join(here, f))
        if seen > limit:
            break
    return found


# -- what a staged command may write -----------------------------------------------------------
BYTECODE = ("__pycache__",)
DOT_WHY = "tools read and run what is there"
BYTECODE_SUFFIXES = (".pyc", ".pyo")


def why_held(path: str, hooks: str | None = None) -> str | None:
    """Why a staged write at `path` (relative to the rule's tree) waits for the user's yes, or
    None when the rule lets it through: a dotfile or anything in a dot folder (hooks, git and
    tool configuration, .envrc, .vscode, ...), and every name of `why_protected` (build and
    test entry points, virtual environments, the hooks path, .pth, sitecustomize.py)."""
    if path.startswith(".") or "/." in path:
        parts = path.split("/")
        for i, part in enumerate(parts):
            if part.startswith("."):
                where = "/".join(parts[: i + 1])
                return f"{where} is a dotfile or configuration folder: {DOT_WHY}"
    return _why(path, path.split("/"), hooks)  # a clean relative path: no pathlib needed


def is_bytecode(path: str) -> bool:
    """A bytecode cache (`__pycache__/*.pyc`): Python runs it in place of an unchanged source,
    and git does not show it."""
    return path.endswith(BYTECODE_SUFFIXES) or any(p in BYTECODE for p in path.split("/"))


def held_root(path: str, hooks: str | None = None) -> str:
    """The place a held write belongs to, for the question: the first dot folder, protected
    folder or hooks path on its way (`sub/.git` for `sub/.git/hooks/pre-commit`), else itself."""
    parts = path.split("/")
    for i, part in enumerate(parts[:-1]):
        if part.startswith(".") or part in PROTECTED_DIRS or (hooks and part in hooks):
            where = "/".join(parts[: i + 1])
            if part.startswith(".") or part in PROTECTED_DIRS or where == hooks:
                return where
    return path
