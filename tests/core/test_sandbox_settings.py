"""The sandbox settings: typed, protected, and every bad value refused with one sentence."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from daemon.cli import cli

SANDBOX_SETTINGS = [
    "sandbox_level",
    "sandbox_hide_paths",
    "sandbox_memory_mb",
    "sandbox_cpu_secs",
    "sandbox_file_size_mb",
    "sandbox_max_processes",
    "command_env_passthrough",
]


def lmd(home, *args):
    return CliRunner().invoke(cli, [*args, "--home", str(home)])


@pytest.mark.parametrize(
    ("name", "value", "sentence"),
    [
        (
            "sandbox_level",
            "sideways",
            "sandbox_level cannot be 'sideways'; it must be one of read-only, workspace-write, "
            "off.",
        ),
        (
            "sandbox_hide_paths",
            '["relative/path"]',
            "sandbox_hide_paths cannot be '[\"relative/path\"]': it must be a JSON list of "
            'absolute or ~ paths, like ["~/.secrets", "/srv/keys"].',
        ),
        ("sandbox_hide_paths", '"~/.secrets"', "it must be a JSON list of absolute or ~ paths"),
        ("sandbox_hide_paths", "[1]", "it must be a JSON list of absolute or ~ paths"),
        ("sandbox_hide_paths", "not json", "sandbox_hide_paths cannot be 'not json'"),
        (
            "command_env_passthrough",
            '["GOPATH", "OPENAI_API_KEY"]',
            "OPENAI_API_KEY never reaches a command (it is a secret of the daemon).",
        ),
        ("command_env_passthrough", '["LMD_TOKEN"]', "LMD_TOKEN never reaches a command"),
        ("command_env_passthrough", '["BAD-NAME"]', "a JSON list of environment variable names"),
        ("sandbox_memory_mb", "0", "it must be a whole number from 16 to 1048576."),
        ("sandbox_max_processes", "2", "it must be a whole number from 4 to 100000."),
        ("sandbox_cpu_secs", "forever", "it must be a whole number from 1 to 86400."),
        ("sandbox_file_size_mb", "-1", "it must be a whole number from 1 to 1048576."),
    ],
)
def test_bad_values_are_refused_with_a_sentence(home, name, value, sentence):
    out = lmd(home, "settings", "set", name, value)
    assert out.exit_code != 0
    assert sentence in out.output
    assert lmd(home, "settings", "get", name).exit_code == 0  # the old value is still there


@pytest.mark.parametrize(
    ("said", "stored"),
    [("workspace", "workspace-write"), ("Read Only", "read-only"), ("none", "off")],
)
def test_spoken_forms_of_the_level(home, said, stored):
    assert lmd(home, "settings", "set", "sandbox_level", said).exit_code == 0
    assert lmd(home, "settings", "get", "sandbox_level").output.strip() == stored


@pytest.mark.parametrize("name", SANDBOX_SETTINGS)
def test_every_sandbox_setting_is_protected_over_http(make_client, name):
    client = make_client()
    value = {"sandbox_level": "off"}.get(name, "[]" if "paths" in name or "env" in name else "99")
    r = client.put(f"/settings/{name}", content=value)
    assert r.status_code == 403, (name, r.text)
    assert "protected" in r.json()["error"]
