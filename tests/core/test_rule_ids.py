"""Rule ids are never reused (issue 36 item 9): a removed or expired rule keeps its row and id,
new rules take ids above every id ever given (AUTOINCREMENT), a home made by an older lmd is
migrated keeping its ids and skipping those its audit names, and the audit keeps naming the
rule that let a command run."""

from __future__ import annotations

import sqlite3
import time
from pathlib import Path

import sqlite_utils

from daemon.agent import rules
from daemon.core import store as store_module
from daemon.core.store import Store


def test_a_removed_rules_id_is_never_given_again(tmp_path: Path):
    s = Store(tmp_path / "lmd.db")
    s.migrate()
    first, _ = rules.add_rule(s, "allow", "touch", origin="cli")
    rules.remove_rule(s, first.id)
    second, made = rules.add_rule(s, "allow", "touch", origin="cli")
    assert made and second.id > first.id
    assert rules.get_rule(s, first.id) is None  # gone for matching and listing...
    kept = rules.get_rule(s, first.id, removed=True)  # ...kept for the audit that names it
    assert kept.pattern == "touch" and kept.removed_at is not None
    assert [r.id for r in rules.all_rules(s) if r.origin == "cli"] == [second.id]
    # removing it twice says there is no such rule
    try:
        rules.remove_rule(s, first.id)
    except rules.RuleError as e:
        assert str(e) == f"There is no rule {first.id}; lmd rules list shows them."
    else:
        raise AssertionError("a removed rule was removed again")
    # even the highest id, deleted by hand from the table, is not given again
    top, _ = rules.add_rule(s, "allow", "mkdir", origin="cli")
    with s.lock:
        s.db.execute("DELETE FROM rules WHERE id = ?", [top.id])
    after, _ = rules.add_rule(s, "allow", "mkdir", origin="cli")
    assert after.id > top.id
    s.close()


def test_an_expired_session_rule_keeps_its_id(tmp_path: Path, monkeypatch):
    s = Store(tmp_path / "lmd.db")
    s.migrate()
    rule, _ = rules.add_rule(s, "allow", "touch", session="s1", origin="voice")
    monkeypatch.setenv("LMD_END_SESSION_AFTER_IDLE_SECS", "0")
    assert all(r.id != rule.id for r in rules.all_rules(s))
    monkeypatch.delenv("LMD_END_SESSION_AFTER_IDLE_SECS")
    again, _ = rules.add_rule(s, "allow", "touch", session="s1", origin="voice")
    assert again.id > rule.id and rules.get_rule(s, rule.id, removed=True).removed_at
    s.close()


def test_an_older_home_keeps_its_ids_and_skips_those_its_audit_names(tmp_path: Path):
    """A database as lmd made it before this migration: rules 1-14 built in, rule 15 the
    user's, rules 16-40 deleted (the audit still names rule 40)."""
    path = tmp_path / "lmd.db"
    db = sqlite_utils.Database(sqlite3.connect(path, isolation_level=None))
    db.execute("CREATE TABLE _lmd_migrations (name TEXT PRIMARY KEY, applied_at REAL)")
    for fn in store_module.CORE_MIGRATIONS[:5]:
        fn(db)
        db.execute("INSERT INTO _lmd_migrations VALUES (?, ?)", [f"core:{fn.__name__}", 0])
    assert [fn.__name__ for fn in store_module.CORE_MIGRATIONS[:5]][-1] == "m005_rules"
    db.execute(
        "INSERT INTO rules (id, decision, words, origin, created_at)"
        " VALUES (15, 'allow', '[\"git\", \"commit\"]', 'voice', ?)",
        [time.time()],
    )
    db.execute(  # an older lmd let "yes, always" make a rule for a wrapper
        "INSERT INTO rules (id, decision, words, origin, created_at)"
        " VALUES (16, 'allow', '[\"timeout\"]', 'voice', ?)",
        [time.time()],
    )
    db.execute("CREATE TABLE marat_commands (id INTEGER PRIMARY KEY, rule_id INTEGER)")
    db.execute("INSERT INTO marat_commands (rule_id) VALUES (40), (15)")
    db.conn.close()

    s = Store(path)
    assert "core:m006_rule_ids" in s.migrate()
    assert rules.get_rule(s, 15).pattern == "git commit"  # its id kept
    # the wrapper's rule stays listed, saying it lets nothing run; it covers nothing
    assert rules.get_rule(s, 16).sentence() == (
        "Rule for timeout everywhere lets nothing run: timeout runs another command it is "
        "given, and a rule never covers what such a program runs."
    )
    assert rules.decide(s, cwd="/", session="x", command="timeout 9 rm -f x") is None
    assert len([r for r in rules.all_rules(s) if r.origin == "built-in"]) == 14
    made, _ = rules.add_rule(s, "allow", "touch", origin="cli")
    assert made.id == 41  # above the deleted rule 40 the audit names
    s.close()


def test_a_fresh_home_is_autoincrement(tmp_path: Path):
    s = Store(tmp_path / "lmd.db")
    s.migrate()
    sql = s.db.execute("SELECT sql FROM sqlite_master WHERE name = 'rules'").fetchone()[0]
    assert "AUTOINCREMENT" in sql and "removed_at" in sql
    s.close()
