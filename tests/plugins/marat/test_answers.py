"""marat's spoken answers that make or read approval rules (plugins/marat/answers.py)."""

from __future__ import annotations

import pytest

from plugins.marat import answers


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
