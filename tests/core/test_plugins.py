"""Plugins: a third-party mode, route and setting work end to end, in-process and installed."""

import json
import subprocess
import sys

from tests.daemons import ROOT, echo_plugin_manager, install_sample


def test_in_process_mode_route_and_setting(make_client, backend):
    client = make_client(pm=echo_plugin_manager())
    data = client.get("/echo").json()
    assert data["prefix"] == "echo" and {"dali", "echo"} <= set(data["modes"])
    assert client.put("/settings/echo_prefix", content="parrot").status_code == 200
    r = client.post("/v1", content="Eko, hello there", headers={"Accept": "application/json"})
    assert r.json()["mode"] == "echo" and r.json()["reply"] == "parrot: ok"
    assert backend.chat_requests[-1]["messages"][-1] == {"role": "user", "content": "hello there"}


def test_installed_plugin_over_http_in_a_live_daemon(tmp_path, live, backend):
    site = tmp_path / "site"
    install_sample(site)
    d = live(env={"PYTHONPATH": str(site)})
    from daemon.client import request, say

    backend.queue("hi from far away")
    assert say("echo hi from far away", url=d.url) == "echo: hi from far away\n"
    status, _, body = request("GET", "/echo", url=d.url)
    assert status == 200 and "echo" in json.loads(body)["modes"]
    status, _, body = request("PUT", "/settings/echo_prefix", "bird", url=d.url)
    assert json.loads(body)["value"] == "bird"
    backend.queue("tweet")
    assert say("echo tweet", url=d.url) == "bird: tweet\n"


def run_lmd(*args, env=None):
    import os

    return subprocess.run(
        [sys.executable, "-m", "daemon.cli", *args],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env={**os.environ, **(env or {})},
    )


def test_lmd_plugins_lists_plugins_hooks_modes_directives(tmp_path):
    site = tmp_path / "site"
    install_sample(site)
    r = run_lmd("plugins", "--json", env={"PYTHONPATH": str(site)})
    info = json.loads(r.stdout)
    names = {p["name"]: p for p in info["plugins"]}
    assert "dali" in names and "echo" in names
    assert names["echo"]["modes"] == ["echo"]
    hooks = {"register_modes", "register_settings", "register_routes", "register_commands"}
    assert set(names["echo"]["hooks"]) == hooks
    assert info["directives"]["echo"] == ["echo", "eko"]
    assert info["tokenizer"].startswith(("tiktoken", "estimate"))
    text = run_lmd("plugins", env={"PYTHONPATH": str(site)}).stdout
    assert "echo: register_commands, register_modes" in text and "tokenizer:" in text


def test_lmd_load_plugins_restricts_loading(tmp_path):
    site = tmp_path / "site"
    install_sample(site)
    r = run_lmd("plugins", "--json", env={"PYTHONPATH": str(site), "LMD_LOAD_PLUGINS": "echo"})
    assert [p["name"] for p in json.loads(r.stdout)["plugins"]] == ["echo"]


def test_builtin_plugins_are_ordinary_entry_points():
    from importlib.metadata import entry_points

    names = {ep.name: ep.value for ep in entry_points(group="lmd")}
    assert names["dali"] == "plugins.dali"


def test_hookspecs_are_empty_functions_with_one_line_docstrings():
    import inspect

    from daemon import hookspecs

    specs = [f for n, f in vars(hookspecs).items() if inspect.isfunction(f)]
    assert {f.__name__ for f in specs} >= {
        "register_modes",
        "register_settings",
        "register_routes",
        "register_commands",
        "startup",
    }
    for f in specs:
        assert f.__doc__ and "\n" not in f.__doc__.strip()
