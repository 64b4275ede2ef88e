"""POST /v1/propose: turn a half-typed shell line into one proposed bash command, run nothing.

The shell key binding sends the current command line here and puts the answer back into the
line for the user to edit. It asks the model the way marat does (the `system` setting names
the OS, the working directory is given) but never executes: the user presses Enter, or not.
Both turns are stored in the session, so later marat requests see what was proposed.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from starlette.responses import PlainTextResponse

from daemon.api import (
    LmdError,
    decode_text,
    read_body,
    record_turn,
    session_name,
    working_directory,
)

SYSTEM_PROMPT = (
    "You turn a request into exactly one bash command for {system}. The working directory is "
    "{cwd}. Reply with the command only: no explanation, no code fence, one line (use && or "
    "pipes to combine steps). If the request already is a valid command, improve or complete "
    "it."
)
FENCED = re.compile(r"```[\w+-]*\n(.*?)```", re.S)


def extract_command(reply: str) -> str:
    """The command in a model reply: the first fenced block, else the first non-empty line."""
    match = FENCED.search(reply)
    text = match.group(1) if match else reply
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    if not lines:
        return ""
    if match:
        return " && ".join(lines) if len(lines) > 1 else lines[0]
    line = lines[0]
    for prefix in ("$ ", "Command: ", "command: "):
        if line.startswith(prefix):
            line = line[len(prefix) :]
    return line.strip("`").strip()


async def propose(request: Any) -> Any:
    """Plain text in (the command line), plain text out (the proposed command)."""
    daemon = request.app.state.daemon
    settings = daemon.settings()
    line = decode_text(await read_body(request, settings["max_body_bytes"])).strip()
    if not line:
        raise LmdError("The command line is empty; type what you want first.")
    if "\x00" in line:
        raise LmdError("The command line contains a NUL character; send plain text.")
    name = session_name(request)
    cwd = working_directory(request.headers.get("x-cwd") or request.query_params.get("cwd"))
    store = daemon.store

    def keep(role: str, content: str, kind: str, **kw: Any) -> int:
        return record_turn(store, settings, name, role, content, kind, "propose", **kw)

    async with daemon.locks.hold(name):
        session = store.session(name)
        if cwd:
            session.cwd = cwd
            store.save_session(session)
        where = session.cwd or str(Path.home())
        user_id = keep("user", line, "default")
        messages = [
            {
                "role": "system",
                "content": SYSTEM_PROMPT.format(system=settings["system"], cwd=where),
            },
            {"role": "user", "content": line},
        ]
        try:
            reply = await daemon.llm(settings).chat(messages)
        except LmdError as e:
            store.update_prompt(user_id, status="failed")
            keep("error", e.message, "none", status="error")
            raise
        command = extract_command(reply)
        if not command:
            raise LmdError("The model proposed no command; say it another way.", status=502)
        keep("assistant", command, "decorative")
    return PlainTextResponse(command + "\n")


propose.openapi = {
    "post": {
        "summary": "One proposed bash command for a half-typed shell line; runs nothing.",
        "parameters": [
            {"name": "X-Session", "in": "header", "schema": {"type": "string"}},
            {"name": "X-Cwd", "in": "header", "schema": {"type": "string", "pattern": "^/"}},
        ],
        "requestBody": {
            "required": True,
            "content": {"text/plain": {"schema": {"type": "string"}}},
        },
        "responses": {
            "200": {
                "description": "The command, one line.",
                "content": {"text/plain": {"schema": {"type": "string"}}},
            },
            **{
                code: {
                    "description": why,
                    "content": {
                        "application/json": {"schema": {"$ref": "#/components/schemas/Error"}}
                    },
                }
                for code, why in (
                    ("400", "An empty line, a NUL, a bad session or working directory."),
                    ("413", "The body is too large."),
                    ("502", "The backend failed or proposed nothing."),
                    ("504", "The backend took too long."),
                )
            },
        },
    }
}
