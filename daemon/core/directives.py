"""Directives: the first word of an utterance may name a mode.

Dictation-tolerant: any case, accents, surrounding punctuation and whitespace, spoken aliases
of several words ("ma rat"), a wake word before it ("Hey marat, ...", "OK cobol ..."), and the
directive as a speech engine mishears it ("Morat, list files"): a word that sounds like it
(daemon/spoken/sounds.py) and is no ordinary English word ("Marathon results", "Merit
increases" stay content). Only the very first word(s) count: a directive word later in the
sentence is content.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from daemon.spoken import sounds

_LEAD = re.compile(r"[\W_]*", re.UNICODE)  # punctuation, quotes and spaces before the word
_WORD = re.compile(r"[^\W\d_]+", re.UNICODE)
_GAP = re.compile(r"[\s\-]+")
_AFTER = re.compile(r"[\s,.:;!?\-\u2013\u2014\u2026'\"\u201c\u201d\u2018\u2019)\]]*")


def _past(pattern: re.Pattern[str], text: str, pos: int = 0) -> int:
    """Where the run of `pattern` (one that may match nothing) starting at `pos` ends."""
    found = pattern.match(text, pos)
    return found.end() if found else pos


# Said before a directive by habit: dropped with it ("Hey marat" is marat). Alone, or before
# anything else, they stay content ("OK, list the files").
WAKE_WORDS = frozenset({"hey", "hi", "hello", "ok", "okay", "yo"})


@dataclass(frozen=True)
class Parsed:
    mode: str | None  # the mode named by a directive, or None
    rest: str  # the utterance without the directive
    word: str | None = None  # the directive as spoken (with its wake word)
    misheard: bool = False  # the directive was a word that only sounds like it


def fold(word: str) -> str:
    """Case- and accent-insensitive form of a word."""
    decomposed = unicodedata.normalize("NFKD", word)
    return "".join(c for c in decomposed if not unicodedata.combining(c)).casefold()


def build_table(modes: Iterable[str], aliases: Mapping[str, Iterable[str]]) -> dict:
    """Map folded word tuples to mode names: each mode's own name plus its aliases."""
    table: dict[tuple[str, ...], str] = {}
    for mode in modes:
        table[(fold(mode),)] = mode
    for mode, spoken in aliases.items():
        for alias in spoken:
            words = tuple(fold(w) for w in _WORD.findall(alias))
            if words and words not in table:
                table[words] = mode
    return table


def parse(text: str, table: Mapping[tuple[str, ...], str]) -> Parsed:
    """Split an utterance into (mode named by its first word(s), the rest)."""
    stripped = text.strip()
    pos = _past(_LEAD, stripped)
    found = _directive_at(stripped, pos, pos, table)
    if found is not None:
        return found
    first = _WORD.match(stripped, pos)
    if first and fold(first.group()) in WAKE_WORDS:
        after = _past(_AFTER, stripped, first.end())
        found = _directive_at(stripped, after, pos, table)
        if found is not None:
            return found
    return Parsed(None, stripped)


def _directive_at(
    stripped: str, pos: int, start: int, table: Mapping[tuple[str, ...], str]
) -> Parsed | None:
    """The directive whose words begin at `pos` (said from `start`, with a wake word), or
    None."""
    longest = max((len(k) for k in table), default=1)
    words: list[tuple[str, int]] = []  # (folded word, end position)
    while len(words) < max(longest, 2):
        m = _WORD.match(stripped, pos)
        if not m:
            break
        words.append((fold(m.group()), m.end()))
        gap = _GAP.match(stripped, m.end())
        if not gap:
            break
        pos = gap.end()
    for n in range(min(len(words), longest), 0, -1):
        key = tuple(w for w, _ in words[:n])
        if key in table:
            found = _parsed(stripped, start, words[n - 1][1], table[key])
            if found is not None:
                return found
    for n in (1, 2):  # a mishearing: one word, or two run together ("co ball")
        if len(words) < n:
            break
        mode = _sounds_like(tuple(w for w, _ in words[:n]), table)
        if mode is not None:
            found = _parsed(stripped, start, words[n - 1][1], mode, misheard=True)
            if found is not None:
                return found
    return None


def _parsed(
    stripped: str, start: int, end: int, mode: str, misheard: bool = False
) -> Parsed | None:
    if end < len(stripped) and (stripped[end].isalnum() or stripped[end] in "'\u2019"):
        return None  # "marat's" or "marat2" is not the directive
    rest_start = _past(_AFTER, stripped, end)
    # keep a closing quote/bracket that belongs to the content, only drop separators
    rest = stripped[rest_start:].strip()
    return Parsed(mode, rest, stripped[start:end].strip(), misheard)


def _sounds_like(words: tuple[str, ...], table: Mapping[tuple[str, ...], str]) -> str | None:
    """The mode whose one-word directive (or alias) these words sound like, when they are no
    ordinary English word; None otherwise."""
    heard = "".join(words)
    if not heard.isascii():
        return None
    matches = {
        mode for key, mode in table.items() if len(key) == 1 and sounds.sounds_like(heard, key[0])
    }
    if len(matches) != 1:
        return None  # none, or two modes it could be: no guess
    if sounds.is_ordinary(heard) or (len(words) == 1 and sounds.is_ordinary(words[0])):
        return None
    return matches.pop()


# The public name (daemon.api): a plugin reads a directive as the core does.
parse_directive = parse


def alias_problem(alias: str, mode: str, table: Mapping[tuple[str, ...], str]) -> tuple[str, str]:
    """(why `alias` cannot be a spoken form of `mode`, or ""; a note to say with it, or "").
    An alias is one to three words of letters, not yet taken, and not so common a word that
    everyday sentences start with it ("go", "list")."""
    words = tuple(fold(w) for w in _WORD.findall(alias))
    if not words or len(words) > 3 or "".join(words) != fold("".join(alias.split())):
        return f"An alias is one to three words of letters; {alias} is not one.", ""
    if words in table:
        if table[words] == mode:
            return f"{alias} already means {mode}.", ""
        return (
            f"{alias} already means {table[words]}; forget that alias first, or choose "
            "another word.",
            "",
        )
    if len(words) == 1 and words[0] in WAKE_WORDS:
        return f"{alias} is a wake word I skip before a directive; choose another word.", ""
    if all(sounds.is_common(w) for w in words):
        return (
            f"{alias} is a common word: every sentence that starts with it would go to {mode}. "
            "Choose a word nobody starts a sentence with.",
            "",
        )
    if any(sounds.is_ordinary(w) for w in words):
        return (
            "",
            f"{alias} is also an ordinary word: a sentence starting with it goes to {mode}.",
        )
    return "", ""
