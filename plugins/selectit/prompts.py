"""Rating prompts: the template file and the spec's prompt layout.

<rating prompt template>
Instruction: <instruction>
Input: <input>                 (only when the sample has a non-empty input)
Response: <response>
The answer is:
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from daemon.errors import LmdError

BUILTIN_FILE = Path(__file__).with_name("rating_prompts.txt")
ANSWER_CUE = "The answer is:"


@dataclass(frozen=True)
class Prompt:
    """One rating prompt split where truncation may cut: `head` may shrink, `tail` never."""

    head: str
    tail: str = "\n" + ANSWER_CUE

    @property
    def text(self) -> str:
        return self.head + self.tail


def build_prompt(template: str, instruction: str, response: str, input: str = "") -> Prompt:
    """The spec's layout; an optional input goes right after the instruction."""
    head = f"{template}\nInstruction: {instruction}\n"
    if input:
        head += f"Input: {input}\n"
    head += f"Response: {response}"
    return Prompt(head)


def load_templates(path: str | Path | None = None) -> list[str]:
    """The rating-prompt templates, one per non-blank line (the built-in file by default)."""
    file = Path(path).expanduser() if path else BUILTIN_FILE
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
            f"k is {k} but the rating-prompt file has only {len(templates)} prompts; lower k "
            "or add prompts to the file."
        )
    return templates[:k]
