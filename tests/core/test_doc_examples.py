"""The harness that runs the docs' examples (tests/doc_examples.py) covers every page and every
block, and fails where an example is wrong: a command that fails, output other than shown."""

from __future__ import annotations

import re
import unittest
from pathlib import Path

import pytest
from sybil.example import SybilFailure

from tests.daemons import ROOT
from tests.doc_examples import (
    matches,
    run_python,
    run_sh,
    setup_page,
    steps_of,
    sybil,
    teardown_page,
)

PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
FENCE = re.compile(r"^[ \t]*```(\w*)\n(.*?)^[ \t]*```", re.M | re.S)


def run_page(path: Path) -> list[str]:
    """Evaluate a page's examples in order as pytest would; the failures' messages."""
    document = sybil.parse(path)
    setup_page(document.namespace)
    failures = []
    try:
        for example in document.examples():
            try:
                example.evaluate()
            except SybilFailure as e:
                failures.append(str(e))
            except unittest.SkipTest:
                pass  # a block marked skip
    finally:
        teardown_page(document.namespace)
    return failures


def test_every_page_is_collected_and_every_sh_and_python_block_is_an_example():
    """The pages pytest collects are README.md and docs/*.md (pyproject's testpaths), and no
    runnable block escapes the parsers (a wrong fence language, an unclosed fence)."""
    assert {p.name for p in PAGES if sybil.should_parse(p)} == {p.name for p in PAGES}
    for path in PAGES:
        fenced = [lang for lang, _ in FENCE.findall(path.read_text()) if lang in ("sh", "python")]
        shown = [
            e
            for e in sybil.parse(path).examples()
            if e.region.evaluator in (run_sh, run_python)
            and not e.document.text.startswith("<!--", e.region.start)  # hidden set-up
        ]
        assert len(shown) == len(fenced), path.name


# a command line (not a synopsis such as `lmd selectit DATASET [-o FILE]`)
COMMAND = re.compile(
    r"^(?:\$ )?(?:lmd|curl|\.venv/bin/lmd) +[\w-]+(?: (?![^\n]*\b[A-Z]{3,}\b)|$)", re.M
)


def test_command_lists_are_sh_blocks_so_they_run():
    """A command (or a `$ command` transcript) in a block of another language (text, none)
    would never run: commands go in sh blocks, their output in `#  ` lines under them."""
    for path in PAGES:
        for lang, body in FENCE.findall(path.read_text()):
            if lang not in ("sh", "python"):
                assert not COMMAND.search(body), f"{path.name}: {COMMAND.search(body)[0]}"


def test_shown_output_and_steps_are_read_as_documented():
    block = (
        "# prose, not output\n"
        'ask() { echo "$*"; }\n'
        "lmd say knob show max tokens   # a trailing comment is prose\n"
        "#  max tokens is 3500.\n"
        "for i in 1 2; do\n  echo $i\ndone\n"
        "#  1 2\n"
        "curl -s -d 'x' \\\n  http://127.0.0.1:8420/v1\n"
        "#\n"
    )
    steps = steps_of(block)
    assert [s.line for s in steps] == [1, 2, 4, 8]
    assert steps[0].shown == [] and steps[1].shown == ["max tokens is 3500."]
    assert steps[2].source == "for i in 1 2; do\n  echo $i\ndone" and steps[2].shown == ["1 2"]
    assert steps[3].shown == [""]
    assert matches(["(3 added, 2 removed).", "..."], "(3 added, 2 removed).\n--- a/x\n+++ b/x")
    assert matches(['{"a": 1, ...}'], '{"a":1,"b":2}')  # whitespace is ignored
    assert not matches(["max tokens is 9999."], "max tokens is 3500.\n")
    assert not matches(["one"], "one\ntwo")  # all of the output, not a part


def test_a_page_whose_examples_hold_passes(tmp_path):
    page = tmp_path / "good.md"
    page.write_text(
        "<!-- invisible-code-block: python\n"
        'backend.queue("Paris.")\n'
        'env["CITY"] = "Paris"\n'
        "-->\n"
        "```sh\n"
        "lmd say dali what is the capital of France\n"
        "#  Paris.\n"
        "lmd settings set max_tokens 4000\n"
        "#  max_tokens ...\n"
        'curl -s -X PUT -d 4001 http://127.0.0.1:8420/settings/max_tokens; echo "$CITY"\n'
        '#  {"name": "max_tokens", "value": 4001, ...}\n'
        "#  Paris\n"
        "```\n"
        '<!-- skip: next "needs a GPU" -->\n'
        "```sh\nnvidia-smi\n```\n"
        "```python\n"
        "import urllib.request\n"
        'with urllib.request.urlopen("http://127.0.0.1:8420/settings/max_tokens") as r:\n'
        "    assert b'4001' in r.read()\n"
        "```\n"
    )
    assert run_page(page) == []


def test_a_broken_example_fails_naming_its_line_and_what_it_printed(tmp_path):
    """The proof that a broken example fails `make test`: the same evaluators on a page with
    a failing command, wrong shown output, and a failing python block."""
    page = tmp_path / "bad.md"
    page.write_text(
        "# A page\n\n"
        "```sh\n"
        "lmd settings set max_tokens lots\n"
        "lmd say knob show max tokens\n"
        "#  max tokens is 9999.\n"
        "```\n"
        "```python\n"
        "assert 1 + 1 == 3, 'arithmetic'\n"
        "```\n"
    )
    document = sybil.parse(page)
    setup_page(document.namespace)
    try:
        sh, python = document.examples()
        with pytest.raises(SybilFailure) as failed:
            sh.evaluate()
        message = str(failed.value)
        assert "line 4: lmd settings set max_tokens lots\n  exited 1" in message
        assert "max_tokens cannot be 'lots'" in message
        assert "line 5: lmd say knob show max tokens\n  the page shows:\nmax tokens is 9999." in (
            message
        )
        assert "it printed:\nmax tokens is 3500." in message
        with pytest.raises(AssertionError, match="arithmetic"):
            python.evaluate()
    finally:
        teardown_page(document.namespace)
