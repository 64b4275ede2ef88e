"""What a backend can do, probed once per endpoint and model with tiny requests.

Modes ask for a capability (native tool calls, JSON-schema output, logprobs, `n`, a tokenize
endpoint, assistant prefill), never for a vendor. A feature counts only when the server showed
it: an answer that merely did not fail is not enough (a server may accept `tools` and answer in
plain text, or take `response_format` and ignore it). What is unknown is off, so a mode falls
back to the text protocols that every server keeps.

Each probe is one small request sent with the header `X-Lmd-Probe: <feature>` (real servers
ignore it; the tests' stand-in backend answers by a profile), no retries, a short timeout.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import asdict, dataclass, field, fields, replace
from typing import Any

PROBE_HEADER = "X-Lmd-Probe"
PROBE_TOOL = "lmd_probe_echo"
# A key and value no model writes unprompted: seeing them proves the schema was enforced.
SCHEMA_KEY, SCHEMA_VALUE = "lmd_probe_7f3", 4217
PREFILL_ASK = "Count from 1 to 10, separated by commas."
PREFILL_START = "1, 2, 3, 4, 5, 6,"
# Where servers keep a tokenize endpoint, relative to the server root (the base URL minus /v1),
# with the body each takes: llama-cpp-python, llama.cpp's server, vLLM.
TOKENIZE_PATHS = (
    ("/extras/tokenize", "input"),
    ("/tokenize", "content"),
    ("/tokenize", "prompt"),
)
PROBE_TIMEOUT = 30.0  # seconds per request: a cold server compiles a grammar on first use
SCHEMA_PROBE_TOKENS = 96


@dataclass(frozen=True)
class Capabilities:
    """What one backend (endpoint + model) showed it can do."""

    tools: bool = False  # accepts `tools` and answers with `tool_calls` on its own
    tool_choice: bool = False  # honours tool_choice naming one function (forces that call)
    tool_required: bool = False  # honours tool_choice "required" (some tool call, any)
    json_schema: bool = False  # honours response_format {"type": "json_schema", ...}
    logprobs: bool = False  # chat logprobs
    top_logprobs: int = 0  # alternatives per position it returns (0: none)
    n: bool = False  # several choices per request
    tokenize: bool = False  # a tokenize endpoint (see tokenize_path)
    prefill: bool = False  # continues a final assistant message
    source: str = "assumed"  # "probe", "setting" (overridden) or "assumed" (not probed)
    prefill_echo: bool = False  # its answer repeats the assistant's text before going on
    slots: int = 0  # requests it serves at once (llama.cpp's parallel slots); 0: not said
    max_n: int = 0  # choices it gives in one request; 0: no limit known
    context_window: int = 0  # tokens of context one request may use; 0: not said
    tokenize_path: str = ""  # "/extras/tokenize" etc., relative to the server root
    tokenize_field: str = ""  # the body field holding the text: input, content or prompt
    schema_format: str = ""  # how it takes a schema: "json_schema" or "json_object"
    notes: tuple[str, ...] = ()  # why a feature is off, one short phrase each
    probed_at: float = 0.0

    FEATURES = ("tools", "tool_choice", "tool_required", "json_schema", "logprobs",
                "top_logprobs", "n", "tokenize", "prefill")  # fmt: skip

    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> Capabilities:
        data = json.loads(text)
        known = {f.name for f in fields(cls)}
        data = {k: v for k, v in data.items() if k in known}
        data["notes"] = tuple(data.get("notes") or ())
        return cls(**data)

    def with_overrides(self, overrides: Mapping[str, Any]) -> Capabilities:
        """The `backend_capabilities` setting wins over what was probed."""
        if not overrides:
            return self
        changes = {k: overrides[k] for k in self.FEATURES if k in overrides}
        if "top_logprobs" in changes:
            changes["top_logprobs"] = int(changes["top_logprobs"])
        for k in self.FEATURES:
            if k in changes and k != "top_logprobs":
                changes[k] = bool(changes[k])
        return replace(self, **changes, source="setting") if changes else self

    def response_format(self, name: str, schema: dict) -> dict | None:
        """The `response_format` constraining an answer to `schema`, or None when the server
        cannot (then ask in words and parse)."""
        if not self.json_schema:
            return None
        return response_format(self.schema_format or "json_schema", name, schema)

    def lines(self) -> list[tuple[str, str]]:
        """(feature, "yes"/"no"/count) rows for doctor-style output."""
        rows = []
        for name in self.FEATURES:
            value = getattr(self, name)
            if name == "top_logprobs":
                rows.append((name, str(value)))
            elif name == "tokenize" and value:
                rows.append((name, f"yes ({self.tokenize_path})"))
            elif name == "json_schema" and value and self.schema_format:
                rows.append((name, f"yes (response_format {self.schema_format})"))
            else:
                rows.append((name, "yes" if value else "no"))
        return rows


def check_overrides(value: Any) -> str | None:
    """The setting's check: a JSON object of known features (a phrase, as checks give)."""
    if not isinstance(value, dict):
        return 'it must be a JSON object, like {"tools": false}'
    unknown = sorted(set(value) - set(Capabilities.FEATURES))
    if unknown:
        return f"it does not know {', '.join(unknown)}; it takes " + ", ".join(
            Capabilities.FEATURES
        )
    for k, v in value.items():
        if k == "top_logprobs":
            if isinstance(v, bool) or not isinstance(v, int) or v < 0:
                return "top_logprobs must be a whole number of at least 0"
        elif not isinstance(v, bool):
            return f"{k} must be true or false"
    return None


# -- probing --------------------------------------------------------------------------------

Send = Callable[..., Awaitable[Any]]


@dataclass
class _Result:
    found: dict[str, Any] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)


def _message(response: Any) -> Any:
    choices = getattr(response, "choices", None) or []
    return choices[0].message if choices else None


def _tool_call_ok(response: Any) -> bool:
    message = _message(response)
    for call in getattr(message, "tool_calls", None) or []:
        fn = getattr(call, "function", None)
        if fn is not None and fn.name == PROBE_TOOL:
            try:
                args = json.loads(fn.arguments or "")
            except ValueError:
                return False
            return isinstance(args, dict) and isinstance(args.get("word"), str)
    return False


TOOL = {
    "type": "function",
    "function": {
        "name": PROBE_TOOL,
        "description": "Echo one word back.",
        "parameters": {
            "type": "object",
            "properties": {"word": {"type": "string"}},
            "required": ["word"],
        },
    },
}
TOOL_ASK = [{"role": "user", "content": f"Call the {PROBE_TOOL} tool with the word ok."}]


async def _tools(send: Send, r: _Result) -> None:
    response = await send("tools", TOOL_ASK, tools=[TOOL], max_tokens=96, temperature=0)
    r.found["tools"] = _tool_call_ok(response)
    if not r.found["tools"]:
        r.notes.append("tools: answered without a tool call")


async def _tool_choice(send: Send, r: _Result) -> None:
    choice = {"type": "function", "function": {"name": PROBE_TOOL}}
    response = await send(
        "tool_choice", TOOL_ASK, tools=[TOOL], tool_choice=choice, max_tokens=96, temperature=0
    )
    r.found["tool_choice"] = _tool_call_ok(response)
    if not r.found["tool_choice"]:
        r.notes.append("tool_choice: a call forced by name did not come back")


async def _tool_required(send: Send, r: _Result) -> None:
    response = await send(
        "tool_required", TOOL_ASK, tools=[TOOL], tool_choice="required", max_tokens=96,
        temperature=0,
    )  # fmt: skip
    r.found["tool_required"] = _tool_call_ok(response)
    if not r.found["tool_required"]:
        r.notes.append('tool_required: tool_choice "required" brought no call')


SCHEMA = {
    "type": "object",
    "properties": {SCHEMA_KEY: {"type": "integer", "enum": [SCHEMA_VALUE]}},
    "required": [SCHEMA_KEY],
    "additionalProperties": False,
}


def response_format(schema_format: str, name: str, schema: dict) -> dict:
    """The `response_format` asking for `schema` in a server's own shape: OpenAI's
    json_schema (OpenAI, vLLM, llama.cpp, Ollama, SGLang) or llama-cpp-python's json_object
    with a schema."""
    if schema_format == "json_object":
        return {"type": "json_object", "schema": schema}
    # not "strict": OpenAI's strict mode refuses keywords such as maxLength that other
    # servers' grammars honour
    return {"type": "json_schema", "json_schema": {"name": name, "schema": schema}}


async def _json_schema(send: Send, r: _Result) -> None:
    ask = [{"role": "user", "content": "Answer with a JSON object."}]
    for shape in ("json_schema", "json_object"):
        fmt = response_format(shape, "probe", SCHEMA)
        try:
            # greedy, and room for the whitespace a grammar allows between the tokens (24
            # tokens ended some answers mid-object)
            response = await send(
                "json_schema", ask, response_format=fmt, max_tokens=SCHEMA_PROBE_TOKENS,
                temperature=0,
            )  # fmt: skip
        except _Refused:
            continue
        message = _message(response)
        try:
            data = json.loads((getattr(message, "content", None) or "").strip())
        except ValueError:
            data = None
        if isinstance(data, dict) and data.get(SCHEMA_KEY) == SCHEMA_VALUE:
            r.found.update(json_schema=True, schema_format=shape)
            return
    r.found["json_schema"] = False
    r.notes.append("json_schema: no answer followed the schema")


async def _logprobs(send: Send, r: _Result) -> None:
    ask = [{"role": "user", "content": "Say yes."}]
    for top in (20, 5, 0):
        extra = {"top_logprobs": top} if top else {}
        try:
            response = await send(
                "logprobs", ask, logprobs=True, max_tokens=1, temperature=0, **extra
            )
        except _Refused:
            continue
        choices = getattr(response, "choices", None) or []
        logprobs = getattr(choices[0], "logprobs", None) if choices else None
        content = getattr(logprobs, "content", None)
        if content:
            r.found["logprobs"] = True
            r.found["top_logprobs"] = len(getattr(content[0], "top_logprobs", None) or [])
            return
        break
    r.found["logprobs"] = False
    r.notes.append("logprobs: none came back")


async def _n(send: Send, r: _Result) -> None:
    ask = [{"role": "user", "content": "Say yes."}]
    response = await send("n", ask, n=2, max_tokens=1, temperature=0)
    r.found["n"] = len(getattr(response, "choices", None) or []) == 2
    if not r.found["n"]:
        r.notes.append("n: one choice came back for two")


async def _prefill(send: Send, r: _Result) -> None:
    # An honouring server continues the assistant's own line ("7, 8, ..."); one that ignores
    # continue_final_message starts a fresh answer. A tiny model may count badly: that reads
    # as "no prefill", the safe side (the strategy then falls back).
    ask = [
        {"role": "user", "content": PREFILL_ASK},
        {"role": "assistant", "content": PREFILL_START},
    ]
    extra = {"continue_final_message": True, "add_generation_prompt": False}
    response = await send("prefill", ask, max_tokens=8, temperature=0, extra_body=extra)
    text = (getattr(_message(response), "content", None) or "").strip()
    # llama.cpp's server answers the assistant's text and its continuation: that counts
    echo = text.startswith(PREFILL_START) and text[len(PREFILL_START) :].strip().startswith("7")
    r.found["prefill"] = text.startswith("7") or echo
    r.found["prefill_echo"] = echo
    if not r.found["prefill"]:
        r.notes.append("prefill: the answer did not continue the assistant's text")


class _Refused(Exception):
    """The server said no to a feature (HTTP 4xx): the feature is off, the probe goes on."""


async def probe(llm: Any, timeout: float = PROBE_TIMEOUT) -> Capabilities:
    """Ask the backend behind `llm` (daemon.backends.llm.LLM) what it can do."""
    # lazy: openai and httpx2 load in ~0.3 s; `lmd settings` and the CLI reach this module
    import openai

    if getattr(llm, "before_call", None) is not None:
        await llm.before_call()  # the embedded model's server may still be starting
    client = llm.client.with_options(max_retries=0, timeout=timeout)

    async def send(feature: str, messages: list[dict], **kwargs: Any) -> Any:
        try:
            return await client.chat.completions.create(
                model=llm.model,
                messages=messages,
                extra_headers={PROBE_HEADER: feature},
                **kwargs,
            )
        except (
            openai.AuthenticationError,
            openai.PermissionDeniedError,
            openai.NotFoundError,
            openai.RateLimitError,
        ):
            raise  # about the backend as a whole, not this feature: the probe fails
        except openai.APIStatusError as e:
            # 400 or 422 for an unknown parameter; some servers answer 500 to what they reject
            raise _Refused(str(e)) from e

    r = _Result()
    await _server_props(llm, timeout, r)
    steps = (_tools, _tool_choice, _tool_required, _json_schema, _logprobs, _n, _prefill)
    for step in steps:  # one after another: many local servers answer one request at a time
        name = step.__name__.lstrip("_")
        try:
            await step(send, r)
        except _Refused:
            r.found.setdefault(name, False)
            r.notes.append(f"{name}: refused by the server")
    await _tokenize(llm, timeout, r)
    found = {k: v for k, v in r.found.items() if k in Capabilities.FEATURES}
    return Capabilities(
        **found,
        source="probe",
        prefill_echo=bool(r.found.get("prefill_echo")),
        slots=int(r.found.get("slots") or 0),
        max_n=int(r.found.get("slots") or 0),
        context_window=int(r.found.get("context_window") or 0),
        tokenize_path=r.found.get("tokenize_path", ""),
        tokenize_field=r.found.get("tokenize_field", ""),
        schema_format=r.found.get("schema_format", ""),
        notes=tuple(r.notes),
        probed_at=time.time(),
    )


def server_root(base_url: str) -> str:
    """http://host:port/v1 -> http://host:port (tokenize endpoints sit beside /v1)."""
    url = base_url.rstrip("/")
    return url[: -len("/v1")] if url.endswith("/v1") else url


async def _server_get(llm: Any, path: str, timeout: float) -> Any:
    """The JSON a GET of `path` (beside /v1) answers, or None."""
    import httpx2  # lazy: see probe

    root = server_root(str(llm.client.base_url))
    headers = {"Authorization": f"Bearer {llm.api_key}", PROBE_HEADER: path.strip("/")}
    try:
        answer = await llm.http.get(root + path, headers=headers, timeout=timeout)
        return answer.json() if answer.status_code == 200 else None
    except (httpx2.HTTPError, ValueError):
        return None


async def _server_props(llm: Any, timeout: float, r: _Result) -> None:
    """What a llama.cpp server says of itself (GET /props): its parallel slots and each
    slot's context window; vLLM's /v1/models says the window as max_model_len."""
    props = await _server_get(llm, "/props", timeout)
    if isinstance(props, dict):
        slots = props.get("total_slots")
        settings = props.get("default_generation_settings")
        window = settings.get("n_ctx") if isinstance(settings, dict) else None
        if isinstance(slots, int) and slots > 0:
            r.found["slots"] = slots
        if isinstance(window, int) and window > 0:
            r.found["context_window"] = window
        return
    models = await _server_get(llm, "/v1/models", timeout)
    rows = models.get("data") if isinstance(models, dict) else None
    for row in rows if isinstance(rows, list) else ():
        if isinstance(row, dict) and row.get("id") == llm.model:
            window = row.get("max_model_len")
            if isinstance(window, int) and window > 0:
                r.found["context_window"] = window


async def _tokenize(llm: Any, timeout: float, r: _Result) -> None:
    import httpx2  # lazy: see probe

    root = server_root(str(llm.client.base_url))
    headers = {"Authorization": f"Bearer {llm.api_key}", PROBE_HEADER: "tokenize"}
    for path, key in TOKENIZE_PATHS:
        body: dict[str, Any] = {key: "hello world"}
        if key == "prompt":
            body["model"] = llm.model
        try:
            answer = await llm.http.post(root + path, json=body, headers=headers, timeout=timeout)
            tokens = answer.json().get("tokens") if answer.status_code == 200 else None
        except (httpx2.HTTPError, ValueError, AttributeError):
            tokens = None
        if isinstance(tokens, list) and tokens and all(isinstance(t, int) for t in tokens):
            r.found.update(tokenize=True, tokenize_path=path, tokenize_field=key)
            return
    r.found["tokenize"] = False
    r.notes.append("tokenize: no endpoint found")


class CapabilityCache:
    """Probe results per (endpoint, model): in memory, and in the database when given one.

    One probe at a time per backend; a probe that fails (timeout, unreachable) is not kept:
    the text protocols are used, and the next call probes again after `retry_after` seconds.
    """

    def __init__(
        self,
        load: Callable[[str, str], str | None] | None = None,
        save: Callable[[str, str, str], None] | None = None,
        retry_after: float = 60.0,
        timeout: float = PROBE_TIMEOUT,
    ) -> None:
        self._load, self._save = load, save
        self.timeout = timeout
        self._known: dict[tuple[str, str], Capabilities] = {}
        self._failed: dict[tuple[str, str], float] = {}
        self._locks: dict[tuple[str, str], asyncio.Lock] = {}
        self.retry_after = retry_after

    def cached(self, url: str, model: str) -> Capabilities | None:
        key = (url, model)
        if key not in self._known and self._load is not None:
            text = self._load(url, model)
            if text:
                try:
                    self._known[key] = Capabilities.from_json(text)
                except (ValueError, TypeError):
                    pass  # an unreadable row is probed again
        return self._known.get(key)

    def forget(self, url: str) -> None:
        """Drop what is known of the server at `url` (another server now holds its address)."""
        for key in [k for k in (*self._known, *self._failed) if k[0] == url]:
            self._known.pop(key, None)
            self._failed.pop(key, None)

    def keep(self, url: str, model: str, caps: Capabilities) -> None:
        """Take what a probe elsewhere found (the same server, model and engine) as known."""
        self._known[(url, model)] = caps

    async def get(self, llm: Any, fresh: bool = False) -> Capabilities:
        key = (getattr(llm, "identity", llm.url), llm.model)
        if not fresh and (known := self.cached(*key)) is not None:
            return known
        if not fresh and time.monotonic() - self._failed.get(key, -1e9) < self.retry_after:
            return Capabilities(notes=("the last probe failed; using the text protocols",))
        lock = self._locks.setdefault(key, asyncio.Lock())
        async with lock:
            if not fresh and (known := self._known.get(key)) is not None:
                return known  # another caller probed while we waited
            try:
                caps = await probe(llm, self.timeout)
            except Exception as e:  # unreachable, timed out, unreadable: not a capability
                self._failed[key] = time.monotonic()
                why = getattr(e, "sentence", None) or type(e).__name__
                return Capabilities(notes=(f"the probe failed ({why}); using the text protocols",))
            self._known[key] = caps
            self._failed.pop(key, None)
            if self._save is not None:
                # a database write: off the event loop (another program may hold the lock)
                await asyncio.to_thread(self._save, key[0], key[1], caps.to_json())
            return caps


_SHARED: CapabilityCache | None = None


def shared_cache() -> CapabilityCache:
    """The in-memory cache of clients made outside a daemon (CLI commands, benchmarks)."""
    global _SHARED
    if _SHARED is None:
        _SHARED = CapabilityCache()
    return _SHARED


def stored_cache(store: Any) -> CapabilityCache:
    """A cache kept in a daemon store's database (for clients made outside the daemon: the
    CLI's `lmd score` and `lmd sql` probe a backend once, not on every run)."""
    return CapabilityCache(store.capabilities, store.save_capabilities)
