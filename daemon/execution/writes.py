"""What a command that may write a tree wrote: read from its stage (the overlay's upper folder,
where the kernel put every write: new and changed files, whiteouts for deletions, opaque
folders for replaced ones), judged against the rule's policy, and applied.

A write is applied when it is a regular, non-executable file or a folder inside the tree and
no tool runs it on its own. Held for the user's yes (named in the question): dotfiles and
anything in a dot folder (hooks, git and tool configuration), build and test entry points,
virtual environments, the hooks path, executable bits, symbolic links, and removing (or
renaming, which is copying and removing) a folder that holds any of those. Dropped: bytecode
caches, named pipes, sockets and devices. There is no limit on how many writes are read: the
stage holds exactly what was written, all of it is judged.
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass, field

from daemon.execution.applying import Applier, Blocked, open_tree, read_record, undo
from daemon.execution.protected import (
    PROTECTED_DIRS,
    VENV_MARK,
    held_root,
    hooks_path,
    is_bytecode,
    why_held,
)
from daemon.execution.sandbox.policy import config_place
from daemon.execution.sandbox.staging import Stage, discard

OPAQUE = ("trusted.overlay.opaque", "user.overlay.opaque")
_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


@dataclass
class Change:
    """One staged write: `path` relative to the tree; `kind` file, dir, link, delete or other;
    `why` it is held (or dropped), "" when the rule lets it through."""

    path: str
    kind: str
    mode: int = 0
    was_executable: bool = False  # it replaces an executable file
    why: str = ""
    drop: bool = False
    root: str = ""  # the place it belongs to in the question (held_root)

    def to_json(self) -> dict:
        return {"path": self.path, "kind": self.kind, "mode": self.mode, "why": self.why,
                "drop": self.drop, "root": self.root}  # fmt: skip


@dataclass
class Settled:
    """A staged command's writes after lmd applied what the rule allows."""

    tree: str
    dir: str | None  # the stage, kept for a yes and for undo (None: discarded)
    applied: list[Change] = field(default_factory=list)
    held: list[Change] = field(default_factory=list)
    dropped: list[Change] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)  # sentences: applied steps that failed

    def held_roots(self) -> dict[str, tuple[str, int]]:
        """{place: (why, how many writes)} of the held writes, in order."""
        roots: dict[str, tuple[str, int]] = {}
        for c in self.held:
            why, n = roots.get(c.root, (c.why, 0))
            roots[c.root] = (why, n + 1)
        return roots

    def summary(self) -> str:
        """Lines for the command's output: what lmd did not keep, and why."""
        lines = []
        roots = self.held_roots()
        if roots:
            kept = "kept for the user's yes" if self.dir else "did not keep"
            parts = [
                f"{place}{_count(n)} ({reason(why, place)})"
                for place, (why, n) in list(roots.items())[:8]
            ]
            more = f"; and {len(roots) - 8} more places" if len(roots) > 8 else ""
            lines.append(
                f"[lmd applied only what the rule allows and {kept}: {'; '.join(parts)}{more}]"
            )
        whys: dict[str, list[str]] = {}
        for c in self.dropped:
            places = whys.setdefault(c.why, [])
            if c.root not in places:
                places.append(c.root)
        for why, places in whys.items():
            named = ", ".join(places[:5]) + (" and more" if len(places) > 5 else "")
            lines.append(f"[lmd dropped {named} ({why})]")
        if self.failed:
            lines.append(f"[lmd could not apply: {'; '.join(self.failed[:5])}]")
        return "\n".join(lines)


def reason(why: str, place: str) -> str:
    """A held write's reason without its place's own name in front ("conftest.py is a file
    that ..." -> "a file that ...")."""
    if not why.startswith(place):
        return why
    return why[len(place) :].lstrip(" :").removeprefix("is ").strip()


def _count(n: int) -> str:
    return f", {n} writes" if n > 1 else ""


def read_stage(stage: Stage) -> list[Change]:
    """Every write in the stage, folders before what is in them; a replaced path comes as a
    delete, then what replaced it."""
    changes: list[Change] = []
    pending = [""]
    while pending:
        rel = pending.pop()
        upper = os.path.join(stage.upper, rel)
        real = _open_real(stage.tree, rel)
        try:
            entries = sorted(os.scandir(upper), key=lambda e: e.name, reverse=True)
            below = []
            for entry in entries:
                path = f"{rel}/{entry.name}" if rel else entry.name
                st = entry.stat(follow_symlinks=False)
                was = _lstat(real, entry.name)
                changes += _changes(path, st, was, entry.path)
                if stat.S_ISDIR(st.st_mode):
                    below.append(path)
            pending += below
        finally:
            if real is not None:
                os.close(real)
    return changes


def _changes(path: str, st: os.stat_result, was: os.stat_result | None, upper: str) -> list:
    """The changes one upper entry stands for, given what the tree held there (`was`)."""
    mode = st.st_mode
    if stat.S_ISCHR(mode) and st.st_rdev == 0:  # a whiteout: deleted
        return [Change(path, "delete")] if was is not None else []
    out = []
    was_dir = was is not None and stat.S_ISDIR(was.st_mode)
    if stat.S_ISDIR(mode):
        if was is not None and (not was_dir or _opaque(upper)):
            out.append(Change(path, "delete"))  # replaced: its old content goes
        if not was_dir or _opaque(upper):
            out.append(Change(path, "dir", stat.S_IMODE(mode)))
        return out
    if was_dir:
        out.append(Change(path, "delete"))
    if stat.S_ISREG(mode):
        old = 0 if was is None or was_dir else stat.S_IMODE(was.st_mode)
        out.append(Change(path, "file", stat.S_IMODE(mode), bool(old & 0o111)))
    elif stat.S_ISLNK(mode):
        out.append(Change(path, "link"))
    else:
        out.append(Change(path, "other"))
    return out


def _opaque(path: str) -> bool:
    for name in OPAQUE:
        try:
            if os.getxattr(path, name, follow_symlinks=False) == b"y":
                return True
        except OSError:
            continue
    return False


def _open_real(tree: str, rel: str) -> int | None:
    """A descriptor of the tree's folder `rel`, no link followed; None where it is none."""
    try:
        fd = open_tree(tree)
    except OSError:
        return None
    for part in rel.split("/") if rel else []:
        try:
            inner = os.open(part, _DIR, dir_fd=fd)
        except OSError:
            os.close(fd)
            return None
        os.close(fd)
        fd = inner
    return fd


def _lstat(fd: int | None, name: str) -> os.stat_result | None:
    if fd is None:
        return None
    try:
        return os.stat(name, dir_fd=fd, follow_symlinks=False)
    except OSError:
        return None


def judge(changes: list[Change], tree: str, home: str) -> None:
    """Mark each change held (`why`), dropped (`drop`), or let through ("")."""
    hooks = hooks_path(tree)
    config = config_place(tree, home)
    venvs = _venvs(changes, tree)
    for c in changes:
        c.root = held_root(c.path, hooks)
        if c.kind == "other":
            c.why, c.drop = "a named pipe, socket or device", True
        elif is_bytecode(c.path) and c.kind != "delete":
            c.why, c.drop = "bytecode caches: Python runs them in place of their source", True
        elif config:
            c.why, c.root = f"{config} is one of your home's configuration places", config
        elif venv := next((v for v in venvs if _under(c.path, v)), None):
            c.why, c.root = f"{venv} is a virtual environment: Python runs what is there", venv
        elif why := why_held(c.path, hooks):
            c.why = why
        elif c.kind == "delete":
            c.why = _protected_below(tree, c.path, hooks)
        elif c.kind == "link":
            c.why = "a symbolic link: it could point anywhere"
        elif c.kind == "file" and c.was_executable:
            c.why = "it changes an executable file"
        elif c.kind == "file" and c.mode & 0o111:
            c.why = "an executable file"


def _under(path: str, root: str) -> bool:
    return path == root or path.startswith(root + "/")


def _venvs(changes: list[Change], tree: str) -> list[str]:
    """Folders among the changes' ancestors (in the tree or made by the command) that hold a
    pyvenv.cfg: virtual environments of any name."""
    folders = {c.path.rsplit("/", 1)[0] for c in changes if "/" in c.path}
    found = set()
    for folder in folders:
        parts = folder.split("/")
        for i in range(1, len(parts) + 1):
            place = "/".join(parts[:i])
            if parts[i - 1] in PROTECTED_DIRS:
                break
            if any(c.path == f"{place}/{VENV_MARK}" for c in changes) or os.path.isfile(
                os.path.join(tree, place, VENV_MARK)
            ):
                found.add(place)
                break
    return sorted(found)


def _protected_below(tree: str, rel: str, hooks: str | None) -> str:
    """Why removing the tree's `rel` needs a yes: what protected it holds (every entry below
    it is looked at, without following links), or ""."""
    parent = _open_real(tree, rel.rsplit("/", 1)[0] if "/" in rel else "")
    if parent is None:
        return ""
    name = rel.rsplit("/", 1)[-1]
    try:
        st = os.stat(name, dir_fd=parent, follow_symlinks=False)
        if not stat.S_ISDIR(st.st_mode):
            return ""
        found = []
        for here, dirs, files, _ in os.fwalk(name, dir_fd=parent, follow_symlinks=False):
            inner = here[len(name) :].lstrip("/")
            for entry in [*dirs, *files]:
                path = "/".join(p for p in (rel, inner, entry) if p)
                if why_held(path, hooks) or entry == VENV_MARK:
                    found.append(held_root(path, hooks))
            dirs[:] = [d for d in dirs if not d.startswith(".") and d not in PROTECTED_DIRS]
        if found:
            listed = sorted(set(found))
            more = f" and {len(listed) - 3} more" if len(listed) > 3 else ""
            return f"removing it would remove {', '.join(listed[:3])}{more}"
        return ""
    except OSError as e:
        return f"what it holds cannot be read ({e.strerror})"
    finally:
        os.close(parent)


def settle(stage: Stage, home: str, keep: bool = False) -> Settled:
    """Read, judge and apply the stage's writes; keep the stage (for a yes to the held ones and
    for undo) or discard it."""
    changes = read_stage(stage)
    judge(changes, stage.tree, home)
    settled = Settled(stage.tree, stage.dir if keep else None)
    applier = Applier(stage.tree, stage.dir, stage.owner)
    blocked: set[str] = set()  # a folder that could not be made: nothing goes into it
    for c in changes:
        if c.drop:
            settled.dropped.append(c)
        elif c.why:
            settled.held.append(c)
        elif any(_under(c.path, b) for b in blocked):
            settled.failed.append(f"{c.path}: its folder could not be made")
        else:
            try:
                _apply(applier, c)
                settled.applied.append(c)
            except Blocked as e:
                settled.failed.append(f"{c.path}: {e}")
                if c.kind == "dir":
                    blocked.add(c.path)
    applier.close()
    if keep:
        applier.save({"tree": stage.tree, "owner": list(stage.owner),
                      "held": [c.to_json() for c in settled.held]})  # fmt: skip
    else:
        discard(stage.dir)
    return settled


def _apply(applier: Applier, c: Change) -> None:
    if c.kind == "delete":
        applier.delete(c.path)
    elif c.kind == "dir":
        applier.mkdir(c.path, c.mode)
    elif c.kind == "link":
        applier.link(c.path)
    else:
        applier.write(c.path, c.mode & 0o7777 & ~0o7000)  # never set-user or set-group id


def apply_held(stage_dir: str, places: list[str]) -> Settled:
    """Apply the held writes in `places` (the ones the question named, and the user said yes
    to), exactly those; the rest stay held."""
    record = read_record(stage_dir)
    tree = record["tree"]
    owner = tuple(record.get("owner", (0, 0)))
    settled = Settled(tree, stage_dir)
    applier = Applier(tree, stage_dir, owner)
    still = []
    for item in record.get("held", []):
        c = Change(item["path"], item["kind"], item["mode"], item["why"], root=item["root"])
        if c.root not in places:
            still.append(c)
            continue
        try:
            _apply_approved(applier, c)
            settled.applied.append(c)
        except Blocked as e:
            settled.failed.append(f"{c.path}: {e}")
    applier.close()
    settled.held = still
    applier.save({"held": [c.to_json() for c in still]})
    return settled


def _apply_approved(applier: Applier, c: Change) -> None:
    """A held write the user said yes to: as staged, executable bits included."""
    if c.kind == "file":
        applier.write(c.path, c.mode & 0o777)
    else:
        _apply(applier, c)


def drop_held(stage_dir: str, places: list[str]) -> None:
    """Forget the held writes in `places`: they are never applied."""
    record = read_record(stage_dir)
    if not record:
        return
    still = [item for item in record.get("held", []) if item["root"] not in places]
    Applier(record["tree"], stage_dir, (0, 0)).save({"held": still})


def undo_stage(stage_dir: str) -> tuple[list[str], list[str]]:
    """Put back what the stage's command changed in its tree (applying.undo)."""
    return undo(stage_dir)


__all__ = [
    "Change", "Settled", "apply_held", "discard", "drop_held", "reason", "settle", "undo_stage"
]  # fmt: skip
