"""cobol's edits as structured operations, where the backend keeps them better than a diff in
text (daemon.api.action_protocol): a `replace_lines` tool (native tool calls) or the same
operations as a JSON object (a JSON schema). lmd turns them into the unified diff that the
rest of cobol checks, shows, applies and undoes: approval, protected paths and undo do not
know how the change was asked for.
"""

from __future__ import annotations

import difflib
import json
from pathlib import Path
from typing import Any

from daemon.api import BackendError, LmdError

from .repo import inside

EDIT = {
    "type": "object",
    "properties": {
        "file": {"type": "string", "description": "Path relative to the repository root."},
        "start": {"type": "integer", "description": "First line replaced (1-based)."},
        "end": {"type": "integer", "description": "Last line replaced; start - 1 inserts."},
        "text": {"type": "string", "description": "The new lines, without line numbers."},
    },
    "required": ["file", "start", "end", "text"],
    "additionalProperties": False,
}
EDITS_SCHEMA = {
    "type": "object",
    "properties": {"edits": {"type": "array", "items": EDIT, "minItems": 1, "maxItems": 8}},
    "required": ["edits"],
    "additionalProperties": False,
}
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "replace_lines",
            "description": "Replace lines start..end of a file with new text (one call per "
            "change; several calls for several changes).",
            "parameters": EDIT,
        },
    }
]
INSTRUCTIONS = {
    "schema": (
        "You change code in a git repository. Answer with a JSON object: edits, a list of "
        "{file, start, end, text}, each replacing lines start to end (1-based, inclusive) of "
        "file with text; to insert without replacing, give end = start - 1. Line numbers and "
        "' | ' shown with the code are not part of the file. Keep the change as small as the "
        "request allows; only touch files inside the repository, never .git."
    ),
    "tools": (
        "You change code in a git repository. Call replace_lines for each change: it replaces "
        "lines start to end (1-based, inclusive) of file with text; to insert without "
        "replacing, give end = start - 1. Line numbers and ' | ' shown with the code are not "
        "part of the file. Keep the change as small as the request allows; only touch files "
        "inside the repository, never .git."
    ),
}


async def ask_edits(
    llm: Any, messages: list[dict], protocol: str, memory: str = "", max_tokens: int = 0
) -> tuple[list[dict], str]:
    """The model's edits (each a dict of EDIT) and its raw answer, or LmdError; `memory`, the
    project's instructions, follows the instructions; `max_tokens` (reply_max_tokens) caps the
    answer, 0 leaves it to the server."""
    instructions = INSTRUCTIONS[protocol] + (f"\n\n{memory}" if memory else "")
    system = [{"role": "system", "content": instructions}]
    asked = system + [m for m in messages if m["role"] != "system"]
    limit = {"max_tokens": max_tokens} if max_tokens else {}
    if protocol == "tools":
        response = await llm.complete(asked, tools=TOOLS, tool_choice="auto", **limit)
        message = response.choices[0].message if response.choices else None
        calls = list(getattr(message, "tool_calls", None) or [])
        raw = json.dumps([[c.function.name, c.function.arguments] for c in calls])
        edits = []
        for call in calls:
            if call.function.name != "replace_lines":
                raise LmdError(f"The model called {call.function.name!r}, not replace_lines.")
            try:
                edits.append(json.loads(call.function.arguments or ""))
            except ValueError:
                raise LmdError("The model's edit was not valid JSON.") from None
        if not edits:
            raise LmdError("The model answered without an edit.")
        return edits, raw
    caps = await llm.capabilities()
    fmt = caps.response_format("cobol_edits", EDITS_SCHEMA) or {"type": "json_object"}
    response = await llm.complete(asked, response_format=fmt, **limit)
    choice = response.choices[0] if response.choices else None
    if choice is None:
        raise BackendError("The language model sent an empty answer; try again.")
    raw = choice.message.content or ""
    try:
        data = json.loads(raw, strict=False)
    except ValueError:
        if limit and choice.finish_reason == "length":
            raise LmdError(
                f"The model's edits were cut off at reply_max_tokens ({max_tokens}); raise it "
                "or ask for a smaller change."
            ) from None
        raise LmdError("The model's edits were not a JSON object.") from None
    edits = data.get("edits") if isinstance(data, dict) else None
    if not isinstance(edits, list) or not edits:
        raise LmdError("The model answered without an edit.")
    return edits, raw


def edits_to_diff(repo: str, edits: list[dict]) -> str:
    """A unified diff doing `edits` to the files as they are now; LmdError for an edit that
    does not fit (an unknown file, lines out of range, overlapping edits)."""
    by_file: dict[str, list[dict]] = {}
    for e in edits:
        if not isinstance(e, dict) or not isinstance(e.get("file"), str):
            raise LmdError("An edit named no file.")
        for key in ("start", "end"):
            if isinstance(e.get(key), bool) or not isinstance(e.get(key), int):
                raise LmdError(f"An edit of {e['file']} had no whole-number {key} line.")
        if not isinstance(e.get("text"), str):
            raise LmdError(f"An edit of {e['file']} had no text.")
        by_file.setdefault(e["file"], []).append(e)
    out = []
    for name, changes in by_file.items():
        path, problem = inside(repo, name)
        if problem:
            raise LmdError(problem)
        rel = str(Path(path).relative_to(Path(repo).resolve()))
        old = path.read_text("utf-8").splitlines(keepends=True) if path.is_file() else []
        new = list(old)
        last_start = None
        for e in sorted(changes, key=lambda c: c["start"], reverse=True):
            start, end = e["start"], e["end"]
            if not (1 <= start <= len(old) + 1) or not (start - 1 <= end <= len(old)):
                raise LmdError(
                    f"An edit of {rel} names lines {start}-{end}, outside its {len(old)} lines."
                )
            if last_start is not None and end >= last_start:
                raise LmdError(f"Two edits of {rel} overlap.")
            last_start = start
            text = e["text"]
            lines = text.splitlines(keepends=True)
            if lines and not lines[-1].endswith("\n"):
                lines[-1] += "\n"
            new[start - 1 : end] = lines
        a = f"a/{rel}" if old else "/dev/null"
        out.extend(difflib.unified_diff(old, new, a, f"b/{rel}", n=3))
    diff = "".join(out)
    if not diff:
        raise LmdError("The model's edits change nothing.")
    return diff
