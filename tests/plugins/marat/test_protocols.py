"""marat on native tool calls and on a JSON schema, chosen in one place from the probe (or
forced by `action_protocol`), with the tool-call message shapes replayed on the next turn;
the bad answers each protocol can get; and, on the real model, a parseable step every turn."""

from __future__ import annotations

import json

import pytest

from daemon.backends.protocols import action_protocol
from plugins.marat.protocols import STEP_SCHEMA, TOOLS
from tests.fake_backend import Reply
from tests.real_model import configure_real_home

from .conftest import action

NOT_A_COMMAND = "Give one command that bash can run, or your final answer."


def call(name: str, **arguments) -> Reply:
    return Reply("", tool_calls=[(name, json.dumps(arguments))])


@pytest.fixture
def marat(make_client, projects, backend):
    """A factory: the stand-in's capabilities are set before the daemon probes them."""

    def make(**caps):
        backend.capabilities.update(caps)
        return make_client(marat_start_dir=str(projects["other"]))

    return make


def say(client, text: str) -> dict:
    r = client.post("/v1", content=text, headers={"Accept": "application/json"})
    assert r.status_code == 200, r.text
    return r.json()


class Caps:
    def __init__(self, **kw):
        self.tools = kw.get("tools", False)
        self.json_schema = kw.get("json_schema", False)


@pytest.mark.parametrize(
    ("caps", "forced", "chosen"),
    [
        (Caps(tools=True, json_schema=True), "auto", "tools"),
        (Caps(json_schema=True), "auto", "schema"),
        (Caps(), "auto", "text"),
        (Caps(tools=True), "text", "text"),
        (Caps(), "schema", "schema"),
    ],
)
def test_one_place_decides(caps, forced, chosen):
    assert action_protocol(caps, forced) == chosen


def test_tools_run_a_command_and_replay_the_call_shapes(marat, backend):
    client = marat(tools=True, tool_choice=True)
    backend.queue(call("bash", command="ls"), call("final", answer="Two files."))
    body = say(client, "marat what files are here")
    assert body["reply"].startswith("Two files.") and body["protocol"] == "tools"
    first, second = backend.chat_requests[-2:]
    assert first["tools"] == TOOLS and first["tool_choice"] == "auto"
    assert "```bash" not in first["messages"][0]["content"]  # the tool protocol's own prompt
    # the next turn replays the call and its result as the server expects
    assistant, result = second["messages"][-2:]
    assert assistant["tool_calls"][0]["function"] == {
        "name": "bash",
        "arguments": json.dumps({"command": "ls"}),
    }
    assert result["role"] == "tool" and result["tool_call_id"] == assistant["tool_calls"][0]["id"]
    assert "notes.txt" in result["content"]


def test_a_tool_call_that_needs_a_yes_asks_then_replays_after_it(marat, backend, projects):
    client = marat(tools=True)
    backend.queue(call("bash", command="touch made.txt"))
    body = say(client, "marat make a file")
    assert body["pending"]["command"] == "touch made.txt"
    backend.queue(call("final", answer="Made it."))
    body = say(client, "yes")
    assert (projects["other"] / "made.txt").exists() and body["reply"].startswith("Made it.")
    last = backend.chat_requests[-1]["messages"]
    roles = [m["role"] for m in last]
    assert "tool" in roles  # the approved call's result went back as its tool message


@pytest.mark.parametrize(
    ("reply", "correction"),
    [
        (Reply("I would list the files."), "call a tool"),  # accepts tools, answers in text
        (Reply("", tool_calls=[("bash", "{not json")]), "arguments were not a JSON object"),
        (Reply("", tool_calls=[("python", '{"code": "1"}')]), "no tool called 'python'"),
        (
            Reply("", tool_calls=[("bash", '{"command": "ls"}'), ("bash", '{"command": "pwd"}')]),
            "called 2 tools at once",
        ),
        (Reply("", tool_calls=[("final", '{"answer": ""}')]), "final answer was empty"),
        (Reply("", tool_calls=[("bash", '{"command": " "}')]), "bash command was empty"),
    ],
)
def test_bad_tool_answers_get_a_correction_and_run_nothing(marat, backend, reply, correction):
    client = marat(tools=True)
    backend.queue(reply, call("final", answer="Done."))
    body = say(client, "marat list files")
    assert body["reply"].startswith("Done.")
    help_sent = backend.chat_requests[-1]["messages"][-1]["content"]
    assert help_sent.startswith("Format help") and correction in help_sent
    assert "Observation: exit code" not in json.dumps(backend.chat_requests[-1]["messages"])


def test_sudo_in_a_well_formed_call_is_refused_not_a_format_error(marat, backend):
    client = marat(tools=True)
    backend.queue(call("bash", command="sudo ls /root"), call("final", answer="Cannot."))
    body = say(client, "marat list root's files")
    assert body["reply"].startswith("Cannot.")
    sent = backend.chat_requests[-1]["messages"][-1]["content"]
    assert sent.startswith("Refused: never use sudo") and "say so with final" in sent
    assert "Observation: exit code" not in json.dumps(backend.chat_requests[-1]["messages"])


def test_a_call_with_text_beside_it_keeps_the_text_as_its_thought(marat, backend):
    client = marat(tools=True)
    backend.queue(
        Reply("Let me look.", tool_calls=[("bash", '{"command": "pwd"}')]),
        call("final", answer="Here."),
    )
    say(client, "marat where am I")
    replayed = backend.chat_requests[-1]["messages"][-2]
    assert replayed["content"] == "Let me look." and replayed["tool_calls"]


def test_schema_steps_are_json_under_the_servers_schema(marat, backend):
    client = marat(json_schema=True, schema_format="json_object")
    backend.queue(
        json.dumps({"thought": "list", "action": "bash", "text": "ls", "extra": 1}),
        json.dumps({"thought": "done", "action": "final", "text": "Two files."}),
    )
    body = say(client, "marat what files are here")
    assert body["reply"].startswith("Two files.") and body["protocol"] == "schema"
    first = backend.chat_requests[-2]
    assert first["response_format"] == {"type": "json_object", "schema": STEP_SCHEMA}
    assert "JSON object" in first["messages"][0]["content"]
    assert "Observation: exit code 0" in backend.chat_requests[-1]["messages"][-1]["content"]


@pytest.mark.parametrize(
    "bad", ['{"thought": "x", "action": "bash"', '{"thought": "x", "action": "dance", "text": ""}']
)
def test_bad_schema_answers_get_a_correction(marat, backend, bad):
    client = marat(json_schema=True, schema_format="json_object")
    backend.queue(bad, json.dumps({"thought": "ok", "action": "final", "text": "Fine."}))
    body = say(client, "marat list files")
    assert body["reply"].startswith("Fine.")
    assert "reply with one JSON object" in backend.chat_requests[-1]["messages"][-1]["content"]


def test_the_setting_forces_the_text_protocol(make_client, backend, projects):
    backend.capabilities.update(tools=True, json_schema=True)
    c = make_client(marat_start_dir=str(projects["other"]), action_protocol="text")
    backend.queue(action("ls"), "Thought: done.\nFinal Thought: Files.")
    body = say(c, "marat list files")
    assert body["protocol"] == "text" and "tools" not in backend.chat_requests[-1]


@pytest.mark.slow
def test_the_real_model_gets_a_parseable_step_every_turn(real_model, tmp_path):
    """llama-cpp-python: no tool calls on its own, a JSON schema yes: marat uses the schema
    and never needs a format correction (the text format failed every turn)."""
    from tests.daemons import LiveDaemon

    home = configure_real_home(
        tmp_path / "h", real_model, reply_max_tokens=96, max_thought_loops=2,
        marat_start_dir=str(tmp_path),
    )  # fmt: skip
    (tmp_path / "notes.txt").write_text("hello\n")
    d = LiveDaemon(home, {"LMD_TOKENIZER": "estimate", "OPENAI_API_KEY": real_model.key})
    try:
        import urllib.request

        for i, task in enumerate(["list the files here"]):
            req = urllib.request.Request(
                d.url + "/v1", f"marat {task}".encode(),
                {"Accept": "application/json", "X-Session": f"s{i}"}, method="POST",
            )  # fmt: skip
            with urllib.request.urlopen(req, timeout=300) as r:
                body = json.loads(r.read())
            assert body["protocol"] == "schema"
        from daemon.core.store import Store

        store = Store(home / "lmd.db")
        helps = [p for p in store.history(None, 200) if p.content.startswith("Format help")]
        store.close()
        # every step parsed; what the tiny model proposed may still be no command (it once
        # proposed the directory's name): that goes back to it (plugins/marat/proposed.py)
        not_commands = [p for p in helps if p.content.endswith(NOT_A_COMMAND)]
        assert [p for p in helps if p not in not_commands] == []
    finally:
        d.stop()
