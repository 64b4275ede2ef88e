"""Markdown to speakable text, for text-to-speech clients (`X-Speak: 1`, `lmd say --speak`).

Line based, so a stream can be stripped as it arrives: `Speaker.feed(chunk)` returns the
finished lines, `Speaker.flush()` the rest. Code inside fences is kept (it is the content);
the fence lines, heading marks, bullets, emphasis, inline-code ticks, link targets and table
rules go, because a voice reads them out as noise.
"""

from __future__ import annotations

import re
from collections.abc import AsyncGenerator
from typing import Any

FENCE = re.compile(r"^\s*(```|~~~)")
RULE = re.compile(r"^\s*([-*_])(\s*\1){2,}\s*$")
TABLE_RULE = re.compile(r"^\s*\|?\s*:?-{2,}:?\s*(\|\s*:?-{2,}:?\s*)*\|?\s*$")
HEADING = re.compile(r"^\s{0,3}#{1,6}\s+")
QUOTE = re.compile(r"^\s{0,3}>\s?")
BULLET = re.compile(r"^(\s*)[-*+]\s+(\[[ xX]\]\s+)?")
IMAGE = re.compile(r"!\[([^\]]*)\]\([^)]*\)")
LINK = re.compile(r"\[([^\]]+)\]\([^)]*\)")
BOLD = re.compile(r"(\*\*|__)(?=\S)(.+?)(?<=\S)\1")
ITALIC_STAR = re.compile(r"(?<![\w*])\*(?=\S)([^*]+?)(?<=\S)\*(?![\w*])")
ITALIC_UNDERSCORE = re.compile(r"(?<![\w_])_(?=\S)([^_]+?)(?<=\S)_(?![\w_])")
STRIKE = re.compile(r"~~(?=\S)(.+?)(?<=\S)~~")
INLINE_CODE = re.compile(r"`+([^`]+)`+")


# A span between these two marks is verbatim: no reply form touches it (a command about to
# run, in the question that asks for a yes). The marks themselves never reach a client.
VERBATIM_OPEN, VERBATIM_CLOSE = "\ue000", "\ue001"


# Characters a reader cannot see: control characters but newline and tab (an escape sequence
# can hide the rest of a line on a terminal, and `lmd say` removes it whole), and the Unicode
# ones that are invisible or reorder what is shown (zero-width, bidirectional overrides).
INVISIBLE = re.compile(
    "[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200b-\u200f\u202a-\u202e\u2060-\u2064"
    "\u2066-\u2069\ufeff\ue000\ue001]"
)


def visible(text: str) -> str:
    """`text` with each invisible character written out (\\x1b, \\u202e), and a sentence
    saying so after it: what a question shows may not hide part of what runs."""
    found = INVISIBLE.findall(text)
    if not found:
        return text

    def named(m: re.Match) -> str:
        code = ord(m.group())
        return f"\\x{code:02x}" if code <= 0xFF else f"\\u{code:04x}"

    n = len(found)
    what = "an invisible character" if n == 1 else f"{n} invisible characters"
    return f"{INVISIBLE.sub(named, text)}\n(It holds {what}, written out as \\x.. or \\u....)"


def verbatim(text: str) -> str:
    """`text` marked so that plain, spoken and streamed replies carry it character for
    character (markdown clean-up would drop a line starting ``` or a `*`); an invisible
    character is written out (`visible`), so no terminal or clean-up can hide a part."""
    return VERBATIM_OPEN + visible(text) + VERBATIM_CLOSE


def unmark(text: str) -> str:
    """The text without verbatim marks."""
    if VERBATIM_OPEN not in text and VERBATIM_CLOSE not in text:
        return text
    return text.replace(VERBATIM_OPEN, "").replace(VERBATIM_CLOSE, "")


class _Marks:
    """Whether we are inside a verbatim span, across lines and chunks."""

    def __init__(self) -> None:
        self.inside = False

    def line_is_verbatim(self, line: str) -> bool:
        """Whether `line` holds verbatim text (then it passes untouched); updates the state."""
        touched = self.inside or VERBATIM_OPEN in line
        for c in line:
            if c == VERBATIM_OPEN:
                self.inside = True
            elif c == VERBATIM_CLOSE:
                self.inside = False
        return touched


class Speaker:
    """Strips markdown line by line; keeps whether we are inside a code fence."""

    def __init__(self) -> None:
        self.in_fence = False
        self.buffer = ""
        self.blank = True  # the last emitted line was blank (or nothing was emitted yet)
        self.marks = _Marks()

    def feed(self, chunk: str) -> str:
        """Add text; return the speakable form of every line it completed."""
        self.buffer += chunk
        if "\n" not in self.buffer:
            return ""
        done, self.buffer = self.buffer.rsplit("\n", 1)
        return "".join(self._line(line) for line in done.split("\n"))

    def flush(self) -> str:
        """The speakable form of what is left (the last line had no newline)."""
        rest, self.buffer = self.buffer, ""
        return self._line(rest, newline=False) if rest else ""

    def _line(self, line: str, newline: bool = True) -> str:
        end = "\n" if newline else ""
        if self.marks.line_is_verbatim(line):
            self.blank = False
            return unmark(line) + end  # every character, as it will run
        if FENCE.match(line):
            self.in_fence = not self.in_fence
            return ""
        if self.in_fence:
            text = line.rstrip()
        else:
            spoken = speak_line(line)
            if spoken is None:
                return ""
            text = spoken
        if not text.strip():
            if self.blank:
                return ""
            self.blank = True
            return end
        self.blank = False
        return text + end


def speak_line(line: str) -> str | None:
    """One line outside code fences without its markup; None to drop the line."""
    if RULE.match(line) or TABLE_RULE.match(line):
        return None
    text = HEADING.sub("", line)
    text = QUOTE.sub("", text)
    text = BULLET.sub(r"\1", text)
    if text.strip().startswith("|") and text.strip().endswith("|"):
        cells = [c.strip() for c in text.strip().strip("|").split("|")]
        text = ", ".join(c for c in cells if c)
    text = IMAGE.sub(r"\1", text)
    text = LINK.sub(r"\1", text)
    text = INLINE_CODE.sub(r"\1", text)
    text = BOLD.sub(r"\2", text)
    text = STRIKE.sub(r"\1", text)
    text = ITALIC_STAR.sub(r"\1", text)
    text = ITALIC_UNDERSCORE.sub(r"\1", text)
    return text.rstrip()


def speakable(text: str) -> str:
    """The whole reply, stripped for a voice."""
    s = Speaker()
    out = s.feed(text) + s.flush()
    return out.strip("\n")


def unfence(text: str) -> str:
    """Drop markdown fence lines (the code between them stays): plain replies are for people.
    Verbatim spans stay whole."""
    if "```" not in text and "~~~" not in text:
        return unmark(text)
    marks = _Marks()
    kept = [
        line for line in text.split("\n") if marks.line_is_verbatim(line) or not FENCE.match(line)
    ]
    return unmark("\n".join(kept))


def _flag(headers: Any, query: Any, name: str, default: bool) -> bool:
    """A yes/no request flag: the X-<Name> header, else ?<name>=, else `default`."""
    value = (headers.get(f"x-{name}") or query.get(name) or "").strip().lower()
    return value in ("1", "true", "yes", "on") if value else default


def wants_raw(headers: Any, query: Any) -> bool:
    """The client asked for the reply exactly as the mode wrote it (X-Raw: 1 or ?raw=1)."""
    return _flag(headers, query, "raw", False)


def wants_speech(headers: Any, query: Any, default: bool = False) -> bool:
    """Whether to strip the reply: the X-Speak header or ?speak= say so, else `default`."""
    return _flag(headers, query, "speak", default)


async def speak_stream(chunks: AsyncGenerator[str, None]) -> AsyncGenerator[str, None]:
    """A chunk stream stripped for a voice (finished lines are released as they complete)."""
    s = Speaker()
    try:
        async for chunk in chunks:
            text = s.feed(chunk)
            if text:
                yield text
        rest = s.flush()
        if rest:
            yield rest
    finally:
        await chunks.aclose()
