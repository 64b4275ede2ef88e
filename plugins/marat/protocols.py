"""How marat gets its next step from the model, in the protocol the backend keeps best
(`daemon.api.action_protocol` decides): native tool calls (a `bash` tool, a `final` tool), an
answer held to a JSON schema, or the text format (Thought / Action / one bash block).

Whatever the protocol, the result is the same Step (a command, a final answer, or a format
correction); approval, sandbox, audit and the spoken replies do not know how it was obtained.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from daemon.api import Context

from . import prompt
from .prompt import Step

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "bash",
            "description": "Run one bash command in the user's shell and see its output.",
            "parameters": {
                "type": "object",
                "properties": {
                    "command": {"type": "string", "description": "One bash command."},
                },
                "required": ["command"],
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "final",
            "description": "Give the user the answer, when the task is done or cannot be done.",
            "parameters": {
                "type": "object",
                "properties": {
                    "answer": {
                        "type": "string",
                        "description": "One or two plain spoken sentences, without markdown.",
                    },
                },
                "required": ["answer"],
            },
        },
    },
]
TOOL_NAMES = {t["function"]["name"] for t in TOOLS}

# One step as a JSON object (the schema protocol). `thought` first, so the model reasons
# before it commits to an action; extra fields a server lets through are ignored.
# Lengths are bounded so a small model's rambling still closes the object within max_tokens
# (grammar-constrained servers stop the string there).
STEP_SCHEMA = {
    "type": "object",
    "properties": {
        "thought": {"type": "string", "maxLength": 160},
        "action": {"enum": ["bash", "final"]},
        "text": {"type": "string", "minLength": 1, "maxLength": 400},
    },
    "required": ["thought", "action", "text"],
    "additionalProperties": False,
}

# Corrections for the structured protocols (stored with decorative karma, as the text ones).
TOOL_TEXT = (
    "Format help: call a tool. Use bash with one command to run it, or final with your answer "
    "for the user."
)
TOOL_MANY = "Format help: you called {n} tools at once. Call one tool per reply."
TOOL_UNKNOWN = "Format help: there is no tool called {name!r}; call bash or final."
TOOL_OBJECT = "Format help: the {name} tool's arguments were not a JSON object."
TOOL_ARGS = "Format help: the {name} tool's arguments were not a JSON object with {field!r}."
EMPTY_COMMAND = "Format help: the bash command was empty. Give one command, or your final answer."
SCHEMA_BAD = (
    'Format help: reply with one JSON object: {"thought": ..., "action": "bash" or "final", '
    '"text": the command, or your answer}.'
)


@dataclass
class Asked:
    """One model step: what to do, what to store as the assistant's turn, and its meta."""

    step: Step
    stored: str
    meta: dict


async def ask(
    ctx: Context, messages: list[dict], protocol: str, limit: dict, tools: list = ()
) -> Asked:
    """The model's next step in `protocol` (tools, schema or text); `tools` are the MCP
    servers' tools on offer beside bash and final."""
    if protocol == "tools":
        return await _tools(ctx, messages, limit, tools)
    if protocol == "schema":
        return await _schema(ctx, messages, limit, tools)
    # Stopping at "Observation:" keeps the model from inventing a command's output.
    text = await ctx.llm.chat(messages, stop=["\nObservation:"], **limit)
    return Asked(prompt.parse_reply(text), text, {"marat": "thought"})


async def _tools(ctx: Context, messages: list[dict], limit: dict, tools: list = ()) -> Asked:
    offered = TOOLS + [t.function() for t in tools]
    mcp_names = {t.exposed for t in tools}
    response = await ctx.llm.complete(messages, tools=offered, tool_choice="auto", **limit)
    message = response.choices[0].message if response.choices else None
    calls = list(getattr(message, "tool_calls", None) or [])
    said = (getattr(message, "content", None) or "").strip()
    meta: dict[str, Any] = {"marat": "thought"}
    if not calls:
        return Asked(Step(correction=TOOL_TEXT), said or "(no tool call)", meta)
    if len(calls) > 1:
        shown = json.dumps([_call_json(c) for c in calls])
        return Asked(Step(correction=TOOL_MANY.format(n=len(calls))), shown, meta)
    call = calls[0]
    name, raw = call.function.name, call.function.arguments or ""
    stored = json.dumps(_call_json(call))
    if name not in TOOL_NAMES and name not in mcp_names:
        return Asked(Step(correction=TOOL_UNKNOWN.format(name=name)), stored, meta)
    try:
        args = json.loads(raw) if raw.strip() else {}
    except ValueError:
        args = None
    if name in mcp_names:
        if not isinstance(args, dict):
            return Asked(Step(correction=TOOL_OBJECT.format(name=name)), stored, meta)
        meta["tool_call"] = {"id": call.id, "name": name, "arguments": raw}
        if said:
            meta["thought"] = said
        return Asked(Step(tool=(name, args)), stored, meta)
    field = "command" if name == "bash" else "answer"
    value = args.get(field) if isinstance(args, dict) else None
    if not isinstance(value, str):
        return Asked(Step(correction=TOOL_ARGS.format(name=name, field=field)), stored, meta)
    meta["tool_call"] = {"id": call.id, "name": name, "arguments": raw}
    if said:
        meta["thought"] = said  # text beside a call: the model's thought, kept
    return Asked(_step(name, value), stored, meta)


def step_schema(tools: list = ()) -> dict:
    """STEP_SCHEMA, with the MCP tools' names as more actions (text: their JSON arguments)."""
    if not tools:
        return STEP_SCHEMA
    action = {"enum": ["bash", "final", *(t.exposed for t in tools)]}
    text = {"type": "string", "minLength": 1, "maxLength": 2000}
    return {
        **STEP_SCHEMA,
        "properties": {**STEP_SCHEMA["properties"], "action": action, "text": text},
    }


async def _schema(ctx: Context, messages: list[dict], limit: dict, tools: list = ()) -> Asked:
    caps = await ctx.llm.capabilities()
    fmt = caps.response_format("marat_step", step_schema(tools)) or {"type": "json_object"}
    # Room for the whole bounded object: its 560 characters of strings can take more tokens
    # than characters (emoji, escapes, one-character tokens). At 512 the real 135M model was
    # cut off mid-string once in a fresh-clone run (605 characters in 512 tokens): a "Format
    # help" for a step the grammar had kept well formed.
    if limit:
        limit = {"max_tokens": max(limit["max_tokens"], 1024)}
    text = await ctx.llm.chat(messages, response_format=fmt, **limit)
    try:
        # strict=False: a raw newline inside a string (some grammars let it through) is fine
        data = json.loads(text, strict=False)
    except ValueError:
        data = None
    meta = {"marat": "thought"}
    mcp_names = {t.exposed for t in tools}
    if isinstance(data, dict) and data.get("action") in mcp_names:
        raw = data.get("text")
        try:
            args = json.loads(raw) if isinstance(raw, str) and raw.strip() else {}
        except ValueError:
            args = None
        if not isinstance(args, dict):
            return Asked(Step(correction=TOOL_OBJECT.format(name=data["action"])), text, meta)
        return Asked(Step(tool=(data["action"], args)), text, meta)
    if (
        not isinstance(data, dict)
        or data.get("action") not in ("bash", "final")
        or not isinstance(data.get("text"), str)
    ):
        return Asked(Step(correction=SCHEMA_BAD), text, meta)
    return Asked(_step(data["action"], data["text"]), text, meta)


def _step(action: str, value: str) -> Step:
    """The Step a structured answer asks for, checked as the text format's are."""
    if action == "final":
        if not value.strip():
            return Step(correction="Format help: the final answer was empty. Say the answer.")
        return Step(final=prompt.speakable(value))
    command = value.strip()
    if not command:
        return Step(correction=EMPTY_COMMAND)
    if prompt.SUDO_RE.search(command):
        return Step(correction=prompt.SUDO_STRUCTURED)
    return Step(command=command)


def _call_json(call: Any) -> dict:
    return {"tool": call.function.name, "arguments": call.function.arguments}


def history_messages(ctx: Context, protocol: str) -> list[dict]:
    """The karma-chosen history as chat messages. Under tool calls, a call that ran is
    replayed as the assistant's tool call followed at once by its `tool` result (what came
    between, the question and the user's yes, follows them), so the next turn reads as the
    server expects; a call whose result karma dropped (or that never ran: the user said no)
    goes back as plain text, and so does a result whose call was dropped."""
    history = ctx.history()
    if protocol != "tools":
        return [{"role": p.role, "content": p.content} for p in history]
    results = {p.meta["tool_call_id"]: p for p in history if p.meta.get("tool_call_id")}
    paired: set[int] = set()
    out: list[dict] = []
    for p in history:
        if id(p) in paired:
            continue
        call = p.meta.get("tool_call")
        result = results.get(call["id"]) if call else None
        if call and result is not None and result.id > p.id:
            out.append(
                {
                    "role": "assistant",
                    "content": p.meta.get("thought") or None,
                    "tool_calls": [
                        {
                            "id": call["id"],
                            "type": "function",
                            "function": {"name": call["name"], "arguments": call["arguments"]},
                        }
                    ],
                }
            )
            out.append({"role": "tool", "tool_call_id": call["id"], "content": result.content})
            paired.add(id(result))
            continue
        out.append({"role": p.role, "content": p.content})
    return out
