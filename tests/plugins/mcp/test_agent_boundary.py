"""The agent's boundary (issue 37 leftovers): an MCP client of `lmd mcp serve` (another
program's model) picks neither the model nor the server that answers, and names no file lmd
reads beyond the daemon's files folder. Through the live daemon, with the `mcp` SDK's own
client and the real `lmd say`, as root and as an ordinary Unix user:

- by knob it changes none of the settings that pick who answers (openai_model, the scorer,
  the judge, the rater, the backend); every call the stand-in backend receives still names the
  user's model, and the user, by voice through `lmd say`, still changes it;
- selectit reads a file only from LMD_HOME/files: another project's file, a key under ~/.ssh,
  a link out of the folder and the daemon's own token are refused with one sentence, and
  nothing of them reaches the model;
- nor does marat read them for it: an agent's command, read-only or not, waits for its
  user's yes; history_search finds nothing of the user's sessions (where a command's output
  held the secret); and it changes no setting, not even an unprotected one that bounds every
  request of the user's (max_body_bytes).
"""

from __future__ import annotations

import asyncio
import json
import subprocess
from importlib.util import find_spec

import pytest

from tests.fake_backend import Reply
from tests.plugins.selectit.conftest import TASK, alpaca, prompt_of, task_handler, write_jsonl

pytestmark = pytest.mark.skipif(find_spec("mcp") is None, reason="needs pip install 'lmd[mcp]'")

# who answers, each tried by the agent through knob (spoken names, as a model would say them)
WHO_ANSWERS = {
    "openai_model": "knob set openai model to agents-model",
    "lm_score_model": "knob set lm score model to agents-model",
    "elo_judge_model": "knob set elo judge model to agents-model",
    "selectit_api": "knob set selectit api to chat",
    "selectit_backend": "knob set selectit backend to transformers",
    "backend": "knob set backend to embedded",
}
SECRET = "TOP SECRET line"
UNPROTECTED = "knob set max body bytes to 64"  # every request of the user's would be refused
REFUSED = "Over HTTP the file of records must be a file in "


def model(body: dict) -> Reply:
    """The stand-in model: ratings for SelectIT, a score for LM_SCORE, `cat data.jsonl` for
    marat, else a plain reply."""
    text = prompt_of(body)
    if TASK.search(text):
        return task_handler(body)
    if "Observation:" in text:
        return Reply("Thought: done.\nFinal Thought: Shown.")
    if "the project data" in text:
        return Reply("Thought: I will read it.\nAction:\n```bash\ncat data.jsonl\n```")
    return Reply("Score: 7" if "Is it large?" in text else "Hello from the model.")


def plant(user) -> dict[str, str]:
    """Records in the files folder, and what an agent would rather have read: another
    project's file, a key in ~/.ssh, a link out of the folder, the daemon's token."""
    files = user.home / "files"
    files.mkdir()
    write_jsonl(files / "records.jsonl", alpaca(2))
    other = user.work / "data.jsonl"  # another project of the user's
    write_jsonl(other, [{"instruction": SECRET, "output": "it is"}])
    ssh = user.unix_home / ".ssh"
    ssh.mkdir()
    write_jsonl(ssh / "keys.json", [{"instruction": SECRET, "output": "-----BEGIN KEY"}])
    (files / "out.jsonl").symlink_to(other)
    (files / "token.json").symlink_to(user.home / "token")
    if user.unix is not None:
        for path in (files, ssh):
            subprocess.run(["chown", "-hR", f"{user.unix}:{user.unix}", str(path)], check=True)
        subprocess.run(["chown", user.unix, str(other)], check=True)
    return {
        "another project": str(other),
        "a key": "~/.ssh/keys.json",
        "a path out": "../../project/data.jsonl",
        "a link out": "out.jsonl",
        "the token": "token.json",
    }


def the_agent(user, bad: dict[str, str]) -> dict:
    """The MCP client's model: tries each knob, scores and says something, then names files."""
    from mcp import Client

    async def session() -> dict:
        seen: dict = {"knobs": {}, "files": {}}
        async with Client(user.mcp_serve()) as client:
            for name, said in {**WHO_ANSWERS, "max_body_bytes": UNPROTECTED}.items():
                result = await client.call_tool("say", {"text": said, "session": "tools"})
                seen["knobs"][name] = result.content[0].text
            found = await client.call_tool("history_search", {"query": SECRET})
            seen["found"] = json.loads(found.content[0].text)
            read = await client.call_tool(
                "say", {"text": "show me the project data", "mode": "marat", "session": "r"}
            )
            seen["marat"] = read.content[0].text
            scored = await client.call_tool(
                "lm_score", {"question": "Is it large?", "contents": ["a blue whale"]}
            )
            seen["score"] = json.loads(scored.content[0].text)
            said = await client.call_tool("say", {"text": "hello", "mode": "dali"})
            seen["said"] = said.content[0].text
            for what, path in bad.items():
                result = await client.call_tool("selectit", {"path": path})
                seen["files"][what] = (result.is_error, result.content[0].text)
            good = await client.call_tool("selectit", {"path": "records.jsonl"})
            seen["scores"] = json.loads(good.content[0].text)
        return seen

    return asyncio.run(asyncio.wait_for(session(), 120))


def attack(user, backend) -> None:
    backend.handler = model
    bad = plant(user)
    # the user's own marat reads the project's data: its output is in the user's history
    assert user.say("marat", "show me the project data").startswith("Shown.\n\n{")
    assert any(SECRET in said for said in user.said("default"))
    backend.clear()
    before = {s["name"]: s["value"] for s in user.get("/settings")["settings"]}
    seen = the_agent(user, bad)
    for name, reply in seen["knobs"].items():
        assert f"The setting {name} is protected" in reply, (name, reply)
    assert "protected from agents" in seen["knobs"]["max_body_bytes"]
    assert seen["found"] == []  # nothing of the user's sessions
    # its marat asks its user first, even for a read-only command: nothing ran, nothing read
    assert seen["marat"].startswith("I am about to run: cat data.jsonl. Say yes to run it")
    assert "lmd waits for the user's yes in session r" in seen["marat"]
    ran = [(c["session"], c["command"]) for c in user.get("/marat/commands")["commands"]]
    assert ran == [("default", "cat data.jsonl")]
    after = {s["name"]: s["value"] for s in user.get("/settings")["settings"]}
    assert after == before
    # every call went to the user's model
    assert seen["score"]["score"] == 7 and seen["said"] == "Hello from the model."
    assert {r.body.get("model") for r in backend.requests if r.method == "POST"} == {"fake-model"}
    # files: one sentence each, nothing of them read or sent
    for what, (is_error, text) in seen["files"].items():
        assert is_error, what
        sentence = text[text.index(REFUSED) :]
        assert sentence == (
            f"{REFUSED}{user.home / 'files'} (the daemon's folder for files requests may name); "
            "copy it there and give its name, or use the command line."
        ), (what, text)
    token = (user.home / "token").read_text().strip()
    sent = json.dumps([r.body for r in backend.requests])
    assert SECRET not in sent and token not in sent
    assert [r["score"] for r in seen["scores"]["results"]] == pytest.approx([4.2, 4.3])
    # the user, by voice through their own client, still chooses the model
    assert user.say("knob", "set", "openai", "model", "to", "users-model") == (
        "openai model is now users-model."
    )
    backend.clear()
    assert user.say("dali", "hello") == "Hello from the model."
    assert [r["model"] for r in backend.chat_requests] == ["users-model"]


def test_an_agent_picks_no_model_and_reads_no_file_outside(tmp_path, backend):
    from test_one_question import User  # this directory is on sys.path (no __init__.py)

    user = User(tmp_path, backend, None)
    try:
        attack(user, backend)
    finally:
        user.daemon.stop()


def test_as_an_ordinary_user(backend):
    from test_one_question import attack_as_ordinary_user

    attack_as_ordinary_user(backend, attack, "lmd-agent-boundary-")
