"""Helpers for marat's tests: scripted model turns, real git repos, and a JSON `say`."""

from __future__ import annotations

import json
import shutil
import subprocess
import urllib.error
import urllib.request
from pathlib import Path

import pytest

GIT_ENV = {
    "GIT_AUTHOR_NAME": "Test User",
    "GIT_AUTHOR_EMAIL": "test@example.com",
    "GIT_COMMITTER_NAME": "Test User",
    "GIT_COMMITTER_EMAIL": "test@example.com",
    "GIT_CONFIG_NOSYSTEM": "1",
}


def action(command: str, thought: str = "I will run a command.") -> str:
    """A model turn in marat's format that runs `command`."""
    return f"Thought: {thought}\nAction:\n```bash\n{command}\n```"


def final(text: str) -> str:
    return f"Thought: That is all.\nFinal Thought: {text}"


def git(repo: Path, *args: str) -> str:
    return subprocess.run(
        ["git", *args], cwd=repo, check=True, capture_output=True, text=True
    ).stdout.strip()


def make_projects(root: Path) -> dict[str, Path]:
    """projects/other (a start dir) and projects/example (a repo: main and develop with 12
    commits, a file example.rs not yet added)."""
    projects = root / "projects"
    other = projects / "other"
    other.mkdir(parents=True)
    (other / "notes.txt").write_text("hello\n")
    (other / "todo.md").write_text("- a\n")
    repo = projects / "example"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    git(repo, "config", "user.name", "Test User")
    git(repo, "config", "user.email", "test@example.com")
    (repo / "README").write_text("example\n")
    git(repo, "add", "README")
    git(repo, "commit", "-q", "-m", "Initial commit")
    git(repo, "checkout", "-q", "-b", "develop")
    for i in range(1, 13):
        (repo / f"f{i}.txt").write_text(f"{i}\n")
        git(repo, "add", f"f{i}.txt")
        git(repo, "commit", "-q", "-m", f"Develop change number {i}")
    git(repo, "checkout", "-q", "main")
    (repo / "example.rs").write_text('fn main() { println!("hi"); }\n')
    return {"projects": projects, "other": other, "repo": repo}


def say(client, text: str, session: str = "s1", cwd: str | None = None):
    """POST /v1 through an in-process TestClient, asking for JSON."""
    headers = {"Accept": "application/json", "X-Session": session}
    if cwd:
        headers["X-Cwd"] = cwd
    return client.post("/v1", content=text.encode(), headers=headers)


def say_live(url: str, text: str, session: str = "s1", timeout: float = 30) -> tuple[int, dict]:
    """POST /v1 to a live daemon; (status, JSON body)."""
    req = urllib.request.Request(
        url + "/v1",
        data=text.encode(),
        headers={"Accept": "application/json", "X-Session": session},
        method="POST",
    )
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def history(client, session: str = "s1") -> list[dict]:
    return client.get("/history", params={"session": session, "limit": 200}).json()["prompts"]


def messages_text(body: dict) -> str:
    return "\n".join(m["content"] for m in body["messages"])


@pytest.fixture(scope="session")
def _projects_made_once(tmp_path_factory) -> Path:
    """make_projects once per worker: its 31 git commands cost a quarter of a CPU-second,
    a copy of what they made a twentieth (some sixty tests take `projects`)."""
    with pytest.MonkeyPatch.context() as mp:
        for k, v in GIT_ENV.items():
            mp.setenv(k, v)
        return make_projects(tmp_path_factory.mktemp("projects-made-once"))["projects"]


@pytest.fixture
def projects(tmp_path, monkeypatch, _projects_made_once):
    """Two git projects under tmp_path (see make_projects), git's identity from GIT_ENV."""
    for k, v in GIT_ENV.items():
        monkeypatch.setenv(k, v)
    root = tmp_path / "projects"
    shutil.copytree(_projects_made_once, root, symlinks=True)
    return {"projects": root, "other": root / "other", "repo": root / "example"}
