"""Human labels in the terminal: show a battle blind, read one key, save after each."""

from __future__ import annotations

import os
import sys
import termios
import textwrap
import time
import tty
from collections.abc import Callable
from dataclasses import dataclass

import click

from .language import language_of

KEYS = {"a": "model_a", "b": "model_b", "t": "tie", "x": "tie (bothbad)"}
HELP = "[a] A is better  [b] B is better  [t] tie  [x] both bad  [s] skip  [q] quit"


@dataclass
class LabelRun:
    labelled: int = 0
    skipped: int = 0
    quit: bool = False


def read_key() -> str:
    """One key press on a terminal; one line (its first letter) from a pipe; '' at the end."""
    if sys.stdin.isatty():
        fd = sys.stdin.fileno()
        old = termios.tcgetattr(fd)
        try:
            # TCSANOW, not the default TCSAFLUSH: a key pressed before we got here still counts.
            tty.setcbreak(fd, termios.TCSANOW)
            data = os.read(fd, 4)
        finally:
            termios.tcsetattr(fd, termios.TCSANOW, old)
        if data[:1] in (b"\x03", b"\x04"):  # Ctrl-C / Ctrl-D in cbreak mode: quit
            return "q"
        return data[:1].decode("ascii", "ignore").lower()
    line = sys.stdin.readline()
    return line.strip()[:1].lower() if line else ""


def show(row: dict, place: int, total: int, width: int = 100) -> str:
    """The battle as text; model names stay hidden so the label is blind."""

    def block(text: str) -> str:
        return "\n".join(
            textwrap.fill(p, width) if p.strip() else "" for p in (text or "").splitlines()
        )

    return (
        f"\n=== Battle {place} of {total} ===\n"
        f"Question:\n{block(row['question'])}\n\n"
        f"--- Answer A ---\n{block(row['answer_a'])}\n\n"
        f"--- Answer B ---\n{block(row['answer_b'])}\n\n{HELP}"
    )


def label(
    rows: list[dict],
    todo: list[int],
    person: str,
    save: Callable[[], None],
    key: Callable[[], str] = read_key,
    echo: Callable[[str], None] = click.echo,
) -> LabelRun:
    """Ask for a verdict on rows[i] for i in todo; each answer is saved at once."""
    run = LabelRun()
    for place, i in enumerate(todo, 1):
        echo(show(rows[i], place, len(todo)))
        while True:
            pressed = key()
            if pressed in KEYS or pressed in ("s", "q", ""):
                break
            echo(f"Press one of a, b, t, x, s or q ({pressed!r} is not one of them).")
        if pressed in ("q", ""):
            run.quit = True
            break
        if pressed == "s":
            run.skipped += 1
            continue
        rows[i].update(
            winner=KEYS[pressed],
            judge=person,
            turn=rows[i].get("turn") or "1",
            language=rows[i].get("language") or language_of(rows[i].get("question") or ""),
            tstamp=f"{time.time():.3f}",
            gpt_4_response="",
            gpt_4_justification="",
            is_valid="true",
        )
        run.labelled += 1
        save()
    return run
