"""Directives: the first word of an utterance may name a mode.

Dictation-tolerant: any case, accents, surrounding punctuation and whitespace, and spoken
aliases of several words ("ma rat"). Only the very first word(s) count: a directive word later
in the sentence is content.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

_LEAD = re.compile(r"[\W_]*", re.UNICODE)  # punctuation, quotes and spaces before the word
_WORD = re.compile(r"[^\W\d_]+", re.UNICODE)
_GAP = re.compile(r"[\s\-]+")
_AFTER = re.compile(r"[\s,.:;!?\-\u2013\u2014\u2026'\"\u201c\u201d\u2018\u2019)\]]*")


@dataclass(frozen=True)
class Parsed:
    mode: str | None  # the mode named by a directive, or None
    rest: str  # the utterance without the directive
    word: str | None = None  # the directive as spoken


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
    pos = _LEAD.match(stripped).end()
    longest = max((len(k) for k in table), default=1)
    words: list[tuple[str, int]] = []  # (folded word, end position)
    while len(words) < longest:
        m = _WORD.match(stripped, pos)
        if not m:
            break
        words.append((fold(m.group()), m.end()))
        gap = _GAP.match(stripped, m.end())
        if not gap:
            break
        pos = gap.end()
    for n in range(len(words), 0, -1):
        key = tuple(w for w, _ in words[:n])
        if key in table:
            end = words[n - 1][1]
            if end < len(stripped) and (stripped[end].isalnum() or stripped[end] in "'\u2019"):
                continue  # "marat's" or "marat2" is not the directive
            rest_start = _AFTER.match(stripped, end).end()
            # keep a closing quote/bracket that belongs to the content, only drop separators
            rest = stripped[rest_start:].strip()
            return Parsed(table[key], rest, stripped[:end].strip())
    return Parsed(None, stripped)
