"""`lmd doctor` says whether commands can be sandboxed (the start-up line of `lmd serve` is
checked by tests/plugins/marat/test_sandbox_corpus.py on its live daemons)."""

from __future__ import annotations

import pytest

from daemon.execution import sandbox
from plugins.clients.doctor import WARN, check_sandbox


class Levels(dict):
    """The one setting check_sandbox reads."""


@pytest.mark.bwrap
def test_sandbox_found():
    found = check_sandbox(Levels(sandbox_level="read-only"))
    assert found.message.startswith("sandbox_level read-only: Commands that run without asking")
    assert "bubblewrap sandbox" in found.message
    assert found.status == ("ok" if not sandbox.detect().warnings else WARN)


def test_no_sandbox_warns_with_the_reason_and_the_remedy(monkeypatch):
    monkeypatch.setenv("LMD_BWRAP", "/nonexistent/bwrap")
    sandbox.detect(refresh=True)
    found = check_sandbox(Levels(sandbox_level="read-only"))
    assert found.status == WARN
    assert found.message == (
        "no sandbox: LMD_BWRAP names /nonexistent/bwrap, which does not exist. To get one, "
        "install the bubblewrap package (apt install bubblewrap, or dnf install bubblewrap). "
        "Until then, every command that would run sandboxed waits for a spoken yes."
    )


def test_level_off_warns():
    found = check_sandbox(Levels(sandbox_level="off"))
    assert found.status == WARN and "commands that look read-only run unsandboxed" in found.message
