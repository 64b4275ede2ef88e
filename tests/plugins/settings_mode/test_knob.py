"""The settings mode (directive `knob`): show, set, reset and list by voice; spoken numbers."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from plugins.settings_mode import spoken_number
from tests.plugins.marat.conftest import action, final, say


def setting(client, name):
    return client.get(f"/settings/{name}").json()


def test_set_show_reset_and_list(client, backend):
    body = say(client, "knob set max tokens to four thousand").json()
    assert body["mode"] == "knob" and body["reply"] == "max tokens is now 4000."
    assert setting(client, "max_tokens")["value"] == 4000
    assert say(client, "Knob, show max tokens.").json()["reply"] == (
        "max tokens is 4000 (the default is 3500)."
    )
    assert say(client, "knob what is Max Tokens").json()["setting"]["value"] == 4000
    body = say(client, "knob reset max tokens").json()
    assert body["reply"] == "max tokens is back to its default, 3500."
    assert setting(client, "max_tokens")["value"] == 3500
    listing = say(client, "knob list").json()
    assert (
        "max tokens is 3500" in listing["reply"] and "marat approval is unsafe" in listing["reply"]
    )
    assert listing["settings"]["system"] == "Ubuntu 22.04"
    assert backend.chat_requests == []  # the settings mode never calls the model


def test_spoken_values_of_each_type(client):
    say(client, "knob set len discount to zero point five")
    assert setting(client, "len_discount")["value"] == 0.5
    say(client, "knob set max thought loops twelve")
    assert setting(client, "max_thought_loops")["value"] == 12
    say(client, "knob set recent history limit = 1,500")
    assert setting(client, "recent_history_limit")["value"] == 1500
    say(client, "knob set selectit device to cuda 12 spare")  # text stays text
    assert setting(client, "selectit_device")["value"] == "cuda 12 spare"


def test_the_approval_setting_needs_the_token(make_client):
    # Without a token any local process or web page could turn approval off: refused.
    open_client = make_client()
    r = say(open_client, "knob set marat approval to never")
    assert r.status_code == 403 and "marat_approval is protected" in r.json()["error"]
    assert say(open_client, "knob reset marat approval").status_code == 403
    assert open_client.put("/settings/marat_approval", content="never").status_code == 403
    assert setting(open_client, "marat_approval")["value"] == "unsafe"
    # With a token, the authenticated request may change it, by voice too.
    guarded = make_client(token="t0k")
    auth = {"Authorization": "Bearer t0k", "Accept": "application/json", "X-Session": "s1"}
    r = guarded.post("/v1", content=b"knob set marat approval to Always", headers=auth)
    assert r.json()["reply"] == "marat approval is now always."
    assert guarded.get("/settings/marat_approval", headers=auth).json()["value"] == "always"


@pytest.mark.parametrize(
    ("text", "sentence"),
    [
        (
            "knob set lm score aggregation to maybe",
            "lm score aggregation cannot be 'maybe'; it must be one of maj, avg.",
        ),
        (
            "knob show max tokenzz gone",
            "There is no setting called max tokenzz gone. Say knob list to hear them.",
        ),
        (
            "knob set nothing at all here",
            "I did not catch a setting name and a value. Say knob list, knob show max tokens, "
            "knob set max tokens to four thousand, or knob reset max tokens.",
        ),
    ],
)
def test_bad_input_gets_one_sentence_and_changes_nothing(client, text, sentence):
    r = say(client, text)
    assert r.status_code in (400, 404)
    assert r.json()["error"] == sentence
    assert setting(client, "max_tokens")["value"] == 3500
    assert setting(client, "marat_approval")["value"] == "unsafe"


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ("knob set max tokens to lots", "I could not read 'lots' as a number for max tokens."),
        ("knob set max tokens to about four thousand",
         "I could not read 'about four thousand' as a number for max tokens."),
        ("knob set max tokens to minus five",
         "max tokens cannot be '-5'; it must be a whole number of at least 1."),
        ("knob set max thought loops to five hundred",
         "max thought loops cannot be '500'; it must be a whole number from 1 to 100."),
        ("knob set max tokens to two minutes",
         "max tokens is not a time; say a number without minutes."),
    ],
)  # fmt: skip
def test_a_value_lmd_cannot_take_is_a_question_not_a_guess(client, backend, text, why):
    name = "max_thought_loops" if "loops" in text else "max_tokens"
    before = setting(client, name)["value"]
    body = say(client, text).json()
    said = name.replace("_", " ")
    assert body["reply"].startswith(f"{why} What should {said} be? Say a whole number")
    assert body["reply"].endswith(f", or no to leave it at {before}.")
    assert body["pending"]["kind"] == "value" and setting(client, name)["value"] == before
    # the next utterance answers the question
    assert say(client, "forty three hundred").json()["reply"] == (
        f"{said} cannot be '4300'; it must be a whole number from 1 to 100. What should {said} "
        f"be? Say a whole number from 1 to 100, or no to leave it at {before}."
        if "loops" in text
        else f"{said} is now 4300."
    )
    if "loops" in text:
        assert say(client, "No.").json()["reply"] == f"All right, {said} stays {before}."
    assert backend.chat_requests == []


def test_names_heard_not_exactly_are_said_back(client):
    assert say(client, "knob show max tokenz").json()["reply"] == (
        "I took max tokenz to mean max tokens. max tokens is 3500."
    )
    assert say(client, "knob set maximum tokens to four k").json()["reply"] == (
        "I took maximum tokens to mean max tokens. max tokens is now 4000."
    )
    assert say(client, "knob set LLM timeout seconds to two minutes").json()["reply"] == (
        "I took LLM timeout seconds to mean llm timeout secs. llm timeout secs is now 120."
    )
    assert say(client, "knob set marat approval to all ways").status_code == 403  # protected


def test_help_and_alias(client):
    assert say(client, "knob").json()["reply"] == "Switched to knob mode."
    assert say(client, "knob please").json()["reply"].startswith("Say knob list")
    assert say(client, "nob show system").json()["reply"] == "system is Ubuntu 22.04."


def test_settings_talk_stays_out_of_the_context(client, backend):
    say(client, "knob set max tokens to four thousand")
    backend.queue("hello")
    say(client, "dali hi")
    sent = backend.chat_requests[-1]["messages"]
    assert sent == [{"role": "user", "content": "hi"}]


def test_a_spoken_timeout_governs_real_bash(make_client, backend, tmp_path):
    c = make_client(marat_start_dir=str(tmp_path), marat_approval="never")
    say(c, "knob set marat command timeout secs to zero point three")
    backend.queue(action("sleep 20"), final("Too slow."))
    body = say(c, "marat sleep a long time").json()
    assert body["commands"][0]["timed_out"] is True
    assert "timed out" in backend.chat_requests[-1]["messages"][-1]["content"]


def test_env_override_is_mentioned(client, monkeypatch):
    monkeypatch.setenv("LMD_MAX_TOKENS", "100")
    reply = say(client, "knob set max tokens to two thousand").json()["reply"]
    assert reply == (
        "max tokens is now 2000. But the environment variable LMD_MAX_TOKENS overrides it "
        "while it is set."
    )


@pytest.mark.parametrize(
    ("spoken", "number"),
    [
        ("four thousand five hundred, please", 4500),
        ("forty three hundred", 4300),
        ("four k", 4000),
        ("4k", 4000),
        ("nineteen eighty four", 1984),
        ("eight oh eight oh", 8080),
        ("two thousand and five", 2005),
        ("1,000,000", 1_000_000),
        ("about four thousand", None),
        ("twenty twenty twenty", None),
        ("four thousand", 4000),
        ("zero point five", 0.5),
        ("three point one four", 3.14),
        ("two hundred and fifty", 250),
        ("a hundred", 100),
        ("twelve hundred", 1200),
        ("one million two hundred thousand", 1_200_000),
        ("minus seven", -7),
        ("forty-two", 42),
        ("4,000", 4000),
        ("0.25", 0.25),
        ("1e3", 1000.0),
        ("lots", None),
        ("four point", None),
        ("", None),
    ],
)
def test_spoken_numbers(spoken, number):
    assert spoken_number(spoken) == number


ONES = "zero one two three four five six seven eight nine".split()
TEENS = "ten eleven twelve thirteen fourteen fifteen sixteen seventeen eighteen nineteen".split()
TENS = "twenty thirty forty fifty sixty seventy eighty ninety".split()


def words(n: int) -> str:
    """English words for 0 <= n < 1_000_000 (the test's own independent spelling)."""
    if n < 10:
        return ONES[n]
    if n < 20:
        return TEENS[n - 10]
    if n < 100:
        return TENS[n // 10 - 2] + ("" if n % 10 == 0 else " " + ONES[n % 10])
    if n < 1000:
        return ONES[n // 100] + " hundred" + ("" if n % 100 == 0 else " and " + words(n % 100))
    return words(n // 1000) + " thousand" + ("" if n % 1000 == 0 else " " + words(n % 1000))


@given(st.integers(min_value=0, max_value=999_999))
def test_every_spoken_whole_number_round_trips(n):
    assert spoken_number(words(n)) == n


# -- directive aliases taught by voice (issue 38 item 2) ------------------------------------------
def test_an_alias_taught_by_voice_picks_the_mode(make_client, backend):
    client = make_client(token="t0k")
    # which words pick a mode is the user's alone (a protected setting): the daemon's token
    r = say(client, "knob, when I say morrat I mean marat")
    assert r.status_code == 403 and "directive_aliases is protected" in r.json()["error"]
    client.headers["Authorization"] = "Bearer t0k"  # lmd say sends it
    body = say(client, "knob, when I say morrat I mean marat").json()
    assert body["reply"] == "From now on, morrat at the start of what you say means marat."
    assert setting(client, "directive_aliases")["value"] == {"marat": ["morrat"]}
    backend.queue(final("Listed."))
    assert say(client, "Morrat, list the files").json()["mode"] == "marat"
    # an ordinary word may be taught, with a warning; a common one may not
    body = say(client, "knob when I say dahlia I mean dali").json()
    assert body["reply"] == (
        "From now on, dahlia at the start of what you say means dali. dahlia is also an "
        "ordinary word: a sentence starting with it goes to dali."
    )
    assert say(client, "knob when I say go I mean marat").json()["reply"] == (
        "go is a common word: every sentence that starts with it would go to marat. Choose a "
        "word nobody starts a sentence with."
    )
    assert say(client, "knob when I say nob I mean marat").json()["reply"] == (
        "nob already means knob; forget that alias first, or choose another word."
    )
    assert (
        say(client, "knob when I say hey I mean marat")
        .json()["reply"]
        .startswith("hey is a wake word")
    )
    assert (
        say(client, "knob when I say blorp I mean wizard")
        .json()["reply"]
        .startswith("There is no mode called wizard; the modes are ")
    )
    assert say(client, "knob aliases").json()["reply"] == (
        "You taught me dahlia for dali; morrat for marat. Built in: kobol, co bol for cobol; "
        "dolly, dally for dali; nob, knobs for knob; murat, marrat, ma rat for marat."
    )
    assert say(client, "knob forget the alias morrat").json()["reply"] == (
        "morrat no longer means marat."
    )
    assert setting(client, "directive_aliases")["value"] == {"dali": ["dahlia"]}
    assert backend.chat_requests == [] or all(
        "knob" not in m["content"] for r in backend.chat_requests for m in r["messages"]
    )
