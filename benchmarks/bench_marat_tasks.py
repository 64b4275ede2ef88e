"""How often marat does what was asked: 42 spoken tasks of the kinds its seed lists (where am
I, go up and into folders, git branches and logs, add and commit, find, count and grep, disk
use, processes, files), each set up in a fresh temporary directory or git repository and
checked by its outcome (the tree, the repository, the session's directory, or the answer).
Approvals are answered as a user would (yes).

Prints, per protocol: the success rate, model calls and seconds per task, and the share of
model turns lost to format errors. The yardstick for any prompt or protocol change.

Run against the embedded model (llama-cpp-python with the bundled SmolLM2, started here):
    .venv/bin/python benchmarks/bench_marat_tasks.py --protocol auto
against any configured server:
    .venv/bin/python benchmarks/bench_marat_tasks.py --endpoint URL --model ID [--key-env VAR]
against the stand-in backend, scripted with each task's reference command and answer (the
harness's own check: every task should pass):
    .venv/bin/python benchmarks/bench_marat_tasks.py --stand-in
Options: --protocol tools|schema|text|auto (repeatable), --tasks N (the first N), --loops N.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.daemons import LiveDaemon, configure  # noqa: E402

GIT = {"GIT_AUTHOR_NAME": "Ada", "GIT_AUTHOR_EMAIL": "ada@example.com",
       "GIT_COMMITTER_NAME": "Ada", "GIT_COMMITTER_EMAIL": "ada@example.com"}  # fmt: skip


def git(d: Path, *args: str) -> str:
    return subprocess.run(
        ["git", "-C", str(d), *args], capture_output=True, text=True, env={**os.environ, **GIT}
    ).stdout.strip()


def files(d: Path) -> None:
    (d / "notes.txt").write_text("buy milk\ncall mom\n")
    (d / "README.md").write_text("# Demo project\nA small demo.\n")
    (d / "main.py").write_text("print('hi')\n# TODO: more\n" + "x = 1\n" * 8)
    (d / "util.py").write_text("def f():\n    return 1\n")
    (d / "old.log").write_text("old\n")
    (d / "draft.md").write_text("draft\n")
    (d / "config.ini").write_text("[a]\nb = 1\n")
    (d / "data.csv").write_text("a,b\n" + "1,2\n" * 600)
    (d / "app.log").write_text("ok\nerror: one\nok\nerror: two\nerror: three\n")
    (d / "docs").mkdir()
    (d / "docs" / "guide.md").write_text("guide\n")
    (d / "tests").mkdir()
    (d / "tests" / "test_main.py").write_text("def test(): pass\n")


def repo(d: Path) -> None:
    files(d)
    git(d, "init", "-q", "-b", "main")
    git(d, "add", "-A")
    git(d, "commit", "-qm", "Start the demo project")
    (d / "main.py").write_text((d / "main.py").read_text() + "y = 2\n")
    git(d, "commit", "-qam", "Add y to main")
    git(d, "branch", "develop")
    (d / "notes.txt").write_text("buy milk\ncall mom\nchanged\n")  # uncommitted


@dataclass
class Task:
    say: str
    setup: Callable[[Path], None]
    check: Callable[[Path, str, str], bool]  # (dir, reply, session cwd) -> done
    command: str  # the reference command (the stand-in's script)
    answer: str  # the reference answer


def has(*words: str) -> Callable[[Path, str, str], bool]:
    return lambda d, reply, cwd: all(w.lower() in reply.lower() for w in words)


def exists(name: str) -> Callable[[Path, str, str], bool]:
    return lambda d, reply, cwd: (d / name).exists()


def gone(name: str) -> Callable[[Path, str, str], bool]:
    return lambda d, reply, cwd: not (d / name).exists()


def number(n: int) -> Callable[[Path, str, str], bool]:
    return lambda d, reply, cwd: str(n) in re.findall(r"\d+", reply)


TASKS = [
    Task("show me the current directory", files, lambda d, r, c: d.name in r, "pwd", "{d}"),
    Task("list the files here", files, has("notes.txt"), "ls", "notes.txt and others."),
    Task("how many entries are in this folder", files, number(12), "ls | wc -l", "12 entries."),
    Task("go up one folder", files, lambda d, r, c: c == str(d.parent), "cd ..", "Done."),
    Task(
        "go into the docs folder", files, lambda d, r, c: c.endswith("/docs"), "cd docs", "In docs."
    ),
    Task("what branch am I on", repo, has("main"), "git branch --show-current", "main."),
    Task("show the last two commits", repo, has("Add y"), "git log -2 --oneline", "Add y to main."),
    Task(
        "create a branch called feature-x",
        repo,
        lambda d, r, c: "feature-x" in git(d, "branch"),
        "git branch feature-x",
        "Created.",
    ),
    Task(
        "switch to the develop branch",
        repo,
        lambda d, r, c: git(d, "branch", "--show-current") == "develop",
        "git switch develop",
        "Switched.",
    ),
    Task(
        "add notes.txt and commit it with a good message",
        repo,
        lambda d, r, c: (
            "notes.txt" in git(d, "show", "--stat", "HEAD")
            and git(d, "log", "-1", "--format=%s").strip() not in ("", "wip")
        ),
        "git add notes.txt && git commit -m 'Update the notes'",
        "Committed.",
    ),
    Task(
        "find all python files",
        files,
        has("main.py", "util.py"),
        "find . -name '*.py'",
        "main.py, util.py and tests/test_main.py.",
    ),
    Task("count the lines in main.py", files, number(10), "wc -l main.py", "10 lines."),
    Task(
        "search for TODO in this project", files, has("main.py"), "grep -rn TODO .", "In main.py."
    ),
    Task(
        "how much disk space does this folder use",
        files,
        lambda d, r, c: bool(re.search(r"\d+(\.\d+)?\s*[KMG]", r)),
        "du -sh .",
        "About 24K.",
    ),
    Task(
        "show the running processes",
        files,
        lambda d, r, c: bool(re.search(r"\d", r)),
        "ps aux | head -5",
        "5 processes, the first is 1.",
    ),
    Task("create a folder named build", files, exists("build"), "mkdir build", "Made."),
    Task(
        "create an empty file named todo.txt", files, exists("todo.txt"), "touch todo.txt", "Made."
    ),
    Task("delete the file old.log", files, gone("old.log"), "rm old.log", "Deleted."),
    Task(
        "rename draft.md to final.md",
        files,
        lambda d, r, c: (d / "final.md").exists() and not (d / "draft.md").exists(),
        "mv draft.md final.md",
        "Renamed.",
    ),
    Task(
        "copy config.ini to config.bak",
        files,
        exists("config.bak"),
        "cp config.ini config.bak",
        "Copied.",
    ),
    Task(
        "show the first line of README.md",
        files,
        has("Demo project"),
        "head -1 README.md",
        "Demo project.",
    ),
    Task(
        "what is in the file notes.txt", files, has("milk"), "cat notes.txt", "Buy milk, call mom."
    ),
    Task("how many commits are there", repo, number(2), "git rev-list --count HEAD", "2."),
    Task("who made the last commit", repo, has("Ada"), "git log -1 --format=%an", "Ada."),
    Task(
        "show my uncommitted changes",
        repo,
        has("notes.txt"),
        "git status --short",
        "notes.txt changed.",
    ),
    Task(
        "stage all changes",
        repo,
        lambda d, r, c: bool(git(d, "diff", "--cached", "--name-only")),
        "git add -A",
        "Staged.",
    ),
    Task(
        "which files changed in the last commit",
        repo,
        has("main.py"),
        "git show --name-only --format= HEAD",
        "main.py.",
    ),
    Task(
        "create a tag called v1.0",
        repo,
        lambda d, r, c: "v1.0" in git(d, "tag"),
        "git tag v1.0",
        "Tagged.",
    ),
    Task(
        "find files larger than one kilobyte",
        files,
        has("data.csv"),
        "find . -size +1k -type f",
        "data.csv.",
    ),
    Task("count the python files", files, number(3), "find . -name '*.py' | wc -l", "3."),
    Task("show the git status", repo, has("notes.txt"), "git status", "notes.txt is modified."),
    Task("make the directory src/utils", files, exists("src/utils"), "mkdir -p src/utils", "Made."),
    Task(
        "append the line done to notes.txt",
        files,
        lambda d, r, c: (d / "notes.txt").read_text().rstrip().endswith("done"),
        "echo done >> notes.txt",
        "Appended.",
    ),
    Task(
        "what year is it",
        files,
        lambda d, r, c: time.strftime("%Y") in r,
        "date +%Y",
        time.strftime("%Y") + ".",
    ),
    Task(
        "what is my user name",
        files,
        lambda d, r, c: os.environ.get("USER", "root") in r or "root" in r,
        "whoami",
        os.environ.get("USER", "root") + ".",
    ),
    Task("how many lines does data.csv have", files, number(601), "wc -l data.csv", "601."),
    Task(
        "list the files sorted by size, biggest first",
        files,
        has("data.csv"),
        "ls -S",
        "data.csv first.",
    ),
    Task(
        "how many lines in app.log contain error", files, number(3), "grep -c error app.log", "3."
    ),
    Task(
        "check out a new branch called fix-bug",
        repo,
        lambda d, r, c: git(d, "branch", "--show-current") == "fix-bug",
        "git checkout -b fix-bug",
        "On fix-bug.",
    ),
    Task(
        "show the history of main.py",
        repo,
        has("Add y"),
        "git log --oneline -- main.py",
        "Add y to main.",
    ),
    Task("what is in the docs folder", files, has("guide.md"), "ls docs", "guide.md."),
    Task("show the end of app.log", files, has("three"), "tail -2 app.log", "error: three."),
]


def post(url: str, text: str, session: str, cwd: Path | None) -> dict:
    headers = {"Accept": "application/json", "X-Session": session}
    if cwd is not None:
        headers["X-Cwd"] = str(cwd)
    req = urllib.request.Request(url + "/v1", text.encode(), headers, method="POST")
    try:
        with urllib.request.urlopen(req, timeout=600) as r:
            return json.loads(r.read())
    except urllib.error.HTTPError as e:
        return {"reply": e.read().decode("utf-8", "replace"), "pending": None}


def session_stats(home: Path, session: str) -> tuple[str, int, list[str], list[str]]:
    """(the session's directory, model turns, the format corrections sent, the refusals
    sent: a well-formed step asking for what marat never does, such as sudo)."""
    import sqlite3

    conn = sqlite3.connect(home / "lmd.db")
    try:
        cwd = conn.execute("SELECT cwd FROM sessions WHERE name = ?", [session]).fetchone()
        rows = conn.execute(
            "SELECT content, meta FROM prompts WHERE session = ? ORDER BY id", [session]
        ).fetchall()
    finally:
        conn.close()
    turns = sum('"thought"' in (meta or "") for _, meta in rows)
    helps = [content for content, _ in rows if content.startswith("Format help")]
    refusals = [content for content, _ in rows if content.startswith("Refused:")]
    return (cwd[0] if cwd else "") or "", turns, helps, refusals


def run(url: str, home: Path, tasks: list[Task], label: str, stand_in=None) -> dict:
    ok, calls, secs, turns_all, failed = 0, [], [], 0, []
    helps_all: list[str] = []
    refusals_all: list[str] = []
    for i, task in enumerate(tasks):
        with tempfile.TemporaryDirectory() as tmp:
            d = Path(tmp) / "work"
            d.mkdir()
            os.chmod(tmp, 0o755)
            task.setup(d)
            for p in [d, *d.rglob("*")]:  # as root, sandboxed commands run as nobody
                if os.geteuid() == 0 and not p.is_symlink():
                    p.chmod(p.stat().st_mode | (0o005 if p.is_dir() else 0o004))
            session = f"{label}-{i}"
            if stand_in is not None:
                stand_in(task, d)
            t = time.monotonic()
            body = post(url, f"marat {task.say}", session, d)
            for _ in range(3):  # a user says yes to what the task asked for
                if not body.get("pending"):
                    break
                body = post(url, "yes", session, None)
            secs.append(time.monotonic() - t)
            cwd, turns, helps, refusals = session_stats(home, session)
            calls.append(turns)
            turns_all += turns
            helps_all += helps
            refusals_all += refusals
            done = bool(task.check(d, body.get("reply") or "", cwd))
            ok += done
            if not done:
                failed.append(task.say)
    n = len(tasks)
    return {
        "label": label,
        "tasks": n,
        "success": ok / n,
        "calls_per_task": statistics.mean(calls),
        "secs_per_task": statistics.mean(secs),
        "format_error_share": len(helps_all) / turns_all if turns_all else 0.0,
        "format_errors": sorted(set(h[:70] for h in helps_all)),
        "refused_share": len(refusals_all) / turns_all if turns_all else 0.0,
        "failed": failed,
    }


def stand_in_script(backend):
    from tests.plugins.marat.conftest import action, final

    def script(task: Task, d: Path) -> None:
        backend.clear()
        backend.queue(action(task.command), final(task.answer.replace("{d}", str(d))))

    return script


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--protocol", action="append", choices=["auto", "tools", "schema", "text"])
    ap.add_argument("--stand-in", action="store_true")
    ap.add_argument("--endpoint")
    ap.add_argument("--model")
    ap.add_argument("--key-env", default="OPENAI_API_KEY")
    ap.add_argument("--tasks", type=int, default=len(TASKS))
    ap.add_argument("--loops", type=int, default=4)
    args = ap.parse_args()
    tasks = TASKS[: args.tasks]
    protocols = args.protocol or ["auto"]
    server = backend = None
    env = {"LMD_TOKENIZER": "estimate"}
    with tempfile.TemporaryDirectory() as tmp:
        base = {"marat_approval": "unsafe", "max_thought_loops": args.loops,
                "reply_max_tokens": 160, "llm_max_retries": 0, "llm_timeout_secs": 120}  # fmt: skip
        if args.stand_in:
            from tests.fake_backend import FakeBackend

            backend = FakeBackend().start()
            endpoint, model = backend.url, "fake-model"
        elif args.endpoint:
            endpoint, model = args.endpoint, args.model or "default"
            env["OPENAI_API_KEY"] = os.environ.get(args.key_env, "sk-no-key-needed")
        else:
            from daemon.backends.embedded import EmbeddedServer, bundled_model_path

            server = EmbeddedServer(bundled_model_path(), n_ctx=4096).start()
            endpoint, model = server.url, server.alias
            env["OPENAI_API_KEY"] = server.key
        try:
            for protocol in protocols:
                home = Path(tmp) / f"home-{protocol}"
                configure(home, openai_chat_endpoint=endpoint, openai_model=model,
                          action_protocol=protocol, **base)  # fmt: skip
                d = LiveDaemon(home, env)
                try:
                    script = stand_in_script(backend) if backend else None
                    label = "stand-in" if backend else ("embedded" if server else model)
                    r = run(d.url, home, tasks, f"{label}-{protocol}", script)
                finally:
                    d.stop()
                print(
                    f"{r['label']}: {r['tasks']} tasks, success {r['success']:.0%}, "
                    f"{r['calls_per_task']:.1f} model calls and {r['secs_per_task']:.1f} s per "
                    f"task, {r['format_error_share']:.0%} of model turns lost to format errors, "
                    f"{r['refused_share']:.0%} refused (well formed, never allowed: sudo)"
                )
                if r["format_errors"]:
                    print("   format errors:", " | ".join(r["format_errors"][:4]))
                if r["failed"]:
                    print("   not done:", "; ".join(r["failed"][:8]),
                          "..." if len(r["failed"]) > 8 else "")  # fmt: skip
        finally:
            if server:
                server.stop()
            if backend:
                backend.stop()


if __name__ == "__main__":
    main()
