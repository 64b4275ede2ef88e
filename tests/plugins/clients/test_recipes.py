"""The client recipes of docs/clients.md, run as written: the Vim snippet, the Python voice
client, the shell voice loop, the curl examples, and the editor configurations' shape."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.daemons import ROOT

LMD_DIR = str(Path(sys.executable).parent)
# Only dali and the clients plugin: the recipes must not depend on other modes' behaviour.
ONLY = {"LMD_LOAD_PLUGINS": "dali,clients"}
SHARED_DAEMON_ENV = ONLY  # the module's one live daemon (tests talk to it, each on its own)


@pytest.fixture
def backend(shared_backend):
    """One backend, reset for each test, behind the module's one live daemon."""
    return shared_backend


CLIENTS_PAGE = ROOT / "docs" / "clients.md"


def page_blocks(lang: str) -> list[str]:
    """The fenced code blocks of one language on the clients page."""
    return re.findall(rf"```{lang}\n(.*?)```", CLIENTS_PAGE.read_text(), re.S)


def recorder(folder: Path, name: str) -> Path:
    """A stand-in for a program the recipe calls (e.g. espeak-ng): it logs what it would say,
    from its arguments, or from stdin when it has none."""
    folder.mkdir(exist_ok=True)
    log = folder / f"{name}.log"
    script = folder / name
    script.write_text(
        f"#!{sys.executable}\nimport sys\n"
        "words = sys.argv[1:] or [sys.stdin.read()]\n"
        f"open({str(log)!r}, 'a').write(repr(words) + '\\n')\n"
    )
    script.chmod(0o755)
    return log


def env_for(url: str, tmp_path: Path, bin_dir: Path) -> dict:
    return {
        "PATH": f"{bin_dir}:{LMD_DIR}:/usr/bin:/bin",
        "HOME": str(tmp_path),
        "LMD_URL": url,
        "LMD_TOKENIZER": "estimate",
    }


def test_python_voice_client(shared_daemon, backend, tmp_path):
    (script,) = [b for b in page_blocks("python") if "espeak-ng" in b]
    assert len(script.strip().splitlines()) <= 23
    (tmp_path / "voice.py").write_text(script)
    d = shared_daemon
    backend.queue("## Forecast\n- **Sunny**, 22 degrees", "Second answer.")
    bins = tmp_path / "bin"
    log = recorder(bins, "espeak-ng")
    done = subprocess.run(
        [sys.executable, str(tmp_path / "voice.py")],
        input="what is the weather\n\nand tomorrow?\n",
        env=env_for(d.url, tmp_path, bins),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    spoken = [eval(line)[0] for line in log.read_text().splitlines()]  # noqa: S307
    assert spoken == ["Forecast\nSunny, 22 degrees\n", "Second answer.\n"]
    sent = [r["messages"][-1]["content"] for r in backend.chat_requests]
    assert sent == ["what is the weather", "and tomorrow?"]
    # The voice session holds both turns.
    assert len(backend.chat_requests[-1]["messages"]) == 3


def test_python_voice_client_speaks_errors(tmp_path):
    (script,) = [b for b in page_blocks("python") if "espeak-ng" in b]
    (tmp_path / "voice.py").write_text(script)
    bins = tmp_path / "bin"
    log = recorder(bins, "espeak-ng")
    subprocess.run(
        [sys.executable, str(tmp_path / "voice.py")],
        input="hello\n",
        env=env_for("http://127.0.0.1:9", tmp_path, bins),
        text=True,
        timeout=60,
    )
    assert "cannot reach lmd" in log.read_text()


def test_shell_voice_loop(shared_daemon, backend, tmp_path):
    text = CLIENTS_PAGE.read_text()
    loop = re.search(r"`(while read -r t; do .*?done)`", text).group(1)
    d = shared_daemon
    backend.queue("**Yes.**")
    bins = tmp_path / "bin"
    log = recorder(bins, "espeak-ng")
    done = subprocess.run(
        ["bash", "-c", loop],
        input="is it on\n",
        env=env_for(d.url, tmp_path, bins),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert log.read_text() == repr(["Yes.\n"]) + "\n"  # espeak-ng read it from stdin
    assert backend.chat_requests[-1]["messages"][-1]["content"] == "is it on"


@pytest.mark.skipif(not shutil.which("vim"), reason="vim is not installed")
def test_vim_snippet_sends_the_selection(shared_daemon, backend, tmp_path):
    (snippet,) = page_blocks("vim")
    (tmp_path / "lmd.vim").write_text(snippet)
    source = tmp_path / "code.py"
    source.write_text("import os\ndef f(x):\n    return x * 2\nprint(f(2))\n")
    d = shared_daemon
    backend.queue("f doubles its argument.")
    out = tmp_path / "reply.txt"
    done = subprocess.run(
        ["vim", "-Nu", "NONE", "-i", "NONE", "-n", "-es",
         "-c", f"source {tmp_path / 'lmd.vim'}",
         "-c", "2,3LmdCobol",
         "-c", f"write! {out}",
         "-c", "qa!", str(source)],
        env=env_for(d.url, tmp_path, tmp_path),
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
    )  # fmt: skip
    assert out.read_text() == "f doubles its argument.\n", done.stdout + done.stderr
    # Without the cobol plugin loaded, dali hears the whole text, directive word included.
    assert backend.chat_requests[-1]["messages"][-1]["content"] == (
        "cobol def f(x):\n    return x * 2"
    )


def test_vim_one_liner_pipeline(shared_daemon, backend, tmp_path):
    text = CLIENTS_PAGE.read_text()
    pipeline = re.search(r"`:'<,'>w !(.*?)`", text).group(1)
    d = shared_daemon
    backend.queue("noted")
    done = subprocess.run(
        ["bash", "-c", pipeline],
        input="x = 1\ny = 2\n",
        env=env_for(d.url, tmp_path, tmp_path),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.stdout == "noted\n", done.stderr
    assert backend.chat_requests[-1]["messages"][-1]["content"].rstrip() == "cobol x = 1\ny = 2"


def test_editor_configs_point_at_the_endpoint(client):
    models = {m["id"] for m in client.get("/v1/models").json()["data"]}
    (continue_yaml,) = page_blocks("yaml")
    for model in yaml.safe_load(continue_yaml)["models"]:
        assert model["provider"] == "openai"
        assert model["apiBase"] == "http://127.0.0.1:8420/v1"
        assert model["model"] == "lmd" or model["model"].startswith("lmd-")
    (zed,) = [b for b in page_blocks("json") if "language_models" in b]
    provider = json.loads(zed)["language_models"]["openai_compatible"]["lmd"]
    assert provider["api_url"] == "http://127.0.0.1:8420/v1"
    for model in provider["available_models"]:
        assert model["capabilities"]["tools"] is False  # lmd refuses tools
        assert model["name"] in models or model["name"] == "lmd-cobol"


def test_curl_examples_run(shared_daemon, backend, tmp_path):
    if not shutil.which("curl"):
        pytest.skip("curl is not installed")
    d = shared_daemon
    (block,) = [b for b in page_blocks("sh") if "/v1/chat/completions" in b]
    script = block.replace("http://127.0.0.1:8420", d.url)
    backend.handler = lambda body: "an answer"
    done = subprocess.run(
        ["bash", "-e", "-c", script], capture_output=True, text=True, timeout=60, env=os.environ
    )
    assert done.returncode == 0, done.stderr
    assert '"lmd-dali"' in done.stdout and '"chat.completion"' in done.stdout
    assert "data: [DONE]" in done.stdout
    sent = [r["messages"][-1]["content"] for r in backend.chat_requests]
    assert sent == ["Explain git rebase in one line.", "a haiku about tests"]
