"""What `make run` installs is what the docs say it installs (make's own dry run, read)."""

from __future__ import annotations

import re
import subprocess

from tests.daemons import ROOT


def test_make_run_installs_the_mcp_extra_as_docs_mcp_says(tmp_path):
    promised = (ROOT / "docs" / "mcp.md").read_text()
    assert "`make run` and `make test` install it" in promised
    # what `make run` (and make test) install first on a fresh clone (its prerequisite
    # .venv/.installed, the `install` target), planned and not run
    planned = subprocess.run(
        ["make", "-n", "-B", f"VENV={tmp_path / 'venv'}", "install"],
        cwd=ROOT, capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    installs = [line for line in planned.splitlines() if " install " in line and " -e " in line]
    assert installs and all(re.search(r"-e '\.\[[^]]*\bmcp\b", line) for line in installs)
