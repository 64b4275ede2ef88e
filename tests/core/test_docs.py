"""The docs are checked like code: generated parts current, every hook documented with its
signature, every page indexed, every relative link and anchor resolving, every route and every
`lmd`/`curl` example one lmd knows, and the README's tour run as printed on a live daemon."""

from __future__ import annotations

import importlib.util
import inspect
import os
import re
import shlex
import sqlite3
import subprocess
import sys
import unicodedata
from pathlib import Path
from urllib.parse import urlparse

import click
import pytest

from tests.daemons import ROOT
from tests.fake_backend import Reply

DOCS = ROOT / "docs"
README = ROOT / "README.md"
# Pages written on other branches, linked from the index ahead of their merge. Once a page
# exists it is checked like any other; then it can leave this set.
PENDING_PAGES: set[str] = set()
LMD_BIN = Path(sys.executable).parent


def load_docgen():
    spec = importlib.util.spec_from_file_location("docgen", DOCS / "docgen.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


docgen = load_docgen()


def markdown_files() -> list[Path]:
    return [README, *sorted(DOCS.glob("*.md"))]


def without_code_blocks(text: str) -> str:
    return re.sub(r"^(```|~~~).*?^\1[^\n]*$", "", text, flags=re.M | re.S)


def without_code(text: str) -> str:
    """The text with fenced blocks and inline code blanked out (links there are examples)."""
    return re.sub(r"`[^`\n]*`", "", without_code_blocks(text))


def code_blocks(text: str, langs: tuple[str, ...] = ("sh", "bash")) -> list[str]:
    return [
        body
        for lang, body in re.findall(r"^```(\w*)\n(.*?)^```", text, flags=re.M | re.S)
        if lang in langs
    ]


def slug(heading: str) -> str:
    """GitHub's anchor for a heading."""
    text = heading.strip().lower()
    text = "".join(
        c for c in text if c in " -_" or unicodedata.category(c)[0] in "LN"
    )  # punctuation, symbols and backticks go
    return text.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    found: set[str] = set()
    for heading in re.findall(r"^#{1,6} (.+)$", without_code_blocks(path.read_text()), re.M):
        base = slug(heading)
        name, n = base, 0
        while name in found:
            n += 1
            name = f"{base}-{n}"
        found.add(name)
    return found


def links(path: Path) -> list[str]:
    return re.findall(r"\]\(([^)\s]+)\)", without_code(path.read_text()))


# -- generated parts --------------------------------------------------------------------


def test_generated_parts_are_current():
    """settings.sql, the settings and CLI references and the sample plugin match the code."""
    from cogapp.cogapp import Cog, CogCheckFailed

    files = [f for f in [ROOT / "settings.sql", *markdown_files()] if "[[[cog" in f.read_text()]
    assert {f.name for f in files} >= {"settings.sql", "settings.md", "cli.md", "plugins.md"}
    try:
        Cog().callable_main(["cog", "--check", "-I", str(DOCS), *map(str, files)])
    except CogCheckFailed:
        pytest.fail("A generated part of the docs is stale: run `make docs` and commit the result.")


def test_settings_sql_is_one_commented_insert_per_builtin_setting():
    specs = docgen.builtin_settings()
    assert {s.plugin for s in specs} >= {"core", "marat", "cobol", "lm_score", "elo", "selectit"}
    text = (ROOT / "settings.sql").read_text()
    db = sqlite3.connect(":memory:")
    db.executescript(text)  # valid SQL as it stands
    rows = dict(db.execute("SELECT name, value FROM settings"))
    assert rows == {s.name: s.dump(s.default) for s in specs}
    for s in specs:
        assert s.parse(rows[s.name]) == s.default, s.name
    lines = text.splitlines()
    inserts = [i for i, line in enumerate(lines) if line.startswith("INSERT")]
    assert len(inserts) == len(specs)
    for i in inserts:
        assert lines[i].startswith("INSERT OR IGNORE INTO settings (name, value) VALUES (")
        assert lines[i - 1].startswith("-- ") and len(lines[i - 1]) > 10, lines[i]
    # One source of truth: the copy the daemon (and an installed package) reads is this file.
    assert (ROOT / "daemon" / "core" / "settings.sql").resolve() == (
        ROOT / "settings.sql"
    ).resolve()


def test_settings_reference_lists_every_builtin_setting_once():
    text = (DOCS / "settings.md").read_text()
    for s in docgen.builtin_settings():
        assert text.count(f"| `{s.name}` |") == 1, s.name


def test_third_party_settings_stay_out_of_the_generated_docs():
    """Only the plugins pyproject.toml lists are documented, whatever else is installed."""
    names = set(docgen.builtin_entry_points())
    assert {s.plugin for s in docgen.builtin_settings()} <= names | {"core"}
    assert "echo_prefix" not in (ROOT / "settings.sql").read_text()  # the sample plugin's


# -- the plugin contract ----------------------------------------------------------------


def test_every_hookspec_is_documented_with_its_signature():
    """As datasette does: each hook is a heading `name(args)` of docs/plugins.md."""
    from daemon import hookspecs

    hooks = {
        f"{name}{inspect.signature(fn)}"
        for name, fn in inspect.getmembers(hookspecs, inspect.isfunction)
        if hasattr(fn, "lmd_spec")
    }
    assert len(hooks) >= 7
    text = without_code_blocks((DOCS / "plugins.md").read_text())
    headings = set(re.findall(r"^### (\w+\(.*\))$", text, re.M))
    assert hooks - headings == set(), "undocumented hooks (add a ### heading to docs/plugins.md)"
    assert headings - hooks == set(), "docs/plugins.md documents hooks that do not exist"


def test_every_public_api_name_is_documented_with_its_summary():
    """Each name of daemon.api.__all__ is a row of docs/plugins.md with its one-line docs."""
    from daemon import api

    text = (DOCS / "plugins.md").read_text()
    missing = [name for name in api.__all__ if f"| `{name}` | {api.summary(name)} |" not in text]
    assert len(api.__all__) > 40 and missing == [], "undocumented names (run `make docs`)"


# -- pages and links --------------------------------------------------------------------


def test_every_page_is_in_the_index_and_the_index_is_linked():
    indexed = {target.split("#")[0] for target in links(DOCS / "index.md")}
    pages = {p.name for p in DOCS.glob("*.md")} - {"index.md"}
    assert pages - indexed == set(), "pages missing from docs/index.md"
    assert "docs/index.md" in links(README)
    assert {t for t in indexed if t.endswith(".md")} - pages - {"../README.md"} <= PENDING_PAGES


@pytest.mark.parametrize("path", markdown_files(), ids=lambda p: p.name)
def test_relative_links_and_anchors_resolve(path):
    for target in links(path):
        if re.match(r"[a-z][a-z0-9+.-]*:", target):  # http:, https:, mailto:
            continue
        file_part, _, anchor = target.partition("#")
        linked = (path.parent / file_part).resolve() if file_part else path
        if file_part and not linked.exists():
            assert linked.name in PENDING_PAGES and linked.parent == DOCS, (
                f"{path.name}: {target} does not exist"
            )
            continue
        if anchor and linked.suffix == ".md":
            assert anchor in anchors(linked), f"{path.name}: no heading for #{anchor} in {target}"


LIST_ITEM = re.compile(r"^(\d+)\. ")
FENCE = re.compile(r"^ {0,3}(`{3,}[^`]*|~{3,}.*)$")


def broken_lists(text: str) -> list[str]:
    """Where a page's lists came apart (a merge once put a whole section inside item 3 of a
    numbered list, leaving the item's last lines and items 4-8 after it): a numbered list
    that skips a number or starts past 1, or an indented line with no list item above it.
    Fenced code and HTML comments (hidden set-up) are not read."""
    found: list[str] = []
    in_code = in_comment = False
    listing: str | None = None  # "numbered" or "bullets" while a list goes on
    expected = 1
    for n, line in enumerate(text.split("\n"), 1):
        if in_comment or line.startswith("<!--"):
            in_comment = "-->" not in line
            continue
        if FENCE.match(line):
            in_code = not in_code
            continue
        if in_code or not line.strip():
            continue
        item = LIST_ITEM.match(line)
        if item:
            number = int(item.group(1))
            if number != (expected if listing == "numbered" else 1):
                found.append(f"line {n}: item {number} where {expected if listing else 1} was due")
            listing, expected = "numbered", number + 1
        elif line.startswith(("- ", "* ")):
            listing = "bullets"
        elif line.startswith(" "):
            if listing is None:
                found.append(f"line {n}: an indented line under no list item: {line.strip()[:40]}")
        else:
            listing = None  # a paragraph, a heading or a table ends the list
    return found


@pytest.mark.parametrize("path", markdown_files(), ids=lambda p: p.name)
def test_lists_hold_together(path):
    assert broken_lists(path.read_text()) == []


def test_broken_lists_are_found():
    mangled = (
        "1. one\n2. two\n   more of two\n\n## Another concept\n\nText.\n   rest of two\n3. three\n"
    )
    assert broken_lists(mangled) == [
        "line 8: an indented line under no list item: rest of two",
        "line 9: item 3 where 1 was due",
    ]
    fine = "1. one\n   ```sh\n   x\n   ```\n2. two\n\n<!-- x\n  y\n-->\n- a\n  b\n"
    assert broken_lists(fine) == []


def test_readme_is_a_front_page():
    text = README.read_text()
    assert len(text.encode()) < 10_000
    quick = text[text.index("## Quick start") :]
    (block,) = code_blocks(quick[: quick.index("\n## ")])
    commands = [line.split("#")[0].strip() for line in block.splitlines() if line.strip()]
    assert commands == ["make run", "make test"]
    assert "pipx install ." in text and "uv tool install ." in text


def test_every_route_is_in_the_http_api_page(make_client):
    spec = make_client(pm=docgen.builtin_plugin_manager()).get("/openapi.json").json()
    text = (DOCS / "http-api.md").read_text()
    missing = [
        f"{method.upper()} {path}"
        for path, item in spec["paths"].items()
        for method in item
        if f"{method.upper()} {path}" not in text
    ]
    assert missing == []


# -- examples ---------------------------------------------------------------------------


def shell_commands(text: str) -> list[list[str]]:
    """Simple commands (word lists) of the sh/bash blocks, split at pipes and `;`/`&&`."""
    found = []
    for block in code_blocks(text):
        for line in block.replace("\\\n", " ").splitlines():
            lexer = shlex.shlex(line, posix=True, punctuation_chars=";&|()")
            lexer.whitespace_split = True
            lexer.commenters = "#"
            words: list[str] = []
            for token in [*lexer, ";"]:
                if token and set(token) <= set(";&|()"):
                    if words:
                        found.append(words)
                    words = []
                else:
                    words.append(token)
    return found


def check_lmd_words(group: click.Group, words: list[str]) -> None:
    """Parse an `lmd ...` example as the CLI would, without running it."""
    command: click.Command = group
    ctx = None
    args = words
    name = "lmd"
    while True:
        ctx = command.make_context(name, list(args), parent=ctx)
        if not isinstance(command, click.Group):
            return
        state = vars(ctx)
        rest = [*(state.get("_protected_args") or state.get("protected_args") or []), *ctx.args]
        if not rest:
            return
        name, sub, args = command.resolve_command(ctx, rest)
        command = sub


def test_lmd_examples_are_commands_lmd_knows():
    group = docgen.builtin_cli()
    checked = 0
    problems = []
    for path in markdown_files():
        for words in shell_commands(path.read_text()):
            if Path(words[0]).name not in ("lmd", "lmd.pyz"):
                continue
            if words[1:2] == ["echoes"]:
                continue  # the sample plugin's command: docs/plugins.md runs it installed
            try:
                check_lmd_words(group, words[1:])
            except click.exceptions.Exit:
                pass  # --version
            except click.ClickException as e:
                problems.append(f"{path.name}: {shlex.join(words)}: {e.format_message()}")
            checked += 1
    assert problems == []
    assert checked > 40  # the pages are full of them; a parser that finds none proves nothing


def route_matches(spec: dict, method: str, path: str) -> bool:
    for template, item in spec["paths"].items():
        pattern = "^" + re.sub(r"\\\{[^}]+\\\}", "[^/]+", re.escape(template)) + "$"
        if re.match(pattern, path) and method.lower() in item:
            return True
    return False


def curl_request(words: list[str]) -> tuple[str, str] | None:
    """(method, path) of a curl example aimed at the daemon."""
    urls = [w for w in words if w.startswith("http://127.0.0.1:8420")]
    if not urls:
        return None
    method = None
    if "-X" in words:
        method = words[words.index("-X") + 1]
    elif any(w in ("-d", "--data", "--data-binary", "--data-raw") for w in words):
        method = "POST"
    return method or "GET", urlparse(urls[0]).path


def test_curl_examples_call_routes_lmd_serves(make_client):
    spec = make_client(pm=docgen.builtin_plugin_manager()).get("/openapi.json").json()
    checked = 0
    problems = []
    for path in markdown_files():
        for words in shell_commands(path.read_text()):
            if words[0] != "curl" or not (request := curl_request(words)):
                continue
            checked += 1
            if not route_matches(spec, *request):
                problems.append(f"{path.name}: {shlex.join(words)} -> {request}")
    assert problems == []
    assert checked > 20


def test_example_parsers_catch_mistakes():
    """The checks above can fail: a wrong option, an unknown command, an unknown route."""
    group = docgen.builtin_cli()
    for words in (["say", "--sesion", "x", "hi"], ["settingz", "list"], ["elo", "rate", "x.csv"]):
        with pytest.raises(click.ClickException):
            check_lmd_words(group, words)
    check_lmd_words(group, ["settings", "set", "max_tokens", "4000"])
    spec = {"paths": {"/settings/{name}": {"put": {}}, "/v1": {"post": {}}}}
    assert route_matches(spec, "PUT", "/settings/max_tokens")
    assert not route_matches(spec, "GET", "/v1") and not route_matches(spec, "POST", "/v2")
    words = shell_commands("```sh\ncurl -s -X PUT -d 1 http://127.0.0.1:8420/settings/a # x\n```")
    assert [curl_request(w) for w in words] == [("PUT", "/settings/a")]


# -- the tour ---------------------------------------------------------------------------


def tour_backend(body: dict) -> Reply | str:
    """Answers for the tour: marat lists the home dir (read-only, so it runs), dali chats."""
    messages = body["messages"]
    system = " ".join(m["content"] for m in messages if m["role"] == "system")
    if "Final Thought" in system:
        if any("Observation" in m["content"] for m in messages if m["role"] != "system"):
            return "Final Thought: Your home holds the files listed below."
        return "Thought: list the home dir.\nAction:\n```bash\nls ~\n```"
    return f"Answer {len(messages)}."


def test_readme_tour_runs_as_printed(live, backend, home, tmp_path):
    text = README.read_text()
    tour = text[text.index("## A 30-second tour") :]
    (block,) = code_blocks(tour[: tour.index("\n## ")])
    (tmp_path / "notes.txt").write_text("hello\n")
    d = live(env={"HOME": str(tmp_path)})  # marat's `~`
    backend.handler = tour_backend
    env = {
        "PATH": f"{LMD_BIN}:/usr/bin:/bin",
        "HOME": str(tmp_path),
        "LMD_HOME": str(home),
        "LMD_URL": d.url,
        "LMD_TOKENIZER": "estimate",
        "PYTHONPATH": os.environ.get("PYTHONPATH", ""),
    }
    done = subprocess.run(
        ["bash", "-e", "-c", block.replace("http://127.0.0.1:8420", d.url)],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    out = done.stdout
    assert "Answer 1." in out and "Answer 3." in out  # the second dali turn saw the first
    assert "notes.txt" in out  # marat ran `ls ~` at once (read-only)
    assert "max tokens is now 4000" in out and "4000" in out.split("now 4000", 1)[1]
    assert '"mode": "dali"' in out or '"mode":"dali"' in out
    sent = [r["messages"][-1]["content"] for r in backend.chat_requests]
    assert sent[0] == "summarise why the sky is blue in one line"
    assert sent[1] == "now in five words"
    assert "list the files in my home dir" in [
        m["content"] for m in backend.chat_requests[2]["messages"]
    ]
