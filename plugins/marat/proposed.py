"""Is what the model proposed a command at all? Only a command is put to the user; anything
else ("the sky is blue in one line.", "The user has quit.", a file name) goes back to the model
as format help.

A command is text bash reads without a syntax error (bash itself says so: `bash -n`, which
reads and runs nothing) whose first program is one bash can run here: a keyword, a builtin, a
program on the PATH commands run with, or a path to an executable file. The first program is
found with the real bash grammar (tree-sitter-bash, as the read-only classifier reads
commands); where the grammar cannot say (an expansion such as `$EDITOR`, a construct it does
not model), the proposal is taken as a command: this check only keeps prose away from the
user, and asking about a real command is never wrong.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
from functools import lru_cache
from typing import Any

import tree_sitter
import tree_sitter_bash

SYNTAX = (
    "Format help: that is not a bash command (bash says: {why}). Give one command that bash "
    "can run, or your final answer."
)
NO_PROGRAM = (
    "Format help: {word!r} is not a program, builtin or function here, so {shown!r} is not a "
    "command. Give one command that bash can run, or your final answer."
)
NOT_EXECUTABLE = (
    "Format help: {word!r} is not an executable file, so {shown!r} is not a command. Give one "
    "command that bash can run, or your final answer."
)
MAX_SHOWN = 80


async def problem(command: str, cwd: str, path: str | None = None) -> str | None:
    """Format help when `command` is no command (see the module's docstring), else None."""
    why = await _syntax_error(command)
    if why is not None:
        return SYNTAX.format(why=why)
    word = first_program(command)
    if word is None or known(word, cwd, path):
        return None
    shown = command if len(command) <= MAX_SHOWN else command[: MAX_SHOWN - 3] + "..."
    template = NOT_EXECUTABLE if "/" in word else NO_PROGRAM
    return template.format(word=word, shown=shown)


async def _syntax_error(command: str) -> str | None:
    """bash's own complaint about the text, or None when bash reads it (nothing runs)."""
    proc = await asyncio.create_subprocess_exec(
        "bash",
        "-n",
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.PIPE,
        env={"PATH": os.environ.get("PATH", os.defpath), "LC_ALL": "C"},
    )
    _, err = await proc.communicate(command.encode("utf-8", "surrogatepass") + b"\n")
    if proc.returncode == 0:
        return None
    lines = [ln for ln in err.decode("utf-8", "replace").splitlines() if ln.strip()]
    # "bash: line 1: syntax error near unexpected token `)'": the part after the line number
    return lines[0].split(": ", 2)[-1].strip() if lines else "a syntax error"


def first_program(command: str) -> str | None:
    """The first program the command runs, as a plain word; None when the grammar cannot say
    (an expansion, something it does not model, a character it cannot take)."""
    text = command.replace("\\\n", "")
    brace = text.find("{")
    if brace >= 0 and any(ord(c) > 0xFFFF for c in text[brace:]):
        return None  # tree-sitter-bash crashes on these (see daemon/execution/bash.py)
    tree = _parser().parse(text.encode("utf-8", "surrogatepass"))
    node = _first_command(tree.root_node)
    if node is None:
        return None
    name = next((c for c in node.children if c.type == "command_name"), None)
    if name is None or not name.children:
        return None
    word = name.children[0]
    raw = word.text.decode("utf-8", "surrogatepass")
    if word.type == "word" and not any(c in raw for c in "$`{}\\*?["):
        return raw
    if word.type == "raw_string":
        return raw[1:-1]
    return None


def _first_command(node: Any) -> Any:
    if node.type == "command":
        return node
    for child in node.children:
        found = _first_command(child)
        if found is not None:
            return found
    return None


def known(word: str, cwd: str, path: str | None = None) -> bool:
    """Can bash run `word` here: a keyword or builtin, a program on `path` (the PATH commands
    run with), or a path to an executable file (relative to `cwd`)?"""
    if "/" in word:
        target = os.path.join(cwd, os.path.expanduser(word))
        return os.path.isfile(target) and os.access(target, os.X_OK)
    if word in _bash_words():
        return True
    return shutil.which(word, path=path or os.environ.get("PATH", os.defpath)) is not None


@lru_cache(maxsize=1)
def _bash_words() -> frozenset[str]:
    """bash's keywords and builtins, as this machine's bash lists them."""
    done = subprocess.run(
        ["bash", "-c", "compgen -k; compgen -b"], capture_output=True, text=True, check=False
    )
    return frozenset(done.stdout.split())


@lru_cache(maxsize=1)
def _parser() -> Any:
    return tree_sitter.Parser(tree_sitter.Language(tree_sitter_bash.language()))
