"""`lmd words`: the user's own dictionary of spoken words, for the hint lmd gives the model
with a dictated request (docs/voice.md)."""

from __future__ import annotations

from pathlib import Path

import click

from daemon.cli import fail, home_option, open_daemon_state
from daemon.spoken.vocabulary import WordsError, add_word, all_words, remove_word


@click.group()
def words() -> None:
    """Your spoken words: what a speech engine writes, and what you mean by it."""


@words.command("add")
@click.argument("said")
@click.argument("meant")
@home_option
def words_add(said: str, meant: str, home: Path | None) -> None:
    """Add SAID (as the speech engine writes it) meaning MEANT: lmd words add "kube cuddle"
    kubectl."""
    _, store, _ = open_daemon_state(home)
    try:
        spoken, kept = add_word(store, said, meant)
    except WordsError as e:
        fail(str(e))
    click.echo(f'When a dictated request says "{spoken}", I tell the model it means {kept}.')


@words.command("list")
@home_option
def words_list(home: Path | None) -> None:
    """Every entry: what is said, and what it means."""
    _, store, _ = open_daemon_state(home)
    found = all_words(store)
    if not found:
        click.echo('No words yet; add one with lmd words add "kube cuddle" kubectl.')
    for said, meant in found:
        click.echo(f"{said}\t{meant}")


@words.command("remove")
@click.argument("said")
@home_option
def words_remove(said: str, home: Path | None) -> None:
    """Remove the entry for SAID."""
    _, store, _ = open_daemon_state(home)
    try:
        spoken = remove_word(store, said)
    except WordsError as e:
        fail(str(e))
    click.echo(f'Removed "{spoken}".')
