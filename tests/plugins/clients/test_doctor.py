"""`lmd doctor`: a healthy setup exits 0; each broken part exits 1 with a sentence saying so."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from daemon.core.store import Store
from tests.daemons import Ran, closed_port, configure, lmd_in_process
from tests.fake_backend import Reply

LMD = str(Path(sys.executable).parent / "lmd")


def doctor(home: Path, *args: str, **env: str) -> Ran | subprocess.CompletedProcess:
    """`lmd doctor` in-process; as a process where PYTHONPATH brings in distributions that must
    be seen installed from the interpreter's start."""
    if "PYTHONPATH" not in env:
        env = {"LMD_URL": f"http://127.0.0.1:{closed_port()}", **env}
        return lmd_in_process("doctor", "--home", str(home), *args, env=env)
    environ = {k: v for k, v in os.environ.items() if not k.startswith(("LMD_", "OPENAI_"))}
    environ.update({"LMD_TOKENIZER": "estimate", "LMD_URL": f"http://127.0.0.1:{closed_port()}"})
    environ.update(env)
    return subprocess.run(
        [LMD, "doctor", "--home", str(home), *args],
        capture_output=True,
        text=True,
        timeout=60,
        env=environ,
    )


def findings(done: Ran | subprocess.CompletedProcess) -> dict[str, dict]:
    return {f["check"]: f for f in json.loads(done.stdout)}


def with_logprobs(body: dict) -> Reply:
    return Reply("yes", logprobs=[("yes", -0.01, [("yes", -0.01), ("no", -4.6)])])


def test_healthy(home, backend, live):
    backend.handler = with_logprobs
    d = live()
    done = doctor(home, "--json", LMD_URL=d.url)
    assert done.returncode == 0, done.stdout + done.stderr
    found = findings(done)
    assert {f["status"] for f in found.values()} <= {"ok", "warn"}
    assert (
        found["database"]["status"] == "ok" and str(home / "lmd.db") in found["database"]["message"]
    )
    assert found["settings"]["status"] == "ok"
    assert found["backend"]["status"] == "ok" and "fake-model" in found["backend"]["message"]
    assert found["logprobs"]["status"] == "ok"
    assert found["tokenizer"]["status"] == "warn" and "estimated" in found["tokenizer"]["message"]
    assert found["bind"]["status"] == "ok"
    assert found["daemon"]["status"] == "ok" and "dali" in found["daemon"]["message"]
    assert "clients" in found["plugins"]["message"] and "dali" in found["plugins"]["message"]
    assert found["commands"] == {
        "check": "commands",
        "status": "ok",
        "message": f"lmd score, sql, selectit and elo ask {backend.url}, model fake-model "
        "(openai_chat_endpoint is set).",
    }
    # What the backend was asked: its model list, and one tiny call that wants logprobs.
    assert any(r.method == "GET" and r.path.endswith("/models") for r in backend.requests)
    probe = backend.chat_requests[-1]
    assert probe["max_tokens"] == 1 and probe["logprobs"] is True
    assert probe["model"] == "fake-model"


def test_healthy_text_report(home, backend):
    backend.handler = with_logprobs
    done = doctor(home)
    assert done.returncode == 0
    assert "[ok  ] backend:" in done.stdout and "[warn] daemon: No daemon answers" in done.stdout


def test_commands_on_the_embedded_model_or_none_at_all(tmp_path, monkeypatch):
    """With nothing configured the commands ask the embedded model (run for each, with no
    daemon); with no engine either, one sentence says what to install or configure."""
    from daemon.backends.for_commands import NOT_INSTALLED
    from tests.daemons import configure

    home = tmp_path / "lmd-home"
    configure(home)
    found = findings(doctor(home, "--json"))
    assert found["commands"]["message"] == (
        "lmd score, sql, selectit and elo ask the embedded model smollm2-135m-instruct, run "
        "for the command as needed (no backend is configured; `lmd serve` keeps it running "
        "between commands)."
    )
    import daemon.backends.embedded as embedded

    monkeypatch.setattr(embedded, "engine_missing", lambda: "llama-cpp-python is missing")
    found = findings(doctor(home, "--json"))
    assert (found["commands"]["status"], found["commands"]["message"]) == ("fail", NOT_INSTALLED)


def test_backend_without_logprobs_is_a_warning(home, backend):
    done = doctor(home, "--json")
    assert done.returncode == 0
    assert findings(done)["logprobs"]["status"] == "warn"
    assert "LM_SCORE" in findings(done)["logprobs"]["message"]


def test_unreachable_backend(home):
    configure(home, openai_chat_endpoint=f"http://127.0.0.1:{closed_port()}/v1")
    done = doctor(home)
    assert done.returncode == 1
    assert "[FAIL] backend: I could not reach the language model" in done.stdout
    assert "1 problem(s) found." in done.stderr


def test_unknown_model_is_a_warning(home, backend):
    configure(home, openai_model="not-served")
    found = findings(doctor(home, "--json"))
    assert found["backend"]["status"] == "warn" and "not-served" in found["backend"]["message"]


def test_invalid_stored_setting(home, backend):
    store = Store(home / "lmd.db")
    store.set_setting("llm_max_retries", "lots")  # written raw, as a hand edit would
    store.close()
    done = doctor(home, "--json")
    assert done.returncode == 1
    found = findings(done)
    assert (
        found["settings"]["status"] == "fail" and "llm_max_retries" in found["settings"]["message"]
    )
    assert backend.requests == []  # the backend is not checked with broken settings


def test_invalid_environment_setting(home, backend):
    done = doctor(home, "--offline", LMD_MAX_TOKENS="many")
    assert done.returncode == 1 and "LMD_MAX_TOKENS" in done.stdout


def test_damaged_database(tmp_path):
    home = tmp_path / "h"
    home.mkdir()
    (home / "lmd.db").write_bytes(b"this is not sqlite" * 100)
    done = doctor(home, "--offline")
    assert done.returncode == 1
    assert "[FAIL] database:" in done.stdout and "move it aside" in done.stdout


def test_missing_database_is_only_a_warning(tmp_path):
    done = doctor(tmp_path / "new", "--offline", "--json")
    assert done.returncode == 0
    assert findings(done)["database"]["status"] == "warn"
    assert not (tmp_path / "new" / "lmd.db").exists()  # the doctor does not create it


def test_open_bind_without_token(home):
    done = doctor(home, "--offline", LMD_BIND="0.0.0.0:8420")
    assert done.returncode == 1 and "neither LMD_TOKEN nor LMD_TOKEN_FILE is set" in done.stdout
    done = doctor(home, "--offline", "--json", LMD_BIND="0.0.0.0:8420", LMD_TOKEN="short")
    assert done.returncode == 0 and findings(done)["bind"]["status"] == "warn"
    done = doctor(home, "--offline", LMD_BIND="nonsense:port")
    assert done.returncode == 1 and "no valid port" in done.stdout


def test_broken_plugin(home, tmp_path):
    """A plugin whose module fails to import is named, with its error."""
    site = tmp_path / "site"
    dist = site / "brokenplug-1.0.dist-info"
    dist.mkdir(parents=True)
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: brokenplug\nVersion: 1.0\n")
    (dist / "entry_points.txt").write_text("[lmd]\nbroken = brokenplug_mod\n")
    (site / "brokenplug_mod.py").write_text("raise RuntimeError('half installed')\n")
    done = doctor(home, "--offline", PYTHONPATH=str(site))
    assert done.returncode == 1
    assert "broken (RuntimeError: half installed)" in done.stdout


def fake_distribution(site: Path, name: str, top_level: str | None, record: str = "") -> None:
    """A distribution's metadata only (no code), as pip leaves it in site-packages."""
    dist = site / f"{name.replace('-', '_')}-1.0.dist-info"
    dist.mkdir(parents=True)
    (dist / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 1.0\n")
    if top_level is not None:
        (dist / "top_level.txt").write_text(top_level)
    (dist / "RECORD").write_text(record)


def test_another_distribution_with_lmds_import_names_is_a_warning(home, tmp_path):
    """python-daemon installs `daemon` too; a plugin pack might install `plugins`."""
    site = tmp_path / "site"
    fake_distribution(site, "python-daemon", "daemon\n")
    fake_distribution(site, "my-plugins", None, "plugins/__init__.py,,\nplugins/x.py,,\n")
    path = os.pathsep.join(p for p in (str(site), os.environ.get("PYTHONPATH")) if p)
    done = doctor(home, "--offline", "--json", PYTHONPATH=path)
    assert done.returncode == 0, done.stdout + done.stderr  # a warning, not a failure
    found = findings(done)["packages"]
    assert found["status"] == "warn"
    assert "python-daemon installs `daemon`" in found["message"]
    assert "my-plugins installs `plugins`" in found["message"]
    assert "pipx install ." in found["message"] and "uv tool install ." in found["message"]
    # lmd itself still runs from its own files: the fake only claims the names.
    assert findings(done)["plugins"]["status"] == "ok"


def test_package_names_in_process(tmp_path, monkeypatch):
    from plugins.clients.doctor import check_package_names

    only_lmd = {"daemon": ["lmd"], "plugins": ["lmd"], "yaml": ["PyYAML"]}
    assert check_package_names(only_lmd).status == "ok"
    fake_distribution(tmp_path, "python-daemon", "daemon\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    found = check_package_names()  # importlib.metadata reads the fake from sys.path
    assert found.status == "warn" and "python-daemon installs `daemon`" in found.message
    assert "lmd installs" not in found.message  # lmd's own claim is no clash


def test_import_name_providers_are_the_standard_librarys():
    """What doctor reads for the names it checks is what importlib.metadata's
    packages_distributions() says, for lmd's names and for others of every kind installed
    here (a top_level.txt, none, a single-module distribution)."""
    from importlib.metadata import packages_distributions

    from plugins.clients.doctor import import_name_providers

    names = frozenset(
        {"daemon", "plugins", "yaml", "numpy", "click", "typing_extensions", "nothing_here"}
    )
    want = packages_distributions()
    got = import_name_providers(names)
    assert got == {name: want.get(name, []) for name in names}
    # found, not merely empty alike
    assert got["daemon"] and got["numpy"] and got["typing_extensions"]
