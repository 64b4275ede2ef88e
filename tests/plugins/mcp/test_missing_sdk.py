"""Without the mcp package (an install that skipped the `mcp` extra), whatever needs it says
so in one sentence at once: not a start timeout, not a traceback. The package is hidden from
a real `lmd` process by a finder that refuses it, as an interpreter without it would."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from tests.daemons import ROOT, configure, free_port

# `lmd` with the mcp package refused, as if it were not installed
WITHOUT_MCP = """
import sys

class NoMcp:
    def find_spec(self, name, path=None, target=None):
        if name == "mcp" or name.startswith(("mcp.", "mcp_")):
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)

sys.meta_path.insert(0, NoMcp())
from daemon.cli import cli
cli(sys.argv[1:], prog_name="lmd")
"""


def lmd_without_mcp(*args: str, home) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("LMD_", "OPENAI_"))}
    env.update(LMD_TOKENIZER="estimate", LMD_URL=f"http://127.0.0.1:{free_port()}")
    return subprocess.run(
        [sys.executable, "-c", WITHOUT_MCP, *args, "--home", str(home)],
        capture_output=True, text=True, timeout=120, env=env, cwd=ROOT,
    )  # fmt: skip


def test_mcp_list_names_the_missing_package(tmp_path):
    home = tmp_path / "lmd-home"
    configure(home, mcp_start_timeout_secs=600)  # a wait for the timeout would fail the run
    (home / "mcp.json").write_text(
        json.dumps({"mcpServers": {"notes": {"command": sys.executable, "args": ["-V"]}}})
    )
    ran = lmd_without_mcp("mcp", "list", home=home)
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout.splitlines()[1:3] == [
        f"notes  stdio  {sys.executable} -V",
        "  state: failed: The MCP server notes needs the mcp package, which is not installed: "
        "run `make run` again (it installs it), or pip install 'lmd[mcp]'.",
    ]


def test_mcp_serve_names_the_missing_package(tmp_path):
    ran = lmd_without_mcp("mcp", "serve", home=tmp_path / "lmd-home")
    assert ran.returncode == 1
    assert ran.stderr.strip() == (
        "lmd mcp serve needs the mcp package, which is not installed: run `make run` again (it "
        "installs it), or pip install 'lmd[mcp]'."
    )
