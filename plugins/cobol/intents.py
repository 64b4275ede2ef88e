"""What an utterance asks cobol for: focus, compile, fix, undo, diff, an edit, or yes/no."""

from __future__ import annotations

import re

from daemon.api import hear_answer, plural  # noqa: F401  (cobol's modules import plural here)

HELP = (
    "Say: focus on a file and lines or a function; rewrite function F so that X; compile; "
    "compile and fix; undo; or show the diff."
)

_COMPILE = re.compile(
    r"^(?:please\s+)?(?:compile|build|make|test|run\s+(?:the\s+)?(?:build|tests?|compiler))"
    r"(?:\s+(?:it|this|the\s+project|the\s+code|now|again|please))*$"
)
_FIX = re.compile(
    r"^(?:please\s+)?(?:(?:compile|build|test)\s+(?:and|&|then)\s+fix(?:\s+it)?"
    r"|fix\s+the\s+(?:build|tests?)|make\s+(?:it|the\s+build|the\s+tests?)\s+pass)"
    r"(?:\s+(?:now|again|please))*$"
)
_UNDO = re.compile(r"^(?:please\s+)?(?:undo|revert|roll\s*back)\b")
_DIFF = re.compile(
    r"^(?:please\s+)?(?:(?:show|read|give|tell)\s+(?:me\s+)?(?:the\s+)?(?:diff|changes)"
    r"|diff|what\s+(?:did\s+you\s+change|changed|has\s+changed))\b"
)
_STATUS = re.compile(r"^(?:focus|what\s+is\s+(?:the\s+)?focus|where\s+am\s+i)$")
EDIT_TARGET = re.compile(
    r"^(?:please\s+)?(?:rewrite|change|edit|modify|update|fix|refactor)\s+(?:the\s+)?"
    r"(?:(?:function|method|class)\s+)?([A-Za-z_]\w*)\b",
    re.IGNORECASE,
)


def normalise(text: str) -> str:
    return re.sub(r"\s+", " ", text.strip().strip(".!?,;").lower())


def yes_or_no(text: str) -> bool | None:
    """True for a yes, False for a no, None for anything else (a wait, an unclear answer, a
    request): the core's reading of spoken answers, biased to refuse."""
    heard = hear_answer(text)
    if heard is None or heard.outcome not in ("yes", "no"):
        return None
    return heard.outcome == "yes"


def classify(text: str) -> str:
    """One of focus, status, fix, compile, undo, diff, help, edit."""
    words = normalise(text)
    if _STATUS.match(words):
        return "status"
    if words.startswith("focus"):
        return "focus"
    if _FIX.match(words):
        return "fix"
    if _COMPILE.match(words):
        return "compile"
    if _UNDO.match(words):
        return "undo"
    if _DIFF.match(words):
        return "diff"
    if words in ("help", "what can you do", "what can i say"):
        return "help"
    return "edit"
