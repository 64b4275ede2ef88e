"""Speakable replies: the markdown stripper, `X-Speak` on /v1 (plain, JSON, stream), `lmd say
--speak` against a live daemon."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from daemon.core.speak import Speaker, speakable, unmark, verbatim, visible
from tests.fake_backend import Reply

LMD = str(Path(sys.executable).parent / "lmd")

MARKDOWN = """# Result

The **build** passed in *3 seconds* with `make test`.

- first [the docs](https://example.com/docs)
- second ![a chart](chart.png)
* [x] done

> quoted words

```bash
ls -la
```

| name | size |
|------|-----:|
| a.txt | 3 |

---
1. keep the numbers
snake_case_name and 2*3*4 stay."""

SPOKEN = """Result

The build passed in 3 seconds with make test.

first the docs
second a chart
done

quoted words

ls -la

name, size
a.txt, 3

1. keep the numbers
snake_case_name and 2*3*4 stay."""


def test_speakable_strips_markup_and_keeps_words():
    assert speakable(MARKDOWN) == SPOKEN


@pytest.mark.parametrize(
    "text",
    ["plain words.", "rm -rf build_dir", "x_y_z = a*b*c", "It costs $5 - maybe $6.", "3 > 2"],
)
def test_plain_text_is_unchanged(text):
    assert speakable(text) == text


@given(st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=200))
def test_streaming_equals_whole(text):
    """Feeding any split of the text gives what stripping the whole text gives."""
    for cut in (1, 3, 7):
        s = Speaker()
        parts = [s.feed(text[i : i + cut]) for i in range(0, len(text), cut)]
        assert ("".join(parts) + s.flush()).strip("\n") == speakable(text)


@given(st.text(alphabet="abc `*_#->[]()|~\n", max_size=120))
def test_never_crashes_and_never_leaves_fences(text):
    out = speakable(text)
    assert all(not line.lstrip().startswith("```") for line in out.splitlines())


FENCED = "Here:\n```python\nprint('hi')\n```\nDone **now**."


def test_v1_speak_plain(client, backend):
    backend.queue(FENCED)
    r = client.post("/v1", content="show code", headers={"X-Speak": "1"})
    assert r.status_code == 200
    assert r.text == "Here:\nprint('hi')\nDone now.\n"
    assert "```" not in r.text
    # Without the header only the fences go; with ?raw=1 the reply is as the mode said it.
    backend.queue(FENCED, FENCED)
    assert "```" not in client.post("/v1", content="show code").text
    assert "```python" in client.post("/v1?raw=1", content="show code").text


def test_v1_speak_query_and_json_keep_the_original(client, backend):
    backend.queue(FENCED)
    r = client.post("/v1?speak=1", content="show code", headers={"Accept": "application/json"})
    body = r.json()
    assert body["reply"] == FENCED and body["speech"] == "Here:\nprint('hi')\nDone now."
    # History keeps the real reply: speaking is only how it is said.
    history = client.get("/history", params={"session": "default"}).json()["prompts"]
    assert [p["content"] for p in history if p["role"] == "assistant"] == [FENCED]


def test_v1_speak_stream(client, backend):
    backend.queue(
        Reply(FENCED, chunks=["Here:\n``", "`python\npri", "nt('hi')\n```\nDone **now**."])
    )
    with client.stream(
        "POST", "/v1", content="x", headers={"Accept": "text/event-stream", "X-Speak": "yes"}
    ) as r:
        lines = [line for line in r.iter_lines() if line.startswith("data: ")]
    chunks = [json.loads(line[6:]) for line in lines if line[6:].startswith('"')]
    assert "".join(chunks) == "Here:\nprint('hi')\nDone now."
    assert lines[-1] == "data: [DONE]"
    assert backend.chat_requests[-1]["stream"] is True


def test_lmd_say_speak_against_live_daemon(live, backend):
    d = live()
    backend.queue("## Weather\n- **sunny**, `22` degrees")
    done = subprocess.run(
        [LMD, "say", "--url", d.url, "--speak", "weather?"], capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout == "Weather\nsunny, 22 degrees\n"
    assert backend.chat_requests[-1]["messages"][-1]["content"] == "weather?"


def test_speak_plain_replies_setting(make_client, backend):
    c = make_client(speak_plain_replies=True)
    backend.queue(FENCED, FENCED, FENCED)
    assert c.post("/v1", content="a").text == "Here:\nprint('hi')\nDone now.\n"
    # X-Speak: 0 turns speech off (fences still go); X-Raw: 1 gets the reply as written.
    # JSON clients are not affected by the setting.
    off = c.post("/v1", content="b", headers={"X-Speak": "0", "X-Raw": "1"}).text
    assert "```python" in off
    body = c.post("/v1", content="c", headers={"Accept": "application/json"}).json()
    assert body["reply"] == FENCED and "speech" not in body


def test_verbatim_writes_out_what_a_reader_cannot_see():
    """A question's command may not hide a part: an escape sequence (which a terminal, or
    `lmd say`'s clean-up, takes with the rest of its line), a bidirectional override, a
    zero-width space, even the verbatim marks themselves are written out, never dropped."""
    assert visible("ls -la\n\tgrep x") == "ls -la\n\tgrep x"  # newline and tab are seen
    shown = unmark(verbatim("ls \x1b]0;t\x07; rm -rf ~ \u202e\u200b\ue000"))
    assert shown.startswith("ls \\x1b]0;t\\x07; rm -rf ~ \\u202e\\u200b\\ue000\n")
    assert shown.endswith("(It holds 5 invisible characters, written out as \\x.. or \\u....)")
    assert (
        visible("\x9b")
        == "\\x9b\n(It holds an invisible character, written out as \\x.. or \\u....)"
    )
