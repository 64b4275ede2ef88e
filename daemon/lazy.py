"""Commands listed by name and one line of help, their code imported only when they run.

`lmd --help` lists every plugin's commands. Importing them all (the Elo arena, SelectIT,
LM_SCORE and their helpers) cost more than Python's own start-up, so a plugin registers a
`LazyCommand` instead: the name and where the real command lives. Its line in `--help` is the
real command's own docstring, read from the module's source file without importing it (one
text, written once); a group resolves the real command on first use (`resolve`).
"""

from __future__ import annotations

import importlib
import inspect
import re
import sys
from pathlib import Path

import click


class LazyCommand(click.Command):
    """A stand-in for the click command at `target` ("module:attribute")."""

    def __init__(
        self,
        name: str,
        target: str,
        short_help: str | None = None,
        hidden: bool = False,
        help: str | None = None,
    ) -> None:
        if short_help is None and help is None:
            help = docstring(target)
        super().__init__(name, short_help=short_help, help=help or short_help, hidden=hidden)
        self.target = target
        if short_help is None and help is None:  # no source to read: ask the command itself
            self.help = self.load().help

    def load(self) -> click.Command:
        """Import and return the real command."""
        module, _, attribute = self.target.partition(":")
        command = getattr(importlib.import_module(module), attribute)
        if not isinstance(command, click.Command):
            raise TypeError(f"{self.target} is not a click command")
        return command


def docstring(target: str) -> str | None:
    """The docstring of the function `target` ("module:function") names, as click makes a
    command's help of it, read from the module's source without running it; None when there
    is no source file or the function has no docstring there."""
    module, _, function = target.partition(":")
    parent, _, leaf = module.rpartition(".")
    try:
        folders = (sys.modules.get(parent) or importlib.import_module(parent)).__path__
        source = (Path(folders[0]) / f"{leaf}.py").read_text(encoding="utf-8")
    except (ImportError, AttributeError, OSError, UnicodeDecodeError):
        return None
    found = re.search(
        rf"^(?:async )?def {re.escape(function)}\(.*?\)[^:\n]*:[ \t]*\n[ \t]+"
        r'(?P<q>"""|\'\'\')(?P<doc>.*?)(?P=q)',
        source,
        re.M | re.S,
    )
    if found is None or "\\" in found["doc"]:  # an escape: the literal's text is not its value
        return None
    return inspect.cleandoc(found["doc"])


def lazy_command(
    name: str, target: str, short_help: str | None = None, *, help: str | None = None
) -> LazyCommand:
    """A command for `register_commands` that imports its code only when it is run.

    Its line in `lmd --help` is the real command's docstring, read from the module's source
    (shortened to fit, as the help of a command of its own is). A plugin may give the line
    instead: `short_help`, the whole line, or `help`, the real command's first paragraph.
    """
    if short_help is not None and help is not None:
        raise TypeError("lazy_command takes short_help or help, not both")
    return LazyCommand(name, target, short_help, help=help)


def resolve(group: click.Group, name: str) -> click.Command | None:
    """`group`'s command `name`, importing (and keeping) the real one behind a LazyCommand."""
    command = group.commands.get(name)
    if isinstance(command, LazyCommand):
        command = command.load()
        group.commands[name] = command
    return command
