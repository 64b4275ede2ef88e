"""The focus: a file and line range (or a function found in it), shown to the model with line
numbers and as much surrounding code as the token budget allows."""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass
from pathlib import Path

from daemon.api import LmdError, match_name, plural, spoken_number, spoken_punctuation, tokens

# Definitions in the common languages: def/class (Python), function (JS), func (Go, with an
# optional receiver), fn (Rust), plus a few modifiers that may precede them.
_DEF = re.compile(
    r"^(?P<indent>[ \t]*)"
    r"(?:(?:export|pub(?:\([^)]*\))?|public|private|protected|static|async|default|unsafe)\s+)*"
    r"(?P<kind>def|class|function|func|fn|struct|interface|impl|enum|trait|sub)\s+"
    r"(?:\([^)]*\)\s*)?"
    r"(?P<name>[A-Za-z_]\w*)"
)
_RANGE = re.compile(
    r"\blines?\s+(\d+)(?:\s*(?:to|through|thru|until|till|and|-|–|—)\s*(\d+))?", re.IGNORECASE
)
# "lines ten to forty", "line forty two", "the first ten lines": numbers as spoken.
_SPOKEN_RANGE = re.compile(
    r"\blines?\s+(?P<a>[\w,-]+(?:\s+[\w,-]+)*?)"
    r"(?:\s*(?:to|through|thru|until|till|-|–|—)\s*(?P<b>[\w,-]+(?:\s+[\w,-]+)*?))?"
    r"(?=\s+(?:of|in|from|on|at|and|please)\b|\s*[.,;!?]*\s*$)",
    re.IGNORECASE,
)
_FIRST_LINES = re.compile(r"\bthe\s+first\s+(?P<n>[\w-]+(?:\s+[\w-]+)*?)\s+lines\b", re.I)
_THE_FILE = re.compile(r"\bthe\s+(?P<name>[\w.-]+(?:\s+[\w.-]+){0,2}?)\s+file\b", re.I)
_SYMBOL = re.compile(r"\b(?:function|method|class|def)\s+([A-Za-z_][\w]*)", re.IGNORECASE)
_PATHISH = re.compile(r"^[\w./@+~-]*[\w/]$")
_TRAILING = ".,;:!?\"'`)"
# Share of max_tokens the focused code and its surroundings may take; the rest is left for the
# instruction, the build output and the model's answer.
CODE_SHARE = 0.6


@dataclass
class Focus:
    file: str  # relative to the repository root
    start: int  # 1-based, inclusive
    end: int
    symbol: str | None = None
    kind: str | None = None  # "function" or "class", said in replies

    def to_state(self) -> dict:
        return asdict(self)

    @classmethod
    def from_state(cls, data: dict | None) -> Focus | None:
        return cls(**data) if data else None

    def describe(self) -> str:
        where = f"line {self.start}" if self.start == self.end else f"lines {self.start}–{self.end}"
        return f"{self.file}, {where}{self.named()}"

    def named(self) -> str:
        return f" ({self.kind or 'function'} {self.symbol})" if self.symbol else ""


def kind_word(kind: str) -> str:
    """Say 'class' for class-like definitions and 'function' for the rest."""
    return (
        "class" if kind in ("class", "struct", "interface", "enum", "trait", "impl") else "function"
    )


@dataclass
class FocusRequest:
    """What the user asked to focus on; any part may be missing."""

    file: str | None = None
    start: int | None = None
    end: int | None = None
    symbol: str | None = None


def parse_request(text: str) -> FocusRequest:
    """Read 'focus on src/parse.py lines 10 to 40' / 'function parse_header in x.py' / ...,
    as typed or as spoken: 'focus on daemon slash core dot pie lines ten to forty', 'the
    core file', 'the first twenty lines'."""
    req = FocusRequest()
    text = spoken_punctuation(text, dash_joins=True)
    m = _RANGE.search(text)
    if m:
        req.start = int(m.group(1))
        req.end = int(m.group(2)) if m.group(2) else req.start
    else:
        req.start, req.end = _spoken_range(text)
    m = _SYMBOL.search(text)
    if m:
        req.symbol = m.group(1)
    skip = {"focus", "on", "at", "in", "the", "file", "lines", "line", "to", "of", "and"}
    words = [w.lstrip("\"'`(").rstrip(_TRAILING) for w in text.split()]
    for word in words:
        if word.lower() in skip or not word or word == req.symbol:
            continue
        if ("/" in word or "." in word) and _PATHISH.match(word):
            req.file = word
            break
    if req.file is None and (m := _THE_FILE.search(text)):
        req.file = m.group("name")  # "the core file": matched against the repository's files
    if req.symbol is None and req.file is not None and req.start is None:
        # "focus on parse_header in src/parse.py"
        m = re.search(r"\b(?:on|at)\s+([A-Za-z_]\w*)\s+in\s+", text, re.IGNORECASE)
        if m and m.group(1).lower() not in skip:
            req.symbol = m.group(1)
    return req


def _spoken_range(text: str) -> tuple[int | None, int | None]:
    """(start, end) of 'lines ten to forty', 'line forty two', 'the first ten lines'."""
    m = _FIRST_LINES.search(text)
    if m:
        n = spoken_number(m.group("n"))
        return (1, int(n)) if isinstance(n, int) and n > 0 else (None, None)
    m = _SPOKEN_RANGE.search(text)
    if not m:
        return None, None
    a = spoken_number(m.group("a"), ordinals=True)
    b = spoken_number(m.group("b"), ordinals=True) if m.group("b") else a
    if not isinstance(a, int) or not isinstance(b, int) or a < 0 or b < 0:
        return None, None
    return a, b


def spoken_file(name: str, files: list[str]) -> tuple[str | None, str, list[str]]:
    """A file said by name ("core", "the core file", "daemon core pie") among the
    repository's files: (path, how it was heard when not exactly, several that fit)."""
    by_path = match_name(name, files)
    if by_path.name is not None and by_path.exact:
        return by_path.name, "", []
    stems: dict[str, list[str]] = {}
    for path in files:
        base = path.rsplit("/", 1)[-1]
        for form in {base, base.split(".", 1)[0]}:
            stems.setdefault(form, []).append(path)
    found = match_name(name, stems)
    if found.name is not None:
        paths = stems[found.name]
        if len(paths) == 1:
            heard = "" if found.exact and "." in name else f"I took {name} to mean {paths[0]}."
            return paths[0], heard, []
        return None, "", paths
    if by_path.name is not None:  # said like a whole path ("daemon core pie")
        return by_path.name, by_path.said_back(name), []
    several = list(dict.fromkeys(p for n in found.candidates for p in stems[n]))
    if len(several) == 1:  # its name and its name with the extension: one file
        return several[0], f"I took {name} to mean {several[0]}.", []
    return None, "", several or list(by_path.candidates)


def read_lines(path: Path, shown: str) -> list[str]:
    """The file's lines; binary or undecodable files are refused with a sentence."""
    if not path.is_file():
        raise LmdError(f"There is no file {shown} in the repository; check the name.")
    data = path.read_bytes()
    if b"\x00" in data[:8192]:
        raise LmdError(f"{shown} is a binary file; I can only focus on text files.")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise LmdError(f"{shown} is not UTF-8 text; I can only focus on text files.") from None
    return text.splitlines()


def definitions(lines: list[str]) -> list[tuple[int, str, str]]:
    """(1-based line, name, 'function' or 'class') of every definition found."""
    found = []
    for i, line in enumerate(lines, 1):
        m = _DEF.match(line)
        if m:
            found.append((i, m.group("name"), kind_word(m.group("kind"))))
    return found


def block_end(lines: list[str], start: int) -> int:
    """Last line (1-based) of the definition starting at `start`."""
    head = lines[start - 1]
    indent = len(head) - len(head.lstrip())
    window = "".join(lines[start - 1 : start + 2])
    if "{" in window and not head.rstrip().endswith(":"):
        depth, opened = 0, False
        for i in range(start - 1, len(lines)):
            depth += lines[i].count("{") - lines[i].count("}")
            opened = opened or "{" in lines[i]
            if opened and depth <= 0:
                return i + 1
        return len(lines)
    last = start
    for i in range(start, len(lines)):
        line = lines[i]
        if not line.strip():
            continue
        if len(line) - len(line.lstrip()) <= indent and not line.lstrip().startswith((")", "]")):
            break
        last = i + 1
    return last


def symbol_range(lines: list[str], name: str) -> tuple[int, int, str] | None:
    """(start, end, kind) of the definition called `name` (decorators included), or None."""
    for line_no, found, kind in definitions(lines):
        if found == name:
            start = line_no
            while start > 1 and lines[start - 2].lstrip().startswith("@"):
                start -= 1
            return start, block_end(lines, line_no), kind
    return None


def enclosing_symbol(lines: list[str], line: int) -> tuple[str, str] | None:
    """(name, kind) of the innermost definition whose block contains `line`."""
    best = None
    for line_no, name, kind in definitions(lines):
        if line_no > line:
            break
        if block_end(lines, line_no) >= line:
            best = (name, kind)
    return best


def symbol_for_range(lines: list[str], start: int, end: int) -> tuple[str, str] | None:
    """The definition a range is about: the one enclosing its start, else the first inside it."""
    found = enclosing_symbol(lines, start)
    if found:
        return found
    for line_no, name, kind in definitions(lines):
        if start <= line_no <= end:
            return name, kind
    return None


def numbered(lines: list[str], start: int, end: int) -> str:
    width = len(str(end))
    return "\n".join(f"{i:>{width}} | {lines[i - 1]}" for i in range(start, end + 1))


def code_budget(max_tokens: int) -> int:
    return max(200, int(max_tokens * CODE_SHARE))


def line_tokens(line: str, model: str) -> int:
    return tokens.count(line + "\n", model) + 2  # + the line number and separator


def check_size(focus: Focus, lines: list[str], max_tokens: int, model: str) -> None:
    """Refuse a focus the model could not be shown whole."""
    need = sum(line_tokens(lines[i - 1], model) for i in range(focus.start, focus.end + 1))
    budget = code_budget(max_tokens)
    if need > budget:
        raise LmdError(
            f"Lines {focus.start} to {focus.end} of {focus.file} are about {need} tokens, more "
            f"than the {budget} I can show the model; focus on a smaller range or raise max_tokens."
        )


def context_window(focus: Focus, lines: list[str], max_tokens: int, model: str) -> tuple[int, int]:
    """Widen the focus line by line, above and below in turn, while the budget lasts."""
    budget = code_budget(max_tokens)
    used = sum(line_tokens(lines[i - 1], model) for i in range(focus.start, focus.end + 1))
    lo, hi = focus.start, focus.end
    grew = True
    while grew:
        grew = False
        if lo > 1 and used + (cost := line_tokens(lines[lo - 2], model)) <= budget:
            lo, used, grew = lo - 1, used + cost, True
        if hi < len(lines) and used + (cost := line_tokens(lines[hi], model)) <= budget:
            hi, used, grew = hi + 1, used + cost, True
    return lo, hi


def render(focus: Focus, lines: list[str], max_tokens: int, model: str) -> str:
    """The focused code with line numbers, inside the context the budget allows."""
    lo, hi = context_window(focus, lines, max_tokens, model)
    header = (
        f"File {focus.file}, {plural(len(lines), 'line')}. "
        f"The focus is lines {focus.start}-{focus.end}{focus.named()}; lines {lo}-{hi} are shown. "
        "Line numbers and ' | ' are not part of the file."
    )
    return f"{header}\n```\n{numbered(lines, lo, hi)}\n```"
