"""Only commands are asked about (issue 36): a proposed "command" that is prose, a file name or
no program bash can run goes back to the model as format help, in every protocol, and the user
never hears it; a command that is one is quoted exactly (no full stop glued to it)."""

from __future__ import annotations

import asyncio
import json
import os

import pytest

from plugins.marat import proposed
from tests.fake_backend import Reply

from . import test_protocols
from .conftest import action, final

# the factory (capabilities set before the daemon probes them) and the JSON say of the
# protocol tests
marat = test_protocols.marat
say = test_protocols.say


NOT_COMMANDS = [
    ("the sky is blue in one line.", "'the' is not a program, builtin or function here"),
    ("The user has quit.", "'The' is not a program"),
    ("notes.txt", "'notes.txt' is not a program"),  # a file in the working directory
    ("./notes.txt", "'./notes.txt' is not an executable file"),
    ("I'll look at the files.", "not a bash command (bash says: unexpected EOF"),
    ("ls (", "not a bash command (bash says: syntax error"),
]


@pytest.mark.parametrize(("said", "why"), NOT_COMMANDS)
@pytest.mark.parametrize("protocol", ["text", "tools", "schema"])
def test_what_is_no_command_goes_back_to_the_model(marat, backend, said, why, protocol):
    caps = {"tools": {"tools": True}, "schema": {"json_schema": True}}.get(protocol, {})
    client = marat(**caps)
    if protocol == "tools":
        step = Reply("", tool_calls=[("bash", json.dumps({"command": said}))])
        done = Reply("", tool_calls=[("final", '{"answer": "Done."}')])
    elif protocol == "schema":
        step = json.dumps({"thought": "run it", "action": "bash", "text": said})
        done = json.dumps({"thought": "done", "action": "final", "text": "Done."})
    else:
        step, done = action(said), final("Done.")
    backend.queue(step, done)
    body = say(client, "marat tidy up")
    assert body["reply"] == "Done." and body["pending"] is None  # never asked, never run
    assert "commands" not in body
    help_sent = backend.chat_requests[-1]["messages"][-1]["content"]
    assert help_sent.startswith("Format help: ") and why in help_sent
    assert "Give one command that bash can run, or your final answer." in help_sent


def test_what_is_a_command_is_asked_quoted_exactly(marat, backend, projects):
    client = marat()
    for command, question in [
        ("git add .", "I am about to run:\ngit add .\nSay yes to run it, or no."),
        ("touch a.txt", "I am about to run: touch a.txt. Say yes to run it, or no."),
        ("rm -f notes.txt;", "I am about to run:\nrm -f notes.txt;\nSay yes to run it, or no."),
    ]:
        backend.queue(action(command))
        body = say(client, f"marat do it {command}")
        assert body["pending"]["command"] == command
        assert body["reply"].startswith(question), body["reply"]
        assert ".." not in body["reply"]  # no full stop glued to the command
        say(client, "no")


@pytest.mark.parametrize(
    "command",
    [
        "ls -la",
        "FOO=1 env",
        "for f in *; do echo $f; done",
        "(cd /tmp && ls)",
        "f() { echo hi; }; f",
        "$SHELL -c true",  # an expansion: the grammar cannot say, so it is a command
        "cat <<EOF\nhi\nEOF",
        "[[ -f x ]] && echo y",
        "'ls' -l",
        "time ls",
    ],
)
def test_real_commands_pass(command, tmp_path):
    assert asyncio.run(proposed.problem(command, str(tmp_path))) is None


def test_an_executable_path_is_a_program(tmp_path):
    script = tmp_path / "run.sh"
    script.write_text("#!/bin/sh\necho hi\n")
    assert asyncio.run(proposed.problem("./run.sh", str(tmp_path))) is not None
    script.chmod(0o755)
    assert asyncio.run(proposed.problem("./run.sh --fast", str(tmp_path))) is None
    assert asyncio.run(proposed.problem(f"{script} --fast", "/")) is None


def test_a_program_on_the_path_only(tmp_path, monkeypatch):
    """A program is one bash finds on the PATH commands run with, not in the directory."""
    (tmp_path / "mytool").write_text("#!/bin/sh\n")
    (tmp_path / "mytool").chmod(0o755)
    assert asyncio.run(proposed.problem("mytool x", str(tmp_path))) is not None
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    assert asyncio.run(proposed.problem("mytool x", "/")) is None
