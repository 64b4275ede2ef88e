"""The `language` column of judged battles: the question's language, detected offline.

py3langid (a maintained fork of langid.py; its model ships inside the package, about 5 MB,
numpy only) gives an ISO 639 code such as `en`, `de` or `zh`. Imported on first use, so only
`lmd elo judge` and `lmd elo label` pay its start-up (about a second, once per run).
"""

from __future__ import annotations

from functools import lru_cache

import py3langid

NO_LANGUAGE = "zxx"  # py3langid's answer for text with no words in it ("2+2?")


@lru_cache(maxsize=4096)
def language_of(text: str) -> str:
    """The ISO 639 code of the language `text` is written in; '' when it has no words."""
    if not any(ch.isalpha() for ch in text):
        return ""

    code, _ = py3langid.classify(text)
    return "" if code == NO_LANGUAGE else code
