"""marat's spoken answers that make or read approval rules (plugins/marat/answers.py)."""

from __future__ import annotations

import pytest

from plugins.marat import answers

from .conftest import final, say
from .test_loop import _ask_to_touch


# -- what the user says ----------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("said", "expected"),
    [
        ("yes, always here", ("allow", "kept", False, None, None)),
        ("Yes. Always here!", ("allow", "kept", False, None, None)),
        ("yes for this session", ("allow", "session", False, None, None)),
        ("Yeah, for the rest of the session.", ("allow", "session", False, None, None)),
        ("yes, always for git commit", ("allow", "kept", False, ("git", "commit"), None)),
        ("Yes, always for Git commit.", ("allow", "kept", False, ("Git", "commit"), None)),
        ("yes always everywhere", ("allow", "kept", True, None, None)),
        ("yes, always here, without the sandbox", ("allow", "kept", False, None, "none")),
        ("yes always in the read only sandbox", ("allow", "kept", False, None, "read-only")),
        ("yes and don't ask again", ("allow", "kept", False, None, None)),
        ("never run that", ("forbid", "kept", True, None, None)),
        ("Never run that here.", ("forbid", "kept", False, None, None)),
        ("no, never run git push", ("forbid", "kept", True, ("git", "push"), None)),
        ("never again", ("forbid", "kept", True, None, None)),
    ],
)
def test_spoken_answers_that_make_rules(said, expected):
    a = answers.parse_answer(said)
    assert a is not None and a.problem is None
    assert (a.decision, a.lifetime, a.everywhere, a.named, a.sandbox) == expected


@pytest.mark.parametrize(
    "said",
    ["yes", "no", "yes please run it", "never", "never mind", "no, never", "remember that",
     "yes for git commit", "yes, list the files instead", "always list the files", "x" * 400,
     "", "forget it"],
)  # fmt: skip
def test_plain_answers_and_other_words_make_no_rule(said):
    assert answers.parse_answer(said) is None


@pytest.mark.parametrize(
    ("said", "problem"),
    [
        ("yes always here everywhere", "both here and everywhere"),
        ("yes always for this session", "both always and this session"),
        ("yes always without the sandbox read only", "without the sandbox and read-only"),
        ("yes, never run that", "both yes and never"),
    ],
)
def test_contradictions_are_one_sentence(said, problem):
    a = answers.parse_answer(said)
    assert a is not None and problem in a.problem


@pytest.mark.parametrize(
    ("said", "expected"),
    [
        ("what are my rules", True),
        ("What are my rules?", True),
        ("which rules do I have", True),
        ("list my rules", True),
        ("what are the files here", False),
    ],
)
def test_asking_for_the_rules(said, expected):
    assert answers.asks_for_list(said) is expected


@pytest.mark.parametrize(
    ("said", "target"),
    [
        ("forget the git commit rule", "git commit"),
        ("Forget rule 3.", "3"),
        ("remove the rule for npm test", "npm test"),
        ("forget it", None),
        ("forget about the meeting", None),
    ],
)
def test_forgetting_a_rule(said, target):
    assert answers.forget_target(said) == target


# -- a wait or an unclear answer keeps the question (issue 38 item 1) ----------------------------
@pytest.fixture
def marat(make_client, projects):
    return make_client(marat_start_dir=str(projects["other"]))


def test_a_question_about_the_command_is_answered_and_the_question_stays(marat, backend, projects):
    target = _ask_to_touch(marat, backend, projects)
    backend.queue("It creates an empty file called made.txt.", final("Created."))
    body = say(marat, "Wait, what does it do?").json()
    assert body["reply"] == (
        'The model says: "It creates an empty file called made.txt."\nIt is still waiting. '
        "I am about to run: touch made.txt. Say yes to run it, or no."
    )
    assert body["pending"]["command"] == "touch made.txt" and not target.exists()
    asked = backend.chat_requests[-1]["messages"]
    assert "do not tell the user whether to say yes" in asked[0]["content"]
    assert asked[1]["content"] == "The command:\ntouch made.txt\n\nThe question: what does it do?"
    assert backend.chat_requests[-1]["max_tokens"] == 120
    # the question stayed: a yes now runs it
    assert say(marat, "Sounds good.").json()["reply"] == "Created."
    assert target.exists()


@pytest.mark.parametrize("said", ["hold on", "Not yet.", "One moment."])
def test_a_wait_keeps_the_question_without_a_model_call(marat, backend, projects, said):
    target = _ask_to_touch(marat, backend, projects)
    calls = len(backend.chat_requests)
    body = say(marat, said).json()
    assert body["reply"] == (
        "All right, it waits for your answer. I am about to run: touch made.txt. Say yes to "
        "run it, or no."
    )
    assert body["pending"]["command"] == "touch made.txt" and body["heard"] == "wait"
    assert len(backend.chat_requests) == calls and not target.exists()
    backend.queue(final("Created."))
    say(marat, "Um, yes.")
    assert target.exists()


@pytest.mark.parametrize(
    "said",
    ["yeah, no", "yes if it's safe", "sure, but use sudo", "yes, and then list the logs", "y",
     "👍", "はい", "yes?"],
)  # fmt: skip
def test_an_unclear_answer_runs_nothing_and_asks_again(marat, backend, projects, said):
    target = _ask_to_touch(marat, backend, projects)
    calls = len(backend.chat_requests)
    body = say(marat, said).json()
    assert body["reply"].startswith("I heard") and "so nothing ran." in body["reply"]
    assert body["reply"].endswith("I am about to run: touch made.txt. Say yes to run it, or no.")
    assert body["pending"]["command"] == "touch made.txt" and body["heard"] == "unclear"
    assert len(backend.chat_requests) == calls and not target.exists()
    assert say(marat, "No.").json()["reply"] == "All right, I did not run touch made.txt."
    assert not target.exists()


# -- rule numbers and names as spoken (issue 38 items 3 and 4) ----------------------------------
@pytest.mark.parametrize(
    ("said", "target"),
    [
        ("forget rule three", "3"),
        ("Forget rule number twelve.", "12"),
        ("forget rule twenty one", "21"),
        ("forget rule lots", None),
    ],
)
def test_forgetting_a_rule_by_its_spoken_number(said, target):
    assert answers.forget_target(said) == target


def test_a_rule_named_as_a_speech_engine_writes_it_is_found(tmp_path):
    from daemon.core.store import Store

    store = Store(tmp_path / "lmd.db")
    store.migrate()
    try:
        proj = tmp_path / "proj"
        proj.mkdir()
        made, _ = answers.make_from_answer(
            store, answers.parse_answer("yes, always here"), cwd=str(proj), session="s1",
            command="git commit -m x",
        )  # fmt: skip
        assert answers.forget_target("forget the get commit rule", store, "s1") == "git commit"
        assert answers.forget_target("forget the npm test rule", store, "s1") == "npm test"
        # a tool named as spoken: "write notes" for write_note
        tool_rules, said = answers.make_from_answer(
            store, answers.parse_answer("yes, always for write notes"), cwd=str(proj),
            session="s1", tool="mcp:notes:write_note",
        )  # fmt: skip
        assert [r.pattern for r in tool_rules] == ["mcp:notes:write_note"]
        with pytest.raises(Exception, match="is not the tool I asked about"):
            answers.make_from_answer(
                store, answers.parse_answer("yes, always for delete everything"),
                cwd=str(proj), session="s1", tool="mcp:notes:write_note",
            )  # fmt: skip
    finally:
        store.close()
