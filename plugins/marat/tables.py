"""marat's table: the schema of `marat_commands` (the audit, audit.py), as migrations the
store applies once each."""

from __future__ import annotations

from typing import Any


def m001_marat_commands(db: Any) -> None:
    db.execute(
        """CREATE TABLE IF NOT EXISTS marat_commands (
            id INTEGER PRIMARY KEY,
            session TEXT NOT NULL,
            cwd TEXT NOT NULL,
            command TEXT NOT NULL,
            exit_code INTEGER,
            duration REAL NOT NULL,
            timed_out INTEGER NOT NULL DEFAULT 0,
            truncated INTEGER NOT NULL DEFAULT 0,
            output TEXT NOT NULL,
            approval TEXT NOT NULL,
            answer TEXT,
            prompt_id INTEGER,
            created_at REAL NOT NULL
        )"""
    )
    db.execute("CREATE INDEX IF NOT EXISTS marat_commands_session ON marat_commands (session, id)")


def m002_marat_sandbox(db: Any) -> None:
    """How each command ran (sandbox level or none) and whether the sandbox stopped it. Rows
    from before the sandbox ran without one: "none" is their truth."""
    db.execute("ALTER TABLE marat_commands ADD COLUMN sandbox TEXT NOT NULL DEFAULT 'none'")
    db.execute("ALTER TABLE marat_commands ADD COLUMN sandbox_blocked INTEGER NOT NULL DEFAULT 0")


def m003_marat_rule(db: Any) -> None:
    """Which approval rule let a command run (or refused it): daemon/agent/rules.py."""
    db.execute("ALTER TABLE marat_commands ADD COLUMN rule_id INTEGER")
