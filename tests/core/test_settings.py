"""Settings: typed values, clear refusals, env overrides, settings.sql, CLI and HTTP."""

import json

import pytest

from daemon.core import collect
from daemon.plugins import get_plugin_manager
from daemon.settings import Setting, SettingError, Settings
from tests.daemons import lmd_in_process
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
    assert client.get("/settings/max_tokens").json()["source"] == "table"
    r = client.delete("/settings/max_tokens")
    assert r.json()["value"] == 3500


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
def lmd(*args, home, input=None):
    return lmd_in_process(*args, "--home", str(home), input=input)


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


def test_user_values_survive_a_restart_with_settings_sql_reapplied(home):
    lmd("settings", "set", "system", "Debian 12", home=home)
    from daemon.store import Store

    store = Store(home / "lmd.db")
    store.migrate()  # applies settings.sql again with INSERT OR IGNORE
    assert store.stored_settings()["system"] == "Debian 12"


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
