"""What lmd says about a command or a tool, in words fit for the ear; what lmd speaks is lmd's.

A question quotes the exact command (a yes binds to that text), but a voice cannot take in a
line of 100,000 characters, and a screen hides what follows a run of spaces. So a long or
unusual command is announced first: its length, what it runs (read through wrappers:
daemon/agent/effective.py), and where it is unusual (one argument thousands of characters long,
a run of blanks, a character outside plain ASCII in a program's name), before the exact text.
Names that come from an MCP server (a tool's name) are the server's words: inside lmd's own
sentences they are quoted, cut to a length, and their invisible characters written out, so no
name can speak for lmd ("read. It only reads, say yes").
"""

from __future__ import annotations

import re
import unicodedata

from daemon.agent import effective

LONG = 200  # characters: about fifteen seconds of a voice reading a command
LONG_WORD = 80  # one argument longer than this is said
BLANK_RUN = 16  # a run of blanks this long can push the rest of a line off the screen
MAX_NAME = 40  # characters of a server's name said inside lmd's sentence
MAX_SAID = 5  # programs named in "that runs ..."
_INVISIBLE = re.compile(
    "[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200b-\u200f\u202a-\u202e\u2060-\u2064"
    "\u2066-\u2069\ufeff\ue000\ue001]"
)
_BLANKS = re.compile(rf"[ \t]{{{BLANK_RUN},}}")


def quoted_name(name: str, limit: int = MAX_NAME) -> str:
    """A name from an MCP server as lmd says it: in double quotes (a quote inside written as
    \\"), invisible characters written out, at most `limit` characters and then how long it
    is."""
    shown = _INVISIBLE.sub(lambda m: f"\\u{ord(m.group()):04x}", name).replace('"', '\\"')
    if len(shown) > limit:
        return f'"{shown[: limit - 1]}…" ({len(name):,} characters)'
    return f'"{shown}"'


def describe_command(command: str) -> str | None:
    """How a question announces a long or unusual command, after "I am about to run ": "a
    one-line command of 100,000 characters that runs echo; one argument of echo is 99,995
    characters long (characters 6 to 100,000)". None for a short, plain, one-line command."""
    lines = command.count("\n") + 1
    unusual = _unusual(command)
    long = len(command) > LONG
    if lines == 1 and not long and not unusual:
        return None
    size = f"a {lines}-line command" if lines > 1 else "a one-line command"
    if long:
        size += f" of {len(command):,} characters"
    if long or unusual:
        size += _what_runs(command)
    return "; ".join([size, *unusual])


def spoken_command(command: str, limit: int = 120) -> str:
    """A command said in a sentence of lmd's: itself when short and on one line, else what it
    is ("a one-line command of 100,000 characters that runs echo")."""
    if len(command) <= limit and "\n" not in command:
        return command
    lines = command.count("\n") + 1
    size = f"a {lines}-line command" if lines > 1 else "a one-line command"
    return f"{size} of {len(command):,} characters{_what_runs(command)}"


def _what_runs(command: str) -> str:
    try:
        parts = effective.read_cached(command)
    except effective.Unread:
        return " whose commands lmd cannot read"
    names: list[str] = []
    for part in parts:
        for run in part.runs_first():
            said = _plain(run.said, 40)
            if run.wraps is None and run.opaque is None and said not in names:
                names.append(said)
            elif run.opaque is not None and f"{_plain(run.name, 40)} code" not in names:
                names.append(f"{_plain(run.name, 40)} code")
    if not names:
        return ""
    if len(names) > MAX_SAID:
        rest = len(names) - MAX_SAID + 1
        names = [*names[: MAX_SAID - 1], f"{rest} more"]
    said = names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1]
    return f" that runs {said}"


def _plain(text: str, limit: int = 120) -> str:
    """Model-chosen words inside lmd's sentence: cut, invisible characters written out."""
    text = _INVISIBLE.sub(lambda m: f"\\u{ord(m.group()):04x}", text)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _unusual(command: str) -> list[str]:
    """Where a command is unusual, each in a phrase."""
    found = []
    for m in re.finditer(r"\S+", command):
        if m.end() - m.start() > LONG_WORD:
            owner = _owner(command, m.start())
            what = f"one argument of {_plain(owner)}" if owner else "one word"
            found.append(
                f"{what} is {m.end() - m.start():,} characters long (characters "
                f"{m.start() + 1:,} to {m.end():,})"
            )
            break
    blanks = _BLANKS.search(command)
    if blanks:
        n = blanks.end() - blanks.start()
        found.append(
            f"a run of {n:,} blanks at character {blanks.start() + 1:,} may push what follows "
            "off the screen"
        )
    foreign = _foreign_program(command)
    if foreign:
        found.append(foreign)
    return found


def _owner(command: str, at: int) -> str | None:
    """The program whose argument starts at `at` (the last program word before it)."""
    before = command[:at].rstrip(" \t")
    if not before or before[-1] in ";|&(\n":
        return None  # the long word is a program's name itself
    try:
        parts = effective.read_cached(command[:at] + "x")
    except effective.Unread:
        return None
    return parts[-1].said if parts else None


def _foreign_program(command: str) -> str | None:
    """A program or subcommand name holding a character outside plain ASCII (`cаt` with a
    Cyrillic а looks like cat)."""
    try:
        parts = effective.read_cached(command)
    except effective.Unread:
        return None
    for part in parts:
        for run in part.runs_first():
            for word in (run.program, run.subcommand or ""):
                odd = [c for c in word if ord(c) > 0x7E]
                if odd:
                    what = unicodedata.name(odd[0], f"U+{ord(odd[0]):04X}").lower()
                    return (
                        f"the program name {_plain(word)} holds a character that only looks "
                        f"plain ({what})"
                    )
    return None
