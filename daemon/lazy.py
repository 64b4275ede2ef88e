"""Commands listed by name and one line of help, their code imported only when they run.

`lmd --help` lists every plugin's commands. Importing them all (the Elo arena, SelectIT,
LM_SCORE and their helpers) cost more than Python's own start-up, so a plugin registers a
`LazyCommand` instead: the name, the line `--help` shows, and where the real command lives.
A group resolves it on first use (`resolve`); tests check each line against the real
command's own help so the two cannot drift apart.
"""

from __future__ import annotations

import importlib

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
        super().__init__(name, short_help=short_help, help=help or short_help, hidden=hidden)
        self.target = target

    def load(self) -> click.Command:
        """Import and return the real command."""
        module, _, attribute = self.target.partition(":")
        command = getattr(importlib.import_module(module), attribute)
        if not isinstance(command, click.Command):
            raise TypeError(f"{self.target} is not a click command")
        return command


def lazy_command(
    name: str, target: str, short_help: str | None = None, *, help: str | None = None
) -> LazyCommand:
    """A command for `register_commands` that imports its code only when it is run.

    `short_help` is its whole line in `lmd --help`. Or give `help`, the real command's first
    paragraph: `--help` then shortens it to fit, as it does the help of a command of its own.
    """
    if (short_help is None) == (help is None):
        raise TypeError("lazy_command takes short_help or help, not both (nor neither)")
    return LazyCommand(name, target, short_help, help=help)


def resolve(group: click.Group, name: str) -> click.Command | None:
    """`group`'s command `name`, importing (and keeping) the real one behind a LazyCommand."""
    command = group.commands.get(name)
    if isinstance(command, LazyCommand):
        command = command.load()
        group.commands[name] = command
    return command
