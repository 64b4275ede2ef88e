"""Text from the model on a terminal: without the control sequences it may carry.

A reply is untrusted: a model (or a page it read) can emit ESC sequences that set the window
title, write the clipboard (OSC 52), hide text, move the cursor over earlier lines or, on
some terminals, answer back into the shell. Before printing to a terminal, every C0 and C1
control character except newline and tab goes, and so does each escape sequence as a whole
(its payload too: an OSC 52 clipboard write leaves no base64 behind).
"""

from __future__ import annotations

import re

# ESC [ ... final (CSI), ESC ] / P / X / ^ / _ ... up to BEL or ST (OSC, DCS, SOS, PM, APC),
# ESC + one intermediate run + final; the same with 8-bit C1 introducers (U+009B, U+009D ...).
_SEQUENCE = re.compile(
    r"""
    (?:\x1b\[|\x9b) [\x30-\x3f]* [\x20-\x2f]* [\x40-\x7e]?         # CSI
  | (?:\x1b[\]PX^_]|[\x90\x98\x9d\x9e\x9f]) .*? (?:\x07|\x1b\\|\x9c|(?=\n)|$)  # to ST
  | \x1b [\x20-\x2f]* [\x30-\x7e]?                                 # other ESC sequences
    """,
    re.VERBOSE | re.DOTALL,
)
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def clean(text: str) -> str:
    """`text` safe to print on a terminal: sequences and control characters removed,
    CR LF turned into LF (a lone CR could overprint a line with another)."""
    text = _SEQUENCE.sub("", text.replace("\r\n", "\n"))
    return _CONTROL.sub("", text)


def clean_json_text(text: str) -> str:
    """JSON printed to a terminal: C1 characters (which json.dumps leaves raw) escaped."""
    return re.sub(r"[\x7f-\x9f]", lambda m: f"\\u{ord(m.group()):04x}", text)
