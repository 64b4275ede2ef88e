"""marat's prompt text and the parser of the model's Thought / Action / Final Thought replies."""

from __future__ import annotations

import asyncio
import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from daemon.api import dictation_hint

from .execute import start_dir

PROMPT_FILE = Path(__file__).with_name("prompt.txt")

_FENCE = re.compile(r"```[ \t]*([\w+-]*)[^\n]*\n(.*?)```", re.S)
_FINAL = re.compile(r"final\s+thought\s*:\s*(.*)", re.I | re.S)
_SUDO = re.compile(r"(^|[\s;&|(])sudo\b")
SUDO_RE = _SUDO

# Corrections sent back when a reply breaks the format (stored with decorative karma).
NO_BLOCK = (
    "Format help: your reply had no ```bash block and no Final Thought. Reply with a Thought "
    "and exactly one ```bash block, or with a Final Thought."
)
MANY_BLOCKS = (
    "Format help: your reply had {n} code blocks. Give exactly one ```bash block per reply; "
    "I run it and send you the Observation."
)
BOTH = (
    "Format help: your reply had both an Action and a Final Thought. Give the Action alone and "
    "wait for its Observation, or give only the Final Thought."
)
# Not a format error (the step was well formed): a refusal, counted apart by the benchmark.
SUDO = "Refused: never use sudo. Find a way without it, or say so in a Final Thought."
SUDO_STRUCTURED = "Refused: never use sudo. Find a way without it, or say so with final."
EMPTY = "Format help: your ```bash block was empty. Put one command in it."
OTHER_LANGUAGE = (
    "Format help: your code block was {lang}, not bash; I only run bash. Give one ```bash "
    "block (python3 -c '...' runs Python), or a Final Thought."
)
# Fences whose body is a bash command ("shell" is markdown's other name for sh); anything else
# is not run: ```python, ```json, ```zsh (another shell's syntax), ```console (a transcript,
# whose output lines would run as commands).
SHELL_FENCES = {"", "bash", "sh", "shell"}


# How to answer, per protocol; the text format's own is in prompt.txt.
STRUCTURED_FORMATS = {
    "tools": (
        "Work in steps. In each reply call exactly one tool:\n"
        "- bash, with one command (join steps that belong together with &&); I then answer "
        "with its exit code and output;\n"
        "- final, with the answer for the user in one or two plain spoken sentences, without "
        "markdown, when the task is done or cannot be done.\n"
    ),
    "schema": (
        "Work in steps. Each reply is one JSON object: thought (what you need to find out or "
        'do next, in one sentence), action ("bash" to run a command, "final" when the task is '
        "done or cannot be done) and text (the one command, joining steps that belong "
        "together with &&; or the answer for the user in one or two plain spoken sentences, "
        "without markdown). After a command I answer with:\n"
        "Observation: the exit code and the output of that command.\n"
    ),
}


def system_prompt(system: str, cwd: str, protocol: str = "text", tools: list = ()) -> str:
    """The system message: the OS named by the `system` setting, how to answer in `protocol`
    (text, tools or schema), and last the working directory; `tools` are the MCP servers'
    tools (the tools protocol sends them as functions, the others describe them here).

    The working directory comes last so that everything before it is the same text in every
    directory: a server that keeps what it read of a prompt's beginning (the embedded model,
    vLLM, OpenAI's prompt caching) reads it once, not again for each project."""
    text = PROMPT_FILE.read_text(encoding="utf-8").format(system=system)
    where = f"\nThe shell's working directory is {cwd}.\n"
    if protocol not in STRUCTURED_FORMATS:
        if tools:
            head, rules = text.split("Rules:", 1)
            text = head.rstrip("\n") + "\n" + tools_text(tools) + TEXT_TOOL_FORMAT
            text += "\nRules:" + rules
        return text + where
    head, rest = text.split("Work in steps.", 1)
    rules = rest[rest.index("Rules:") :]
    rules = "\n".join(line for line in rules.splitlines() if "```bash" not in line)
    extra = ""
    if tools and protocol == "schema":
        extra = tools_text(tools) + SCHEMA_TOOL_FORMAT
    elif tools:
        extra = (
            "\nThe other tools come from MCP servers the user configured; call them the same way.\n"
        )
    return head + STRUCTURED_FORMATS[protocol] + extra + "\n" + rules + "\n" + where


@dataclass(frozen=True)
class Step:
    """What a model reply asks for: a command, a final answer, or a format correction."""

    command: str | None = None
    final: str | None = None
    correction: str | None = None
    tool: tuple[str, dict] | None = None  # an MCP tool's offered name and its arguments


def parse_reply(text: str) -> Step:
    fenced = _FENCE.findall(text)
    blocks = [body for _lang, body in fenced]
    final = _FINAL.search(text)
    if final and not blocks:
        return Step(final=speakable(final.group(1)))
    if final and blocks:
        return Step(correction=BOTH)
    if not blocks:
        return Step(correction=NO_BLOCK)
    if len(blocks) > 1:
        return Step(correction=MANY_BLOCKS.format(n=len(blocks)))
    lang = fenced[0][0].lower()
    if lang == "tool":
        return tool_step(blocks[0])
    if lang not in SHELL_FENCES:
        return Step(correction=OTHER_LANGUAGE.format(lang=lang))
    lines = [ln[2:] if ln.startswith("$ ") else ln for ln in blocks[0].strip().splitlines()]
    command = "\n".join(lines).strip()
    if not command:
        return Step(correction=EMPTY)
    if _SUDO.search(command):
        return Step(correction=SUDO)
    return Step(command=command)


TOOL_BLOCK = (
    'Format help: a ```tool block holds one JSON object: {"tool": "the tool\'s name", '
    '"arguments": {...}}.'
)


def tool_step(body: str) -> Step:
    """The Step of a ```tool block (the text protocol's way to call an MCP tool)."""
    try:
        data = json.loads(body)
    except ValueError:
        data = None
    if (
        not isinstance(data, dict)
        or not isinstance(data.get("tool"), str)
        or not isinstance(data.get("arguments", {}), dict)
    ):
        return Step(correction=TOOL_BLOCK)
    return Step(tool=(data["tool"], data.get("arguments", {})))


def tools_text(tools: list) -> str:
    """The MCP tools described for the text and schema protocols (the tools protocol sends
    them as functions)."""
    lines = ["", "Besides bash you may call these tools (each reply still does one thing):"]
    for t in tools:
        args = json.dumps(t.schema.get("properties", {}), ensure_ascii=False)[:600]
        lines.append(f"- {t.exposed}: {t.description} Arguments: {args}")
    return "\n".join(lines) + "\n"


TEXT_TOOL_FORMAT = (
    "To call one of them, instead of a ```bash block give:\n"
    "Action:\n```tool\n"
    '{"tool": "the tool\'s name", "arguments": {"name": "value"}}\n```\n'
)
SCHEMA_TOOL_FORMAT = (
    "To call one of them, set action to the tool's name and text to its arguments as a JSON "
    "object.\n"
)


def speakable(text: str) -> str:
    """Plain words for a voice: no markdown emphasis, backticks or stray whitespace."""
    text = re.sub(r"```.*?```", " ", text, flags=re.S)
    text = text.replace("`", "").replace("**", "").replace("__", "")
    text = re.sub(r"^\s*#+\s*", "", text, flags=re.M)
    return re.sub(r"[ \t]+", " ", text).strip()


async def dictated(ctx: Any, instruction_id: int) -> str:
    """The hint about the task's dictated words (daemon.api.dictation_hint), worked out once
    when the task is said and kept while it runs (a yes resumes it with the same hint)."""
    kept = ctx.state.get("dictation") or {}
    if kept.get("for") == instruction_id:
        return kept.get("hint", "")
    if instruction_id != ctx.user_prompt_id or not ctx.settings["dictation_hints"]:
        return ""

    cwd, _ = start_dir(ctx.session.cwd, ctx.settings["marat_start_dir"])
    hint = await asyncio.to_thread(dictation_hint, ctx.text, cwd, ctx.store)
    ctx.state["dictation"] = {"for": instruction_id, "hint": hint}
    return hint
