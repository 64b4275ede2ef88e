"""Helpers for the cobol tests: a real tiny Python project in a real git repo, snapshots of a
repository's exact state, and a client that talks to cobol with a chosen approval level."""

from __future__ import annotations

import hashlib
import subprocess
from pathlib import Path

from tests.daemons import SANDBOX_PYTHON

CALC = '''"""A tiny calculator with a header parser."""


def add(a, b):
    return a - b


def parse_header(line):
    key, _, value = line.partition(":")
    if key not in ("Host", "Accept"):
        raise ValueError(key)
    return key, value.strip()
'''

CHECK = """import calc

assert calc.add(2, 3) == 5, "add(2, 3) should be 5"
print("all good")
"""

# The build: -B so Python leaves no __pycache__ behind in the repository.
BUILD = f"{SANDBOX_PYTHON} -B check.py"  # also run in the sandbox (as root: nobody)

FIX_ADD = """Here you go:
```diff
--- a/calc.py
+++ b/calc.py
@@ -4,2 +4,2 @@
 def add(a, b):
-    return a - b
+    return a + b
```
"""

LOWERCASE = """```diff
--- a/calc.py
+++ b/calc.py
@@ -8,5 +8,6 @@
 def parse_header(line):
     key, _, value = line.partition(":")
-    if key not in ("Host", "Accept"):
+    key = key.strip().title()
+    if key not in ("Host", "Accept"):
         raise ValueError(key)
     return key, value.strip()
```"""

# Context that is not in the file: git apply --check refuses it.
WRONG_CONTEXT = """```diff
--- a/calc.py
+++ b/calc.py
@@ -4,2 +4,2 @@
 def add(x, y):
-    return x - y
+    return x + y
```"""


def git(repo: Path, *args: str) -> str:
    return subprocess.run(
        ["git", *args], cwd=repo, check=True, capture_output=True, text=True
    ).stdout


def make_repo(path: Path, files: dict[str, str | bytes] | None = None) -> Path:
    """A committed git repository holding the calculator project (plus `files`)."""
    path.mkdir(parents=True, exist_ok=True)
    contents: dict[str, str | bytes] = {
        "calc.py": CALC,
        "check.py": CHECK,
        ".gitignore": "__pycache__/\n",
        **(files or {}),
    }
    for name, content in contents.items():
        target = path / name
        target.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, bytes):
            target.write_bytes(content)
        else:
            target.write_text(content)
    git(path, "init", "-q")
    git(path, "config", "user.email", "test@example.com")
    git(path, "config", "user.name", "Test")
    git(path, "config", "commit.gpgsign", "false")
    git(path, "add", "-A")
    git(path, "commit", "-qm", "start")
    return path


def snapshot(repo: Path) -> tuple[str, str, dict[str, str]]:
    """HEAD, `git status --porcelain` and a hash of every file outside .git."""
    head = git(repo, "rev-parse", "HEAD")
    status = git(repo, "status", "--porcelain", "--untracked-files=all")
    hashes = {
        str(p.relative_to(repo)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(repo.rglob("*"))
        if p.is_file() and ".git" not in p.relative_to(repo).parts
    }
    return head, status, hashes
