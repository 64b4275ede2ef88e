"""marat's approval on top of the sandbox: what runs at once (sandboxed), what asks, the
escalation after the sandbox stopped a command, the fallback without a sandbox, the audit."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

import plugins.marat.safety as safety
from daemon.execution import sandbox
from daemon.execution.runner import REDACTED
from plugins.marat.policy import plan_command

from .conftest import action, final, say

SENTINEL = "sk-sentinel-approval-0123456789abcdef"


@pytest.fixture
def marat(make_client, projects):
    return make_client(marat_start_dir=str(projects["other"]))


@pytest.fixture
def no_sandbox(monkeypatch):
    monkeypatch.setenv("LMD_BWRAP", "/nonexistent/bwrap")
    yield sandbox.detect(refresh=True)
    monkeypatch.delenv("LMD_BWRAP")
    sandbox.detect(refresh=True)


@pytest.fixture
def trusting(monkeypatch):
    """The classifier calls everything read-only (marat looks it up at call time)."""
    monkeypatch.setattr(safety, "is_read_only", lambda command: True)


# -- the policy ----------------------------------------------------------------------------------
@pytest.mark.bwrap
@pytest.mark.parametrize(
    ("approval", "level", "command", "escalate", "expected"),
    [
        ("never", "read-only", "rm -rf x", False, (False, "none", "never")),
        ("never", "off", "ls", False, (False, "none", "never")),
        ("always", "read-only", "ls", False, (True, "none", "read-only")),
        ("unsafe", "read-only", "ls", False, (False, "read-only", "read-only")),
        ("unsafe", "workspace-write", "ls", False, (False, "read-only", "read-only")),
        ("unsafe", "read-only", "touch x", False, (True, "none", "read-only")),
        ("unsafe", "read-only", "ls", True, (True, "none", "read-only")),
        ("unsafe", "off", "ls", False, (False, "none", "read-only")),
        ("unsafe", "off", "touch x", False, (True, "none", "read-only")),
    ],
)
def test_plan_command_by_approval_and_sandbox_level(approval, level, command, escalate, expected):
    d = plan_command(approval, level, command, escalate)
    assert (d.ask, d.level, d.approval) == expected
    if escalate:
        assert d.why == "The sandbox stopped the last command; this one would run outside it."


def test_plan_without_a_sandbox_asks_and_says_why(no_sandbox):
    d = plan_command("unsafe", "read-only", "ls")
    assert d.ask and "there is none here: LMD_BWRAP names /nonexistent/bwrap" in d.why
    assert "apt install bubblewrap" in d.why
    assert plan_command("unsafe", "off", "ls").ask is False  # the user's explicit choice
    assert plan_command("never", "read-only", "ls").ask is False


# -- end to end, in process -----------------------------------------------------------------------
@pytest.mark.bwrap
def test_read_only_commands_run_in_the_sandbox_and_the_audit_says_so(marat, backend, projects):
    backend.queue(action("ls && touch sneaky.txt"))
    # the classifier is honest: `touch` asks. A read-only command runs sandboxed:
    body = say(marat, "marat list").json()
    assert body["pending"] is not None
    backend.queue(action("ls -a"), final("Listed."))
    body = say(marat, "marat list the files").json()
    assert body["commands"][0]["sandbox"] == "read-only"
    assert body["commands"][0]["sandbox_blocked"] is False
    row = marat.get("/marat/commands").json()["commands"][-1]
    assert (row["approval"], row["sandbox"], row["sandbox_blocked"]) == (
        "read-only",
        "read-only",
        False,
    )


@pytest.mark.bwrap
def test_a_command_the_sandbox_stopped_makes_the_next_one_ask(
    marat, backend, projects, trusting, monkeypatch
):
    target = projects["other"] / "made.txt"
    backend.queue(action("touch made.txt"), action("touch made.txt"))
    body = say(marat, "marat make a file").json()
    assert not target.exists()
    assert body["reply"] == (
        "I am about to run: touch made.txt. Say yes to run it, or no. The sandbox stopped the "
        "last command; this one would run outside it."
    )
    told = backend.chat_requests[1]["messages"][-1]["content"]
    assert "Read-only file system" in told
    assert "The sandbox stopped this command: the file system is read-only there." in told
    assert "propose it again: I will ask the user to run it outside the sandbox" in told
    rows = marat.get("/marat/commands").json()["commands"]
    assert [(r["sandbox"], r["sandbox_blocked"]) for r in rows] == [("read-only", True)]
    # yes: it runs outside the sandbox, with the clean environment
    monkeypatch.setenv("OPENAI_API_KEY", SENTINEL)
    backend.queue(final("Made it."))
    body = say(marat, "yes").json()
    assert body["reply"].startswith("Made it.") and target.exists()
    row = marat.get("/marat/commands").json()["commands"][-1]
    assert (row["approval"], row["answer"], row["sandbox"]) == ("user", "yes", "none")


@pytest.mark.bwrap
def test_approved_commands_get_the_clean_environment_and_redaction(
    make_client, backend, projects, monkeypatch
):
    monkeypatch.setenv("OPENAI_API_KEY", SENTINEL)
    monkeypatch.setenv("SOME_SECRET_OF_MINE", "private-value")
    monkeypatch.setenv("GOPATH", "/opt/go")
    c = make_client(
        marat_start_dir=str(projects["other"]),
        marat_approval="always",
        command_env_passthrough='["GOPATH"]',
    )
    half = len(SENTINEL) // 2  # the output holds the key; the command does not
    command = f"printenv; printf '%s%s\\n' {SENTINEL[:half]} {SENTINEL[half:]}"
    backend.queue(action(command))
    assert say(c, "marat show the environment").json()["pending"]["command"] == command
    backend.queue(final("That is the environment."))
    body = say(c, "yes").json()
    out = body["reply"]
    assert "GOPATH=/opt/go" in out and "HOME=" in out and "PAGER=cat" in out
    assert SENTINEL not in out and "private-value" not in out and "OPENAI_API_KEY" not in out
    assert REDACTED in out
    stored = c.get("/marat/commands").json()["commands"][-1]["output"]
    assert SENTINEL not in stored and REDACTED in stored
    assert all(SENTINEL not in json.dumps(r) for r in backend.chat_requests)


def test_without_a_sandbox_even_read_only_commands_ask(marat, backend, projects, no_sandbox):
    backend.queue(action("ls"))
    body = say(marat, "marat list").json()
    assert body["reply"].startswith("I am about to run: ls. Say yes to run it, or no. I would run")
    assert "there is none here" in body["reply"] and "bubblewrap" in body["reply"]
    assert marat.get("/marat/commands").json()["commands"] == []
    # "marat yes" right after the longer question still answers it
    backend.queue(final("Here."))
    body = say(marat, "marat yes").json()
    assert body["reply"].startswith("Here.") and "notes.txt" in body["reply"]
    row = marat.get("/marat/commands").json()["commands"][-1]
    assert (row["approval"], row["sandbox"]) == ("user", "none")


def test_sandbox_level_off_runs_read_only_commands_unsandboxed(make_client, backend, projects):
    c = make_client(marat_start_dir=str(projects["other"]), sandbox_level="off")
    backend.queue(action("ls"), final("Here."))
    body = say(c, "marat list").json()
    assert body["commands"][0]["sandbox"] == "none"
    backend.queue(action("touch x"))
    assert say(c, "marat touch x").json()["pending"] is not None  # writes still ask


def test_never_runs_everything_unsandboxed(make_client, backend, projects):
    c = make_client(marat_start_dir=str(projects["other"]), marat_approval="never")
    backend.queue(action("touch written.txt"), final("Done."))
    body = say(c, "marat touch it").json()
    assert body["commands"][0]["sandbox"] == "none"
    assert (projects["other"] / "written.txt").exists()
    row = c.get("/marat/commands").json()["commands"][-1]
    assert (row["approval"], row["sandbox"], row["sandbox_blocked"]) == ("never", "none", False)


@pytest.mark.bwrap
def test_cd_persists_through_the_sandbox(marat, backend, projects):
    backend.queue(action("cd .. && cd example"), final("Moved."))
    body = say(marat, "marat go to the example project").json()
    assert body["commands"][0]["sandbox"] == "read-only"
    assert body["cwd"] == str(projects["repo"])
    backend.queue(action("pwd"), final("Here."))
    assert str(projects["repo"]) in say(marat, "marat where am I").json()["reply"]


@pytest.mark.bwrap
def test_history_commands_show_how_each_ran(marat, backend, projects, home):
    from daemon.cli import cli

    backend.queue(action("ls"), final("Here."))
    say(marat, "marat list")
    out = CliRunner().invoke(cli, ["history", "--commands", "--home", str(home)])
    assert out.exit_code == 0 and "sandbox read-only" in out.output
    rows = json.loads(
        CliRunner().invoke(cli, ["history", "--commands", "--json", "--home", str(home)]).output
    )
    assert rows[-1]["sandbox"] == "read-only" and rows[-1]["sandbox_blocked"] is False


def test_the_migration_keeps_old_rows_as_unsandboxed(tmp_path):
    from daemon.core.store import Store
    from plugins.marat.tables import m001_marat_commands, m002_marat_sandbox

    store = Store(tmp_path / "old.db")
    store.migrate([("m001_marat_commands", m001_marat_commands)])
    store.db.execute(
        "INSERT INTO marat_commands (session, cwd, command, duration, output, approval,"
        " created_at) VALUES ('s', '/', 'ls', 0.1, 'x', 'read-only', 0)"
    )
    applied = store.migrate(
        [("m001_marat_commands", m001_marat_commands), ("m002_marat_sandbox", m002_marat_sandbox)]
    )
    assert applied == ["m002_marat_sandbox"]
    row = store.db.execute_returning_dicts("SELECT * FROM marat_commands")[0]
    assert (row["sandbox"], row["sandbox_blocked"]) == ("none", 0)
    assert store.migrate([("m002_marat_sandbox", m002_marat_sandbox)]) == []  # applied once
    store.close()
