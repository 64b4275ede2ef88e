"""Staging a command's writes: a fresh directory (upper/, work/, lower/) for the overlay that
lmd-stage (stage.c) mounts over the writable tree, and the argv that mounts it before bwrap.

Whatever the command writes under the tree lands in upper/, recorded by the kernel (new and
changed files, whiteouts for deletions, opaque directories for replaced ones); nothing reaches
the tree until lmd applies what the rule allows (daemon/execution/writes.py)."""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from dataclasses import dataclass

from .helpers import user_cache
from .policy import ROOT_RUNS_AS

STAGE_AGE = 7 * 86400.0  # a week: staged directories older than this go when a new one is made


def default_root() -> str:
    """Where staged directories live when the policy names no place (the user's cache)."""
    return str(user_cache() / "staged")


@dataclass(frozen=True)
class Stage:
    """One command's staging directory over `tree`."""

    tree: str  # the real path of the writable tree
    dir: str
    owner: tuple[int, int]  # the tree's owner (uid, gid): as root, who the command acts as

    @property
    def upper(self) -> str:
        return os.path.join(self.dir, "upper")

    def argv(self, helper: str) -> list[str]:
        """lmd-stage's part of the command line, up to its `--`. As root, the tree's owner
        appears as the unprivileged user the command runs as (an idmapped mount), and
        lmd-stage becomes that user before bwrap."""
        wanted = [helper, self.tree, self.dir]
        if os.geteuid() == 0:
            uid, gid = self.owner
            wanted += ["--idmap", f"{uid}:{gid}", "--as", f"{ROOT_RUNS_AS}:{ROOT_RUNS_AS}"]
        return [*wanted, "--"]


def new_stage(tree: str, root: str | None = None) -> Stage:
    """A fresh, private staging directory for a command that may write `tree`."""
    tree = os.path.realpath(tree)
    root = root or default_root()
    if _inside(root, tree):  # overlayfs refuses an upper layer inside its lower one
        root = os.path.join(tempfile.gettempdir(), f"lmd-staged-{os.geteuid()}")
    os.makedirs(root, mode=0o700, exist_ok=True)
    sweep(root)
    where = tempfile.mkdtemp(prefix="cmd-", dir=root)
    for part in ("upper", "work", "lower"):
        os.mkdir(os.path.join(where, part), 0o700)
    st = os.stat(tree)
    upper = os.path.join(where, "upper")
    # the overlay's top directory takes upper's owner and mode: make them the tree's (as root,
    # the tree's owner appears as the unprivileged user)
    os.chmod(upper, st.st_mode & 0o777)
    if os.geteuid() == 0:
        os.chown(upper, ROOT_RUNS_AS, ROOT_RUNS_AS)
    return Stage(tree, where, (st.st_uid, st.st_gid))


def discard(stage_dir: str) -> None:
    """Remove a staging directory and everything in it."""
    shutil.rmtree(stage_dir, ignore_errors=True)


def sweep(root: str, age: float = STAGE_AGE) -> None:
    """Remove staged directories older than `age` seconds (a daemon that died kept them)."""
    now = time.time()
    try:
        names = os.listdir(root)
    except OSError:
        return
    for name in names:
        path = os.path.join(root, name)
        try:
            if name.startswith("cmd-") and now - os.stat(path).st_mtime > age:
                discard(path)
        except OSError:
            pass


def _inside(path: str, root: str) -> bool:
    path = os.path.realpath(path)
    return path == root or path.startswith(root.rstrip("/") + "/")
