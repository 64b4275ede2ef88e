"""The daemon's own battles: a table `elo_battles` with the spec's full columns."""

from __future__ import annotations

import time
from typing import Any

from .files import FULL_COLUMNS, Table, check_battles

TABLE = "elo_battles"


def m001_elo_battles(db: Any) -> None:
    columns = ",\n            ".join(f"{c} TEXT NOT NULL DEFAULT ''" for c in FULL_COLUMNS)
    db.execute(
        f"""CREATE TABLE IF NOT EXISTS {TABLE} (
            id INTEGER PRIMARY KEY,
            {columns},
            added_at REAL NOT NULL
        )"""
    )


MIGRATIONS = [("m001_elo_battles", m001_elo_battles)]


def validate(table: Table) -> list[dict[str, str]]:
    """Rows fit to store: known winners, two different models (else EloFileError)."""
    return check_battles(table).rows


def add_battles(store: Any, rows: list[dict[str, Any]]) -> int:
    """Append battles in one transaction; returns how many."""
    now = time.time()
    records = [
        tuple("" if r.get(c) is None else str(r.get(c)) for c in FULL_COLUMNS) + (now,)
        for r in rows
    ]
    marks = ", ".join("?" for _ in range(len(FULL_COLUMNS) + 1))
    with store.transaction() as db:
        db.conn.executemany(
            f"INSERT INTO {TABLE} ({', '.join(FULL_COLUMNS)}, added_at) VALUES ({marks})",
            records,
        )
    return len(records)


def all_battles(store: Any) -> list[dict[str, str]]:
    """Every stored battle that counts for ratings (valid, with a winner), oldest first."""
    cursor = store.db.execute(
        f"SELECT {', '.join(FULL_COLUMNS)} FROM {TABLE} "
        "WHERE winner != '' AND lower(is_valid) NOT IN ('false', '0', 'no', 'f') ORDER BY id"
    )
    return [dict(zip(FULL_COLUMNS, row, strict=True)) for row in cursor.fetchall()]


def fingerprint(store: Any) -> tuple[int, int]:
    """(count, highest id) of the stored battles: changes whenever battles are added."""
    count, top = store.db.execute(f"SELECT count(*), coalesce(max(id), 0) FROM {TABLE}").fetchone()
    return count, top
