"""cobol end to end: real git repositories, a real build command, the fake backend scripting
the model's diffs, and the request bodies it received."""

from __future__ import annotations

import json
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from tests.daemons import ROOT
from tests.fake_backend import Reply

from .conftest import (
    BUILD,
    CALC,
    FIX_ADD,
    LOWERCASE,
    WRONG_CONTEXT,
    git,
    make_repo,
    snapshot,
)


class Cobol:
    """Talks to cobol in one session with the repository as the working directory."""

    def __init__(self, client, repo: Path | None, session: str = "code") -> None:
        self.client, self.repo, self.session = client, repo, session

    def say(self, text: str, expect: int = 200) -> dict:
        headers = {"Accept": "application/json", "X-Session": self.session}
        if self.repo is not None:
            headers["X-Cwd"] = str(self.repo)
        r = self.client.post("/v1", content=text.encode(), headers=headers)
        assert r.status_code == expect, r.text
        return r.json()


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    return make_repo(tmp_path / "project")


@pytest.fixture
def cobol(make_client, monkeypatch, repo):
    """cobol with approval `never` and the calculator's build command."""
    monkeypatch.setenv("LMD_MARAT_APPROVAL", "never")
    client = make_client(cobol_build_command=BUILD, max_thought_loops=3)
    return Cobol(client, repo)


def stored(home: Path, sql: str, args=()) -> list[dict]:
    import sqlite_utils

    db = sqlite_utils.Database(home / "lmd.db")
    try:
        return list(db.query(sql, args))
    finally:
        db.close()


# -- focus ----------------------------------------------------------------------------------
def test_focus_on_a_range_names_the_function(cobol, backend):
    out = cobol.say("cobol focus on calc.py lines 4 to 5.")
    assert out["reply"] == "Focused on calc.py, lines 4–5 (function add)."
    assert out["focus"] == {
        "file": "calc.py",
        "start": 4,
        "end": 5,
        "symbol": "add",
        "kind": "function",
    }
    assert backend.chat_requests == []  # focusing needs no model


def test_focus_on_a_function_by_name_and_a_file_found_by_its_base_name(cobol, repo):
    (repo / "src").mkdir()
    (repo / "src" / "parse.py").write_text(CALC)
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "src")
    out = cobol.say("cobol focus on function parse_header in parse.py")
    assert out["reply"] == "Focused on src/parse.py, lines 8–12 (function parse_header)."
    out = cobol.say("cobol focus on function add")  # two files define it: the focused one wins
    assert out["reply"] == "Focused on src/parse.py, lines 4–5 (function add)."
    out = cobol.say("cobol focus on lines 1 to 2")  # the same file as before
    assert out["reply"] == "Focused on src/parse.py, lines 1–2."
    assert cobol.say("cobol what is the focus")["reply"] == "The focus is src/parse.py, lines 1–2."
    # The focus belongs to its repository: in another one, nothing is in focus yet.
    elsewhere = Cobol(cobol.client, make_repo(repo.parent / "elsewhere"))
    assert elsewhere.say("cobol focus")["reply"].startswith("Nothing is in focus yet.")


def test_the_current_focus_is_instructive_until_another_replaces_it(cobol, backend):
    def kinds() -> list[tuple[str, str, float]]:
        rows = cobol.client.get("/history", params={"session": "code", "limit": 50}).json()
        return [(r["content"][:24], r["kind"], r["karma"]) for r in rows["prompts"]]

    cobol.say("cobol focus on calc.py lines 4 to 5")
    assert kinds() == [
        ("focus on calc.py lines 4", "instructive", 10000),
        ("Focused on calc.py, line", "instructive", 10000),
    ]
    cobol.say("cobol what is the focus")  # asking about it changes nothing
    cobol.say("cobol focus on calc.py lines 8 to 12")
    assert kinds() == [
        ("focus on calc.py lines 4", "decorative", 500),
        ("Focused on calc.py, line", "decorative", 500),
        ("what is the focus", "default", 1000),
        ("The focus is calc.py, li", "default", 1000),
        ("focus on calc.py lines 8", "instructive", 10000),
        ("Focused on calc.py, line", "instructive", 10000),
    ]
    # a dali question in the same session gets the focus in its context
    backend.queue("You are on parse_header.")
    cobol.say("dali which code am I working on")
    sent = "\n".join(m["content"] for m in backend.chat_requests[-1]["messages"])
    assert "Focused on calc.py, lines 8–12 (function parse_header)." in sent


# -- rewrite --------------------------------------------------------------------------------
def test_rewrite_applies_the_models_diff_and_says_what_changed(cobol, backend, repo):
    cobol.say("cobol focus on calc.py lines 8 to 12")
    backend.queue(LOWERCASE)
    out = cobol.say(
        "cobol rewrite function parse_header so that it accepts lowercase keys", expect=200
    )
    assert out["reply"] == "Changed parse_header in calc.py: 2 lines added, 1 removed."
    assert out["focus"]["end"] == 13  # the focus follows the function as it grows
    assert "key = key.strip().title()" in (repo / "calc.py").read_text()
    assert out["diff"].startswith("--- a/calc.py")
    assert out["applied"][0]["files"] == ["calc.py"]
    # The model saw the numbered focused code, the instruction and the diff-only rules.
    body = backend.chat_requests[-1]
    system, user = body["messages"][0]["content"], body["messages"][-1]["content"]
    assert "unified diff" in system
    assert " 8 | def parse_header(line):" in user
    assert '10 |     if key not in ("Host", "Accept"):' in user
    assert "The focus is lines 8-12 (function parse_header)" in user
    assert "so that it accepts lowercase keys" in user
    rows = stored(cobol.client.app.state.daemon.home, "SELECT * FROM cobol_patches")
    assert [(r["session"], json.loads(r["files"]), r["reverted"]) for r in rows] == [
        ("code", ["calc.py"], 0)
    ]
    assert rows[0]["repo"] == str(repo.resolve())


def test_rewrite_finds_the_function_it_names(cobol, backend, repo):
    cobol.say("cobol focus on check.py")
    backend.queue(FIX_ADD)
    out = cobol.say("cobol rewrite add in calc.py so that it adds")
    assert out["reply"] == "Changed add in calc.py: 1 line added, 1 removed."
    assert (
        "The focus is lines 4-5 (function add)"
        in backend.chat_requests[-1]["messages"][-1]["content"]
    )
    # A file named in passing does not move the focus.
    backend.queue(
        FIX_ADD.replace(
            "-    return a - b\n+    return a + b", "+    return a - b\n-    return a + b"
        )
    )
    out = cobol.say("cobol make it subtract like check.py expects not")
    assert out["reply"] == "Changed add in calc.py: 1 line added, 1 removed."
    assert "File calc.py" in backend.chat_requests[-1]["messages"][-1]["content"]
    before = snapshot(repo)
    out = cobol.say("cobol rewrite function nothing_here so that it works", expect=400)
    assert out["error"] == "I found no function or class called nothing_here in calc.py."
    assert snapshot(repo) == before and len(backend.chat_requests) == 2


def test_rewrite_without_focus_finds_the_function_in_the_repository(cobol, backend, repo):
    backend.queue(FIX_ADD)
    out = cobol.say("cobol rewrite add so that it adds")
    assert out["reply"] == "Changed add in calc.py: 1 line added, 1 removed."
    (repo / "more.py").write_text("def twice(x):\n    return 2 * x\n")
    (repo / "again.py").write_text("def twice(x):\n    return x + x\n")
    out = cobol.say("cobol focus on function twice", expect=400)
    assert out["error"] == (
        "twice is defined in several files (again.py, more.py); name the file too."
    )
    out = cobol.say("cobol focus on function nowhere_at_all", expect=400)
    assert out["error"].startswith("I found no function or class called nowhere_at_all in calc")


def test_rewrite_retries_once_with_gits_error(cobol, backend, repo):
    cobol.say("cobol focus on calc.py lines 4 to 5")
    backend.queue(WRONG_CONTEXT, FIX_ADD)
    out = cobol.say("cobol rewrite function add so that it adds")
    assert out["reply"] == "Changed add in calc.py: 1 line added, 1 removed."
    assert "return a + b" in (repo / "calc.py").read_text()
    first, second = backend.chat_requests
    assert len(second["messages"]) == len(first["messages"]) + 2
    assert second["messages"][-2] == {"role": "assistant", "content": WRONG_CONTEXT}
    feedback = second["messages"][-1]["content"]
    assert "could not be applied" in feedback and "patch" in feedback.lower()
    kinds = stored(
        cobol.client.app.state.daemon.home,
        "SELECT kind FROM prompts WHERE content = ?",
        [feedback],
    )
    assert kinds == [{"kind": "decorative"}]


def test_a_diff_that_never_applies_changes_nothing(cobol, backend, repo):
    cobol.say("cobol focus on calc.py lines 4 to 5")
    before = snapshot(repo)
    backend.queue(WRONG_CONTEXT, "I think you should just change the minus to a plus.")
    out = cobol.say("cobol rewrite function add so that it adds", expect=422)
    assert out["error"] == (
        "The model's change did not apply even after I showed it git's error, so I changed "
        "nothing; try rephrasing the request or focusing on a smaller range."
    )
    assert out["detail"]["git"] == "The answer contained no unified diff."
    assert len(backend.chat_requests) == 2
    assert "no unified diff" not in backend.chat_requests[1]["messages"][-1]["content"]
    assert snapshot(repo) == before


def test_a_diff_outside_the_repository_or_into_git_is_refused(cobol, backend, repo, tmp_path):
    cobol.say("cobol focus on calc.py lines 4 to 5")
    before = snapshot(repo)
    escape = "```diff\n--- /dev/null\n+++ b/../evil.txt\n@@ -0,0 +1 @@\n+owned\n```"
    into_git = "```diff\n--- /dev/null\n+++ b/.git/hooks/pre-commit\n@@ -0,0 +1 @@\n+owned\n```"
    backend.queue(escape, into_git)
    out = cobol.say("cobol rewrite function add so that it adds", expect=422)
    assert out["error"] == (
        "The model's change touches .git/hooks/pre-commit, inside .git, so I refused it and "
        "changed nothing."
    )
    assert "outside the repository" in backend.chat_requests[1]["messages"][-1]["content"]
    assert not (tmp_path / "evil.txt").exists()
    assert not (repo / ".git" / "hooks" / "pre-commit").exists()
    assert snapshot(repo) == before


def test_uncommitted_hand_edits_are_kept_under_the_change(cobol, backend, repo):
    text = (repo / "calc.py").read_text().replace("A tiny calculator", "My calculator")
    (repo / "calc.py").write_text(text)
    cobol.say("cobol focus on calc.py lines 4 to 5")
    backend.queue(FIX_ADD)
    out = cobol.say("cobol rewrite add so that it adds")
    assert out["reply"].startswith("Changed add in calc.py: 1 line added, 1 removed.")
    assert "Your uncommitted changes to calc.py were kept" in out["reply"]
    now = (repo / "calc.py").read_text()
    assert "My calculator" in now and "return a + b" in now
    cobol.say("cobol undo")
    assert (repo / "calc.py").read_text() == text  # undo keeps the hand edit too


# -- compile --------------------------------------------------------------------------------
def test_compile_reads_out_the_first_error_then_passes(cobol, backend, repo):
    out = cobol.say("cobol compile")
    assert out["reply"] == ("Build failed (exit code 1): AssertionError: add(2, 3) should be 5.")
    assert out["build"]["exit_code"] == 1 and "Traceback" in out["build"]["output"]
    (repo / "calc.py").write_text(CALC.replace("a - b", "a + b"))
    out = cobol.say("cobol run the tests")
    assert out["reply"].startswith("Build passed in ")
    assert "all good" in out["build"]["output"]
    assert backend.chat_requests == []


def test_compile_and_fix_with_pytest_as_the_build(make_client, monkeypatch, backend, tmp_path):
    monkeypatch.setenv("LMD_MARAT_APPROVAL", "never")
    test = "import calc\n\n\ndef test_add():\n    assert calc.add(2, 3) == 5\n"
    repo = make_repo(tmp_path / "pytested", {"test_calc.py": test})
    # no .pyc files; and none of this venv's pytest plugins (schemathesis, hypothesis, ...), which
    # a project of its own would not have: they cost each run of the build about a CPU-second
    pytest_build = (
        f"PYTEST_DISABLE_PLUGIN_AUTOLOAD=1 {sys.executable} -B -m pytest -q -p no:cacheprovider"
    )
    cobol = Cobol(make_client(cobol_build_command=pytest_build), repo)
    out = cobol.say("cobol compile")
    assert (
        out["reply"]
        == "Build failed (exit code 1): FAILED test_calc.py::test_add - assert -1 == 5."
    )
    before = snapshot(repo)
    backend.queue(FIX_ADD)
    out = cobol.say("cobol compile and fix")  # no focus: the traceback points at the code
    assert out["passed"] is True and out["rounds"] == 1
    assert "1 passed" in out["build"]["output"]
    assert "def test_add():" in backend.chat_requests[0]["messages"][-1]["content"]
    cobol.say("cobol undo")
    assert snapshot(repo) == before


def test_compile_detects_the_makefile_target_and_says_so(make_client, monkeypatch, tmp_path):
    monkeypatch.setenv("LMD_MARAT_APPROVAL", "never")
    repo = make_repo(tmp_path / "made", {"Makefile": f"test:\n\t{BUILD}\n\nother:\n\techo other\n"})
    cobol = Cobol(make_client(), repo)
    out = cobol.say("cobol compile")
    assert out["reply"].startswith(
        "No build command is set, so I used make test (the test target of the Makefile). "
        "Build failed (exit code 2):"
    )
    assert "should be 5" in out["build"]["output"]


def test_compile_asks_first_when_approval_is_unsafe(make_client, repo, tmp_path):
    marker = tmp_path / "ran"
    client = make_client(cobol_build_command=f"touch {marker} && {BUILD}")
    cobol = Cobol(client, repo)
    out = cobol.say("cobol compile")
    assert out["reply"].startswith("Shall I run touch ")
    assert out["reply"].endswith("? Say yes or no.")
    assert out["pending"]["action"] == "compile" and not marker.exists()
    out = cobol.say("no")
    assert out["reply"].startswith("All right. I did not run touch") and not marker.exists()
    cobol.say("cobol build")
    out = cobol.say("yes")  # the answer without the directive goes to the pending question
    assert marker.exists() and out["reply"].startswith("Build failed (exit code 1)")
    marker.unlink()
    cobol.say("cobol compile")
    out = cobol.say("cobol yes")  # and with it
    assert marker.exists() and out["reply"].startswith("Build failed")


def test_compile_and_fix_loops_until_the_build_passes(cobol, backend, repo):
    cobol.say("cobol focus on function add in calc.py")
    backend.queue(FIX_ADD)
    out = cobol.say("cobol compile and fix")
    assert out["reply"] == (
        "Build failed (exit code 1): AssertionError: add(2, 3) should be 5. "
        "Round 1: Changed add in calc.py: 1 line added, 1 removed. "
        "The build passes now, after 1 round."
    )
    assert out["rounds"] == 1 and out["passed"] is True
    assert [b["exit_code"] for b in out["builds"]] == [1, 0]
    user = backend.chat_requests[0]["messages"][-1]["content"]
    assert "add(2, 3) should be 5" in user  # the build's errors
    assert "4 | def add(a, b):" in user  # and the focused code, numbered
    assert "return a + b" in (repo / "calc.py").read_text()


def test_compile_and_fix_asks_once_for_the_whole_loop(make_client, backend, repo):
    cobol = Cobol(make_client(cobol_build_command=BUILD, max_thought_loops=2), repo)
    cobol.say("cobol focus on calc.py lines 4 to 5")
    out = cobol.say("cobol compile and fix")
    assert out["reply"] == (
        f"Shall I run {BUILD} in {repo.resolve()} and apply the model's fixes, up to 2 rounds? "
        "Say yes or no."
    )
    assert out["pending"]["action"] == "fix" and backend.chat_requests == []
    backend.queue(FIX_ADD)
    out = cobol.say("go ahead")
    assert out["passed"] is True and out["rounds"] == 1
    assert len(backend.chat_requests) == 1


def test_compile_and_fix_without_focus_looks_where_the_error_points(cobol, backend, repo):
    backend.queue(FIX_ADD)
    out = cobol.say("cobol build and fix")
    assert out["passed"] is True
    user = backend.chat_requests[0]["messages"][-1]["content"]
    assert "File check.py" in user and "3 | assert calc.add(2, 3) == 5" in user


def test_compile_and_fix_stops_after_max_thought_loops(cobol, backend, repo):
    comment = (
        "```diff\n--- a/calc.py\n+++ b/calc.py\n@@ -4,2 +4,3 @@\n"
        " def add(a, b):\n     return a - b\n+    # note {}\n```"
    )
    cobol.say("cobol focus on calc.py lines 4 to 5")
    backend.handler = lambda body: comment.format(len(backend.chat_requests))
    out = cobol.say("cobol compile and fix")
    assert len(backend.chat_requests) == 3  # max_thought_loops
    assert out["rounds"] == 3 and out["passed"] is False
    assert "After 3 rounds the build still fails." in out["reply"]
    assert out["reply"].endswith("say undo to revert them one at a time.")
    # The last round's prompt lists the earlier changes of the loop.
    assert (
        "Changes already made in this loop" in backend.chat_requests[2]["messages"][-1]["content"]
    )


def test_compile_and_fix_passing_build_needs_no_model(cobol, backend, repo):
    (repo / "calc.py").write_text(CALC.replace("a - b", "a + b"))
    out = cobol.say("cobol compile and fix")
    assert out["reply"] == "Build passed already; nothing to fix."
    assert backend.chat_requests == []


# -- undo and diff --------------------------------------------------------------------------
def test_undo_reverts_exactly_the_last_change(cobol, backend, repo):
    before = snapshot(repo)
    cobol.say("cobol focus on calc.py lines 4 to 5")
    backend.queue(FIX_ADD)
    cobol.say("cobol rewrite add so that it adds")
    cobol.say("cobol focus on check.py")
    backend.queue(
        "```diff\n--- a/check.py\n+++ b/check.py\n@@ -4 +4 @@\n"
        '-print("all good")\n+print("all fine")\n```'
    )
    cobol.say("cobol change the message to all fine")
    # A later hand edit to another file does not stop the undo of this one.
    (repo / ".gitignore").write_text("__pycache__/\n*.log\n")
    out = cobol.say("cobol undo")
    assert out["reply"] == "Undone: changed check.py: 1 line added, 1 removed."
    assert 'print("all good")' in (repo / "check.py").read_text()
    assert "return a + b" in (repo / "calc.py").read_text()  # the earlier change stays
    assert out["reverted"]["files"] == ["check.py"]
    out = cobol.say("cobol undo")
    assert out["reply"] == "Undone: changed add in calc.py: 1 line added, 1 removed."
    assert cobol.say("cobol undo")["reply"] == "There is no change of mine to undo in this session."
    (repo / ".gitignore").write_text("__pycache__/\n")
    assert snapshot(repo) == before


def test_show_the_diff_lists_the_sessions_changes(cobol, backend, repo):
    assert cobol.say("cobol show the diff")["reply"] == (
        "I have not changed anything in this session."
    )
    cobol.say("cobol focus on calc.py lines 4 to 5")
    backend.queue(FIX_ADD)
    cobol.say("cobol rewrite add so that it adds")
    out = cobol.say("cobol show me the diff")
    assert out["reply"].startswith(
        "This session made 1 change still in place, touching calc.py (1 added, 1 removed)."
    )
    assert "-    return a - b\n+    return a + b" in out["reply"]
    assert out["diff"] == out["reply"].split("\n\n", 1)[1]
    # Another session's view is its own.
    other = Cobol(cobol.client, repo, session="other")
    assert other.say("cobol show the diff")["reply"].startswith("I have not changed anything")


# -- approval -------------------------------------------------------------------------------
def test_always_approval_asks_before_applying(make_client, monkeypatch, backend, repo):
    monkeypatch.setenv("LMD_MARAT_APPROVAL", "always")
    cobol = Cobol(make_client(cobol_build_command=BUILD), repo)
    cobol.say("cobol focus on calc.py lines 4 to 5")
    before = snapshot(repo)
    backend.queue(FIX_ADD)
    out = cobol.say("cobol rewrite add so that it adds")
    assert out["reply"] == (
        "The model proposes: changed add in calc.py: 1 line added, 1 removed. "
        "Shall I apply it? Say yes or no."
    )
    assert out["diff"].startswith("--- a/calc.py") and snapshot(repo) == before
    assert cobol.say("no")["reply"] == "All right. I left the code as it was."
    assert snapshot(repo) == before
    backend.queue(FIX_ADD)
    cobol.say("cobol rewrite add so that it adds")
    out = cobol.say("yes")
    assert out["reply"] == "Changed add in calc.py: 1 line added, 1 removed."
    assert "return a + b" in (repo / "calc.py").read_text()


def test_an_unrelated_answer_to_a_question_declines_it(make_client, repo):
    cobol = Cobol(make_client(cobol_build_command=BUILD), repo)
    cobol.say("cobol compile")
    out = cobol.say("focus on calc.py lines 4 to 5")
    assert out["reply"].startswith("I did not run ")
    assert out["reply"].endswith("Focused on calc.py, lines 4–5 (function add).")
    assert out["pending"] is None


# -- bad input: one sentence, repository exactly as it was ------------------------------------
BAD_INPUTS = [
    ("cobol focus on nope.py", 400, "There is no file nope.py in the repository"),
    (
        "cobol focus on calc.py lines 10 to 40",
        400,
        "calc.py has only 14 lines, so line 40 is past its end",
    ),
    ("cobol focus on calc.py lines 0 to 3", 400, "Lines are counted from 1"),
    ("cobol focus on logo.png", 400, "logo.png is a binary file"),
    ("cobol focus on ../outside.py", 400, "is outside the repository"),
    ("cobol focus on .git/config", 400, "is inside .git"),
    ("cobol focus on function nothing_here in calc.py", 400, "I found no function or class"),
    ("cobol focus on lines 1 to 3", 400, "Nothing is in focus yet"),
    ("cobol rewrite it so that it is faster", 400, "Nothing is in focus; first say"),
]


@pytest.mark.parametrize("text,status,sentence", BAD_INPUTS)
def test_bad_input_gets_one_sentence_and_touches_nothing(
    make_client, monkeypatch, tmp_path, backend, text, status, sentence
):
    monkeypatch.setenv("LMD_MARAT_APPROVAL", "never")
    repo = make_repo(tmp_path / "project", {"logo.png": b"\x89PNG\r\n\x1a\n\x00\x00\x00"})
    (tmp_path / "outside.py").write_text("x = 1\n")
    (repo / "calc.py").write_text(CALC + "\n# dirty by hand\n")  # a dirty working tree
    before = snapshot(repo)
    cobol = Cobol(make_client(cobol_build_command=BUILD), repo)
    out = cobol.say(text, expect=status)
    assert out["error"].startswith(sentence) or sentence in out["error"]
    assert out["error"].count(". ") == 0 and out["error"].endswith(".")  # one sentence
    assert snapshot(repo) == before
    assert backend.chat_requests == []


def test_not_a_git_repository(cobol, tmp_path):
    plain = tmp_path / "plain"
    plain.mkdir()
    (plain / "a.py").write_text("x = 1\n")
    out = Cobol(cobol.client, plain).say("cobol focus on a.py", expect=400)
    assert out["error"] == (
        f"{plain} is not a git repository; run git init there or point cobol_repo at one."
    )
    assert not (plain / ".git").exists()
    out = Cobol(cobol.client, None, session="nowhere").say("cobol compile", expect=400)
    assert out["error"].startswith("I do not know which repository to work in")
    out = Cobol(cobol.client, tmp_path / "gone").say("cobol compile", expect=400)
    assert out["error"] == (
        f"The directory {tmp_path / 'gone'} does not exist; point cobol_repo or --cwd at a "
        "repository."
    )


def test_the_cobol_repo_setting_names_the_repository(make_client, monkeypatch, repo):
    monkeypatch.setenv("LMD_MARAT_APPROVAL", "never")
    client = make_client(cobol_repo=str(repo / "."), cobol_build_command=BUILD)
    out = Cobol(client, None).say("cobol focus on calc.py lines 4 to 5")
    assert out["reply"] == "Focused on calc.py, lines 4–5 (function add)."
    assert out["repo"] == str(repo.resolve())


def test_a_hanging_build_is_stopped(make_client, monkeypatch, repo):
    monkeypatch.setenv("LMD_MARAT_APPROVAL", "never")
    client = make_client(
        cobol_build_command="sleep 30 & sleep 30; echo never",
        cobol_build_timeout_secs=1,
    )
    before = snapshot(repo)
    started = time.monotonic()
    out = Cobol(client, repo).say("cobol compile")
    assert time.monotonic() - started < 10
    assert out["reply"] == (
        "The build sleep 30 & sleep 30; echo never did not finish within 1 seconds and was "
        "stopped; raise cobol_build_timeout_secs if it needs longer."
    )
    assert out["build"]["timed_out"] is True
    assert snapshot(repo) == before


def test_no_build_command_found(make_client, monkeypatch, tmp_path):
    monkeypatch.setenv("LMD_MARAT_APPROVAL", "never")
    repo = make_repo(tmp_path / "bare", {})
    (repo / "check.py").unlink()
    git(repo, "commit", "-qam", "no checks")
    out = Cobol(make_client(), repo).say("cobol compile", expect=400)
    assert out["error"].startswith("I could not tell how to build this repository")


def test_merge_conflicts_block_edits_and_nothing_changes(cobol, backend, repo):
    git(repo, "checkout", "-qb", "theirs")
    (repo / "calc.py").write_text(CALC.replace("a - b", "b - a"))
    git(repo, "commit", "-qam", "theirs")
    git(repo, "checkout", "-q", "-")
    (repo / "calc.py").write_text(CALC.replace("a - b", "a * b"))
    git(repo, "commit", "-qam", "ours")
    subprocess_result = __import__("subprocess").run(
        ["git", "merge", "-q", "theirs"], cwd=repo, capture_output=True
    )
    assert subprocess_result.returncode != 0  # a conflict
    cobol.say("cobol focus on check.py")
    before = snapshot(repo)
    out = cobol.say("cobol change the message", expect=409)
    assert out["error"] == (
        "The repository has unresolved merge conflicts in calc.py; resolve them first, "
        "then ask again."
    )
    assert snapshot(repo) == before and backend.chat_requests == []
    assert cobol.say("cobol undo")["reply"] == "There is no change of mine to undo in this session."


def test_undo_after_hand_edits_to_the_same_lines_is_refused(cobol, backend, repo):
    cobol.say("cobol focus on calc.py lines 4 to 5")
    backend.queue(FIX_ADD)
    cobol.say("cobol rewrite add so that it adds")
    (repo / "calc.py").write_text((repo / "calc.py").read_text().replace("a + b", "b + a"))
    before = snapshot(repo)
    out = cobol.say("cobol undo", expect=409)
    assert out["error"] == (
        "I cannot undo the last change to calc.py: those lines were changed since, so reversing "
        "it would not apply cleanly; nothing was touched."
    )
    assert snapshot(repo) == before


def test_a_focus_too_large_for_the_budget_is_refused(make_client, monkeypatch, tmp_path):
    monkeypatch.setenv("LMD_MARAT_APPROVAL", "never")
    big = "".join(f"value_{i} = {i} * 1234567\n" for i in range(400))
    repo = make_repo(tmp_path / "big", {"big.py": big})
    cobol = Cobol(make_client(max_tokens=500), repo)
    out = cobol.say("cobol focus on big.py", expect=400)
    assert out["error"].startswith("Lines 1 to 400 of big.py are about ")
    assert out["error"].endswith("focus on a smaller range or raise max_tokens.")


# -- a real daemon --------------------------------------------------------------------------
def test_a_coding_session_over_a_live_daemon(live, home, backend, tmp_path):
    from tests.daemons import configure

    repo = make_repo(tmp_path / "live-project")
    configure(home, cobol_build_command=BUILD)
    daemon = live()

    def say(text: str) -> dict:
        request = urllib.request.Request(
            daemon.url + "/v1",
            data=text.encode(),
            headers={"Accept": "application/json", "X-Session": "voice", "X-Cwd": str(repo)},
        )
        with urllib.request.urlopen(request, timeout=30) as r:
            return json.loads(r.read())

    assert say("cobol focus on calc.py lines 4 to 5")["focus"]["symbol"] == "add"
    backend.queue(Reply(FIX_ADD))
    out = say("cobol rewrite function add so that it adds instead of subtracting")
    assert out["reply"] == "Changed add in calc.py: 1 line added, 1 removed."
    assert "4 | def add(a, b):" in backend.chat_requests[-1]["messages"][-1]["content"]
    assert say("cobol compile")["pending"]["action"] == "compile"
    assert say("yes")["reply"].startswith("Build passed in ")
    assert say("cobol show the diff")["diff"].count("+    return a + b") == 1
    # The documented CLI form, `lmd say --cwd DIR cobol ...`, reaches the same session.
    shown = subprocess.run(
        [sys.executable, "-m", "daemon.cli", "say", "--url", daemon.url, "--session", "voice"]
        + ["--cwd", str(repo), "cobol", "what", "is", "the", "focus"],
        capture_output=True,
        text=True,
        timeout=30,
        cwd=ROOT,
    )
    assert shown.stdout == "The focus is calc.py, lines 4–5 (function add).\n", shown.stderr
    assert say("cobol undo")["reply"].startswith("Undone: changed add in calc.py")
    assert (repo / "calc.py").read_text() == CALC


def test_a_failing_backend_leaves_the_repository_alone(cobol, backend, repo):
    cobol.say("cobol focus on calc.py lines 4 to 5")
    before = snapshot(repo)
    backend.queue(Reply(status=500))
    out = cobol.say("cobol rewrite add so that it adds", expect=502)
    assert out["error"] == "The language model failed with HTTP 500; try again later."
    assert snapshot(repo) == before
    rows = stored(cobol.client.app.state.daemon.home, "SELECT * FROM cobol_patches")
    assert rows == []


def test_replies_stream_as_server_sent_events(cobol, repo):
    r = cobol.client.post(
        "/v1",
        content=b"cobol focus on calc.py lines 4 to 5",
        headers={"Accept": "text/event-stream", "X-Cwd": str(repo), "X-Session": "sse"},
    )
    assert r.status_code == 200
    events = [line[6:] for line in r.text.splitlines() if line.startswith("data: ")]
    assert json.loads(events[0]) == "Focused on calc.py, lines 4–5 (function add)."
    assert events[-1] == "[DONE]"


def test_an_agents_edit_waits_for_its_users_yes(cobol, backend, repo):
    """A client relaying a model's words (lmd mcp serve) gets no edit applied at once, even
    where the user's would be (approval never here): it waits for that client's user."""
    before = snapshot(repo)
    backend.queue(FIX_ADD)
    r = cobol.client.post(
        "/v1",
        content=b"cobol fix add so that it adds",
        headers={"Accept": "application/json", "X-Session": "code", "X-Cwd": str(repo),
                 "X-Lmd-Agent": "1"},
    )  # fmt: skip
    out = r.json()
    assert r.status_code == 200 and out["session"] == "agent:code", out
    assert out["pending"]["action"] == "apply", out
    assert out["reply"].endswith("Shall I apply it? Say yes or no.")
    assert snapshot(repo) == before
    said = cobol.client.post(
        "/v1", content=b"yes", headers={"X-Session": "code", "X-Lmd-Agent": "1"}
    )
    assert "waits for the user's own yes" in said.text
    assert snapshot(repo) == before
