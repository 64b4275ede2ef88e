"""lmd_journey_probe: what an lmd process asked its model server, for the journeys tier.

Installed as a plugin (an `lmd` entry point) in a site directory that the tier puts on the
PYTHONPATH of the daemons and `lmd` commands it starts; it does nothing unless
LMD_JOURNEY_RECORD names a file. It wraps httpx2's transports and lmd's own HTTP/1.1 client
for local servers (daemon/backends/lean_http.py): every request lmd's model clients send goes
through one of them, so it sees any model server on any address:

- **records** each request to a completions route, as JSON lines in $LMD_JOURNEY_RECORD:
  `{"event": "request", "id", "pid", "url", "uds", "body", "probe", "rule", "steered"}`
  (`uds`: the Unix socket it went to, if any; `probe`: lmd's capability probe asked it),
  `{"event": "first_byte", "id"}` when the answer starts, and `{"event": "end", "id",
  "status", "complete", "content", "finish_reason", "usage"}` when lmd closed the answer
  (`complete`: read to its end), or `{"event": "error", "id", "error"}` when it never came
  (no server there, no network);
- **narrows** a request when $LMD_JOURNEY_STEER names a JSON file of rules
  `[{"when": TEXT, "content": OBJECT, "text": STRING, "call": {"name", "arguments"}}]`: a
  chat request whose last message holds TEXT gets its output held to one answer, in the
  protocol lmd asked in: a JSON schema narrowed to `content`, native tools narrowed to the
  one `call`, or (no schema, no tools) a grammar that spells `text`. The embedded model then
  writes exactly that: the model server really answers, with the answer the journey needs,
  where the tiny model would not write it by itself. A rule `{"when": TEXT, "max_tokens": N}`
  leaves lmd's request as it is (its schema, its tools) but for the length of the answer:
  the server reads the whole request and writes N tokens. Each request's record says which
  rule matched (`rule`) and whether it could narrow it (`steered`).

No answer is made up here: the model server writes every byte lmd reads.
"""

from __future__ import annotations

import itertools
import json
import os
import time

import httpx2

from daemon.backends import lean_http

_IDS = itertools.count(1)
_ROUTES = ("/chat/completions", "/completions")
_KEEP = 20000  # characters of an answer's content kept in the record


def _record(**fields) -> None:
    path = os.environ.get("LMD_JOURNEY_RECORD")
    if not path:
        return
    line = json.dumps({"t": time.time(), "pid": os.getpid(), **fields}) + "\n"
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line.encode())
    finally:
        os.close(fd)


def _steer_rules() -> list[dict]:
    path = os.environ.get("LMD_JOURNEY_STEER")
    if not path:
        return []
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except (OSError, ValueError):
        return []


def _last_text(body: dict) -> str:
    messages = body.get("messages") or []
    if not messages:
        return ""
    content = messages[-1].get("content")
    if isinstance(content, list):
        content = " ".join(p.get("text", "") for p in content if isinstance(p, dict))
    return content if isinstance(content, str) else ""


def _narrow(body: dict) -> tuple[dict, str | None]:
    """The body narrowed by the first rule whose text is in its last message, and that
    rule's text (None when no rule matched; the body unchanged when the rule has no form
    for the protocol lmd asked in)."""
    last = _last_text(body)
    for rule in _steer_rules():
        if rule.get("when") and rule["when"] in last:
            return _narrowed(body, rule), rule["when"]
    return body, None


def _narrowed(body: dict, rule: dict) -> dict:
    if "max_tokens" in rule:
        return {**body, "max_tokens": rule["max_tokens"]}
    fmt = body.get("response_format") or {}
    if "content" in rule and fmt.get("type") in ("json_schema", "json_object"):
        schema = {"enum": [rule["content"]]}
        if fmt["type"] == "json_schema":  # OpenAI's shape (llama.cpp, vLLM, ...)
            return {**body, "response_format": {**fmt, "json_schema": {
                **fmt["json_schema"], "schema": schema}}}  # fmt: skip
        if "schema" in fmt:  # llama-cpp-python's
            return {**body, "response_format": {**fmt, "schema": schema}}
    if "call" in rule and body.get("tools"):
        name, args = rule["call"]["name"], rule["call"]["arguments"]
        params = {
            "type": "object",
            "properties": {k: {"enum": [v]} for k, v in args.items()},
            "required": list(args),
        }
        tools = [
            {**t, "function": {**t["function"], "parameters": params}}
            for t in body["tools"]
            if t.get("function", {}).get("name") == name
        ]
        if tools:
            choice = {"type": "function", "function": {"name": name}}
            return {**body, "tools": tools, "tool_choice": choice}
    if "text" in rule and not fmt and not body.get("tools"):
        return {**body, "grammar": "root ::= " + json.dumps(rule["text"])}
    return body


class _Teed(httpx2.AsyncByteStream):
    """The answer's bytes, passed on as they come and kept for the record."""

    def __init__(self, stream, rid: int, status: int) -> None:
        self.stream = stream
        self.rid = rid
        self.status = status
        self.data = bytearray()
        self.complete = False
        self.ended = False

    async def __aiter__(self):
        async for chunk in self.stream:
            if not self.data:
                _record(event="first_byte", id=self.rid)
            if len(self.data) < 4 * _KEEP:
                self.data += chunk
            yield chunk
        self.complete = True

    async def aclose(self) -> None:
        try:
            await self.stream.aclose()
        finally:
            if not self.ended:
                self.ended = True
                _record(event="end", id=self.rid, status=self.status, complete=self.complete,
                        **_answer(bytes(self.data)))  # fmt: skip


def _answer(data: bytes) -> dict:
    """content, finish_reason and usage of a JSON answer or a stream of events."""
    text = data.decode("utf-8", "replace")
    content, finish, usage = [], None, None
    chunks = []
    if text.lstrip().startswith("{"):
        try:
            chunks = [json.loads(text)]
        except ValueError:
            pass
    else:
        for line in text.splitlines():
            if line.startswith("data:") and line[5:].strip() not in ("", "[DONE]"):
                try:
                    chunks.append(json.loads(line[5:]))
                except ValueError:
                    pass
    for chunk in chunks:
        if not isinstance(chunk, dict):
            continue
        usage = chunk.get("usage") or usage
        for choice in chunk.get("choices") or []:
            part = choice.get("message") or choice.get("delta") or {}
            piece = part.get("content") if isinstance(part, dict) else None
            if piece is None:
                piece = choice.get("text")
            if isinstance(piece, str):
                content.append(piece)
            for call in (part.get("tool_calls") or []) if isinstance(part, dict) else []:
                content.append(json.dumps(call.get("function", {})))
            finish = choice.get("finish_reason") or finish
    return {"content": "".join(content)[:_KEEP], "finish_reason": finish, "usage": usage}


def _recorded(content: bytes, url: str, headers, uds: str | None) -> tuple[int, bytes]:
    """Record a request (narrowed by the first matching rule): its id and the body to send."""
    rid = next(_IDS)
    try:
        body = json.loads(content)
    except ValueError:
        body = None
    rule, steered = None, False
    if isinstance(body, dict) and body.get("messages"):
        narrowed, rule = _narrow(body)
        if narrowed is not body:
            content = json.dumps(narrowed).encode()
            body, steered = narrowed, True
    probe = "x-lmd-probe" in headers  # lmd's capability probe (its own header)
    _record(event="request", id=rid, url=url, uds=uds, body=body, probe=probe,
            rule=rule, steered=steered)  # fmt: skip
    return rid, content


_original = httpx2.AsyncHTTPTransport.handle_async_request


async def _handle(self, request):
    if not os.environ.get("LMD_JOURNEY_RECORD") or not request.url.path.endswith(_ROUTES):
        return await _original(self, request)
    try:
        content = request.content
    except httpx2.RequestNotRead:
        content = b""
    uds = getattr(getattr(self, "_pool", None), "_uds", None)  # a server on a Unix socket
    rid, sent = _recorded(content, str(request.url), request.headers, uds)
    if sent is not content:
        headers = [(k, v) for k, v in request.headers.raw if k.lower() != b"content-length"]
        request = httpx2.Request(request.method, request.url, headers=headers, content=sent,
                                 extensions=request.extensions)  # fmt: skip
    try:
        response = await _original(self, request)
    except BaseException as e:
        _record(event="error", id=rid, error=f"{type(e).__name__}: {e}")
        raise
    response.stream = _Teed(response.stream, rid, response.status_code)
    return response


_lean_post = lean_http.LeanClient.post


async def _lean(self, target, headers, content, request):
    if not os.environ.get("LMD_JOURNEY_RECORD") or not target.endswith(_ROUTES):
        return await _lean_post(self, target, headers, content, request)
    rid, content = _recorded(content, str(request.url), httpx2.Headers(headers), self.uds)
    try:
        response = await _lean_post(self, target, headers, content, request)
    except BaseException as e:
        _record(event="error", id=rid, error=f"{type(e).__name__}: {e}")
        raise
    teed = _Teed(_LeanBody(response), rid, response.status_code)
    response.aiter_bytes = teed.__aiter__  # what aread, aiter_text and the SSE reader use
    response.aclose = teed.aclose
    return response


class _LeanBody:
    """A lean response's own body and closing, for _Teed."""

    def __init__(self, response) -> None:
        self.body = type(response).aiter_bytes.__get__(response)
        self.close = type(response).aclose.__get__(response)

    def __aiter__(self):
        return self.body()

    async def aclose(self) -> None:
        await self.close()


httpx2.AsyncHTTPTransport.handle_async_request = _handle
lean_http.LeanClient.post = _lean
