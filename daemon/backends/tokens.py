"""Token counting: tiktoken when its encoding is available, else a documented estimate.

tiktoken downloads its encoding files on first use. Offline (as on machines with no network,
and unless the files are in TIKTOKEN_CACHE_DIR) that fails; we then estimate one token per
four UTF-8 bytes, rounded up, and log one warning. LMD_TOKENIZER=estimate skips the attempt.
"""

from __future__ import annotations

import logging
import os
import threading
from typing import Any

log = logging.getLogger("lmd.tokens")

_lock = threading.Lock()
_encodings: dict[str, Any] = {}  # model -> tiktoken.Encoding, or None when unavailable
_warned = False


def estimate(text: str) -> int:
    """One token per 4 UTF-8 bytes, rounded up (English averages about 4 bytes a token)."""
    n = len(text.encode("utf-8", "surrogatepass"))
    return (n + 3) // 4


def set_encoding(model: str, encoding: Any) -> None:
    """Use this tiktoken Encoding for `model` (tests and offline users with their own file)."""
    with _lock:
        _encodings[model] = encoding


def encoding_for(model: str) -> Any:
    """The tiktoken Encoding for a model, or None when it cannot be had (warns once)."""
    global _warned
    with _lock:
        if model in _encodings:
            return _encodings[model]
    enc = None
    if os.environ.get("LMD_TOKENIZER", "").lower() != "estimate":
        try:
            import tiktoken

            try:
                enc = tiktoken.encoding_for_model(model)
            except KeyError:  # a model tiktoken does not know (llama, qwen, ...)
                enc = tiktoken.get_encoding("o200k_base")
        except Exception as e:
            with _lock:
                if not _warned:
                    _warned = True
                    log.warning(
                        "tiktoken could not load an encoding (%s); token counts are estimated "
                        "as one token per 4 bytes.",
                        type(e).__name__,
                    )
    with _lock:
        _encodings[model] = enc
    return enc


def count(text: str, model: str = "gpt-4.1-mini") -> int:
    """Tokens in `text` for `model`."""
    enc = encoding_for(model)
    if enc is None:
        return estimate(text)
    return len(enc.encode(text, disallowed_special=()))


def tokenizer_name(model: str = "gpt-4.1-mini") -> str:
    """Which counter is in use: 'tiktoken:<encoding>' or 'estimate (4 bytes/token)'."""
    enc = encoding_for(model)
    return f"tiktoken:{enc.name}" if enc is not None else "estimate (4 bytes/token)"
