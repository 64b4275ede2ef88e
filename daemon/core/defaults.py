"""Which stored settings the user chose, and keeping the others on the declared defaults.

Every setting stays visible in the `settings` table, so it can be read and changed with plain
SQL, as the seed's users do. Which values the user chose is known exactly: a trigger marks a
name in `settings_chosen` whenever a value is inserted or updated, however that happens (`lmd
settings set`, knob, HTTP, or an `UPDATE` in the sqlite3 shell). lmd writes its own defaults
with `follow()` below, which clears that mark in the same transaction. A value nobody chose
follows the declaration's default when lmd is upgraded; a chosen one stays.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

SETTINGS_SQL = Path(__file__).with_name("settings.sql")  # the repository's, by a symlink


def schema(sql: str) -> str:
    """The CREATE statements of settings.sql (the tables and triggers), without its INSERTs of
    the defaults: lmd writes those itself (`follow`), unmarked as chosen."""
    statements, part = [], ""
    for line in sql.splitlines(keepends=True):
        if not part and (not line.strip() or line.lstrip().startswith("--")):
            continue
        part += line
        if sqlite3.complete_statement(part):
            if part.lstrip().upper().startswith("CREATE"):
                statements.append(part.strip())
            part = ""
    return "\n".join(statements) + "\n"


SCHEMA = schema(SETTINGS_SQL.read_text(encoding="utf-8"))


class StoredSettings(Mapping[str, str]):
    """The settings table, read-only, with the names whose values the user chose."""

    __slots__ = ("_rows", "chosen")

    def __init__(self, rows: dict[str, str], chosen: frozenset[str] = frozenset()) -> None:
        self._rows = rows
        self.chosen = chosen

    def __getitem__(self, name: str) -> str:
        return self._rows[name]

    def __contains__(self, name: object) -> bool:
        return name in self._rows

    def __iter__(self) -> Iterator[str]:
        return iter(self._rows)

    def __len__(self) -> int:
        return len(self._rows)


def read_settings_table(conn: sqlite3.Connection) -> StoredSettings:
    """The settings table of an open database (read-only use: `lmd doctor`), with the names
    the user chose; every stored value counts as chosen in a database from before that."""
    rows = dict(conn.execute("SELECT name, value FROM settings").fetchall())
    try:
        return StoredSettings(rows, chosen_names(conn))
    except sqlite3.OperationalError:  # no settings_chosen table: an older lmd's database
        return StoredSettings(rows, frozenset(rows))


def _same(spec: Any, stored: str, text: str) -> bool:
    """Whether a stored text means the same value as a default's text ("60" and "60.0")."""
    if stored == text:
        return True
    try:
        return spec.parse(stored) == spec.parse(text)
    except Exception:  # a broken stored value is never "the default"
        return False


def follow(conn: sqlite3.Connection, name: str, text: str) -> None:
    """Store `text` as the value lmd chose (a default): not marked as the user's."""
    conn.execute(
        "INSERT INTO settings (name, value) VALUES (?, ?) "
        "ON CONFLICT(name) DO UPDATE SET value = excluded.value",
        [name, text],
    )
    conn.execute("DELETE FROM settings_chosen WHERE name = ?", [name])
    conn.execute(
        "INSERT INTO settings_defaults (name, value) VALUES (?, ?) "
        "ON CONFLICT(name) DO UPDATE SET value = excluded.value",
        [name, text],
    )


def plan(conn: sqlite3.Connection, specs: Mapping[str, Any]) -> tuple[dict, set]:
    """What to write so every declared setting not chosen by the user holds its default.

    Returns ({name: default text to follow}, {names to mark chosen}); both empty when the
    table is current, so an ordinary start only reads.
    """
    stored = dict(conn.execute("SELECT name, value FROM settings").fetchall())
    chosen = {r[0] for r in conn.execute("SELECT name FROM settings_chosen")}
    written = dict(conn.execute("SELECT name, value FROM settings_defaults").fetchall())
    to_follow: dict[str, str] = {}
    to_mark: set[str] = set()
    for name, spec in specs.items():
        text = spec.dump(spec.default)
        if name not in stored:
            to_follow[name] = text
        elif name in chosen:
            continue
        elif name not in written:
            # a home from before this was known: an earlier default counts as not chosen
            known = (text, *(spec.dump(v) for v in spec.past_defaults))
            if any(_same(spec, stored[name], t) for t in known):
                to_follow[name] = text
            else:
                to_mark.add(name)
        elif stored[name] != text or written[name] != text:
            to_follow[name] = text  # the default changed since lmd wrote it
    return to_follow, to_mark


def chosen_names(conn: sqlite3.Connection) -> frozenset[str]:
    return frozenset(r[0] for r in conn.execute("SELECT name FROM settings_chosen"))
