"""Small helpers for sentences a person hears: counts with the right noun form."""

from __future__ import annotations


def plural(count: int | float, noun: str, plural_form: str | None = None) -> str:
    """'1 model turn', '2 model turns', '1 battle', '0 battles' ('1 reply', '2 replies'
    needs `plural_form`). Only exactly one takes the singular, as English says it."""
    word = noun if count == 1 else (plural_form or _plural_of(noun))
    shown = f"{count:g}" if isinstance(count, float) else str(count)
    return f"{shown} {word}"


def _plural_of(noun: str) -> str:
    last = noun.rsplit(" ", 1)[-1]
    if last.endswith(("s", "x", "ch", "sh")):
        return noun + "es"
    if last.endswith("y") and last[-2:-1] not in "aeiou":
        return noun[:-1] + "ies"
    return noun + "s"
