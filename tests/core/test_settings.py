"""Settings: typed values, clear refusals, env overrides, settings.sql, CLI and HTTP."""

import json
import sqlite3

import pytest

from daemon.core.defaults import SCHEMA
from daemon.core.registry import collect
from daemon.core.settings import Setting, SettingError, Settings
from daemon.core.store import Store
from daemon.plugins import get_plugin_manager
from tests.daemons import ROOT, lmd_in_process
from tests.test_seed_examples import SEED_SETTINGS


def builtin_specs():
    return collect(get_plugin_manager()).specs


def test_all_eighteen_seed_settings_exist_with_the_original_defaults():
    specs = builtin_specs()
    for name, value in SEED_SETTINGS.items():
        assert specs[name].default == value, name
    assert "openai_model" in specs and specs["openai_model"].default != "gpt-3.5-turbo"
    assert specs["openai_chat_endpoint"].default.endswith("/chat/completions")


@pytest.mark.parametrize(
    ("spec", "raw", "value"),
    [
        (Setting("a", 1, "int", min=1), "4000", 4000),
        (Setting("a", 1, "int"), "1_000", 1000),
        (Setting("a", 1.0, "float"), "0.5", 0.5),
        (Setting("a", True, "bool"), "f", False),
        (Setting("a", True, "bool"), "Yes", True),
        (
            Setting("a", "x", "choice", choices=("majority", "avg"), synonyms={"maj": "majority"}),
            "MAJ",
            "majority",
        ),
        (Setting("a", {}, "json"), '{"k": [1]}', {"k": [1]}),
        (Setting("a", "", "str"), "  Ubuntu 24.04 ", "Ubuntu 24.04"),
    ],
)
def test_parse_accepts(spec, raw, value):
    assert spec.parse(raw) == value


@pytest.mark.parametrize(
    ("spec", "raw", "words"),
    [
        (Setting("max_tokens", 1, "int", min=1), "abc", "whole number of at least 1"),
        (Setting("max_tokens", 1, "int", min=1), "0", "at least 1"),
        (Setting("max_tokens", 1, "int", min=1), "2.5", "whole number"),
        (Setting("len_discount", 1.0, "float", min=0), "nan", "a number of at least 0"),
        (Setting("flag", True, "bool"), "maybe", "true or false"),
        (Setting("agg", "avg", "choice", choices=("maj", "avg")), "median", "one of maj, avg"),
        (Setting("aliases", {}, "json"), "{nope", "JSON"),
    ],
)
def test_parse_refuses_with_a_sentence_naming_setting_value_and_rule(spec, raw, words):
    with pytest.raises(SettingError) as e:
        spec.parse(raw)
    message = str(e.value)
    assert spec.name in message and repr(raw) in message and words in message
    assert message.endswith(".")


def test_env_overrides_table_which_overrides_default():
    specs = {"max_tokens": Setting("max_tokens", 3500, "int", min=1)}
    assert Settings(specs, {}, {})["max_tokens"] == 3500
    assert Settings(specs, {"max_tokens": "4000"}, {})["max_tokens"] == 4000
    s = Settings(specs, {"max_tokens": "4000"}, {"LMD_MAX_TOKENS": "5000"})
    assert s["max_tokens"] == 5000 and s.source("max_tokens") == "env"


def test_a_bad_env_value_is_reported_naming_the_variable():
    specs = {"max_tokens": Setting("max_tokens", 3500, "int", min=1)}
    s = Settings(specs, {}, {"LMD_MAX_TOKENS": "lots"})
    with pytest.raises(SettingError, match="LMD_MAX_TOKENS"):
        s["max_tokens"]
    assert len(s.problems()) == 1


def test_unknown_setting_is_a_clear_404():
    s = Settings({}, {}, {})
    with pytest.raises(Exception) as e:
        s.spec("nope")
    assert e.value.status == 404 and "lmd settings list" in str(e.value)


# -- over HTTP ------------------------------------------------------------------------------
def test_http_list_get_put_reset(client):
    listed = client.get("/settings").json()["settings"]
    assert {r["name"] for r in listed} >= set(SEED_SETTINGS)
    assert client.get("/settings/max_tokens").json()["value"] == 3500
    r = client.put("/settings/max_tokens", content="4000")
    assert r.status_code == 200 and r.json()["value"] == 4000
    r = client.put("/settings/max_tokens", json={"value": 4500})
    assert r.json()["value"] == 4500
    assert client.get("/settings/max_tokens").json()["source"] == "set"
    r = client.delete("/settings/max_tokens")
    assert r.json()["value"] == 3500 and r.json()["source"] == "default"


def test_http_bad_values_and_unknown_names(client):
    r = client.put("/settings/max_tokens", content="four thousand")
    assert r.status_code == 400
    assert "max_tokens cannot be 'four thousand'" in r.json()["error"]
    assert client.get("/settings/max_tokens").json()["value"] == 3500  # nothing changed
    r = client.get("/settings/no_such_thing")
    assert r.status_code == 404 and "no setting called no_such_thing" in r.json()["error"]
    assert client.put("/settings/no_such_thing", content="1").status_code == 404
    r = client.put(
        "/settings/max_tokens", content="{", headers={"content-type": "application/json"}
    )
    assert r.status_code == 400 and "not valid JSON" in r.json()["error"]


# -- over the CLI ---------------------------------------------------------------------------
def lmd(*args, home, input=None, env=None):
    return lmd_in_process(*args, "--home", str(home), input=input, env=env)


def test_cli_set_get_list_reset(home):
    r = lmd("settings", "set", "max_tokens", "4000", home=home)
    assert r.returncode == 0, r.stderr
    assert lmd("settings", "get", "max_tokens", home=home).stdout.strip() == "4000"
    rows = json.loads(lmd("settings", "list", "--json", home=home).stdout)
    assert {r["name"]: r["value"] for r in rows}["max_tokens"] == 4000
    detail = json.loads(lmd("settings", "get", "max_tokens", "--json", home=home).stdout)
    assert detail["default"] == 3500 and detail["type"] == "int"
    assert lmd("settings", "reset", "max_tokens", home=home).returncode == 0
    assert lmd("settings", "get", "max_tokens", home=home).stdout.strip() == "3500"


def test_cli_refuses_bad_values_and_unknown_names(home):
    r = lmd("settings", "set", "karma_multiplier", "-1", home=home)
    assert r.returncode == 1 and "karma_multiplier cannot be '-1'" in r.stderr
    r = lmd("settings", "get", "nope", home=home)
    assert r.returncode == 1 and "no setting called nope" in r.stderr
    assert lmd("settings", "get", "karma_multiplier", home=home).stdout.strip() == "10.0"


def test_user_values_survive_a_restart(home):
    lmd("settings", "set", "system", "Debian 12", home=home)
    from daemon.core.store import Store

    store = Store(home / "lmd.db")
    store.migrate(specs=builtin_specs())  # every start follows the defaults again
    assert store.stored_settings()["system"] == "Debian 12"


# -- upgrades: values nobody chose follow new defaults, chosen ones stay -------------------


def _upgraded(path, specs, changes: dict):
    """Open the database as an lmd whose declarations have these defaults would (each changed
    one listing the old default in past_defaults, as docs/development.md asks)."""
    import dataclasses

    from daemon.core.store import Store

    new = {
        n: dataclasses.replace(s, default=changes[n], past_defaults=(*s.past_defaults, s.default))
        if n in changes
        else s
        for n, s in specs.items()
    }
    store = Store(path)
    store.migrate(specs=new)
    return store, Settings(new, store.stored_settings(), {})


def _sql(path, statement, *args):
    import sqlite3

    conn = sqlite3.connect(path)
    with conn:
        conn.execute(statement, args)
    conn.close()


def test_an_unchanged_value_follows_a_new_default_and_chosen_ones_stay(home):
    specs = builtin_specs()
    db = home / "lmd.db"
    lmd("settings", "set", "max_tokens", "4000", home=home)  # chosen through the CLI
    _sql(db, "UPDATE settings SET value = 'Arch Linux' WHERE name = 'system'")  # plain SQL
    # chosen, though equal to today's default: still the user's choice after an upgrade
    _sql(db, "UPDATE settings SET value = '300' WHERE name = 'end_session_after_idle_secs'")

    changes = {
        "max_tokens": 5000,
        "system": "Debian 13",
        "end_session_after_idle_secs": 600,
        "recent_history_limit": 80,
    }
    store, s = _upgraded(db, specs, changes)
    assert s["recent_history_limit"] == 80 and s.source("recent_history_limit") == "default"
    assert s["max_tokens"] == 4000 and s.source("max_tokens") == "set"
    assert s["system"] == "Arch Linux" and s.source("system") == "set"
    assert s["end_session_after_idle_secs"] == 300
    # the table shows the value in use, for those who read it with SQL
    assert store.stored_settings()["recent_history_limit"] == "80"
    store.close()


def test_reset_follows_the_default_again(home):
    specs = builtin_specs()
    lmd("settings", "set", "max_tokens", "4000", home=home)
    assert lmd("settings", "reset", "max_tokens", home=home).returncode == 0
    store, s = _upgraded(home / "lmd.db", specs, {"max_tokens": 5000})
    assert s["max_tokens"] == 5000 and s.source("max_tokens") == "default"
    store.close()


def test_a_deleted_row_comes_back_as_the_default(home):
    _sql(home / "lmd.db", "DELETE FROM settings WHERE name = 'max_tokens'")
    store, s = _upgraded(home / "lmd.db", builtin_specs(), {})
    assert store.stored_settings()["max_tokens"] == "3500" and s.source("max_tokens") == "default"
    store.close()


def test_a_home_from_an_older_lmd_keeps_only_what_its_user_changed(tmp_path):
    """Before lmd knew who chose a value, every default sat in the table like a choice. A
    value equal to the default of the lmd that wrote it (today's or an earlier one) counts as
    not set; any other value is the user's."""
    import sqlite3

    specs = builtin_specs()
    db = tmp_path / "lmd.db"
    conn = sqlite3.connect(db)
    conn.execute("CREATE TABLE settings (name TEXT PRIMARY KEY, value TEXT NOT NULL)")
    old_rows = {
        "llm_timeout_secs": "60",  # an earlier lmd's spelling of its default
        "min_score_to_include_prompt": "0.00001",
        "directive_aliases": (
            '{"marat": ["murat", "marrat", "ma rat"], "dali": ["dolly", "dally"], '
            '"cobol": ["kobol", "co bol"]}'
        ),  # an earlier default, since changed
        "max_tokens": "3500",  # today's default
        "system": "Fedora 40",  # the user's
        "karma_multiplier": "12.5",  # the user's
    }
    conn.executemany("INSERT INTO settings VALUES (?, ?)", old_rows.items())
    conn.commit()
    conn.close()

    changes = {"llm_timeout_secs": 90.0, "max_tokens": 5000, "system": "Debian 13"}
    store, s = _upgraded(db, specs, changes)
    assert s["llm_timeout_secs"] == 90.0 and s.source("llm_timeout_secs") == "default"
    assert s["max_tokens"] == 5000
    assert s["directive_aliases"] == specs["directive_aliases"].default
    assert s["min_score_to_include_prompt"] == specs["min_score_to_include_prompt"].default
    assert s["system"] == "Fedora 40" and s.source("system") == "set"
    assert s["karma_multiplier"] == 12.5 and s.source("karma_multiplier") == "set"
    store.close()
    # and a second start changes nothing more
    store, s = _upgraded(db, specs, changes)
    assert s["system"] == "Fedora 40" and s["max_tokens"] == 5000
    store.close()


def test_settings_list_says_where_each_value_comes_from(home):
    lmd("settings", "set", "max_tokens", "4000", home=home)
    r = lmd("settings", "list", "--sources", home=home, env={"LMD_SYSTEM": "Alpine"})
    lines = {line.split()[0]: line.split()[1:] for line in r.stdout.splitlines()}
    assert lines["max_tokens"][:2] == ["set", "4000"]
    assert lines["system"][:2] == ["environment", "Alpine"]
    assert lines["recent_history_limit"][:2] == ["default", "50"]


@pytest.mark.parametrize(
    "args", [("settings", "get", "max_tokens"), ("settings", "list"), ("history",)]
)
def test_a_bad_environment_value_is_one_sentence_and_a_failure(tmp_path, args):
    from tests.daemons import lmd_in_process

    ran = lmd_in_process(*args, "--home", str(tmp_path / "h"), env={"LMD_MAX_TOKENS": "lots"})
    assert ran.returncode == 1
    assert ran.stderr.strip() == (
        "The environment variable LMD_MAX_TOKENS: max_tokens cannot be 'lots'; it must be a "
        "whole number of at least 1."
    )


def test_the_daemon_makes_the_settings_tables_settings_sql_declares(tmp_path):
    """settings.sql holds the schema once: a new database has exactly its tables and triggers,
    and none of its INSERTs (lmd writes the defaults itself, unmarked as chosen)."""
    reference = sqlite3.connect(":memory:")
    reference.executescript((ROOT / "settings.sql").read_text())
    store = Store(tmp_path / "lmd.db")
    store.migrate()
    made = sqlite3.connect(":memory:")
    made.executescript(SCHEMA)
    query = "SELECT type, name, sql FROM sqlite_master WHERE name LIKE 'settings%' ORDER BY name"
    expected = reference.execute(query).fetchall()
    assert {name for _, name, _ in expected} == {
        "settings", "settings_chosen", "settings_defaults",
        "settings_chosen_on_insert", "settings_chosen_on_update",
    }  # fmt: skip
    assert made.execute(query).fetchall() == expected
    assert store.db.execute(query).fetchall() == expected
    assert made.execute("SELECT COUNT(*) FROM settings").fetchone() == (0,)
    store.close()
