"""The third-party plugin of docs/plugins.md (tests/sample_plugin), pip-installed and driven
for real: its mode answers through a live daemon and the fake backend, its setting is listed
and set, its route answers over HTTP, its command runs from the `lmd` command."""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys

import pytest

from daemon.client import ClientError, request, say
from tests.daemons import ROOT, SAMPLE_PLUGIN, install_sample, plugin_env


def test_the_sample_plugin_uses_only_the_public_api():
    tree = ast.parse((SAMPLE_PLUGIN / "lmd_echo.py").read_text())
    daemon_imports = {
        node.module
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("daemon")
    }
    assert daemon_imports == {"daemon.api"}


@pytest.fixture
def installed(tmp_path):
    """The sample plugin pip-installed into a directory of its own, and the env to see it."""
    site = tmp_path / "site"
    install_sample(site)
    entry_points = (site / "lmd_echo-0.1.0.dist-info" / "entry_points.txt").read_text()
    assert "[lmd]" in entry_points and "echo = lmd_echo" in entry_points  # pip wrote them
    return plugin_env(site)


def lmd(env: dict, *args: str) -> subprocess.CompletedProcess:
    """`lmd ARGS` in a fresh process: it finds the plugin by its entry point, as a user's would."""
    return subprocess.run(
        [sys.executable, "-m", "daemon.cli", *args],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env={**os.environ, **env},
    )


def test_installed_plugin_mode_setting_route_and_command(installed, live, backend, home):
    home_args = ["--home", str(home)]
    where = lmd(installed, "plugins", "--json")
    echo = next(p for p in json.loads(where.stdout)["plugins"] if p["name"] == "echo")
    assert echo["modes"] == ["echo"] and "register_commands" in echo["hooks"]

    # The setting: listed with its default, set from the CLI, a bad value refused in words.
    assert "echo_prefix" in lmd(installed, "settings", "list", *home_args).stdout
    assert lmd(installed, "settings", "set", "echo_prefix", "parrot", *home_args).returncode == 0
    bad = lmd(installed, "settings", "set", "echo_prefix", "x" * 30, *home_args)
    assert bad.returncode == 1
    assert bad.stderr.strip() == (
        f"echo_prefix cannot be '{'x' * 30}': it must be a word or two (1 to 20 characters)."
    )

    # The command, before the mode has said anything: one sentence, exit 1.
    none_yet = lmd(installed, "echoes", *home_args)
    assert none_yet.returncode == 1
    assert none_yet.stderr.strip() == (
        "The echo mode has said nothing yet; try `lmd say echo hello`."
    )

    # The mode, through a live daemon: what the backend received, and what came back.
    d = live(env=installed)
    backend.queue("You said hello there.")
    assert say("echo hello there", url=d.url) == "parrot: You said hello there.\n"
    sent = backend.chat_requests[-1]
    assert sent["model"] == "fake-model" and sent["temperature"] == 0
    assert sent["messages"] == [
        {
            "role": "system",
            "content": "Say the user's words back to them, in your own words, in one sentence.",
        },
        {"role": "user", "content": "hello there"},
    ]
    backend.queue("Hi to you.")
    reply = say("Eko, hi", url=d.url, as_json=True)  # the alias the mode declares
    assert reply["mode"] == "echo" and reply["reply"] == "parrot: Hi to you."
    assert say("echo", url=d.url, session="s2") == "Switched to echo mode.\n"  # the core's
    with pytest.raises(ClientError) as e:
        say("?!", url=d.url, session="s2")  # in echo mode now, and no words
    assert e.value.message == "Say some words for echo to say back; I heard none."
    assert len(backend.chat_requests) == 2  # neither reached the model

    # The route, and its OpenAPI entry.
    status, _, body = request("GET", "/echo", url=d.url)
    data = json.loads(body)
    assert status == 200 and data["prefix"] == "parrot" and {"echo", "dali"} <= set(data["modes"])
    spec = json.loads(request("GET", "/openapi.json", url=d.url)[2])
    operation = spec["paths"]["/echo"]["get"]
    assert operation["summary"].startswith("The echo prefix in use")
    assert operation["x-lmd-plugin"] == "echo"  # the route's plugin, as collect recorded it

    # The setting over HTTP, as a mode reads it on the next turn.
    status, _, body = request("PUT", "/settings/echo_prefix", "bird", url=d.url)
    assert status == 200 and json.loads(body)["value"] == "bird"
    with pytest.raises(ClientError) as e:
        request("PUT", "/settings/echo_prefix", " ", url=d.url)
    assert "echo_prefix cannot be" in e.value.message and "1 to 20 characters" in e.value.message
    backend.queue("Tweet.")
    assert say("echo tweet", url=d.url) == "bird: Tweet.\n"

    # The command, after: what the mode said, from the database.
    out = lmd(installed, "echoes", *home_args)
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines() == [
        "parrot: You said hello there.",
        "parrot: Hi to you.",
        "bird: Tweet.",
    ]
    as_json = json.loads(lmd(installed, "echoes", "--json", *home_args).stdout)
    assert as_json == {"prefix": "bird", "said": out.stdout.splitlines()}
    assert "echoes" in lmd(installed, "--help").stdout


def test_without_the_plugin_none_of_it_exists(home):
    """The same commands without the install: the plugin, not lmd, brought them."""
    out = lmd({}, "echoes", "--home", str(home))
    assert out.returncode == 2 and "No such command 'echoes'" in out.stderr
    assert "echo_prefix" not in lmd({}, "settings", "list", "--home", str(home)).stdout
