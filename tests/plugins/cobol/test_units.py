"""cobol's pure parts: reading diffs out of replies, build detection, first errors, focus
requests and definition ranges, and the intent of an utterance."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from daemon.api import LmdError
from plugins.cobol import build, focus, patches
from plugins.cobol.intents import classify, yes_or_no

from .conftest import CALC, FIX_ADD, make_repo

BARE = "--- a/x.py\n+++ b/x.py\n@@ -1 +1 @@\n-a\n+b\n"


@pytest.mark.parametrize(
    "reply,expected",
    [
        (FIX_ADD, FIX_ADD.split("```diff\n")[1].split("```")[0]),
        ("Sure.\n" + BARE + "", BARE),
        ("```\n" + BARE + "```\nDone.", BARE),  # a fence without a language
        ("```patch\n" + BARE, BARE),  # an unclosed fence
        ("I would change a to b.", None),
        ("```python\nprint('no diff')\n```", None),
    ],
)
def test_extract_diff(reply, expected):
    assert patches.extract_diff(reply) == expected


def read(repo, text: str) -> patches.Patch:
    return asyncio.run(patches.read(str(repo), text))


def test_git_counts_lines_and_lmd_finds_the_strip_level(tmp_path):
    repo = make_repo(tmp_path / "r")
    p = read(
        repo,
        "--- a/src/x.py\n+++ b/src/x.py\n@@ -1,3 +1,3 @@\n ctx\n-old\n+new\n+++plus\n"
        "diff --git a/new.py b/new.py\nnew file mode 100644\n"
        "--- /dev/null\n+++ b/new.py\n@@ -0,0 +1,2 @@\n+one\n+two\n",
    )
    assert p.strip == 1 and p.paths == ["src/x.py", "new.py"]
    assert [(f.added, f.removed, f.created) for f in p.files] == [(2, 1, False), (2, 0, True)]
    assert p.files[1].new_mode == "100644" and p.files[0].first_added == "new"
    assert patches.read_text("--- x.py\n+++ x.py\n@@ -1 +1 @@\n-a\n+b\n").strip == 0


def test_refuse_paths(tmp_path):
    repo = make_repo(tmp_path / "r")
    with pytest.raises(LmdError, match="^The answer had no file headers"):
        read(repo, "just text")
    escape = read(repo, "--- a/../x\n+++ b/../x\n@@ -1 +1 @@\n-a\n+b\n")
    assert "outside the repository" in patches.refuse_paths(str(repo), escape)
    absolute = read(repo, "--- /etc/passwd\n+++ /etc/passwd\n@@ -1 +1 @@\n-a\n+b\n")
    assert "outside the repository" in patches.refuse_paths(str(repo), absolute)
    renamed = read(
        repo,
        "diff --git a/calc.py b/calc.py\nsimilarity index 100%\nrename from calc.py\n"
        "rename to .git/hooks/post-checkout\n",
    )
    assert "inside .git" in patches.refuse_paths(str(repo), renamed)
    (repo / "link").symlink_to(tmp_path)  # a symlink out of the repository is outside too
    linked = read(repo, "--- a/link/y\n+++ b/link/y\n@@ -1 +1 @@\n-a\n+b\n")
    assert "outside the repository" in patches.refuse_paths(str(repo), linked)


def test_check_apply_and_reverse_on_a_real_repo(tmp_path):
    repo = str(make_repo(tmp_path / "r"))
    patch = read(repo, patches.extract_diff(FIX_ADD))

    async def go():
        assert await patches.check(repo, patch) is None
        assert await patches.check(repo, patch, reverse=True) is not None  # not applied yet
        assert await patches.apply(repo, patch) is None
        assert "a + b" in Path(repo, "calc.py").read_text()
        assert "patch does not apply" in await patches.check(repo, patch)
        assert await patches.apply(repo, patch, reverse=True) is None

    asyncio.run(go())
    assert Path(repo, "calc.py").read_text() == CALC


@pytest.mark.parametrize(
    "files,expected",
    [
        ({"Makefile": "all:\n\tcc x.c\ntest: all\n\t./x\n"}, "make test"),
        ({"Makefile": "build:\n\tcc x.c\n"}, "make build"),
        ({"Makefile": "VAR := 1\n", "go.mod": "module x\n"}, "go test ./..."),
        ({"package.json": json.dumps({"scripts": {"test": "jest"}})}, "npm test"),
        ({"package.json": json.dumps({"scripts": {"build": "tsc"}})}, "npm run build"),
        ({"package.json": "{broken"}, None),
        ({"Cargo.toml": "[package]\n"}, "cargo test"),
        ({"pyproject.toml": "[project]\n"}, "python3 -m pytest -q"),
        ({"test_x.py": "def test(): pass\n"}, "python3 -m pytest -q"),
        ({"README": "hi\n"}, None),
    ],
)
def test_detect_build_command(tmp_path, files, expected):
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    found = build.detect(str(tmp_path))
    assert (found[0] if found else None) == expected
    if found:
        assert found[1]  # and says why


@pytest.mark.parametrize(
    "output,expected",
    [
        (
            'Traceback (most recent call last):\n  File "c.py", line 3, in <module>\n'
            "    assert x\nAssertionError: add(2, 3) should be 5\n",
            "AssertionError: add(2, 3) should be 5",
        ),
        (
            "============ 1 failed, 2 passed ============\n"
            "FAILED test_x.py::test_add - assert 1 == 2\n",
            "FAILED test_x.py::test_add - assert 1 == 2",
        ),
        ("x.c:3:5: error: expected ';'\n1 error generated.\n", "x.c:3:5: error: expected ';'"),
        (
            "error[E0308]: mismatched types\n --> src/main.rs:2:5\n",
            "error[E0308]: mismatched types",
        ),
        ("compiling\n0 errors\nsomething odd\n", "something odd"),
        ("", "it printed nothing"),
    ],
)
def test_first_error(output, expected):
    assert build.first_error(output) == expected


def test_error_location_points_into_the_repository(tmp_path):
    (tmp_path / "calc.py").write_text(CALC)
    out = (
        'File "/usr/lib/python3/x.py", line 9\n'
        f'File "{tmp_path}/calc.py", line 5, in add\ncalc.py:5: AssertionError\n'
    )
    (tmp_path / "test_calc.py").write_text("import calc\n")
    out += "test_calc.py:1: in <module>\ncalc.py:9: again\n"
    assert build.error_locations(out, str(tmp_path)) == [("calc.py", 5), ("test_calc.py", 1)]
    assert build.error_locations("nothing here", str(tmp_path)) == []


@pytest.mark.parametrize(
    "text,file,start,end,symbol",
    [
        ("focus on src/parse.py lines 10 to 40.", "src/parse.py", 10, 40, None),
        ("Focus on src/parse.py, lines 10-40", "src/parse.py", 10, 40, None),
        ("focus on line 7 of a.py", "a.py", 7, 7, None),
        ("focus on function parse_header in src/parse.py", "src/parse.py", None, None,
         "parse_header"),
        ("focus on parse_header in parse.py", "parse.py", None, None, "parse_header"),
        ("focus on lines 3 through 5", None, 3, 5, None),
        ("focus on class Parser", None, None, None, "Parser"),
        ("focus on ../etc/passwd", "../etc/passwd", None, None, None),
    ],
)  # fmt: skip
def test_parse_focus_request(text, file, start, end, symbol):
    req = focus.parse_request(text)
    assert (req.file, req.start, req.end, req.symbol) == (file, start, end, symbol)


@given(st.text(max_size=200))
def test_diff_reading_never_fails(text):
    found = patches.extract_diff(text)
    assert found is None or found.endswith("\n")
    reading = patches.read_text(found or text)
    assert all(a >= 0 and r >= 0 for a, r in reading.text_files.values())


_LINES = st.sampled_from(
    ["--- a/calc.py", "+++ b/calc.py", "--- /dev/null", "+++ b/Makefile", "@@ -1 +1 @@",
     "@@ -0,0 +1,2 @@", "diff --git a/calc.py b/Makefile", "rename from calc.py",
     "rename to x.py", "new file mode 100755", "GIT binary patch", "literal 0", "+x", "-y",
     " z", "", "\\ No newline at end of file", "old mode 100644", "new mode 100755"]
)  # fmt: skip


@settings(max_examples=40, deadline=None)
@given(st.lists(_LINES, max_size=14))
def test_git_reading_gives_a_patch_or_one_sentence(tmp_path_factory, lines):
    """Whatever the text, git's reading gives a patch or an LmdError, nothing else."""
    repo = _fuzz_repo(tmp_path_factory)
    try:
        patch = read(repo, "\n".join(lines) + "\n")
    except LmdError as e:
        assert e.message and e.status == 422
    else:
        assert patch.files and all(f.path for f in patch.files)


_FUZZ: list[Path] = []


def _fuzz_repo(factory) -> Path:
    if not _FUZZ:
        _FUZZ.append(make_repo(factory.mktemp("fuzz") / "r"))
    return _FUZZ[0]


@given(st.text(max_size=80))
def test_parse_focus_request_never_fails(text):
    req = focus.parse_request(text)
    assert req.start is None or req.start >= 0


def test_definitions_and_their_ranges():
    lines = CALC.splitlines()
    assert focus.symbol_range(lines, "add") == (4, 5, "function")
    assert focus.symbol_range(lines, "parse_header") == (8, 12, "function")
    assert focus.symbol_range(lines, "missing") is None
    assert focus.enclosing_symbol(lines, 10) == ("parse_header", "function")
    assert focus.enclosing_symbol(lines, 2) is None
    js = "export function go(a) {\n  if (a) {\n    return 1;\n  }\n}\nconst x = 1;\n".splitlines()
    assert focus.symbol_range(js, "go") == (1, 5, "function")
    go = "func (s *Server) Serve(x int) error {\n\treturn nil\n}\n".splitlines()
    assert focus.symbol_range(go, "Serve") == (1, 3, "function")
    py = "class A:\n    @property\n    def b(self):\n        return 1\n\nx = 2\n".splitlines()
    assert focus.symbol_range(py, "b") == (2, 4, "function")
    assert focus.symbol_range(py, "A") == (1, 4, "class")


def test_render_shows_numbered_focus_inside_a_token_budget():
    lines = [f"line_{i} = {i}" for i in range(1, 201)]
    f = focus.Focus("big.py", 100, 101)
    shown = focus.render(f, lines, 400, "fake-model")
    assert "100 | line_100 = 100" in shown and "101 | line_101 = 101" in shown
    lo, hi = focus.context_window(f, lines, 400, "fake-model")
    assert lo < 100 and hi > 101 and (100 - lo) - (hi - 101) in (-1, 0, 1)  # even both sides
    used = sum(focus.line_tokens(lines[i - 1], "fake-model") for i in range(lo, hi + 1))
    assert used <= focus.code_budget(400)
    assert focus.context_window(f, lines, 10**6, "fake-model") == (1, 200)


@pytest.mark.parametrize(
    "text,intent",
    [
        ("focus on a.py", "focus"),
        ("Focus.", "status"),
        ("compile", "compile"),
        ("Build it now.", "compile"),
        ("run the tests", "compile"),
        ("compile and fix", "fix"),
        ("Compile & fix it!", "fix"),
        ("fix the build", "fix"),
        ("undo", "undo"),
        ("Undo that change.", "undo"),
        ("show the diff", "diff"),
        ("what changed?", "diff"),
        ("rewrite function f so that it builds the list", "edit"),
        ("fix the bug in add", "edit"),
        ("help", "help"),
    ],
)
def test_classify(text, intent):
    assert classify(text) == intent


def test_yes_or_no():
    assert yes_or_no("Yes.") is True and yes_or_no("go ahead") is True
    assert yes_or_no("No!") is False and yes_or_no("cancel") is False
    assert yes_or_no("focus on a.py") is None


def test_git_names_what_the_text_hides(tmp_path):
    """What git lists, not what the text seems to say: a file name with a newline (C-quoted in
    the header) is refused; a symbolic link and an executable bit come from git's modes."""
    repo = make_repo(tmp_path / "r")
    hidden = (
        'diff --git "a/x\\ny" "b/x\\ny"\nnew file mode 100644\n--- /dev/null\n'
        '+++ "b/x\\ny"\n@@ -0,0 +1 @@\n+z\n'
    )
    with pytest.raises(LmdError, match="control character"):
        read(repo, hidden)
    link = (
        "diff --git a/l b/l\nnew file mode 120000\n--- /dev/null\n+++ b/l\n@@ -0,0 +1 @@\n"
        "+/etc/passwd\n\\ No newline at end of file\n"
    )
    (f,) = read(repo, link).files
    assert (f.path, f.created, f.new_mode) == ("l", True, "120000")
    mode = "diff --git a/calc.py b/calc.py\nold mode 100644\nnew mode 100755\n"
    (f,) = read(repo, mode).files
    assert (f.old_mode, f.new_mode, f.added, f.removed) == ("100644", "100755", 0, 0)
