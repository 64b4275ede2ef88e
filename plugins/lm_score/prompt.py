"""The spec's prompt, byte for byte, and how arguments become its text.

LM_SCORE(part, ..., question): every argument but the last is content, joined by "\n"; the
last is a yes/no question. Non-text contents become text so the original's crash on numbers
and NULLs cannot happen (see `content_text`).
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from typing import Any

from daemon.api import LmdError

# Exactly the seed's f-string (note the space after "Content:"). Do not reformat.
PROMPT_TEMPLATE = (
    "Based on the following content, answer this yes/no question: {question}\n"
    "\n"
    "Content: \n"
    "{content}\n"
    "\n"
    "Provide a score from 0 to 10 based on your confidence in the answer:\n"
    "- 10 = strongly yes, definitely true\n"
    "- 7-9 = probably yes, likely true\n"
    "- 5-6 = uncertain, could go either way\n"
    "- 3-4 = probably no, likely false\n"
    "- 0-2 = strongly no, definitely false\n"
    "\n"
    "Provide only a single number from 0 to 10.\n"
    "Score:"
)

# The assistant prefill that tells a thinking model its thinking is over (THINKING=f).
THINK_PREFILL = "<think>Okay, I think I have finished thinking</think>"


def content_text(value: Any) -> str:
    """One content argument as text.

    str as is; None (SQL NULL) as an empty line; bool as true/false; int as digits; float
    as Python's shortest repr, which is also SQLite's CAST(x AS TEXT) for ordinary values
    (14000.0 -> "14000.0"); bytes (BLOBs) as UTF-8 with undecodable bytes replaced by U+FFFD;
    lists and dicts (from JSON) as compact JSON, without spaces, as SQLite's json() writes it
    (so a list sent over HTTP and the same JSON from a query give one prompt, one cache entry).
    """
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return repr(value) if math.isfinite(value) else str(value)
    if isinstance(value, bytes | bytearray | memoryview):
        return bytes(value).decode("utf-8", "replace")
    if isinstance(value, list | tuple | dict):
        return json.dumps(value, ensure_ascii=False, separators=(",", ":"))
    return str(value)


def split_parts(parts: Sequence[Any]) -> tuple[list[str], str]:
    """(contents as text, question) from LM_SCORE's arguments, refusing bad ones."""
    if len(parts) < 2:
        raise LmdError(
            "LM_SCORE needs at least two arguments: the content, then a yes/no question.",
            status=400,
        )
    question = parts[-1]
    if not isinstance(question, str):
        raise LmdError(
            "The last argument of LM_SCORE must be the question as text; put it last.",
            status=400,
        )
    if not question.strip():
        raise LmdError("The question is empty; ask a yes/no question.", status=400)
    return [content_text(p) for p in parts[:-1]], question


def build_prompt(contents: Sequence[Any], question: str) -> str:
    """The spec's prompt for these contents and this question."""
    content = "\n".join(content_text(c) for c in contents)
    return PROMPT_TEMPLATE.format(question=question, content=content)


def prompt_for(parts: Sequence[Any]) -> str:
    """The prompt for LM_SCORE(*parts)."""
    contents, question = split_parts(parts)
    return build_prompt(contents, question)
