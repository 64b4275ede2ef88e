"""Spoken numbers, names and punctuation (daemon/spoken/numbers.py, names.py, sounds.py)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from daemon.spoken.names import match_name, spoken_punctuation
from daemon.spoken.numbers import in_unit, spoken_number, spoken_quantity
from daemon.spoken.sounds import is_common, is_ordinary, sounds_like


@pytest.mark.parametrize(
    ("said", "value"),
    [
        ("four thousand five hundred, please", 4500),
        ("forty three hundred", 4300),
        ("4,500", 4500),
        ("four k", 4000),
        ("1.5k", 1500),
        ("1.5 million", 1_500_000),
        ("two thousand and five", 2005),
        ("nineteen eighty four", 1984),
        ("nineteen oh five", 1905),
        ("eight oh eight oh", 8080),
        ("one and a half", 1.5),
        ("point five", 0.5),
        ("minus seven", -7),
        ("about four thousand", None),
        ("twenty twenty twenty", None),
        ("two hundred hundred", None),
        ("five five five five five", 55555),
        ("4 5", None),
        ("the third", None),  # an ordinal only where one fits
    ],
)
def test_spoken_numbers(said, value):
    assert spoken_number(said) == value


@pytest.mark.parametrize(("said", "value"), [("the third", 3), ("twenty first", 21), ("3rd", 3)])
def test_ordinals_where_they_fit(said, value):
    assert spoken_number(said, ordinals=True) == value


def test_units():
    assert spoken_quantity("two minutes") == (2, "minutes")
    assert in_unit(2, "minutes", "llm_timeout_secs") == (120, "")
    assert in_unit(4000, "tokens", "max_tokens") == (4000, "")
    assert in_unit(5, "minutes", "max_tokens")[0] is None
    assert in_unit(5, "tokens", "llm_timeout_secs")[0] is None


@given(st.integers(min_value=0, max_value=10**12), st.sampled_from(["", ",", "k"]))
def test_digits_as_written(n, style):
    if style == ",":
        assert spoken_number(f"{n:,}") == n
    elif style == "k":
        assert spoken_number(f"{n}k") == n * 1000
    else:
        assert spoken_number(str(n)) == n


@pytest.mark.parametrize(
    ("said", "written"),
    [
        ("git check out dash b feature slash login", "git check out -b feature/login"),
        ("daemon slash core dot pie", "daemon/core.py"),
        ("cd dot dot slash src", "cd ../src"),
        ("tilde slash projects", "~/projects"),
        ("kubectl get pods dash dash all dash namespaces", "kubectl get pods --all-namespaces"),
        ("tail dash n twenty notes dot text", "tail -n 20 notes.txt"),
        ("cat log dot text pipe grep error", "cat log.txt | grep error"),
        ("my underscore file dot jason", "my_file.json"),
        ("connect the dots and dashes", "connect the dots and dashes"),
    ],
)
def test_spoken_punctuation(said, written):
    assert spoken_punctuation(said) == written


def test_names_matched_against_what_exists():
    names = ["max_tokens", "reply_max_tokens", "llm_timeout_secs", "marat_approval"]
    assert match_name("Max Tokens", names).exact
    near = match_name("maximum tokens", names)
    assert near.name == "max_tokens" and near.said_back("maximum tokens", "max tokens") == (
        "I took maximum tokens to mean max tokens."
    )
    assert match_name("LLM timeout seconds", names).name == "llm_timeout_secs"
    assert match_name("core", ["a/core.py", "b/core.py"]).name is None
    assert match_name("banana", names).name is None and not match_name("", names).candidates
    two = match_name("notes", ["notes.md", "notes.txt"])
    assert two.name is None and set(two.candidates) == {"notes.md", "notes.txt"}


def test_the_ordinary_word_guard():
    assert sounds_like("morat", "marat") and sounds_like("kobol", "cobol")
    assert not sounds_like("marathon", "marat") and not sounds_like("mara", "marat")
    assert is_ordinary("merit") and is_ordinary("cable") and not is_ordinary("morat")
    assert is_common("go") and not is_common("dahlia")
