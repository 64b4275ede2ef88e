"""cobol's focus as spoken (issue 38 items 3 and 4): spoken punctuation, file names said
without their folder or extension, line numbers as words; an inexact match said back, two
files that fit asked about."""

from __future__ import annotations

from pathlib import Path

import pytest

from daemon.api import NOTHING_WAITING
from plugins.cobol import focus

from .conftest import BUILD, CALC, FIX_ADD, git, make_repo
from .test_mode import Cobol


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    repo = make_repo(tmp_path / "project")
    for rel in ("daemon/core.py", "plugins/cobol/core.py", "daemon/parser.py"):
        (repo / rel).parent.mkdir(parents=True, exist_ok=True)
        (repo / rel).write_text(CALC)
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "more files")
    return repo


@pytest.fixture
def cobol(make_client, monkeypatch, repo):
    monkeypatch.setenv("LMD_MARAT_APPROVAL", "never")
    return Cobol(make_client(cobol_build_command=BUILD), repo)


@pytest.mark.parametrize(
    ("said", "reply"),
    [
        ("cobol focus on daemon slash core dot pie lines four to five",
         "Focused on daemon/core.py, lines 4–5 (function add)."),
        ("Cobol, focus on daemon slash parser dot pie, lines eight to twelve.",
         "Focused on daemon/parser.py, lines 8–12 (function parse_header)."),
        ("cobol focus on line eight of the parser file",
         "I took parser to mean daemon/parser.py. Focused on daemon/parser.py, line 8 "
         "(function parse_header)."),
        ("cobol focus on the first five lines of calc dot pie",
         "Focused on calc.py, lines 1–5 (function add)."),
        ("Hey cobol, focus on the calc file", "I took calc to mean calc.py. Focused on calc.py, "
         "lines 1–12."),
    ],
)  # fmt: skip
def test_a_spoken_focus(cobol, backend, said, reply):
    assert cobol.say(said)["reply"] == reply
    assert backend.chat_requests == []


def test_a_spoken_file_name_that_fits_two_files_asks_which(cobol, backend):
    out = cobol.say("cobol focus on the core file", expect=400)
    assert out["error"] == (
        "2 files fit core: daemon/core.py and plugins/cobol/core.py; which one? Say it with its "
        "folder."
    )
    out = cobol.say("cobol focus on core dot pie lines four to five", expect=400)
    assert out["error"].startswith("2 files fit core.py: daemon/core.py and plugins/cobol/core.py")
    assert cobol.say("cobol focus on plugins slash cobol slash core dot pie")["focus"]["file"] == (
        "plugins/cobol/core.py"
    )
    assert backend.chat_requests == []


def test_a_line_past_the_end_is_refused_in_words(cobol):
    out = cobol.say("cobol focus on calc dot pie lines ten to forty", expect=400)
    assert out["error"].startswith("calc.py has only 12 lines, so line 40 is past its end")


@pytest.mark.parametrize(
    ("text", "file", "start", "end"),
    [
        ("focus on daemon slash core dot pie lines ten to forty", "daemon/core.py", 10, 40),
        ("focus on line forty two of a.py", "a.py", 42, 42),
        ("focus on the first twenty lines of the parser file", "parser", 1, 20),
        ("Focus on core dot pie, lines twelve to thirty.", "core.py", 12, 30),
        ("focus on lines three through five", None, 3, 5),
        ("focus on lines about ten", None, None, None),  # no number read: no guess
    ],
)
def test_spoken_focus_requests(text, file, start, end):
    req = focus.parse_request(text)
    assert (req.file, req.start, req.end) == (file, start, end)


def test_cobol_hears_wait_and_idioms_and_keeps_its_question(
    make_client, monkeypatch, repo, backend
):
    monkeypatch.setenv("LMD_MARAT_APPROVAL", "always")
    cobol = Cobol(make_client(cobol_build_command=BUILD), repo)
    cobol.say("cobol focus on calc dot pie lines four to five")
    backend.queue(FIX_ADD)
    asked = cobol.say("cobol rewrite add so that it adds")
    assert asked["reply"].endswith("Shall I apply it? Say yes or no.")
    held = cobol.say("hold on")
    assert held["reply"] == (
        "All right, it waits. The change is still waiting: say yes to apply it, or no."
    )
    assert held["pending"]["action"] == "apply"
    unclear = cobol.say("yes if the tests pass")
    assert unclear["reply"].startswith('I heard "yes if the tests pass": that is more than a yes')
    assert "return a - b" in (repo / "calc.py").read_text()
    cobol.say("Go for it.")
    assert "return a + b" in (repo / "calc.py").read_text()
    # nothing waits now: a bare yes is no edit for the model
    calls = len(backend.chat_requests)
    assert cobol.say("cobol yes")["reply"] == NOTHING_WAITING
    assert len(backend.chat_requests) == calls


def test_a_dictated_edit_gets_the_hint_beside_its_words(cobol, backend):
    cobol.say("cobol focus on daemon slash core dot pie lines four to five")
    backend.queue("no diff here")
    cobol.say("cobol rewrite add so that it calls parse underscore header", expect=422)
    sent = backend.chat_requests[0]["messages"]
    assert (
        "spoken punctuation written out: rewrite add so that it calls parse_header"
        in (sent[0]["content"])
    )
    assert "rewrite add so that it calls parse underscore header" in sent[1]["content"]
