"""marat with the rest of lmd: approval rules, MCP tools, the audit, spoken answers, other
clients in the same session, and root's own set-up."""

from __future__ import annotations

import json
import sys

import pytest

from tests.daemons import ROOT, as_user_argv

from .conftest import journey, marat_step, messages_text, one, steered

pytestmark = pytest.mark.slow  # the journeys tier: real daemons on the embedded model

MKDIR_BUILD = ("directory called build", marat_step("bash", "mkdir build"))
MKDIR_DIST = ("directory called dist", marat_step("bash", "mkdir dist"))
DONE = ("Observation", marat_step("final", "Done."))


def audit(person, session: str) -> list[dict]:
    ran = person.lmd("history", "commands", "--json", "-s", session)
    assert ran.returncode == 0, ran
    return json.loads(ran.stdout)


@journey()
def test_a_rule_made_by_voice_then_the_next_command(person):
    """ "yes, always here" to a mkdir in a project of theirs (root-owned for root): the rule is
    said back and listed, and the next mkdir there runs without a question under that rule,
    in the sandbox; or lmd says, when the rule is made, why it cannot keep it."""
    proj = person.mkdir("rules-voice")
    s = person.session("rule")
    person.steer(MKDIR_BUILD, MKDIR_DIST, DONE)
    calls = person.calls()
    said = person.say("marat make a directory called build", s, cwd=proj)
    assert said["reply"].startswith("I am about to run: mkdir build."), said
    said = person.say("yes, always here", s, cwd=proj)
    assert (proj / "build").is_dir() and said["pending"] is None, said
    promised = f"From now on I run mkdir without asking in {proj}" in said["reply"]
    _, listed = person.http("GET", "/rules")
    mine = [r for r in listed["rules"] if r["origin"] != "built-in"]
    said = person.say("marat make a directory called dist", s, cwd=proj)
    assert len(steered(calls.chats())) >= 3
    if promised:  # a promise is kept
        rule = one(mine, "rule")
        assert rule["pattern"] == "mkdir" and rule["decision"] == "allow", rule
        assert said["pending"] is None, said["reply"]
        ran = one(said["commands"], "command")
        assert ran["rule"] == rule["id"] and ran["exit_code"] == 0, ran
        assert (proj / "dist").is_dir()
        rows = audit(person, s)
        assert [(r["command"], r["approval"], r["rule_id"]) for r in rows] == [
            ("mkdir build", "user", None), ("mkdir dist", "rule", rule["id"])]  # fmt: skip
    else:  # said at once that it cannot: no rule, and the next one asks
        assert mine == [] and said["reply"].startswith("I am about to run: mkdir dist.")


@journey()
def test_a_git_commit_rule_then_git_clean(person):
    """ "yes, always here" to `git -C . commit` runs it once and makes no rule (an option that
    moves a command to another directory is covered by none, docs/rules.md), never one for
    all of git: the model's next `git -C . clean -fdx` is asked about, and the user's
    untracked file survives a no."""
    repo = person.git_repo("git-rule", {"a.txt": "a\n"})
    person.write(repo / "notes.txt", "precious, and not in git\n")
    s = person.session("git-rule")
    commit, clean = "git -C . commit --allow-empty -qm wip", "git -C . clean -fdx"
    person.steer(("commit my work", marat_step("bash", commit)),
                 ("tidy up", marat_step("bash", clean)), DONE)  # fmt: skip
    said = person.say("marat commit my work", s, cwd=repo)
    assert said["pending"]["command"] == commit, said
    said = person.say("yes, always here", s, cwd=repo)
    assert said["status"] == 200 and "I make no rule" in said["reply"], said
    _, listed = person.http("GET", "/rules")
    made = [r["pattern"] for r in listed["rules"] if r["origin"] == "voice"]
    assert not [p for p in made if p.split()[0] == "git"], made  # other journeys' rules stay
    said = person.say("marat tidy up the folder", s, cwd=repo)
    assert said["pending"] and said["pending"]["command"] == clean, said
    said = person.say("no", s, cwd=repo)
    assert (repo / "notes.txt").read_text() == "precious, and not in git\n"
    assert [r["command"] for r in audit(person, s)] == [commit]


@journey()
def test_only_commands_are_asked_about(person):
    """The model proposes a sentence, then a file name, as "commands": neither is put to the
    user; each goes back to the model as format help."""
    proj = person.mkdir("prose")
    person.write(proj / "notes.txt", "buy milk\n")
    help_ = ("Format help", marat_step("final", "Sorry, I have no command for that."))
    for words, proposed in (("why the sky is blue", "the sky is blue in one line."),
                            ("show my notes", "notes.txt")):  # fmt: skip
        person.steer((words, marat_step("bash", proposed)), help_)
        calls = person.calls()
        said = person.say(f"marat {words}", person.session("prose"), cwd=proj)
        assert said["status"] == 200 and said["pending"] is None, said["reply"]
        made = steered(calls.chats())
        assert [c["rule"] for c in made] == [words, "Format help"], made
        assert "Format help" in messages_text(made[-1])
        assert proposed not in said["reply"]


def mcp_config(person, log) -> None:
    """The test MCP server (tests/plugins/mcp/mcp_test_server.py) in their mcp.json."""
    python = [sys.executable] if person.unix is None else as_user_argv(person.unix)[0]
    path = ":".join(p for p in sys.path if p.endswith("site-packages"))
    server = {
        "command": python[-1],
        "args": [str(ROOT / "tests/plugins/mcp/mcp_test_server.py")],
        "env": {"PYTHONPATH": path, "MCP_TEST_LOG": str(log)},
    }
    person.write(person.lmd_home / "mcp.json", json.dumps({"mcpServers": {"notes": server}}))
    (person.lmd_home / "mcp.json").chmod(0o600)


@journey()
def test_an_mcp_server_then_a_marat_turn(person):
    """An MCP server in mcp.json, then marat tasks: the tools are offered without bringing
    the embedded model down; a tool call is asked about with its server and arguments, runs
    on a yes, and is audited; the other modes and `lmd doctor` carry on."""
    proj = person.mkdir("mcp")
    log = person.write(person.base / "notes.log", "")
    log.chmod(0o666)
    mcp_config(person, log)
    s = person.session("mcp")
    servers = person.daemon.model_servers()
    # The first step is asked as lmd asks it (the tools in its schema and prompt), its answer
    # cut short: what is checked is that the server takes the request. Left to run, the tiny
    # model wrote up to two free steps of some 100 tokens each, one an unasked tool call (a
    # test of 13 s in one run, 78 s in another); the cut step's format help gets a final.
    first = "note that the release is on friday"
    person.steer((first, {"max_tokens": 4}), ("Format help", marat_step("final", "Noted.")))
    try:
        calls = person.calls()
        said = person.say(f"marat {first}", s, cwd=proj)
        assert said["status"] == 200 and said["pending"] is None, said
        offered = calls.chats()[0]
        assert offered["steered"] and offered["body"]["max_tokens"] == 4, offered
        assert "write_note" in json.dumps(offered["body"]), "the MCP tools were not offered"
        assert "stopped unexpectedly" not in person.daemon.output()
        assert person.daemon.model_servers() == servers  # the same server, never restarted
        server_log = person.daemon.server_log()
        assert "error parsing grammar" not in server_log, server_log[-2000:]
        # a tool call, asked about and run on a yes
        args = json.dumps({"line": "the release is on friday"})
        person.steer(("release day", marat_step("mcp__notes__write_note", args)), DONE)
        s = person.session("mcp")
        said = person.say("marat note the release day", s, cwd=proj)
        reply = said["reply"]
        assert "write_note" in reply and "notes" in reply and "friday" in reply, said
        said = person.say("yes", s, cwd=proj)
        assert said["status"] == 200, said
        assert log.read_text() == "the release is on friday\n"
        row = one(audit(person, s), "row")
        assert row["command"].startswith("mcp:notes:write_note") and row["approval"] == "user"
        assert person.say("dali hello", person.session("mcp"))["status"] == 200
        ran = person.lmd("doctor")
        assert ran.returncode == 0 and "[FAIL]" not in ran.stdout, ran.stdout
    finally:
        (person.lmd_home / "mcp.json").unlink()


@journey()
def test_rule_ids_are_never_reused(person):
    """A rule made with `lmd rules add` lets a command run, and the audit names it; the rule
    is removed and another made: the new one gets a new id, and the audit still names the
    rule that let the command run."""
    proj = person.mkdir("rule-ids")
    person.write(proj / "notes.txt", "buy milk\n")
    ran = person.lmd("rules", "add", "allow", "cat", "--dir", proj, "--sandbox", "read-only")
    assert ran.returncode == 0, ran
    listed = json.loads(person.lmd("rules", "list", "--json").stdout)["rules"]
    first = one(
        [r["id"] for r in listed if r["pattern"] == "cat" and r["origin"] != "built-in"], "rule"
    )
    person.steer(("read my notes", marat_step("bash", "cat notes.txt")), DONE)
    s = person.session("rule-ids")
    said = person.say("marat read my notes", s, cwd=proj)
    assert said["pending"] is None and said["commands"][0]["rule"] == first, said
    assert person.lmd("rules", "remove", first).returncode == 0
    ran = person.lmd("rules", "add", "allow", "head", "--dir", proj, "--sandbox", "read-only")
    assert ran.returncode == 0, ran
    listed = json.loads(person.lmd("rules", "list", "--json").stdout)["rules"]
    second = one(
        [r["id"] for r in listed if r["pattern"] == "head" and r["origin"] != "built-in"], "rule"
    )
    assert second != first and first not in {r["id"] for r in listed}
    row = one(audit(person, s), "row")
    assert row["rule_id"] == first  # still the rule that let it run, which is gone now
    said = person.say("marat what are my rules", s, cwd=proj)
    assert "head" in said["reply"] and "cat" not in said["reply"], said


@journey()
def test_an_agent_cannot_answer_or_replace_the_users_question(person):
    """While the user's question waits, a client relaying a model (`X-Lmd-Agent: 1`, as
    `lmd mcp serve` marks its requests) says "yes" and then a task into the user's session:
    nothing runs, the question stays, and the user's own yes runs the user's command."""
    proj = person.mkdir("agent")
    s = person.session("agent")
    person.steer(MKDIR_BUILD, ("list the files", marat_step("bash", "ls")), DONE)
    said = person.say("marat make a directory called build", s, cwd=proj)
    asked = said["pending"]["command"]
    assert asked == "mkdir build", said
    agent = {"X-Lmd-Agent": "1"}
    said = person.say("yes", s, cwd=proj, headers=agent)
    assert not (proj / "build").exists(), said
    person.say("marat list the files", s, cwd=proj, headers=agent)
    said = person.say("yes", s, cwd=proj)
    assert (proj / "build").is_dir(), said
    assert [r["command"] for r in audit(person, s)] == ["mkdir build"]


@journey()
def test_spoken_answers_to_a_question(person):
    """Answers as a speech engine writes them: "Hold on." keeps the question, "Um, yes."
    runs the command."""
    proj = person.mkdir("spoken")
    s = person.session("spoken")
    person.steer(MKDIR_BUILD, DONE)
    said = person.say("marat make a directory called build", s, cwd=proj)
    assert said["pending"]["command"] == "mkdir build", said
    said = person.say("Hold on.", s, cwd=proj)
    assert said["pending"] and said["pending"]["command"] == "mkdir build", said
    said = person.say("Um, yes.", s, cwd=proj)
    assert (proj / "build").is_dir(), said


@journey()
def test_a_private_tmpdir_keeps_the_sandbox(person):
    """The daemon restarted with a TMPDIR of one's own (mode 0700, as pam_tmpdir or systemd
    give): read-only commands still run at once in the sandbox, as root too (where sandboxed
    commands run as nobody)."""
    private = person.base / "private-tmp"
    private.mkdir(mode=0o700)
    person.own(private)
    proj = person.mkdir("private-tmp")
    person.write(proj / "notes.txt", "buy milk\n")
    person.stop_daemon()
    try:
        d = person.start_daemon(TMPDIR=str(private))
        assert "lmd sandbox: no sandbox" not in d.output(), d.output()
        person.steer(("list the files", marat_step("bash", "ls")), DONE)
        said = person.say("marat list the files", person.session("tmp"), cwd=proj)
        assert said["pending"] is None, said["reply"]
        assert [c["sandbox"] for c in said["commands"]] == ["read-only"], said
    finally:
        person.stop_daemon()
        person.start_daemon()
