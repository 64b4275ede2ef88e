"""Rating prompts: the template file, the spec's prompt layout, and fitting it to max_length.

<rating prompt template>
Instruction: <instruction>
Input: <input>                 (only when the sample has a non-empty input)
Response: <response>
The answer is:

A prompt longer than max_length tokens is shortened in the sample's own text only: the
template, the labels and the answer cue are never cut (`fit`).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, replace
from pathlib import Path, PurePath
from typing import Protocol

from daemon.api import LmdError, plural

log = logging.getLogger("lmd.selectit")

BUILTIN_FILE = Path(__file__).with_name("rating_prompts.txt")
ANSWER_CUE = "The answer is:"
# The spec's default rp_file, a path inside its original repository: it means "the shipped
# rating prompts" wherever no such file exists.
SPEC_RP_FILE = ("scorers", "SelectIT", "rating_prompt.txt")

MARK = " [...] "  # stands where the middle of a shortened text was (ASCII: in every vocabulary)
MIN_KEEP = 8  # tokens a shortened text keeps at least (half from its start, half from its end)
PARTS = ("instruction", "input", "response")


@dataclass(frozen=True)
class Prompt:
    """One rating prompt, kept in parts so fitting can shorten the sample's texts only.

    `removed` counts the sample's tokens cut to fit max_length (0: the prompt is whole)."""

    template: str
    instruction: str
    response: str
    input: str = ""
    removed: int = 0

    @property
    def text(self) -> str:
        head = f"{self.template}\nInstruction: {self.instruction}\n"
        if self.input:
            head += f"Input: {self.input}\n"
        return f"{head}Response: {self.response}\n{ANSWER_CUE}"


def build_prompt(template: str, instruction: str, response: str, input: str = "") -> Prompt:
    """The spec's layout; an optional input goes right after the instruction."""
    return Prompt(template, instruction, response, input)


# -- fitting a prompt into max_length tokens ------------------------------------------------------
class Tokens(Protocol):
    """How a backend counts: the whole prompt as it is sent, and a part on its own."""

    def count(self, text: str) -> int: ...

    def part(self, text: str) -> int: ...

    def ends(self, text: str, head: int, tail: int) -> tuple[str, str]:
        """The text of the first `head` and the last `tail` tokens of `text`."""
        ...


class TooLong(LmdError):
    """A prompt that cannot fit max_length even with the sample's texts shortened."""


def fit(prompt: Prompt, max_length: int, tokens: Tokens) -> Prompt:
    """The prompt itself if it fits max_length tokens; else the same prompt with its
    instruction, input and response shortened in the middle.

    Each text that must shrink keeps its first and last tokens around MARK. The budget left
    after the fixed text (template, labels, answer cue, marks) is shared in proportion to each
    text's length, after every text got min(its length, MIN_KEEP) tokens, so a short response
    ("ok") stays whole while a long instruction gives way. The result is counted again (token
    boundaries shift where texts are joined) and shrunk further until it fits. Raises TooLong
    when even MIN_KEEP tokens per text do not fit.
    """
    total = tokens.count(prompt.text)
    if total <= max_length:
        return prompt
    texts = {name: getattr(prompt, name) for name in PARTS if getattr(prompt, name)}
    lengths = {name: tokens.part(text) for name, text in texts.items()}
    # An empty input drops its line; a shortened one keeps it, so fill it with a stand-in.
    bare = replace(prompt, **{n: "x" if n == "input" else "" for n in texts})
    fixed = tokens.count(bare.text)
    fixed += tokens.part(MARK) * sum(n > MIN_KEEP for n in lengths.values())  # only these shrink
    budget = max_length - fixed
    for _ in range(8):
        keep = _share(lengths, budget)
        if keep is None:
            break
        parts = {n: _shorten(texts[n], lengths[n], keep[n], tokens) for n in texts}
        fitted = replace(prompt, **parts, removed=sum(lengths[n] - keep[n] for n in texts))
        over = tokens.count(fitted.text) - max_length
        if over <= 0:
            return fitted
        budget -= over
    need = fixed + sum(min(n, MIN_KEEP) for n in lengths.values())
    raise TooLong(
        f"the prompt needs at least {need} tokens even with the sample's text shortened, "
        f"more than max_length {max_length}"
    )


def _share(lengths: dict[str, int], budget: int) -> dict[str, int] | None:
    """Tokens each text keeps: MIN_KEEP (or all of a shorter text) first, then the rest of
    the budget in proportion to what each still lacks; None when the minimum does not fit."""
    keep = {n: min(length, MIN_KEEP) for n, length in lengths.items()}
    rest = budget - sum(keep.values())
    if rest < 0:
        return None
    lacking = {n: lengths[n] - keep[n] for n in lengths}
    total = sum(lacking.values())
    if total <= rest:
        return dict(lengths)
    for n in lengths:
        keep[n] += rest * lacking[n] // total
    return keep


def _shorten(text: str, length: int, keep: int, tokens: Tokens) -> str:
    if keep >= length:
        return text
    head, tail = tokens.ends(text, (keep + 1) // 2, keep // 2)
    return f"{head.rstrip()}{MARK}{tail.lstrip()}"


# -- rating-prompt templates -----------------------------------------------------------------
def is_spec_default(path: str | Path) -> bool:
    """The spec's `rp_file: scorers/SelectIT/rating_prompt.txt` (relative, any prefix), or its
    bare name `rating_prompt.txt` as the docs' YAML gives it."""
    p = PurePath(path)
    if p.is_absolute():
        return False
    return p.parts[-len(SPEC_RP_FILE) :] == SPEC_RP_FILE or p.parts == SPEC_RP_FILE[-1:]


def resolve_rp_file(path: str | Path | None) -> Path | None:
    """The rating-prompt file to read; None means the shipped prompts. The spec's default path
    means the shipped prompts when no such file exists here (said once, in the log)."""
    if not path:
        return None
    file = Path(path).expanduser()
    if is_spec_default(path) and not file.exists():
        log.warning(
            "selectit: %s (the SelectIT spec's default rp_file) does not exist here; "
            "using the shipped rating prompts, %s.",
            path,
            BUILTIN_FILE,
        )
        return None
    return file


def load_templates(path: str | Path | None = None) -> list[str]:
    """The rating-prompt templates, one per non-blank line (the built-in file by default)."""
    file = resolve_rp_file(path) or BUILTIN_FILE
    try:
        raw = file.read_bytes()
    except FileNotFoundError:
        raise LmdError(
            f"The rating-prompt file {file} does not exist; give an existing file with --rp-file "
            "or leave it out to use the built-in prompts."
        ) from None
    except IsADirectoryError:
        raise LmdError(
            f"The rating-prompt file {file} is a directory; give a text file with one prompt "
            "per line."
        ) from None
    except OSError as e:
        raise LmdError(f"I could not read the rating-prompt file {file} ({e.strerror}).") from None
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        raise LmdError(
            f"The rating-prompt file {file} is not UTF-8 (bad byte at position {e.start}); "
            "save it as UTF-8."
        ) from None
    templates = [line.strip() for line in text.split("\n") if line.strip()]
    if not templates:
        raise LmdError(f"The rating-prompt file {file} is empty; write one rating prompt per line.")
    return templates


def choose_templates(templates: list[str], k: int) -> list[str]:
    """The first k templates; asking for more than the file has is refused before any call."""
    if k < 1:
        raise LmdError("k must be at least 1: it is the number of rating prompts per sample.")
    if k > len(templates):
        raise LmdError(
            f"k is {k} but the rating-prompt file has only {plural(len(templates), 'prompt')}; "
            "lower k or add prompts to the file."
        )
    return templates[:k]
