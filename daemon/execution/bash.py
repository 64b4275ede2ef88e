"""Reading a bash command line as bash would: the simple commands it runs, with their words.

The grammar is tree-sitter-bash (the one GitHub and the editors use). Before parsing,
backslash-newline pairs are joined as bash joins them. Anything this reading does not model
(command substitution, expansions, subshells, compound statements, background jobs,
here-documents, variable assignments, redirection to a file, control characters, a parse error)
raises `Unmodelled`: callers then know nothing about the command and ask the user. marat's
read-only classifier and the approval rules (daemon/agent/rules.py) both read commands here.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import tree_sitter
import tree_sitter_bash

_SAFE_TARGETS = {"/dev/null"}
# Structure that only joins commands: what bash runs is still each command, one after another.
_JOINING = {"program", "list", "pipeline", "redirected_statement", ";", "&&", "||", "|", "|&",
            "\n", "comment"}  # fmt: skip


@dataclass(frozen=True)
class SimpleCommand:
    """One command of a parsed command line: the program and its arguments as bash would pass
    them (quotes and escapes removed). The approval rules match on these too."""

    words: tuple[str, ...]
    globbed: bool = False  # an unquoted * ? or [ in some word: the words are not final
    globs: tuple[bool, ...] = ()  # per word: whether it holds an unquoted glob character

    @property
    def program(self) -> str:
        return self.words[0]


class Unmodelled(Exception):
    """Something the reading does not model: the command is not known to be read-only."""


@lru_cache(maxsize=1)
def _parser() -> Any:
    return tree_sitter.Parser(tree_sitter.Language(tree_sitter_bash.language()))


def join_continuations(command: str) -> str:
    """The command with backslash-newline pairs removed where bash removes them: everywhere but
    inside single quotes (and a comment, which ends at the newline anyway)."""
    out, quote, i = [], None, 0
    while i < len(command):
        c = command[i]
        if c == "\\" and quote != "'":
            if command[i + 1 : i + 2] == "\n":
                i += 2  # the line continues: both characters vanish
                continue
            out.append(command[i : i + 2])
            i += 2
            continue
        if quote is None and c in "'\"":
            quote = c
        elif quote == c:
            quote = None
        out.append(c)
        i += 1
    return "".join(out)


def simple_commands(command: str) -> list[SimpleCommand]:
    """The simple commands a command line runs, in order; Unmodelled when it holds anything
    else (see the module's docstring), or redirects output anywhere but /dev/null."""
    text = join_continuations(command)
    if any(ord(c) < 32 and c not in "\n\t" for c in text) or "\x7f" in text:
        raise Unmodelled("a control character")
    brace = text.find("{")
    if brace >= 0 and any(ord(c) > 0xFFFF for c in text[brace:]):
        # tree-sitter-bash 0.25.1 reads out of bounds, and crashes the process (SIGSEGV, as
        # in this test suite once), on a `{` followed later by a character outside the Basic
        # Multilingual Plane (an emoji): tree-sitter/tree-sitter-bash#337. Not read: asked.
        raise Unmodelled("a brace before a character this reader cannot take")
    tree = _parser().parse(text.encode("utf-8", "surrogatepass"))
    if tree.root_node.has_error:
        raise Unmodelled("bash would not read it as written")
    found: list[SimpleCommand] = []
    _collect(tree.root_node, found)
    if not found:
        raise Unmodelled("no command")
    return found


def _collect(node: Any, found: list[SimpleCommand]) -> None:
    kind = node.type
    if kind == "command":
        found.append(_simple(node))
        return
    if kind == "file_redirect":
        _check_redirect(node)
        return
    if kind not in _JOINING:
        raise Unmodelled(kind)  # &, subshells, heredocs, loops, functions, assignments...
    for child in node.children:
        _collect(child, found)


def _check_redirect(node: Any) -> None:
    """Reading a file (`< f`) and `>/dev/null`, `2>&1` are fine; writing a file is not."""
    operator = next(c.type for c in node.children if c.type not in ("file_descriptor",))
    target = node.children[-1]
    if operator == "<":
        _word(target)  # a plain name: reading it changes nothing
        return
    if operator in (">&", "<&") and target.type == "number":
        return
    if operator in (">", ">>", ">|", "&>", "&>>") and _word(target)[0] in _SAFE_TARGETS:
        return
    raise Unmodelled("a redirection")


def _simple(node: Any) -> SimpleCommand:
    # tree-sitter-bash 0.25 can read `pwd | pwd\nrm x` as the command `pwd rm x` (without
    # an error): a line break between a command's words is never one command to bash
    text, base, end = node.text, node.start_byte, None
    for child in node.children:
        if end is not None and b"\n" in text[end - base : child.start_byte - base]:
            raise Unmodelled("a line break inside a command")
        end = child.end_byte
    words, globs = [], []
    for child in node.children:
        if child.type == "command_name":
            child = child.children[0]
        elif child.type == "file_redirect":
            _check_redirect(child)
            continue
        value, glob = _word(child)
        words.append(value)
        globs.append(glob)
    if not words:
        raise Unmodelled("no program")
    return SimpleCommand(tuple(words), any(globs), tuple(globs))


def _word(node: Any) -> tuple[str, bool]:
    """A word's value as bash passes it, and whether it holds an unquoted glob character."""
    kind, raw = node.type, node.text.decode("utf-8", "surrogatepass")
    if kind in ("word", "number"):
        if any(c in raw for c in "{}$`"):
            raise Unmodelled("an expansion")
        return _unescape(raw), any(c in raw for c in "*?[")
    if kind == "raw_string":  # '...': every character as written
        return raw[1:-1], False
    if kind == "string":  # "...": only literal content, no expansion inside
        if any(c.type not in ('"', "string_content") for c in node.children):
            raise Unmodelled("an expansion inside quotes")
        return _unescape_double(raw[1:-1]), False
    if kind == "concatenation":
        parts = [_word(c) for c in node.children]
        return "".join(v for v, _ in parts), any(g for _, g in parts)
    raise Unmodelled(kind)  # $x, ${x}, $(...), <(...), $'...', brace expansion...


def _unescape(raw: str, only: str | None = None) -> str:
    """Outside quotes a backslash keeps the next character as it is; inside double quotes
    (`only` = the characters it escapes there) it escapes only those."""
    out, i = [], 0
    while i < len(raw):
        if raw[i] == "\\" and i + 1 < len(raw) and (only is None or raw[i + 1] in only):
            out.append(raw[i + 1])
            i += 2
        else:
            out.append(raw[i])
            i += 1
    return "".join(out)


def _unescape_double(raw: str) -> str:
    """Inside double quotes a backslash escapes only $ ` " \\ (and newline)."""
    return _unescape(raw, '$`"\\')
