"""cobol's build in the sandbox: at `workspace-write` it runs without asking and writes inside
the repository only (never its .git); a build the sandbox stopped makes the next one ask."""

from __future__ import annotations

import os
import subprocess
import uuid
from pathlib import Path

import pytest

from daemon.execution import sandbox
from tests.daemons import SANDBOX_PYTHON, writable_by_others

from .conftest import BUILD, FIX_ADD, make_repo


def say(client, repo: Path, text: str) -> dict:
    headers = {"Accept": "application/json", "X-Session": "code", "X-Cwd": str(repo)}
    r = client.post("/v1", content=text.encode(), headers=headers)
    assert r.status_code == 200, r.text
    return r.json()


@pytest.fixture
def world(tmp_path, monkeypatch):
    home = tmp_path / "home"
    home.mkdir()
    (home / ".bashrc").write_text("# mine\n")
    monkeypatch.setenv("HOME", str(home))
    repo = writable_by_others(make_repo(home / "code" / "calc"))
    sibling = home / "code" / "other"
    sibling.mkdir()
    return {"home": home, "repo": repo, "sibling": sibling}


WRITES = (
    "mkdir -p build && echo built > build/out.txt && {py} -B -c 'import calc; print(calc.add)';"
    " touch ../other/x.txt; echo pwned >> $HOME/.bashrc; touch .git/hooks/post-commit;"
    " echo '[core] fsmonitor = evil' >> .git/config; touch {tmp}; true"
)


@pytest.mark.bwrap
def test_workspace_write_build_writes_inside_the_repository_and_nowhere_else(
    make_client, world, backend
):
    repo, home = world["repo"], world["home"]
    marker = f"/tmp/lmd-cobol-{uuid.uuid4().hex}"
    git_config = (repo / ".git" / "config").read_text()
    build = WRITES.format(py=SANDBOX_PYTHON, tmp=marker)
    c = make_client(cobol_build_command=build, sandbox_level="workspace-write")
    out = say(c, repo, "cobol compile")
    assert out["pending"] is None and out["reply"].startswith("Build passed in ")
    assert out["build"]["sandbox"] == "workspace-write"
    assert (repo / "build" / "out.txt").read_text() == "built\n"
    assert "<function add at" in out["build"]["output"]  # it reads the repository
    assert list(world["sibling"].iterdir()) == []
    assert (home / ".bashrc").read_text() == "# mine\n"
    assert not (repo / ".git" / "hooks" / "post-commit").exists()
    assert (repo / ".git" / "config").read_text() == git_config
    assert not os.path.exists(marker)
    assert "'../other/x.txt': Read-only file system" in out["build"]["output"]
    # its writes into .git landed in the stage, and were not kept (daemon/execution/writes.py)
    assert "did not keep: .git, 2 writes (a dotfile" in out["build"]["output"]
    assert backend.chat_requests == []


@pytest.mark.bwrap
def test_compile_and_fix_in_the_sandbox_asks_nothing(make_client, world, backend):
    repo = world["repo"]
    c = make_client(cobol_build_command=BUILD, sandbox_level="workspace-write")
    backend.queue(FIX_ADD)
    out = say(c, repo, "cobol compile and fix")
    assert out["pending"] is None and out["passed"] is True and out["rounds"] == 1
    assert {b["sandbox"] for b in out["builds"]} == {"workspace-write"}
    assert "return a + b" in (repo / "calc.py").read_text()


@pytest.mark.bwrap
def test_a_build_the_sandbox_stopped_makes_the_next_one_ask_and_run_outside(make_client, world):
    repo = world["repo"]
    c = make_client(
        cobol_build_command="touch ../other/needed.txt", sandbox_level="workspace-write"
    )
    out = say(c, repo, "cobol compile")
    # the sibling is read-only (as root the build runs as nobody, whom root's files may
    # refuse first: then that is the reason)
    whys = ["the file system is read-only there"]
    if os.geteuid() == 0:
        whys.append("it ran as the unprivileged user nobody, who may not do that")
    assert out["reply"] in [
        f"The sandbox stopped the build touch ../other/needed.txt: {why}. Say compile again "
        "and I will ask before running it outside the sandbox."
        for why in whys
    ]
    assert out["build"]["sandbox_blocked"] is True
    out = say(c, repo, "cobol compile")
    assert out["reply"] == (
        f"Shall I run touch ../other/needed.txt in {repo}? Say yes or no. (It cannot run in the "
        "sandbox at once: the sandbox stopped the last build, so this one would run outside it.)"
    )
    out = say(c, repo, "yes")
    assert out["reply"].startswith("Build passed") and out["build"]["sandbox"] == "none"
    assert (world["sibling"] / "needed.txt").exists()
    # the escalation was spent on that question: the next build is sandboxed again
    out = say(c, repo, "cobol compile")
    assert out["pending"] is None and out["reply"].startswith("The sandbox stopped the build")


def test_at_the_read_only_level_a_build_asks_and_runs_unsandboxed(make_client, world):
    repo = world["repo"]
    c = make_client(cobol_build_command=BUILD)  # sandbox_level read-only (the default)
    out = say(c, repo, "cobol compile")
    assert out["reply"] == f"Shall I run {BUILD} in {repo}? Say yes or no."
    out = say(c, repo, "yes")
    assert out["reply"].startswith("Build failed") and out["build"]["sandbox"] == "none"


def test_a_yes_to_a_build_does_not_cover_build_files_changed_since(make_client, world):
    """The question is bound to the build's files as they were: a Makefile written between the
    question and the yes makes it ask again, showing the change, and nothing runs meanwhile."""
    repo = world["repo"]
    marker = repo / "ran.txt"
    c = make_client(cobol_build_command=f"make -s 2>/dev/null; {BUILD}")
    out = say(c, repo, "cobol compile")
    assert out["pending"] is not None and not out["pending"].get("inputs", {}).get("Makefile")
    (repo / "Makefile").write_text(f"all:\n\ttouch {marker}\n")  # e.g. the model's earlier fix
    out = say(c, repo, "yes")
    assert out["pending"] is not None and "the build's files changed (Makefile)" in out["reply"]
    assert "What changed:\n--- a/Makefile\n+++ b/Makefile\n" in out["reply"]
    assert f"+\ttouch {marker}\n" in out["reply"]  # shown as it would run
    assert not marker.exists()
    out = say(c, repo, "yes")  # now the yes is to the build as it is
    assert marker.exists() and out["build"]["sandbox"] == "none"


def test_workspace_write_refused_for_the_home_directory(make_client, world, monkeypatch):
    repo = world["repo"]
    monkeypatch.setenv("HOME", str(repo))  # the repository is the home directory
    c = make_client(cobol_build_command=BUILD, sandbox_level="workspace-write")
    out = say(c, repo, "cobol compile")
    assert out["pending"] is not None
    assert "I cannot let a sandbox write there: the working directory" in out["reply"]
    assert "holds your home directory" in out["reply"]


def test_workspace_write_without_a_sandbox_asks(make_client, world, monkeypatch):
    monkeypatch.setenv("LMD_BWRAP", "/nonexistent/bwrap")
    sandbox.detect(refresh=True)
    try:
        c = make_client(cobol_build_command=BUILD, sandbox_level="workspace-write")
        out = say(c, world["repo"], "cobol compile")
    finally:
        monkeypatch.delenv("LMD_BWRAP")
        sandbox.detect(refresh=True)
    assert out["pending"] is not None and "there is no sandbox here" in out["reply"]


def test_never_runs_the_build_unsandboxed(make_client, world, monkeypatch):
    monkeypatch.setenv("LMD_MARAT_APPROVAL", "never")
    c = make_client(cobol_build_command="touch ../other/y.txt", sandbox_level="workspace-write")
    out = say(c, world["repo"], "cobol compile")
    assert out["build"]["sandbox"] == "none" and (world["sibling"] / "y.txt").exists()


def test_cobols_own_git_calls_run_none_of_a_hostile_repositorys_code(
    make_client, world, backend, monkeypatch, tmp_path
):
    """cobol runs git (status, diff, ls-files, apply) without asking: a repository's
    core.fsmonitor, filter drivers and hooks must not run through it."""
    repo = world["repo"]
    log = tmp_path / "evil.log"
    evil = tmp_path / "evil.sh"
    evil.write_text(f'#!/bin/sh\necho "$0 $*" >> {log}\ncat\n')
    evil.chmod(0o755)
    (repo / ".gitattributes").write_text("*.py filter=evil\n")
    for key in ("core.fsmonitor", "filter.evil.clean", "filter.evil.smudge", "filter.evil.process"):
        subprocess.run(["git", "config", key, str(evil)], cwd=repo, check=True)
    subprocess.run(["git", "config", "filter.evil.required", "true"], cwd=repo, check=True)
    subprocess.run(["git", "status"], cwd=repo, capture_output=True)  # plain git would run it
    assert log.exists()
    log.unlink()
    monkeypatch.setenv("LMD_MARAT_APPROVAL", "never")
    c = make_client(cobol_build_command=BUILD, max_thought_loops=2)
    assert say(c, repo, "cobol focus on calc.py")["reply"].startswith("Focused on calc.py")
    backend.queue(FIX_ADD)
    out = say(c, repo, "cobol compile and fix")
    assert out["passed"] is True, out["reply"]
    assert say(c, repo, "cobol undo")["reply"].startswith("Undone")
    assert not log.exists(), log.read_text()
