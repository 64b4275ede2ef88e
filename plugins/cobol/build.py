"""The build/test command: the `cobol_build_command` setting, else detected from the repo;
runs through the core runner (timeout, cut output, process group killed)."""

from __future__ import annotations

import json
import re
from pathlib import Path

_MAKE_TARGET = r"^{}\s*:(?!=)"
# Kinds of error line, most telling first: a named error with its message (Python, Rust, C),
# a pytest failure summary, then any line that speaks of failing.
_ERROR_TIERS = (
    re.compile(r"^(?:E\s+)?[\w.]*(?:Error|Exception|error(?:\[\w+\])?)\b:\s*\S"),
    re.compile(r"^\S+:\d+(?::\d+)?:\s*(?:fatal )?error\b"),
    re.compile(r"^(?:FAILED|FAIL|ERROR)\b|\bpanic\b"),
    re.compile(r"^E\s+\S"),
    re.compile(r"(?i)\b(?:error|failed|failure|exception|assert\w*|cannot|undefined)\b"),
)
_NOT_AN_ERROR = re.compile(r"(?i)\b(0|no) (errors?|failures?|failed)\b")


def detect(repo: str) -> tuple[str, str] | None:
    """(command, why) from the repository's files, in the order a developer would look."""
    root = Path(repo)
    for name in ("Makefile", "makefile", "GNUmakefile"):
        if (root / name).is_file():
            text = (root / name).read_text("utf-8", "replace")
            for target in ("test", "check", "build"):
                if re.search(_MAKE_TARGET.format(target), text, re.MULTILINE):
                    return f"make {target}", f"the {target} target of the {name}"
    package = root / "package.json"
    if package.is_file():
        try:
            scripts = json.loads(package.read_text("utf-8")).get("scripts") or {}
        except (ValueError, AttributeError):
            scripts = {}
        if "test" in scripts:
            return "npm test", "the test script of package.json"
        if "build" in scripts:
            return "npm run build", "the build script of package.json"
    if (root / "Cargo.toml").is_file():
        return "cargo test", "Cargo.toml"
    if (root / "go.mod").is_file():
        return "go test ./...", "go.mod"
    for name in ("pyproject.toml", "pytest.ini", "setup.cfg", "tox.ini", "setup.py"):
        if (root / name).is_file():
            return "python3 -m pytest -q", name
    if (root / "tests").is_dir() or any(root.glob("test_*.py")):
        return "python3 -m pytest -q", "the Python tests"
    return None


def first_error(output: str) -> str:
    """The line a listener most needs: the first that looks like an error, else the last."""
    lines = [line.strip() for line in output.splitlines() if line.strip()]
    lines = [line for line in lines if not line.startswith("Traceback (most recent call last)")]
    for tier in _ERROR_TIERS:
        for line in lines:
            if tier.search(line) and not _NOT_AN_ERROR.search(line):
                return _short(line)
    return _short(lines[-1]) if lines else "it printed nothing"


def error_locations(output: str, repo: str, limit: int = 3) -> list[tuple[str, int]]:
    """(file, line) of the first errors pointing into the repository, one per file, in order."""
    patterns = (
        re.compile(r'File "([^"]+)", line (\d+)'),
        re.compile(r"^([\w./-]+\.\w+):(\d+)(?::\d+)?:", re.MULTILINE),
    )
    found: list[tuple[int, str, int]] = []
    for pat in patterns:
        for m in pat.finditer(output):
            found.append((m.start(), m.group(1), int(m.group(2))))
    root = Path(repo).resolve()
    places: dict[str, int] = {}
    for _, name, line in sorted(found):
        path = Path(name) if Path(name).is_absolute() else root / name
        try:
            rel = path.resolve().relative_to(root)
        except (ValueError, OSError):
            continue
        if path.is_file() and ".git" not in rel.parts:
            places.setdefault(str(rel), line)
    return list(places.items())[:limit]


def _short(line: str, limit: int = 200) -> str:
    return line if len(line) <= limit else line[: limit - 1] + "…"
