"""Directive parsing survives dictation: case, accents, punctuation, aliases."""

import pytest
from hypothesis import given
from hypothesis import strategies as st

from daemon.directives import Parsed, build_table, parse

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
