"""`lmd mcp serve` driven by the `mcp` SDK's own client, against a live daemon on the stand-in
backend: the tools listed, LM_SCORE and a dali turn answered (the backend's bodies asserted),
and a marat command that needs a yes approved only by the client's user through elicitation,
never by the client's model."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import urllib.error
import urllib.request
from importlib.util import find_spec
from pathlib import Path

import pytest

from tests.daemons import ROOT, free_port

# found, not imported: importing the SDK at collection cost every test worker a second
pytestmark = pytest.mark.skipif(find_spec("mcp") is None, reason="needs pip install 'lmd[mcp]'")

TOOLS = {"say", "approve", "lm_score", "selectit", "elo_leaderboard", "history_search"}


@pytest.fixture(autouse=True)
def _warm_lmd(lmd_mcp_command, monkeypatch):
    monkeypatch.setattr(sys.modules[__name__], "LMD", [lmd_mcp_command])


LMD = [sys.executable, "-m", "daemon.cli"]  # the warm `lmd` (conftest.py) in these tests


def stdio(home: Path, url: str):
    from mcp import StdioServerParameters

    return StdioServerParameters(
        command=LMD[0],
        args=[*LMD[1:], "mcp", "serve", "--url", url],
        env={"LMD_HOME": str(home), "PYTHONPATH": str(ROOT)},
        cwd=str(ROOT),
    )


def text(result) -> str:
    assert not result.is_error, result.content
    return result.content[0].text


def run(coro):
    return asyncio.run(asyncio.wait_for(coro, 120))


def test_tools_lm_score_and_a_dali_turn(home, backend, live):
    from mcp import Client

    d = live()

    async def session() -> None:
        async with Client(stdio(home, d.url)) as client:
            assert {t.name for t in (await client.list_tools()).tools} == TOOLS
            backend.queue("Score: 7")
            scored = json.loads(
                text(
                    await client.call_tool(
                        "lm_score", {"question": "Is it large?", "contents": ["a blue whale"]}
                    )
                )
            )
            assert scored["score"] == 7
            assert "a blue whale" in backend.chat_requests[-1]["messages"][-1]["content"]
            backend.queue("Hello from dali.")
            said = await client.call_tool(
                "say", {"text": "hello there", "mode": "dali", "session": "editor"}
            )
            assert text(said) == "Hello from dali."
            assert backend.chat_requests[-1]["messages"][-1] == {
                "role": "user",
                "content": "hello there",
            }
            found = json.loads(text(await client.call_tool("history_search", {"query": "HELLO"})))
            # the agent spoke in a session of its own (daemon.core.approvals)
            assert [(f["session"], f["role"], f["content"]) for f in found] == [
                ("agent:editor", "assistant", "Hello from dali."),
                ("agent:editor", "user", "hello there"),
            ]

    run(session())


def test_selectit_on_a_file_and_the_elo_leaderboard(home, backend, live, tmp_path):
    from mcp import Client

    from tests.plugins.selectit.conftest import alpaca, task_handler, write_jsonl

    backend.handler = task_handler  # P("5") of task n is (n % 5 + 1) / 10: the score 4 + P("5")
    (home / "files").mkdir()  # the daemon's folder for files a request names
    data = write_jsonl(home / "files" / "records.jsonl", alpaca(2))
    (tmp_path / "notes.txt").write_text("not records\n")
    d = live()

    async def session() -> None:
        async with Client(stdio(home, d.url)) as client:
            for named in ("records.jsonl", str(data)):  # its name there, or its path
                scored = json.loads(text(await client.call_tool("selectit", {"path": named})))
                assert [r["score"] for r in scored["results"]] == pytest.approx([4.2, 4.3])
            bad = await client.call_tool("selectit", {"path": str(tmp_path / "notes.txt")})
            assert bad.is_error
            assert bad.content[0].text.endswith(
                ": SelectIT reads a .json or .jsonl file of records."
            )
            board = json.loads(text(await client.call_tool("elo_leaderboard", {})))
            with urllib.request.urlopen(d.url + "/elo/leaderboard", timeout=10) as r:
                assert board == json.loads(r.read())  # the daemon's own answer, relayed

    run(session())


def test_a_command_needs_the_users_yes_through_elicitation(home, backend, live, tmp_path):
    from mcp import Client
    from mcp_types import ElicitResult

    from tests.daemons import configure

    work = tmp_path / "work"
    work.mkdir()
    configure(home, marat_start_dir=str(work), marat_approval="always")
    d = live()
    asked: list[str] = []

    async def user_says_yes(context, params):
        asked.append(params.message)
        return ElicitResult(action="accept", content={"approve": True})

    async def session() -> None:
        make = "Thought: make it.\nAction:\n```bash\ntouch made.txt\n```"
        backend.queue(make, make, "Thought: done.\nFinal Thought: I made the file.")
        async with Client(stdio(home, d.url)) as model_only:
            reply = text(
                await model_only.call_tool(
                    "say", {"text": "make the file", "mode": "marat", "session": "m"}
                )
            )
            assert reply.startswith("I am about to run: touch made.txt. Say yes to run it, or no.")
            assert "You cannot give it: call approve" in reply
            # the client's model says yes: nothing runs, the question stays
            refused = text(await model_only.call_tool("say", {"text": "yes", "session": "m"}))
            assert "waits for the user's own yes" in refused
            assert not (work / "made.txt").exists()
            # a client that cannot ask its user is told so
            cannot = text(await model_only.call_tool("approve", {"session": "m"}))
            assert "cannot ask its user" in cannot and not (work / "made.txt").exists()
        async with Client(stdio(home, d.url), elicitation_callback=user_says_yes) as with_user:
            await with_user.call_tool(
                "say", {"text": "make the file", "mode": "marat", "session": "m2"}
            )
            done = text(await with_user.call_tool("approve", {"session": "m2"}))
        assert done == "I made the file."
        assert (work / "made.txt").exists()
        assert "I am about to run: touch made.txt" in asked[0]

    run(session())


def test_http_serve_answers_behind_the_owner_check(home, live):
    from mcp import Client

    d = live()
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "daemon.cli", "mcp", "serve", "--http", f"127.0.0.1:{port}",
         "--url", d.url],
        env={**os.environ, "LMD_HOME": str(home)},
        cwd=ROOT,
    )  # fmt: skip
    try:
        from tests.plugins.mcp.test_client import wait_port

        wait_port(port, proc)

        async def session() -> None:
            async with Client(f"http://127.0.0.1:{port}/mcp") as client:
                assert {t.name for t in (await client.list_tools()).tools} == TOOLS

        run(session())
        req = urllib.request.Request(
            f"http://127.0.0.1:{port}/mcp", data=b"{}", headers={"Host": "evil.example"}
        )
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(req, timeout=10)
        assert refused.value.code == 403
    finally:
        proc.terminate()
        proc.wait(10)
