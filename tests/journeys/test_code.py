"""Code through lmd: cobol's change, diff and undo beside the user's own edits; the shell's
proposed command."""

from __future__ import annotations

import json

import pytest

from tests.daemons import tree_hash

from .conftest import cobol_edit, journey, messages_text, one, steered

pytestmark = pytest.mark.slow  # the journeys tier: real daemons on the embedded model

CALC = "def add(a, b):\n    return a - b\n"


@journey()
def test_cobol_rewrite_then_undo_keeps_the_users_own_edits(person):
    """cobol focuses, rewrites a function (the model's edit), shows the diff and undoes it:
    the repository ends as it began, the user's uncommitted edit of another file untouched
    throughout, the change recorded and marked undone; a second undo has nothing to undo."""
    repo = person.git_repo("cobol", {"calc.py": CALC, "NOTES.md": "# notes\n"})
    person.write(repo / "NOTES.md", "# notes\n- my own edit, not committed\n")
    s = person.session("cobol")
    person.steer(("so that it adds", cobol_edit("calc.py", 2, 2, "    return a + b")))
    calls = person.calls()
    said = person.say("cobol focus on calc.py", s, cwd=repo)
    assert said["reply"].startswith("Focused on calc.py"), said
    said = person.say("cobol rewrite function add so that it adds", s, cwd=repo)
    assert said["status"] == 200, said
    asked = one(steered(calls.chats()), "steered call")
    assert "return a - b" in messages_text(asked)  # the focused code was shown
    assert "calc.py" in said["reply"] and "1 line added, 1 removed" in said["reply"], said
    assert (repo / "calc.py").read_text() == "def add(a, b):\n    return a + b\n"
    said = person.say("cobol show the diff", s, cwd=repo)
    assert "+    return a + b" in said["reply"] and "NOTES.md" not in said["reply"], said
    said = person.say("cobol undo", s, cwd=repo)
    assert said["reply"].startswith("Undone"), said
    assert (repo / "calc.py").read_text() == CALC
    assert (repo / "NOTES.md").read_text() == "# notes\n- my own edit, not committed\n"
    ran = person.run(["git", "status", "--porcelain"], cwd=repo)
    assert ran.stdout.strip() == "M NOTES.md", ran
    with person.db() as conn:
        rows = conn.execute("SELECT * FROM cobol_patches WHERE session = ?", [s]).fetchall()
    assert len(rows) == 1 and rows[0]["reverted"], [dict(r) for r in rows]
    said = person.say("cobol undo", s, cwd=repo)
    assert "no change of mine to undo" in said["reply"], said
    assert (repo / "calc.py").read_text() == CALC
    assert len(calls.chats()) == 1  # focus, diff and undo ask no model


@journey()
def test_the_shell_proposes_and_runs_nothing(person):
    """The shell integration as a user loads it (`eval "$(lmd shell-init bash)"`): its
    Alt-m function sends the command line to lmd and puts the model's proposal back on it,
    with the escape sequence the model slipped in removed (a window title, here); nothing
    runs, nothing enters marat's audit, the project is untouched."""
    proj = person.mkdir("shell")
    person.write(proj / "notes.txt", "buy milk\n")
    before = sorted(p.name for p in proj.iterdir())
    fence = "`" * 3
    person.steer(("delete every", {"text": f"{fence}bash\nrm -i ./*\x1b]0;owned\x07\n{fence}"}))
    calls = person.calls()
    script = (
        'eval "$(lmd shell-init bash)"\n'
        'READLINE_LINE="delete every file here"\n'
        "__lmd_propose_line\n"
        'printf "%s" "$READLINE_LINE"\n'
    )
    ran = person.run(["bash", "-c", script], cwd=proj)
    assert ran.returncode == 0 and ran.stderr == "", ran
    assert ran.stdout == "rm -i ./*", ran  # on the line, to edit or run: not run
    call = one(steered(calls.chats()), "steered call")
    assert "delete every file here" in messages_text(call)
    assert str(proj) in messages_text(call)  # the shell's directory went with it
    assert sorted(p.name for p in proj.iterdir()) == before
    audit = json.loads(person.lmd("history", "commands", "--json").stdout)
    assert audit == []


@journey()
def test_workspace_write_then_cobol_builds_at_once(person):
    """The user turns on sandbox_level workspace-write, then asks cobol to build: the build
    runs at once in the sandbox, writes in the repository and nowhere else (its .git is
    untouched), as root too (dev containers: a root-owned project)."""
    make = "test:\n\tpython3 -c 'print(40 + 2)' > result.txt\n"
    repo = person.git_repo("build", {"Makefile": make})
    git = tree_hash(repo / ".git")
    calls = person.calls()
    assert person.lmd("settings", "set", "sandbox_level", "workspace-write").returncode == 0
    try:
        said = person.say("cobol compile", person.session("build"), cwd=repo)
        assert said["pending"] is None, said["reply"]
        assert "Build passed" in said["reply"], said
        assert (repo / "result.txt").read_text() == "42\n"
        assert tree_hash(repo / ".git") == git
        assert calls.chats() == []  # a build asks no model
    finally:
        assert person.lmd("settings", "reset", "sandbox_level").returncode == 0
