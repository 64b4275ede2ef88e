"""Names as spoken: "daemon slash core dot pie" is daemon/core.py, "max token" is max_tokens,
"write note" is write_note. A spoken name is matched against the names that exist (files,
settings, rules, tools); a match that is not exact is said back ("I took max token to mean
max tokens"), and two names that fit equally are asked about, never guessed.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Iterable
from dataclasses import dataclass

from daemon.spoken.numbers import spoken_number
from daemon.spoken.sounds import key

# Spoken punctuation. Infix marks join the words on either side ("feature slash login");
# prefix marks join only the word after them ("dash b" -> -b).
INFIX = {
    ("slash",): "/", ("forward", "slash"): "/", ("backslash",): "\\", ("back", "slash"): "\\",
    ("dot",): ".", ("underscore",): "_", ("under", "score"): "_", ("colon",): ":",
    ("at", "sign"): "@", ("equals",): "=", ("equal", "sign"): "=", ("equals", "sign"): "=",
    ("plus", "sign"): "+",
}  # fmt: skip
PREFIX = {
    ("dot", "dot"): "..", ("dash", "dash"): "--", ("double", "dash"): "--", ("dash",): "-",
    ("hyphen",): "-", ("tilde",): "~", ("dollar", "sign"): "$", ("dollar",): "$",
}  # fmt: skip
# Said alone between words: a character of its own.
ALONE = {("pipe",): "|", ("star",): "*", ("asterisk",): "*", ("ampersand",): "&",
         ("semicolon",): ";", ("greater", "than"): ">", ("less", "than"): "<"}  # fmt: skip
# File extensions as speech engines write them after "dot".
EXTENSIONS = {
    ("pie",): "py", ("pi",): "py", ("pye",): "py", ("p", "y"): "py", ("python",): "py",
    ("jay", "ess"): "js", ("j", "s"): "js", ("jays",): "js", ("tee", "ess"): "ts",
    ("t", "s"): "ts", ("jason",): "json", ("jay", "son"): "json", ("yamel",): "yaml",
    ("yam", "el"): "yaml", ("yaml",): "yaml", ("tom", "el"): "toml", ("tommel",): "toml",
    ("tom", "l"): "toml", ("em", "dee"): "md", ("m", "d"): "md", ("markdown",): "md",
    ("text",): "txt", ("see",): "c", ("sea",): "c", ("aitch",): "h", ("see", "pee", "pee"):
    "cpp", ("c", "p", "p"): "cpp", ("are", "ess"): "rs", ("r", "s"): "rs", ("rust",): "rs",
    ("shell",): "sh", ("ess", "aitch"): "sh", ("s", "h"): "sh", ("sequel",): "sql",
    ("see", "ess", "vee"): "csv", ("c", "s", "v"): "csv", ("see", "ess", "ess"): "css",
    ("html",): "html", ("toml",): "toml", ("jsonl",): "jsonl", ("jason", "l"): "jsonl",
}  # fmt: skip
_LONGEST = 3


def _find(table: dict, words: list[str], i: int) -> tuple[str, int] | None:
    low = [w.lower().strip(",") for w in words]
    for n in range(min(_LONGEST, len(words) - i), 0, -1):
        found = table.get(tuple(low[i : i + n]))
        if found is not None:
            return found, n
    return None


def spoken_punctuation(text: str, dash_joins: bool = False) -> str:
    """Spoken punctuation written as the characters: "git check out dash b feature slash
    login" -> "git check out -b feature/login"; "core dot pie" -> "core.py". With
    `dash_joins` a dash joins words (a file name: "my dash notes" -> my-notes)."""
    words = text.split()
    out: list[str] = []
    glue = False  # the next word joins the last one
    i = 0
    while i < len(words):
        infix = _find(INFIX, words, i)
        prefix = _find(PREFIX, words, i)
        if infix and prefix and prefix[1] > infix[1]:
            infix = None  # "dot dot" is .., not two dots between words
        elif infix:
            prefix = None
        if prefix and prefix[0] == "-" and out and (dash_joins or _option(out[-1])):
            infix, prefix = prefix, None  # "my dash notes", "dash dash all dash namespaces"
        if infix:
            mark, n = infix
            _put(out, mark, join=True)
            glue = True
            i += n
            if mark == ".":
                ext = _find(EXTENSIONS, words, i)
                if ext and (i + ext[1] == len(words) or _find(INFIX, words, i + ext[1]) is None):
                    out[-1] += ext[0]
                    i += ext[1]
                    glue = False
            continue
        alone = None if prefix else _find(ALONE, words, i)
        number = None if prefix or alone else _number_after_option(words, i, out)
        # a prefix mark (-, --, ~) joins the next word; a number after an option is digits
        text, n = prefix or alone or number or (words[i].strip(",") if glue else words[i], 1)
        _put(out, text, join=glue and not alone)
        glue = bool(prefix)
        i += n
    return " ".join(out)


def _put(out: list[str], text: str, join: bool) -> None:
    """Add `text` to the words written so far: joined to the last one, or as a word."""
    if join and out:
        out[-1] += text
    else:
        out.append(text)


def _option(token: str) -> bool:
    """A command-line option being spelled out ("--all", "-n")."""
    return bool(re.fullmatch(r"--?[A-Za-z][\w-]*", token))


def _number_after_option(words: list[str], i: int, out: list[str]) -> tuple[str, int] | None:
    """Number words right after an option ("-" or "-n"): (digits, how many words)."""
    if not out or not (out[-1] == "-" or _option(out[-1])):
        return None
    for n in range(min(4, len(words) - i), 0, -1):
        value = spoken_number(" ".join(words[i : i + n]))
        if isinstance(value, int) and value >= 0 and not words[i].isdigit():
            return str(value), n
    return None


def flat(name: str) -> str:
    """Letters and digits only, lower case: how a name sounds written out."""
    return re.sub(r"[^a-z0-9]", "", name.lower())


# Words people say for the short forms in names.
_SAID_FOR = {"maximum": "max", "minimum": "min", "seconds": "secs", "second": "secs",
             "number": "num", "directory": "dir", "length": "len", "temperature": "temp",
             "configuration": "config", "approve": "approval"}  # fmt: skip


@dataclass(frozen=True)
class NameMatch:
    """What a spoken name was matched to."""

    name: str | None  # the one name meant, or None
    exact: bool = False  # said as written (case, spaces and separators aside)
    candidates: tuple[str, ...] = ()  # several fit equally well: ask which

    def said_back(self, spoken: str, shown: str | None = None) -> str:
        """ "I took max token to mean max tokens." ("" for an exact match)."""
        if self.exact or self.name is None:
            return ""
        return f"I took {spoken.strip()} to mean {shown or self.name}."


def match_name(spoken: str, names: Iterable[str], cutoff: float = 0.8) -> NameMatch:
    """The existing name a spoken one means: exactly (separators aside), or by sound or
    spelling when one name fits best; candidates when several fit equally."""
    names = list(dict.fromkeys(names))
    said = spoken_punctuation(spoken.strip().strip(".?!,:;\"'"))
    wanted = flat(said)
    if not wanted:
        return NameMatch(None)
    exact = [n for n in names if flat(n) == wanted]
    if len(exact) == 1:
        return NameMatch(exact[0], exact=True)
    if len(exact) > 1:
        return NameMatch(None, candidates=tuple(exact))
    expanded = flat(" ".join(_SAID_FOR.get(w.lower(), w) for w in said.split()))
    near = [n for n in names if flat(n) == expanded]
    if not near:
        sound = key(wanted)
        near = [n for n in names if len(flat(n)) > 3 and sound and key(flat(n)) == sound]
    if not near:
        scored = [(difflib.SequenceMatcher(None, wanted, flat(n)).ratio(), n) for n in names]
        best = max((s for s, _ in scored), default=0.0)
        if best >= cutoff:  # one clear best: a close second is asked about, not guessed
            near = [n for s, n in scored if s >= best - 0.1]
    if len(near) == 1:
        return NameMatch(near[0])
    return NameMatch(None, candidates=tuple(near))
