"""Spoken answers (daemon/spoken/answers.py): yes, no, wait or unclear, biased to refuse; and a
bare answer that no question waits for gets one sentence in any mode (issue 36 item 8).
The corpus through the live daemon: tests/core/test_spoken_corpus.py."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from daemon.spoken.answers import (
    NOTHING_WAITING,
    YES,
    hear_answer,
    is_bare_answer,
)
from tests.fake_backend import FakeBackend


@pytest.mark.parametrize(
    ("said", "outcome"),
    [
        ("Um, yes.", "yes"),
        ("Go for it.", "yes"),
        ("Sounds good.", "yes"),
        ("Proceed.", "yes"),
        ("Yes, that's fine.", "yes"),
        ("YES!!!", "yes"),
        ("y-yes", "yes"),
        ("No problem, go ahead.", "yes"),
        ("No, cancel.", "no"),
        ("Don't run it.", "no"),
        ("never mind", "no"),
        ("hold on", "wait"),
        ("Not yet.", "wait"),
        ("One moment please", "wait"),
        ("yeah, no", "unclear"),
        ("yes if it's safe", "unclear"),
        ("sure, but use sudo", "unclear"),
        ("yes, and then list the logs", "unclear"),
        ("I'm not sure", "unclear"),
        ("Yes?", "unclear"),
        ("wait, yes", "unclear"),
        ("", "unclear"),
        ("y", "unclear"),
        ("👍", "unclear"),
        ("はい", "unclear"),
        ("Hmm.", "unclear"),
        ("list the logs", None),
        ("actually just list the files", None),
    ],
)
def test_what_an_answer_is_heard_as(said, outcome):
    heard = hear_answer(said)
    assert (heard.outcome if heard else None) == outcome


def test_a_wait_keeps_the_question_about_the_command():
    heard = hear_answer("Wait, what does it do?")
    assert (heard.outcome, heard.question) == ("wait", "what does it do?")
    assert hear_answer("Is that going to delete anything?").question == (
        "Is that going to delete anything?"
    )
    assert hear_answer("hold on").question == ""


def test_an_unclear_answer_is_said_back_with_why():
    assert hear_answer("sure, but use sudo").say_again() == (
        'I heard "sure, but use sudo": that is more than a yes, and a yes runs exactly what I '
        "asked about, so nothing ran."
    )
    assert hear_answer("").say_again() == "I heard nothing, so nothing ran."
    long = hear_answer("yes " + "and then some more words " * 60)
    assert long.outcome == "unclear" and len(long.say_again()) < 160


WORDS = ["yes", "no", "sure", "ok", "but", "if", "wait", "not", "never", "maybe", "and",
         "run", "it", "please", "sudo", "then", "list", "logs", "don't", "go", "ahead", "what",
         "?", ",", ".", "!", "uh", "safe", "always", "here", "👍", "4"]  # fmt: skip


@given(st.lists(st.sampled_from(WORDS), max_size=12))
def test_no_yes_holds_a_refusal_a_doubt_or_a_condition(words):
    """The one unacceptable error is a false yes: any utterance with a no, a doubt, a
    condition or a new task in it is never heard as one."""
    text = " ".join(words)
    heard = hear_answer(text)
    risky = {"no", "but", "if", "wait", "not", "never", "maybe", "sudo", "list", "logs",
             "don't", "what", "safe", "always", "here", "👍", "4"}  # fmt: skip
    if heard is not None and heard.outcome == YES:
        assert not risky & set(words) and not text.endswith("?"), text


@pytest.mark.parametrize(
    ("said", "bare"),
    [
        ("yes", True),
        ("No.", True),
        ("hold on", False),  # with nothing asked, the mode hears it
        ("yes, always here", True),
        ("Yeah for this session", True),
        ("never run that", True),
        ("go on", False),  # asks for more of a cut answer
        ("continue", False),
        ("go", False),  # a request to a mode of its own
        ("please refuse", False),
        ("what does it do?", False),
        ("No idea, what should I cook?", False),
        ("yes, and then list the logs", False),
    ],
)
def test_bare_answers(said, bare):
    assert is_bare_answer(said) is bare


# -- nothing waiting, in any mode (issue 36 item 8) --------------------------------------------
def say(client, text: str, session: str = "s1") -> dict:
    r = client.post(
        "/v1", content=text.encode(), headers={"Accept": "application/json", "X-Session": session}
    )
    assert r.status_code == 200, r.text
    return r.json()


@pytest.mark.parametrize("said", ["yes", "Yes, always here.", "no, never run that", "Um, yes."])
def test_a_bare_answer_in_a_fresh_session_is_no_model_call(client, backend: FakeBackend, said):
    body = say(client, said)
    assert body["reply"] == NOTHING_WAITING and body["mode"] == "dali"
    assert backend.chat_requests == []


def test_in_every_mode_and_after_a_directive(client, backend: FakeBackend):
    for said in ("dali yes", "cobol yes", "knob no", "marat, okay"):
        assert say(client, said, "fresh")["reply"] == NOTHING_WAITING, said
    assert backend.chat_requests == []


def test_a_yes_to_the_modes_own_question_goes_to_the_mode(client, backend: FakeBackend):
    backend.queue("Paris is the capital. Shall I tell you more about it?", "It has 20 districts.")
    say(client, "dali what is the capital of France")
    body = say(client, "yes please")
    assert body["reply"] == "It has 20 districts."
    assert backend.chat_requests[-1]["messages"][-1]["content"] == "yes please"
    # a rule answer is never an answer to a chat question
    assert say(client, "yes, always here")["reply"] == NOTHING_WAITING


def test_go_on_and_requests_still_reach_the_mode(client, backend: FakeBackend):
    backend.queue("More.", "Logs listed.")
    assert say(client, "go on")["reply"] == "More."
    assert say(client, "no idea what to cook, any suggestions?")["reply"] == "Logs listed."
