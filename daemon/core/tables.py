"""CSV cells a spreadsheet cannot run: every CSV lmd writes goes through `csv_cell`.

A cell that begins with = + - @, a tab or a carriage return is a formula to Excel, LibreOffice
and Google Sheets (`=HYPERLINK(...)` in a model's answer or name runs when the file is
opened). Such a cell is written with a leading apostrophe, which spreadsheets show as text;
lmd's own readers take it off again (`csv_value`), so a file round-trips unchanged. Numbers
(-2.5, +3) stay as they are: a spreadsheet reads them as numbers, not formulas.
"""

from __future__ import annotations

from typing import Any

FORMULA_START = ("=", "+", "-", "@", "\t", "\r")


def _number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def _needs_quote(text: str) -> bool:
    bare = text.lstrip("'")
    return bool(bare) and bare.startswith(FORMULA_START) and not _number(bare)


def csv_cell(value: Any) -> Any:
    """The value as it may go into a CSV cell."""
    if isinstance(value, str) and value[:1] in (*FORMULA_START, "'") and _needs_quote(value):
        return "'" + value
    return value


def csv_value(text: str) -> str:
    """A cell of a CSV lmd wrote, as it was before `csv_cell`."""
    if text[:1] == "'" and _needs_quote(text[1:]):
        return text[1:]
    return text
