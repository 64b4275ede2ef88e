"""Staged writes (daemon/execution/writes.py, sandbox/staging.py, stage.c): a command that may
write a tree writes an overlay's upper folder, all of it known by the kernel; lmd applies
what the rule allows, holds what needs the user's yes (named), drops what no tool should get
this way, keeps the stage for a yes and for undo, and never follows a link while applying.
Through the runner, as whoever runs the tests (root here: the command runs as nobody over an
idmapped view of a root-owned tree); tests/core/test_sandbox_writes_live.py repeats the
attacks through a live daemon, as root and as a second Unix user."""

from __future__ import annotations

import asyncio
import os
import stat
import subprocess
import threading
from pathlib import Path

import pytest

from daemon.execution import sandbox, writes
from daemon.execution.runner import run_command
from daemon.execution.sandbox import Limits, Policy

pytestmark = pytest.mark.bwrap


def staged(tree: Path, stage_root: Path | None = None, **kw) -> Policy:
    """A workspace-write policy over `tree` (root-owned and 0755 as root: no o+w needed)."""
    tree.chmod(0o755)
    root = stage_root or tree.parent / "staged"
    return Policy("workspace-write", str(tree), str(tree.parent), writable=(str(tree),),
                  limits=Limits(), stage_root=str(root), **kw)  # fmt: skip


def run(cmd: str, tree: Path, pol: Policy, keep: bool = True, timeout: float = 60):
    return asyncio.run(run_command(cmd, str(tree), timeout, 20000, sandbox=pol, keep_staged=keep))


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    if not sandbox.detect().stage:
        pytest.skip(sandbox.detect().sentence())
    tmp_path.chmod(0o755)
    t = tmp_path / "proj"
    t.mkdir()
    (t / "a.txt").write_text("a\n")
    (t / "app.py").write_text("print('app')\n")
    (t / "conftest.py").write_text("# the user's\n")
    sub = t / "sub"
    (sub / "nested").mkdir(parents=True)
    subprocess.run(["git", "init", "-q", str(sub / "nested")], check=True)
    (sub / "conftest.py").write_text("# nested\n")
    (sub / "keep.txt").write_text("k\n")
    (t / "run.sh").write_text("echo hi\n")
    (t / "run.sh").chmod(0o755)
    return t


def test_bwrap_args_bind_the_staged_tree_and_keep_secrets_hidden(tmp_path):
    work = tmp_path / "repo"
    (work / ".git").mkdir(parents=True)
    (work / ".env").write_text("KEY=1\n")
    pol = Policy("workspace-write", str(tmp_path), str(tmp_path), writable=(str(work),),
                 hidden=(str(work / ".env"),))  # fmt: skip
    a = sandbox.bwrap_args(pol)
    bind = a.index("--bind")
    assert a[bind + 1 : bind + 3] == [str(work), str(work)]
    assert str(work / ".git") not in a  # no walk: the stage holds whatever is written there
    env = a.index(str(work / ".env"))
    assert env > bind  # hidden after the writable bind, so it stays hidden
    found = sandbox.detect()
    if found.kind == "bwrap":
        with pytest.raises(RuntimeError, match="only with its writes staged"):
            sandbox.prepare(pol, ["true"], found)  # never a writable tree without a stage


def test_a_tree_is_refused_where_writes_would_run_later(tmp_path):
    home = tmp_path / "home"
    lmd = home / ".local" / "share" / "lmd"
    (home / ".config" / "git").mkdir(parents=True)
    lmd.mkdir(parents=True)
    (home / "code").mkdir()
    for where, sentence in [
        ("/", "the root of the file system"),
        (str(home), "your home directory"),
        (str(tmp_path), "your home directory"),
        (str(home / ".local"), "lmd's own directory"),
        (str(home / ".config"), "your home's configuration places (~/.config)"),
        (str(home / ".config" / "git"), "your home's configuration places (~/.config)"),
        ("/etc", "a system directory (/etc)"),
        ("/usr/local/bin", "a system directory (/usr)"),
    ]:
        problem = sandbox.workspace_problem(where, str(home), str(lmd), [])
        assert problem and sentence in problem, (where, problem)
    secret = home / ".ssh"
    (secret / "keys").mkdir(parents=True)
    assert "hidden" in sandbox.workspace_problem(
        str(secret / "keys"), str(home), str(lmd), [str(secret)]
    )
    (home).chmod(0o755)
    tmp_path.chmod(0o755)
    assert sandbox.workspace_problem(str(home / "code"), str(home), str(lmd), []) is None


def test_writes_reach_the_tree_only_as_the_rule_allows(tree: Path):
    pol = staged(tree)
    r = run(
        "echo new > b.txt; echo more >> a.txt; mkdir -p build && echo o > build/out.o; "
        "rm sub/keep.txt; echo x >> conftest.py; echo all: > Makefile; echo 'import os' > x.pth;"
        " mkdir -p __pycache__ && echo bad > __pycache__/app.cpython-311.pyc; "
        "echo 'fsmonitor = evil' >> sub/nested/.git/config; echo 'echo pwn' > tool; chmod +x tool; "
        "echo more >> run.sh; ln -s /etc/passwd link; mkfifo pipe; "
        "echo s > suid; chmod 4755 suid; touch ../outside; echo done",
        tree,
        pol,
    )
    assert r.exit_code == 0 and "done" in r.output, r.output
    assert r.output.count("Read-only file system") == 1  # ../outside: the tree only
    assert not (tree.parent / "outside").exists()
    s = r.staged
    applied = {c.path for c in s.applied}
    assert applied == {"b.txt", "a.txt", "build", "build/out.o", "sub/keep.txt"}
    assert (tree / "b.txt").read_text() == "new\n" and (tree / "a.txt").read_text() == "a\nmore\n"
    assert (tree / "build" / "out.o").read_text() == "o\n" and not (tree / "sub/keep.txt").exists()
    held = s.held_roots()
    assert set(held) == {"conftest.py", "Makefile", "x.pth", "sub/nested/.git", "tool",
                         "run.sh", "link", "suid"}  # fmt: skip
    assert "executable" in held["tool"][0] and "changes an executable" in held["run.sh"][0]
    assert "symbolic link" in held["link"][0] and "dotfile" in held["sub/nested/.git"][0]
    assert {c.root for c in s.dropped} == {"__pycache__", "__pycache__/app.cpython-311.pyc", "pipe"}
    # nothing held or dropped reached the tree
    assert (tree / "conftest.py").read_text() == "# the user's\n"
    for name in ("Makefile", "x.pth", "__pycache__", "tool", "link", "pipe", "suid"):
        assert not os.path.lexists(tree / name), name
    assert "fsmonitor" not in (tree / "sub/nested/.git/config").read_text()
    assert (tree / "run.sh").read_text() == "echo hi\n"
    assert "kept for the user's yes" in r.output and "conftest.py" in r.output
    assert "lmd dropped" in r.output and "bytecode caches" in r.output
    assert r.blocked == "the file system is read-only there"  # ../outside


def test_a_staged_file_is_the_trees_owners_and_never_set_id(tree: Path):
    r = run("echo n > n.txt; chmod 6644 n.txt; echo m >> a.txt", tree, staged(tree))
    assert {c.path for c in r.staged.applied} == {"n.txt", "a.txt"}
    for name in ("n.txt", "a.txt"):
        st = os.stat(tree / name)
        assert (st.st_uid, st.st_gid) == (os.stat(tree).st_uid, os.stat(tree).st_gid)
        assert not st.st_mode & (stat.S_ISUID | stat.S_ISGID | 0o111)


def test_renaming_a_protected_trees_parent_never_deletes_it(tree: Path):
    """The observed attack: `mv sub sub2` (overlayfs copies a folder of the tree, then removes
    it) made lmd delete the nested repository and conftest.py as 'what it created'."""
    r = run("mv sub sub2 && ls sub2", tree, staged(tree))
    assert r.exit_code == 0, r.output
    assert (tree / "sub" / "nested" / ".git" / "HEAD").is_file()
    assert (tree / "sub" / "conftest.py").read_text() == "# nested\n"
    held = r.staged.held_roots()
    assert "removing it would remove sub/conftest.py, sub/nested/.git" in held["sub"][0]
    assert "sub2/conftest.py" in held and "sub2/nested/.git" in held
    assert (tree / "sub2" / "keep.txt").read_text() == "k\n"  # the plain copy is applied
    assert not (tree / "sub2" / "conftest.py").exists()


def test_a_repository_planted_after_twenty_thousand_files_is_held(tree: Path):
    """No count lets a write through unchecked: a nested .git planted after the first 20,001
    files (where the old walk stopped). 100,000 files in one command: the live tests."""
    script = (
        'python3 -c "import os\n'
        "os.makedirs('many', exist_ok=True)\n"
        "for i in range(21000):\n"
        "    open(f'many/f{i:06d}', 'w').close()\n"
        "    if i == 20001:\n"
        "        os.makedirs('many/zz/.git/hooks')\n"
        "        open('many/zz/.git/config', 'w').write('[core]\\\\nfsmonitor = evil\\\\n')\n\""
    )
    r = run(script, tree, staged(tree), timeout=300)
    assert r.exit_code == 0, r.output
    assert len([c for c in r.staged.applied if c.path.startswith("many/f")]) == 21000
    assert len(os.listdir(tree / "many")) == 21001  # the files, and zz
    assert not (tree / "many" / "zz" / ".git").exists()
    assert set(r.staged.held_roots()) == {"many/zz/.git"}


def test_a_yes_applies_exactly_the_places_asked_and_undo_puts_everything_back(tree: Path):
    before = {p: p.read_bytes() for p in tree.rglob("*") if p.is_file() and ".git" not in p.parts}
    r = run("echo b > b.txt; echo x >> a.txt; echo c >> conftest.py; echo m > Makefile; "
            "rm -rf sub", tree, staged(tree))  # fmt: skip
    s = r.staged
    assert set(s.held_roots()) == {"conftest.py", "Makefile", "sub"}
    done = writes.apply_held(s.dir, ["conftest.py"])
    assert [c.path for c in done.applied] == ["conftest.py"]
    assert (tree / "conftest.py").read_text() == "# the user's\nc\n"
    assert not (tree / "Makefile").exists() and (tree / "sub").is_dir()
    writes.drop_held(s.dir, ["Makefile"])
    assert writes.apply_held(s.dir, ["Makefile"]).applied == []  # dropped is dropped
    restored, left = writes.undo_stage(s.dir)
    assert left == [] and set(restored) == {"b.txt", "a.txt", "conftest.py"}
    after = {p: p.read_bytes() for p in tree.rglob("*") if p.is_file() and ".git" not in p.parts}
    assert after == before and not (tree / "b.txt").exists()
    assert writes.undo_stage(s.dir) == ([], [])  # once only


def test_undo_leaves_what_changed_since(tree: Path):
    r = run("echo x >> a.txt; echo b > b.txt", tree, staged(tree))
    (tree / "b.txt").write_text("the user's own edit\n")
    restored, left = writes.undo_stage(r.staged.dir)
    assert (restored, left) == (["a.txt"], ["b.txt changed since"])
    assert (tree / "a.txt").read_text() == "a\n"
    assert (tree / "b.txt").read_text() == "the user's own edit\n"


def test_applying_never_follows_a_link_swapped_in_meanwhile(tree: Path, monkeypatch):
    """Between reading the stage and applying it, another process swaps a folder of the tree
    for a link to one outside: the write stops there, nothing outside changes."""
    outside = tree.parent / "outside"
    outside.mkdir()
    (outside / "keep.txt").write_text("mine\n")
    real = writes.judge

    def judge_then_swap(changes, tree_path, home):
        real(changes, tree_path, home)
        os.rename(tree / "sub", tree.parent / "moved-away")
        (tree / "sub").symlink_to(outside)

    monkeypatch.setattr(writes, "judge", judge_then_swap)
    r = run("echo planted > sub/keep.txt", tree, staged(tree))
    assert r.staged.applied == [] and len(r.staged.failed) == 1, r.staged
    assert "sub/keep.txt: a symbolic link or a file stands on its way now" in r.staged.failed[0]
    assert (outside / "keep.txt").read_text() == "mine\n"
    assert "could not apply" in r.output


def test_applying_never_follows_a_parent_of_the_tree_swapped_for_a_link(tmp_path, monkeypatch):
    """Whoever owns a folder above the tree swaps it for a link, so that the tree's path leads
    to another folder of the same name (as root: /etc): nothing is applied anywhere."""
    if not sandbox.detect().stage:
        pytest.skip(sandbox.detect().sentence())
    tmp_path.chmod(0o755)
    parent = tmp_path / "parent"
    tree = parent / "proj"
    tree.mkdir(parents=True)
    elsewhere = tmp_path / "elsewhere" / "proj"
    elsewhere.mkdir(parents=True)
    real = writes.judge

    def judge_then_swap(changes, tree_path, home):
        real(changes, tree_path, home)
        parent.rename(tmp_path / "moved")
        parent.symlink_to(tmp_path / "elsewhere")

    monkeypatch.setattr(writes, "judge", judge_then_swap)
    r = run("echo planted > new.txt", tree, staged(tree, stage_root=tmp_path / "staged"))
    assert r.staged.applied == [] and "without following a link" in r.staged.failed[0]
    assert os.listdir(elsewhere) == [] and os.listdir(tmp_path / "moved" / "proj") == []


def test_the_stage_is_read_and_applied_off_the_event_loop(tree: Path, monkeypatch):
    where: list[bool] = []
    real = writes.settle

    def watched(*args, **kwargs):
        where.append(threading.current_thread() is threading.main_thread())
        return real(*args, **kwargs)

    from daemon.execution import runner

    monkeypatch.setattr(runner, "settle", watched)
    run("echo b > b.txt", tree, staged(tree), keep=False)
    assert where == [False] and (tree / "b.txt").exists()


def test_a_stage_not_kept_is_gone_and_its_held_writes_with_it(tree: Path):
    r = run("echo b > b.txt; echo m > Makefile", tree, staged(tree), keep=False)
    assert r.staged.dir is None and r.removed == (str(tree / "Makefile"),)
    assert os.listdir(tree.parent / "staged") == []
    assert "did not keep" in r.output and not (tree / "Makefile").exists()


def test_no_staging_folder_means_the_command_does_not_run(tree: Path, tmp_path: Path):
    blocker = tmp_path / "not-a-folder"
    blocker.write_text("")
    r = run("echo b > b.txt", tree, staged(tree, stage_root=blocker / "staged"))
    assert r.exit_code is None and "the command did not run" in r.output
    assert r.blocked and "staging folder" in r.blocked and not (tree / "b.txt").exists()
