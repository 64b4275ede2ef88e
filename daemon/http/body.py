"""What a request sent: its body within a size and a time limit, as UTF-8 text or strict JSON,
and the session it speaks in. Every route reads requests through these."""

from __future__ import annotations

import asyncio
import json
import math
import re
from typing import TYPE_CHECKING, Any

from starlette.requests import Request

from daemon.core.errors import LmdError

if TYPE_CHECKING:
    from daemon.core.daemon import Daemon

SESSION_NAME = re.compile(r"[\w.:@+-]{1,128}")  # used with fullmatch: "$" lets "\n" through
MAX_PROMPT_ID = 2**63 - 1  # SQLite's largest integer; bigger ids overflow the driver


class TooLarge(LmdError):
    status = 413


async def read_body(request: Request, limit: int, deadline_secs: float | None = None) -> bytes:
    """The body, refusing (413) anything over `limit` bytes without reading it all.

    With `deadline_secs`, a body that trickles in slower than that (slowloris) is refused (408)
    instead of holding a connection forever.
    """
    declared = request.headers.get("content-length")
    too_large = TooLarge(
        f"The request is larger than {limit} bytes; send less, or raise max_body_bytes."
    )
    if declared and declared.isdigit() and int(declared) > limit:
        raise too_large
    parts, size = [], 0

    async def collect() -> None:
        nonlocal size
        async for chunk in request.stream():
            size += len(chunk)
            if size > limit:
                raise too_large
            parts.append(chunk)

    if deadline_secs is None:
        await collect()
    else:
        try:
            await asyncio.wait_for(collect(), deadline_secs)
        except TimeoutError:
            raise LmdError(
                f"The request body took longer than {deadline_secs:g} seconds to arrive; "
                "send it in one go.",
                status=408,
            ) from None
    return b"".join(parts)


async def read_request_body(request: Request, daemon: Daemon) -> bytes:
    """The body within max_body_bytes and body_read_timeout_secs."""
    s = daemon.settings()
    return await read_body(request, s["max_body_bytes"], s["body_read_timeout_secs"])


def decode_text(body: bytes) -> str:
    """A request body as UTF-8 text, or a 400 sentence saying it is not."""
    try:
        return body.decode("utf-8")
    except UnicodeDecodeError as e:
        raise LmdError(
            f"The request is not valid UTF-8 (bad byte at position {e.start}); send UTF-8 text."
        ) from None


MAX_INT_DIGITS = 4300  # Python's own limit for int(str); past it json.loads raises ValueError


class _Unusable(Exception):
    """A JSON number lmd refuses (raised from inside the decoder)."""


def _int(text: str) -> int:
    digits = len(text.lstrip("-"))
    if digits > MAX_INT_DIGITS:
        raise _Unusable(f"a number has {digits} digits, more than {MAX_INT_DIGITS}")
    return int(text)


def _float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise _Unusable(f"the number {text[:20]} is too large")
    return value


def _constant(text: str) -> Any:
    raise _Unusable(f"{text} is not a JSON number")


def parse_json(text: str, example: str = "a JSON object") -> Any:
    """JSON text as data, or a 400 sentence saying what is wrong and what to send instead.

    Refused besides syntax errors: nesting deeper than Python can follow, integers of more
    than 4,300 digits, NaN/Infinity and numbers too large for a float, lone surrogates.
    """
    try:
        data = json.loads(text, parse_int=_int, parse_float=_float, parse_constant=_constant)
    except _Unusable as e:
        problem = str(e)
    except json.JSONDecodeError as e:
        problem = f"{e.msg} at line {e.lineno} column {e.colno}"
    except RecursionError:
        problem = "it is nested too deeply"
    except ValueError as e:  # any other refusal of the decoder
        problem = str(e).split(";")[0] or type(e).__name__
    else:
        try:
            check_encodable(data)
        except RecursionError:  # decoded just under the limit; encoding it again goes deeper
            problem = "it is nested too deeply"
        else:
            return data
    raise LmdError(f"The request body is not valid JSON ({problem}); send {example}.")


async def read_json(request: Request, daemon: Daemon, example: str = "a JSON object") -> Any:
    """A JSON body within the size limit, or a 400 sentence: what every JSON route uses."""
    return parse_json(decode_text(await read_request_body(request, daemon)), example)


def check_encodable(data: Any) -> None:
    """Refuse JSON strings with lone surrogates ("\\ud800"): valid JSON, but not storable text."""
    try:
        json.dumps(data, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError:
        raise LmdError(
            "The request contains an invalid character (a lone UTF-16 surrogate); "
            "send valid Unicode text."
        ) from None


def session_name(request: Request, given: Any = None) -> str:
    """The session a request speaks in: `given`, X-Session, ?session=, else "default"."""
    name = given or request.headers.get("x-session") or request.query_params.get("session")
    name = name or "default"
    if not isinstance(name, str) or not SESSION_NAME.fullmatch(name):
        raise LmdError(
            "The session name must be 1 to 128 letters, digits or . _ - : @ +; pick another."
        )
    return name
