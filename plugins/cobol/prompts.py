"""The prompt texts, kept beside the code in .txt files so they can be read and tuned alone."""

from __future__ import annotations

from functools import cache
from pathlib import Path


@cache
def text(name: str) -> str:
    """The prompt stored in prompt_<name>.txt."""
    return (Path(__file__).parent / f"prompt_{name}.txt").read_text("utf-8").strip()


def edit_request(code: str, instruction: str) -> str:
    return f"{code}\n\nChange requested: {instruction}\n\nAnswer with the unified diff only."


def fix_request(command: str, output: str, code: str, earlier: list[str]) -> str:
    done = ""
    if earlier:
        done = "\n\nChanges already made in this loop:\n" + "\n".join(f"- {e}" for e in earlier)
    return (
        f"{text('fix')}\n\nThe command `{command}` failed with this output:\n```\n{output}\n```\n\n"
        f"{code}{done}\n\nAnswer with the unified diff only."
    )


def retry_feedback(problem: str) -> str:
    return (
        "That diff could not be applied. git said:\n"
        f"{problem}\n"
        "Send a corrected unified diff only, whose context and removed lines match the file "
        "exactly as shown (without the line numbers)."
    )
