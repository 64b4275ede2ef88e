"""How words sound and how common they are: the tests a spoken word passes before lmd takes
it for a name it knows (a directive, a file, a setting, a program).

A word is taken for a name it merely sounds like only when it is no ordinary English word:
"Morat, list files" goes to marat, "Merit increases" stays content. Ordinary means common
enough in the English word frequencies that pyspellchecker ships (read once, when first
needed: some 0.3 CPU-seconds).
"""

from __future__ import annotations

import functools
import re

import jellyfish
from spellchecker import SpellChecker

# A word seen more often than this in pyspellchecker's English frequencies is an ordinary
# word. Names and rare words sit at its floor (50): "marat", "murat" and "dali" are there,
# "merit" (4695), "dolly" (2493) and "cable" (18344) are far above.
ORDINARY_COUNT = 100
# Above this a word is so common that a directive alias of it would capture everyday
# sentences ("go", "list", "show"): about the 5,000 most frequent words.
COMMON_COUNT = 10_000


@functools.lru_cache(maxsize=1)
def _frequencies() -> dict[str, int]:
    return dict(SpellChecker(language="en", distance=1).word_frequency.dictionary)


def frequency(word: str) -> int:
    """How often the word occurs in the English frequencies (0: not an English word)."""
    return _frequencies().get(word.lower(), 0)


def is_ordinary(word: str) -> bool:
    """An ordinary English word (never taken for a name it only sounds like)."""
    return frequency(word) > ORDINARY_COUNT


def is_common(word: str) -> bool:
    """A word so common that sentences start with it every day."""
    return frequency(word) > COMMON_COUNT


def key(text: str) -> str:
    """The phonetic key of what is said: metaphone of its letters, spaces ignored ("kube
    cuddle" and "kubectl" share KBKTL)."""
    letters = re.sub(r"[^a-z]", "", text.lower())
    return jellyfish.metaphone(letters) if letters else ""


def distance(a: str, b: str) -> int:
    """Edits (insert, delete, change, swap) from one spelling to the other."""
    return jellyfish.damerau_levenshtein_distance(a.lower(), b.lower())


def sounds_like(heard: str, name: str) -> bool:
    """`heard` (one word, or words run together) may be a speech engine's spelling of
    `name`: the same phonetic key, a spelling a few edits away (one for names of four letters
    or less), and at least three letters."""
    flat = re.sub(r"[^a-z]", "", heard.lower())
    target = re.sub(r"[^a-z]", "", name.lower())
    if len(flat) < 3 or len(target) < 3 or flat == target:
        return flat == target and bool(flat)
    most = 1 if len(target) <= 4 else 2
    return distance(flat, target) <= most and key(flat) == key(target)
