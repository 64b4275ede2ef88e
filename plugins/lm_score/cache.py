"""Scores kept in the daemon's database, keyed by everything that changes the answer.

The key names the model that answered: the endpoint of a server, or the embedded model's file
(its identity, daemon.backends.for_commands), whichever process served it. Keys of lmd
before this change named the configured endpoint and model even when the embedded model answered, so
those rows (without an identity) are dropped by m002 and never served (their keys differ).
"""

from __future__ import annotations

import hashlib
import json
import threading
import time
from typing import Any

TABLE = "lm_score_cache"


def m001_cache(db: Any) -> None:
    db.execute(
        f"""CREATE TABLE IF NOT EXISTS {TABLE} (
            key TEXT PRIMARY KEY,
            score INTEGER NOT NULL,
            result TEXT NOT NULL,
            created_at REAL NOT NULL
        )"""
    )


def m002_identity(db: Any) -> None:
    """Rows keyed by what was configured rather than by the model that answered (a score of
    the embedded model could be served as another model's) are dropped; rows name their
    model's identity from now on."""
    db.execute(f"DELETE FROM {TABLE}")
    db.execute(f"ALTER TABLE {TABLE} ADD COLUMN identity TEXT")


KEY_VERSION = 2  # 1: keyed by the configured endpoint, not the model that answered


def cache_key(fingerprint: dict, prompt: str) -> str:
    """sha256 of the config fingerprint (the answering model's identity, model id, method,
    settings) and the exact prompt."""
    blob = json.dumps({"v": KEY_VERSION, "config": fingerprint, "prompt": prompt}, sort_keys=True)
    return hashlib.sha256(blob.encode("utf-8")).hexdigest()


class ScoreCache:
    """get/put on the lm_score_cache table of a sqlite-utils Database."""

    def __init__(self, db: Any, lock: Any = None) -> None:
        self.db = db
        self.lock = lock or threading.RLock()

    def get(self, key: str) -> dict | None:
        with self.lock:
            rows = list(self.db.execute(f"SELECT result FROM {TABLE} WHERE key = ?", [key]))
        return json.loads(rows[0][0]) if rows else None

    def get_many(self, keys: list[str]) -> dict[str, dict]:
        """The cached results among `keys`, in a few queries instead of one per key."""
        found: dict[str, dict] = {}
        for i in range(0, len(keys), 500):
            chunk = keys[i : i + 500]
            marks = ", ".join("?" * len(chunk))
            with self.lock:
                rows = list(
                    self.db.execute(
                        f"SELECT key, result FROM {TABLE} WHERE key IN ({marks})", chunk
                    )
                )
            found.update((k, json.loads(r)) for k, r in rows)
        return found

    def put(self, key: str, score: int, result: dict, identity: str = "") -> None:
        with self.lock:
            self.db.execute(
                f"INSERT OR REPLACE INTO {TABLE} (key, score, result, created_at, identity)"
                " VALUES (?, ?, ?, ?, ?)",
                [key, score, json.dumps(result), time.time(), identity],
            )

    def clear(self) -> int:
        with self.lock:
            return self.db.execute(f"DELETE FROM {TABLE}").rowcount
