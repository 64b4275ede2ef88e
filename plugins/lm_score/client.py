"""LM_SCORE from Python: ask a running daemon (POST /lm_score) with the light client.

    from plugins.lm_score.client import LM_SCORE
    LM_SCORE("This is a test", "Is this a test?")  # -> 10; ClientError with a sentence

Only the standard library and daemon.api's client are imported, so a script or a shell
alias pays no more than `lmd say` does.
"""

from __future__ import annotations

import json
from typing import Any

from daemon.api import ClientError, request

__all__ = ["LM_SCORE", "ClientError", "lm_score_result"]


def _json_safe(value: Any) -> Any:
    """Contents JSON cannot carry as they are: bytes become UTF-8 text (like the server)."""
    if isinstance(value, bytes | bytearray | memoryview):
        return bytes(value).decode("utf-8", "replace")
    return value


def lm_score_result(
    parts: list, *, url: str | None = None, token: str | None = None, cache: bool = True
) -> dict:
    """POST /lm_score for LM_SCORE(*parts); the daemon's whole JSON answer."""
    body: dict[str, Any] = {
        "contents": [_json_safe(p) for p in parts[:-1]],
        "question": _json_safe(parts[-1]) if parts else None,
        "cache": cache,
    }
    _, _, raw = request("POST", "/lm_score", body, url=url, token=token)
    return json.loads(raw)


def LM_SCORE(*parts: Any, url: str | None = None, token: str | None = None) -> int:  # noqa: N802
    """The spec's LM_SCORE: contents..., then a yes/no question -> 0 (no) to 10 (yes).

    Asks the running daemon (LMD_URL, default http://127.0.0.1:8420); raises ClientError
    with the daemon's sentence when it cannot score.
    """
    return lm_score_result(list(parts), url=url, token=token)["score"]
