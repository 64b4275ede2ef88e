"""`lmd mcp serve`: lmd as an MCP server, a thin layer over the running daemon's HTTP API.

Imported only by `lmd mcp serve` (it imports the SDK at once). No `from __future__ import
annotations`: the SDK reads the tools' annotations, which name closures of `build`.

Every request it relays carries `X-Lmd-Agent: 1`: the words come from the client's model, so
the daemon gives them sessions of their own (`agent:NAME`: they never reach a question the user
is waiting on), treats them as no one's yes and gives them none of the token's rights
(protected settings stay shut). A command that waits for a yes is approved only by the
client's *user*: the `approve` tool asks them through MCP elicitation, showing lmd's own
question, and only their accept sends the yes, bound to that exact question (`X-Lmd-Approve`).
A client without elicitation is told how the user answers in lmd itself.

It opens no file itself: a file the client names (selectit) is read by the daemon, under the
rule for every path a request names (daemon/paths.py: only in LMD_HOME/files), so an agent
cannot make lmd read ~/.ssh or another project's file and send it to a model.
"""

import asyncio
import json
from pathlib import Path
from typing import Annotated, Any
from urllib.parse import quote

import hypercorn.asyncio
import hypercorn.config
from mcp.server.mcpserver import Context, MCPServer, Resolve
from mcp.server.mcpserver.exceptions import ToolError
from mcp.server.mcpserver.resolve import Elicit, ElicitationResult
from mcp_types import ToolAnnotations
from pydantic import BaseModel, Field

from daemon.api import (
    ClientError,
    LmdError,
    approval_fingerprint,
    default_home,
    is_loopback,
    owner_only,
    parse_bind,
    request,
)

AGENT = {"X-Lmd-Agent": "1", "Accept": "application/json"}
MAX_HISTORY_SCAN = 2000
MAX_RECORDS = 200
NOTHING_WAITS = "nothing waits"
NO_ELICITATION = "no elicitation"


class Approval(BaseModel):
    """What the client shows its user: one yes/no box."""

    approve: bool = Field(description="Run it: yes or no.")


def build(url: str | None = None) -> Any:
    """The MCP server, its tools talking to the daemon at `url`."""
    server = MCPServer(
        "lmd",
        instructions=(
            "lmd is the user's language-model daemon. say() speaks to one of its modes "
            "(dali answers, marat runs shell commands, cobol edits code) in a named session "
            "of your own (lmd keeps agents' sessions apart from the user's). "
            "A command that needs the user's yes waits: call approve() to show the question "
            "to the user; you cannot answer it yourself."
        ),
    )
    waiting: dict[str, dict] = {}  # session -> the question lmd asked there, and its fingerprint

    async def call(method: str, path: str, body: Any = None, headers: dict | None = None) -> Any:
        def go() -> Any:
            _, _, raw = request(method, path, body, url=url, headers={**AGENT, **(headers or {})})
            return json.loads(raw)

        try:
            return await asyncio.to_thread(go)
        except ClientError as e:
            raise ToolError(e.message) from None

    def answered(outcome: dict, session: str) -> str:
        """The reply, and what to do when a question waits for the user's yes."""
        reply = outcome.get("reply") or ""
        pending = outcome.get("pending")
        if pending and pending.get("kind") == "approval":
            waiting[session] = {
                "question": reply,
                "fingerprint": approval_fingerprint(pending),
                "session": outcome.get("session") or session,  # agent:NAME, where it waits
            }
            return (
                f"{reply}\n\n[lmd waits for the user's yes in session {session}. You cannot give "
                "it: call approve with this session to show the question to the user, or ask "
                f"them to answer in lmd itself (lmd say --session {waiting[session]['session']} "
                "yes).]"
            )
        waiting.pop(session, None)
        return reply

    @server.tool(
        description="Say something to lmd: to a mode (dali, marat, cobol, ...) in a named "
        "session; returns lmd's reply.",
        annotations=ToolAnnotations(read_only_hint=False, open_world_hint=True),
    )
    async def say(text: str, mode: str = "", session: str = "mcp") -> str:
        utterance = f"{mode} {text}" if mode.strip() else text
        outcome = await call("POST", "/v1", {"input": utterance, "session": session})
        return answered(outcome, session)

    def ask_user(session: str, ctx: Context) -> Any:
        """The elicitation of the user's yes (side-effect free: it may run on every round)."""
        asked = waiting.get(session)
        if asked is None:
            return NOTHING_WAITS
        caps = ctx.client_capabilities
        if caps is None or caps.elicitation is None:
            return NO_ELICITATION
        return Elicit(
            f"lmd asks, in session {session}:\n\n{asked['question']}\n\nApprove it?", Approval
        )

    @server.tool(
        description="Show the question lmd is waiting on (a command that needs a yes) to the "
        "user, through the client; runs it only if the user approves.",
    )
    async def approve(
        session: str,
        answer: Annotated[ElicitationResult[Approval], Resolve(ask_user)],
    ) -> str:
        asked = waiting.get(session)
        data = getattr(answer, "data", None)
        if asked is None or data == NOTHING_WAITS:
            return f"Nothing waits for a yes in session {session} (that I asked about)."
        if data == NO_ELICITATION:
            return (
                "This client cannot ask its user (no MCP elicitation), and you cannot approve "
                "it: the user must say yes to lmd itself (lmd say --session "
                f"{asked['session']} yes)."
            )
        if getattr(answer, "action", "") == "cancel":
            return "The user did not answer; the command still waits."
        yes = isinstance(data, Approval) and data.approve
        headers = {"X-Lmd-Approve": asked["fingerprint"]} if yes else {}
        outcome = await call(
            "POST", "/v1", {"input": "yes" if yes else "no", "session": session}, headers
        )
        return answered(outcome, session)

    @server.tool(
        description="LM_SCORE: how confidently the model answers yes (0-10) to a yes/no "
        "question about some texts.",
        annotations=ToolAnnotations(read_only_hint=True),
    )
    async def lm_score(question: str, contents: list[str]) -> str:
        result = await call("POST", "/lm_score", {"contents": contents, "question": question})
        return json.dumps(result, ensure_ascii=False)

    @server.tool(
        description="SelectIT: score the instruction-response records of a JSON or JSONL file "
        f"(at most {MAX_RECORDS}) by the model's own uncertainty. The file must be in lmd's "
        "files folder (LMD_HOME/files): give its name there.",
        annotations=ToolAnnotations(read_only_hint=True),
    )
    async def selectit(path: str) -> str:
        if Path(path).suffix not in (".json", ".jsonl"):
            raise ToolError("SelectIT reads a .json or .jsonl file of records.")
        body = {"file": path, "max_records": MAX_RECORDS}
        result = await call("POST", "/selectit", body)
        return json.dumps(result, ensure_ascii=False)

    @server.tool(
        description="The Elo leaderboard of the models' battles.",
        annotations=ToolAnnotations(read_only_hint=True),
    )
    async def elo_leaderboard() -> str:
        return json.dumps(await call("GET", "/elo/leaderboard"), ensure_ascii=False)

    @server.tool(
        description="Search lmd's history (what was said in agents' sessions, every one or "
        "one; never the user's own) for a text; newest first.",
        annotations=ToolAnnotations(read_only_hint=True),
    )
    async def history_search(query: str, session: str = "", limit: int = 20) -> str:
        path = f"/history?limit={MAX_HISTORY_SCAN}"
        if session:
            path += f"&session={quote(session)}"
        prompts = (await call("GET", path))["prompts"]
        needle = query.casefold()
        found = [
            {k: p[k] for k in ("id", "session", "role", "mode", "created_at", "content")}
            for p in reversed(prompts)
            if needle in p["content"].casefold()
        ][: max(1, min(limit, 200))]
        return json.dumps(found, ensure_ascii=False)

    return server


def serve_http(server: Any, bind: str, home: Path | None) -> None:
    """Streamable HTTP on loopback, behind the daemon's own Guard (its token, or on Linux the
    kernel's word that the client is the same user)."""
    host, port = parse_bind(bind)
    if not is_loopback(host):
        raise LmdError(f"lmd mcp serve --http listens on loopback only, not {host}.")
    app = owner_only(server.streamable_http_app(), home or default_home())
    config = hypercorn.config.Config()
    config.bind = [f"{host}:{port}" if ":" not in host else f"[{host}]:{port}"]
    config.accesslog = None
    asyncio.run(hypercorn.asyncio.serve(app, config))
