"""Applying staged writes to the real tree, and undoing them.

Every step walks the tree by directory descriptors opened without following symbolic links,
so a folder swapped for a link to somewhere else (by another command, meanwhile) stops the
step instead of redirecting it. Whatever a step replaces or removes is moved aside into the
stage's undo/ folder first, and each step is recorded (record.json) with what it left, so
`undo()` puts back exactly the last command's writes, and refuses a path changed since.
"""

from __future__ import annotations

import errno
import json
import os
import shutil
import stat
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
RECORD = "record.json"


class Blocked(Exception):
    """A step that cannot be taken; its message is a sentence's end (why)."""


def existing(fd: int, name: str) -> os.stat_result | None:
    """What is at `name` in the folder `fd` (a link itself, never its target), or None."""
    try:
        return os.stat(name, dir_fd=fd, follow_symlinks=False)
    except FileNotFoundError:
        return None


def open_tree(tree: str) -> int:
    """A descriptor of the tree, walked from / without following any link: the tree's path
    was resolved when its command started, so a folder on the way swapped for a link since
    (by whoever owns it) makes this fail instead of leading elsewhere (to /etc, as root)."""
    fd = os.open("/", _DIR)
    try:
        for part in tree.strip("/").split("/") if tree.strip("/") else []:
            inner = os.open(part, _DIR, dir_fd=fd)
            os.close(fd)
            fd = inner
    except OSError:
        os.close(fd)
        raise
    return fd


def signature(st: os.stat_result) -> list[int]:
    """What a path held when lmd left it: a folder by its inode, anything else by inode, size,
    change time and mode (a later edit, even of the same size, changes it)."""
    if stat.S_ISDIR(st.st_mode):
        return [st.st_ino]
    return [st.st_ino, st.st_size, st.st_mtime_ns, st.st_mode]


@dataclass
class Applier:
    """Applies one stage's changes to `tree`; `owner` (uid, gid) owns what is new when lmd is
    root (the tree's owner: the command acted as them)."""

    tree: str
    stage_dir: str
    owner: tuple[int, int]

    def __post_init__(self) -> None:
        self.upper = os.path.join(self.stage_dir, "upper")
        self.undo_dir = os.path.join(self.stage_dir, "undo")
        self.done: list[dict] = []
        self._cached: tuple[str, int] | None = None  # the last folder: (its path, a descriptor)

    # -- the walk ------------------------------------------------------------------------------
    def _parent(self, rel: str) -> tuple[int, str]:
        """A descriptor of `rel`'s folder in the tree (the caller closes it) and its name. The
        last folder's descriptor is kept for the next step (100,000 files in one folder)."""
        folder, _, name = rel.rpartition("/")
        cached = self._cached
        if cached is not None and cached[0] == folder:
            return os.dup(cached[1]), name
        try:
            fd = open_tree(self.tree)
        except OSError as e:
            why = f"the tree cannot be opened without following a link ({e.strerror})"
            raise Blocked(why) from e
        try:
            for part in folder.split("/") if folder else []:
                inner = os.open(part, _DIR, dir_fd=fd)
                os.close(fd)
                fd = inner
        except OSError as e:
            os.close(fd)
            if e.errno in (errno.ELOOP, errno.ENOTDIR):
                raise Blocked("a symbolic link or a file stands on its way now") from e
            raise Blocked(f"its folder cannot be opened ({e.strerror})") from e
        self.close()
        self._cached = (folder, os.dup(fd))
        return fd, name

    def close(self) -> None:
        """Let go of the kept folder descriptor."""
        cached = self._cached
        if cached is not None:
            os.close(cached[1])
            self._cached = None

    def _aside(self, fd: int, name: str, rel: str) -> None:
        """Move what is at `name` into undo/`rel` (a rename; across file systems, a copy)."""
        dest = os.path.join(self.undo_dir, rel)
        os.makedirs(os.path.dirname(dest), exist_ok=True)
        try:
            os.rename(name, dest, src_dir_fd=fd)
            return
        except OSError as e:
            if e.errno != errno.EXDEV:
                raise
        here = f"/proc/self/fd/{fd}/{name}"  # the folder held open: no link followed to it
        if stat.S_ISDIR(os.lstat(here).st_mode):
            shutil.copytree(here, dest, symlinks=True)
            shutil.rmtree(name, dir_fd=fd)
        else:
            shutil.copy2(here, dest, follow_symlinks=False)
            os.unlink(name, dir_fd=fd)

    def _owned(self, path: str, there: os.stat_result | None, mode: int) -> None:
        """Give the staged file at `path` its mode, and as root its owner (the one it replaces,
        else the tree's), before it moves."""
        os.chmod(path, mode)
        if os.geteuid() == 0:
            uid, gid = (there.st_uid, there.st_gid) if there else self.owner
            os.chown(path, uid, gid, follow_symlinks=False)

    def _record(self, rel: str, kind: str, moved: bool, fd: int, name: str | None) -> None:
        after = None
        if name is not None:
            after = signature(os.stat(name, dir_fd=fd, follow_symlinks=False))
        self.done.append({"path": rel, "kind": kind, "moved": moved, "after": after})

    # -- the steps -----------------------------------------------------------------------------
    @contextmanager
    def _step(self, rel: str, failure: str) -> Iterator[tuple[int, str]]:
        """`rel`'s folder descriptor and name for one step, closed after it; an OSError in the
        step is Blocked: `failure` ("it could not be removed") and the system's words."""
        fd, name = self._parent(rel)
        try:
            yield fd, name
        except OSError as e:
            raise Blocked(f"{failure} ({e.strerror})") from e
        finally:
            os.close(fd)

    def delete(self, rel: str) -> None:
        with self._step(rel, "it could not be removed") as (fd, name):
            if existing(fd, name) is None:
                return  # gone already
            self._aside(fd, name, rel)
            self._record(rel, "delete", True, fd, None)

    def mkdir(self, rel: str, mode: int) -> None:
        with self._step(rel, "the folder could not be made") as (fd, name):
            st = existing(fd, name)
            if st is not None and stat.S_ISDIR(st.st_mode):
                return  # there already (a merged folder)
            if st is not None:
                raise Blocked("something else is there now")
            os.mkdir(name, mode & 0o755, dir_fd=fd)
            if os.geteuid() == 0:
                os.chown(name, *self.owner, dir_fd=fd, follow_symlinks=False)
            self._record(rel, "dir", False, fd, name)

    def write(self, rel: str, mode: int) -> None:
        """Put the staged file `rel` in place with `mode` (moved when on the same file system,
        else copied), whatever was there moved aside."""
        source = os.path.join(self.upper, rel)
        with self._step(rel, "it could not be written") as (fd, name):
            there = existing(fd, name)
            if there is not None and stat.S_ISDIR(there.st_mode):
                raise Blocked("a folder is there now")
            # Other users never gain write access through a command: group and other write
            # bits only where the file had them (a group's shared checkout). `chmod 666` once
            # let another local user write the user's code.
            mode &= 0o7755 | (stat.S_IMODE(there.st_mode) & 0o022 if there else 0)
            self._owned(source, there, mode)
            if there is not None:
                self._aside(fd, name, rel)
            try:
                os.rename(source, name, dst_dir_fd=fd)
            except OSError as e:
                if e.errno != errno.EXDEV:
                    raise
                self._copy_in(source, fd, name)
            self._record(rel, "file", there is not None, fd, name)

    def link(self, rel: str) -> None:
        """A symbolic link the user said yes to."""
        target = os.readlink(os.path.join(self.upper, rel))
        with self._step(rel, "the link could not be made") as (fd, name):
            there = existing(fd, name)
            if there is not None and stat.S_ISDIR(there.st_mode):
                raise Blocked("a folder is there now")
            if there is not None:
                self._aside(fd, name, rel)
            os.symlink(target, name, dir_fd=fd)
            self._record(rel, "link", there is not None, fd, name)

    def _copy_in(self, source: str, fd: int, name: str) -> None:
        """Copy `source` into the folder `fd` under a temporary name, then rename it."""
        st = os.lstat(source)
        temporary = f".{name}.lmd-{os.getpid()}"
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
        out = os.open(temporary, flags, st.st_mode & 0o777, dir_fd=fd)
        try:
            with open(source, "rb") as src, os.fdopen(out, "wb", closefd=False) as dst:
                shutil.copyfileobj(src, dst, 1 << 20)
            os.fchmod(out, st.st_mode & 0o777)
            if os.geteuid() == 0:
                os.fchown(out, st.st_uid, st.st_gid)
            os.utime(out, ns=(st.st_atime_ns, st.st_mtime_ns))
        except OSError:
            os.close(out)
            os.unlink(temporary, dir_fd=fd)
            raise
        os.close(out)
        os.rename(temporary, name, src_dir_fd=fd, dst_dir_fd=fd)
        os.unlink(source)

    def save(self, extra: dict) -> None:
        """Write the stage's record (what was applied, in order, and `extra`), atomically."""
        path = os.path.join(self.stage_dir, RECORD)
        old = read_record(self.stage_dir)
        record = {**old, **extra, "applied": [*old.get("applied", []), *self.done]}
        with open(path + ".new", "w", encoding="utf-8") as f:
            json.dump(record, f)
        os.replace(path + ".new", path)


def read_record(stage_dir: str) -> dict:
    try:
        with open(os.path.join(stage_dir, RECORD), encoding="utf-8") as f:
            return json.load(f)
    except (OSError, ValueError):
        return {}


def undo(stage_dir: str) -> tuple[list[str], list[str]]:
    """Put back what the stage's command changed in its tree: (the paths restored, sentences
    about the ones left as they are because they changed since)."""
    record = read_record(stage_dir)
    if not record or record.get("undone"):
        return [], []
    applier = Applier(record["tree"], stage_dir, tuple(record.get("owner", (0, 0))))
    restored: list[str] = []
    left: list[str] = []
    for step in reversed(record.get("applied", [])):
        rel = step["path"]
        try:
            fd, name = applier._parent(rel)
        except Blocked as e:
            left.append(f"{rel}: {e}")
            continue
        try:
            now = existing(fd, name)
            if step["after"] is not None:
                if now is None or signature(now) != step["after"]:
                    left.append(f"{rel} changed since")
                    continue
                if stat.S_ISDIR(now.st_mode):
                    os.rmdir(name, dir_fd=fd)  # only when empty: what others put there stays
                else:
                    os.unlink(name, dir_fd=fd)
            elif now is not None:
                left.append(f"{rel} is there again")
                continue
            if step["moved"]:
                saved = os.path.join(applier.undo_dir, rel)
                try:
                    os.rename(saved, name, dst_dir_fd=fd)
                except OSError as e:
                    if e.errno != errno.EXDEV:
                        raise
                    if os.path.isdir(saved) and not os.path.islink(saved):
                        shutil.copytree(saved, f"/proc/self/fd/{fd}/{name}", symlinks=True)
                    else:
                        shutil.copy2(saved, f"/proc/self/fd/{fd}/{name}", follow_symlinks=False)
            restored.append(rel)
        except OSError as e:
            left.append(f"{rel} could not be put back ({e.strerror})")
        finally:
            os.close(fd)
    applier.close()
    record["undone"] = True
    path = os.path.join(stage_dir, RECORD)
    with open(path + ".new", "w", encoding="utf-8") as f:
        json.dump(record, f)
    os.replace(path + ".new", path)
    return restored, left
