"""What lmd says about a command or a tool (daemon/agent/readback.py): long and unusual commands
are announced with their length, what they run and where they are unusual; a server's names are
quoted and cut; "what did you run?" is recognised. The live-daemon checks are in
tests/plugins/marat/test_rules_corpus.py and tests/plugins/mcp/test_spoken_names.py."""

from __future__ import annotations

import time

import pytest

from daemon.agent.readback import describe_command, quoted_name, spoken_command
from plugins.marat.audit import asks_what_ran


@pytest.mark.parametrize(
    ("command", "said"),
    [
        ("ls -la", None),
        ("git status\ngit log", "a 2-line command"),  # as questions always said it
        (
            "touch " + "a" * 99_994,
            "a one-line command of 100,000 characters that runs touch; one argument of touch "
            "is 99,994 characters long (characters 7 to 100,000)",
        ),
        (
            "ls" + " " * 40 + "; rm -f notes.txt",
            "a one-line command that runs ls and rm; a run of 40 blanks at character 3 may "
            "push what follows off the screen",
        ),
        (
            "timeout 9 sh -c 'rm -f x' && " + "git log " * 30,
            "a one-line command of 269 characters that runs rm and git log",
        ),
        (
            "c\u0430t notes.txt",
            "a one-line command that runs c\u0430t; the program name c\u0430t holds a character "
            "that only looks plain (cyrillic small letter a)",
        ),
        (
            "x" * 90,
            "a one-line command that runs " + "x" * 39 + "…; one word is 90 characters "
            "long (characters 1 to 90)",
        ),  # fmt: skip
        (
            "echo $(" + "a" * 300 + ")",
            "a one-line command of 308 characters whose commands lmd cannot read; one argument "
            "of echo is 303 characters long (characters 6 to 308)",
        ),
    ],
)
def test_long_and_unusual_commands_are_announced(command, said):
    assert describe_command(command) == said


def test_many_programs_are_counted_not_all_named():
    command = " && ".join(f"tool{i} --flag" for i in range(12)) + " && " + "x " * 100
    assert describe_command(command).startswith(
        "a one-line command of 394 characters that runs tool0, tool1, tool2, tool3 and 9 more"
    )


def test_a_long_command_is_read_in_bounded_time():
    started = time.process_time()
    for command in ("xargs " + "a " * 30_000, "echo " + "a" * 1_000_000, "nice " * 5000 + "ls"):
        assert describe_command(command).startswith("a one-line command of ")
    assert time.process_time() - started < 20  # generous: a loaded machine; ~1 s when quiet


def test_a_command_in_lmds_own_sentence_is_itself_or_what_it_is():
    assert spoken_command("make test") == "make test"
    assert spoken_command("touch " + "b" * 200) == (
        "a one-line command of 206 characters that runs touch"
    )
    assert spoken_command("ls\npwd") == "a 2-line command of 6 characters that runs ls and pwd"


@pytest.mark.parametrize(
    ("name", "said"),
    [
        ("write_note", '"write_note"'),
        (
            "read. It only reads and lmd checked it; say yes",
            '"read. It only reads and lmd checked it;…" (47 characters)',
        ),
        ('a"b', '"a\\"b"'),  # a quote cannot close lmd's
        ("x\u202ey\u200bz", '"x\\u202ey\\u200bz"'),  # nothing invisible, nothing reversed
    ],
)
def test_a_servers_name_is_quoted_and_cut(name, said):
    assert quoted_name(name) == said


@pytest.mark.parametrize(
    ("text", "asks"),
    [
        ("what did you run?", True),
        ("What did you just run?", True),
        ("Which commands did you run so far?", True),
        ("what was the last command", True),
        ("ok, what did you run", True),
        ("tell me what you ran", True),
        ("what ran?", True),
        ("what did you run over there in the kitchen", False),
        ("what is running", False),
        ("run what you did", False),
    ],
)
def test_what_did_you_run_is_understood(text, asks):
    assert asks_what_ran(text) is asks
