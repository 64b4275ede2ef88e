"""`lmd shell-init bash|zsh|fish`: shell functions, one per mode, and a propose key binding."""

from __future__ import annotations

import os
import re
import shlex
import shutil
import sys
from pathlib import Path

SHELLS = ("bash", "zsh", "fish")
# Modes that act in a directory get the shell's current directory as the session's cwd.
CWD_MODES = {"marat", "cobol"}
KEYS = {"bash": r"\em", "zsh": "^[m", "fish": r"\em"}
NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
# Never shadow these, even if a plugin names a mode so.
RESERVED = {
    "alias", "bg", "bind", "break", "builtin", "case", "cd", "command", "continue", "declare",
    "do", "done", "echo", "else", "end", "eval", "exec", "exit", "export", "false", "fg", "fi",
    "for", "function", "if", "jobs", "kill", "let", "local", "read", "return", "set", "shift",
    "source", "test", "then", "trap", "true", "type", "unset", "wait", "while",
}  # fmt: skip


def lmd_command() -> str:
    """How this very `lmd` is started again: its script or pyz, else `python -m daemon.cli`."""
    argv0 = Path(sys.argv[0])
    if argv0.name == "lmd" or argv0.suffix == ".pyz":
        found = argv0 if argv0.exists() else shutil.which(str(argv0))
        if found:
            return str(Path(found).resolve())
    found = shutil.which("lmd")
    return found or "lmd"


def fish_quote(text: str) -> str:
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


def usable_names(modes: list[str]) -> tuple[list[str], list[str]]:
    """Modes that can become functions, and those skipped (bad names or existing commands)."""
    ok, skipped = [], []
    for m in sorted(modes):
        if NAME.match(m) and m not in RESERVED and not shutil.which(m):
            ok.append(m)
        else:
            skipped.append(m)
    return ok, skipped


def render(shell: str, modes: list[str], lmd_bin: str | None = None, bind: bool = True) -> str:
    """The script to eval (bash/zsh) or source (fish)."""
    if shell not in SHELLS:
        raise ValueError(f"shell must be one of {', '.join(SHELLS)}")
    template = (Path(__file__).with_name(f"shell_{shell}.txt")).read_text()
    names, skipped = usable_names(modes)
    lines = []
    for m in names:
        cwd = "1" if m in CWD_MODES else "0"
        if shell == "fish":
            lines.append(
                f"function {m} --description 'lmd {m} mode'\n    __lmd_say {m} {cwd} $argv\nend"
            )
        else:
            lines.append(f'{m}() {{ __lmd_say {m} {cwd} "$@"; }}')
    for m in skipped:
        lines.append(f"# no function for the mode {m!r}: the name is taken or not a shell name")
    binary = lmd_bin or lmd_command()
    quoted = fish_quote(binary) if shell == "fish" else shlex.quote(binary)
    script = template.replace("@LMD_BIN@", quoted).replace("@FUNCTIONS@", "\n".join(lines))
    script = script.replace("@KEY@", os.environ.get("LMD_SHELL_KEY") or KEYS[shell])
    if not bind:
        script = script.split("\nif ", 1)[0].rstrip() + "\n"
    return script
