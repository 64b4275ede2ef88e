"""Directive parsing survives dictation: case, accents, punctuation, aliases."""

import pytest
from hypothesis import given
from hypothesis import strategies as st

from daemon.core.directives import Parsed, build_table, parse

TABLE = build_table(["marat", "dali", "cobol"], {"marat": ["murat", "ma rat"], "dali": ["dolly"]})


@pytest.mark.parametrize(
    ("text", "mode", "rest"),
    [
        ("marat list files", "marat", "list files"),
        ("Marat, list files.", "marat", "list files."),
        ("  MARAT: list files\n", "marat", "list files"),
        ("\n\nmarat\tshow me the current dir", "marat", "show me the current dir"),
        ('"Marat, list files."', "marat", 'list files."'),
        ("Marát — list files", "marat", "list files"),
        ("...dali! tell me a joke", "dali", "tell me a joke"),
        ("Ma rat, list files", "marat", "list files"),
        ("ma-rat list files", "marat", "list files"),
        ("Murat list files", "marat", "list files"),
        ("dolly, hello", "dali", "hello"),
        ("marat", "marat", ""),
        ("Marat.", "marat", ""),
        ("  cobol  ", "cobol", ""),
        ("paint it like dali", None, "paint it like dali"),
        ("marathon training plan", None, "marathon training plan"),
        ("marat's opinion", None, "marat's opinion"),
        ("marat2 go", None, "marat2 go"),
        ("ma rathon", None, "ma rathon"),
        ("", None, ""),
        ("   ", None, ""),
        ("¿dali, qué tal?", "dali", "qué tal?"),
    ],
)
def test_parse(text, mode, rest):
    assert parse(text, TABLE) == Parsed(mode, rest, parse(text, TABLE).word)
    assert parse(text, TABLE).mode == mode


def test_the_directive_word_as_spoken_is_kept():
    assert parse("Ma rat, go", TABLE).word == "Ma rat"


@given(st.text())
def test_never_crashes_and_rest_is_a_suffix(text):
    p = parse(text, TABLE)
    assert p.rest in text.strip() or p.rest == ""
    if p.mode is None:
        assert p.rest == text.strip()


@given(st.sampled_from(["marat", "dali", "cobol"]), st.text(min_size=1).filter(lambda t: t.strip()))
def test_directive_then_content(mode, content):
    text = f"{mode.upper()}, {content}"
    p = parse(text, TABLE)
    assert p.mode == mode
    assert text.strip().endswith(p.rest)
    assert len(p.rest) <= len(content.strip())


# -- wake words and mishearings (issue 38 item 2) -------------------------------------------------
SPOKEN = build_table(["marat", "dali", "cobol", "knob"], {"knob": ["nob"], "dali": ["dolly"]})


@pytest.mark.parametrize(
    ("text", "mode", "rest", "misheard"),
    [
        ("Hey marat, list files", "marat", "list files", False),
        ("OK marat list files.", "marat", "list files.", False),
        ("Okay, Cobol: compile", "cobol", "compile", False),
        ("hi dali", "dali", "", False),
        ("Hello, knob list", "knob", "list", False),
        ("Morat, list files", "marat", "list files", True),
        ("Hey Morat, list files", "marat", "list files", True),
        ("Maret show me the logs", "marat", "show me the logs", True),
        ("Kobol, compile", "cobol", "compile", True),
        ("Co ball focus on a.py", "cobol", "focus on a.py", True),
        ("Dahli, a joke please", "dali", "a joke please", True),
        ("Knobb list", "knob", "list", True),
        # wake words alone, or before anything else, are content
        ("Hey, what is up", None, "Hey, what is up", False),
        ("OK, list the files", None, "OK, list the files", False),
        ("ok", None, "ok", False),
        # ordinary words that sound like a directive are content
        ("Marathon results", None, "Marathon results", False),
        ("Merit increases this year", None, "Merit increases this year", False),
        ("Cobble stones", None, "Cobble stones", False),
        ("Cable prices", None, "Cable prices", False),
        ("Dally no more", None, "Dally no more", False),
        ("Nab the thief", None, "Nab the thief", False),
        ("mara, list", None, "mara, list", False),
        # only at the start
        ("please ask morat", None, "please ask morat", False),
        ("morat's idea", None, "morat's idea", False),
    ],
)
def test_wake_words_and_mishearings(text, mode, rest, misheard):
    p = parse(text, SPOKEN)
    assert (p.mode, p.rest, p.misheard) == (mode, rest, misheard)


@given(st.sampled_from(["hey", "OK", "okay", "hi", "hello"]), st.sampled_from(["marat", "dali"]))
def test_a_wake_word_before_a_directive_is_dropped_with_it(wake, mode):
    p = parse(f"{wake} {mode}, do it", SPOKEN)
    assert (p.mode, p.rest, p.word) == (mode, "do it", f"{wake} {mode}")
