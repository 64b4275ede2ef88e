"""cobol's edits as line operations under a JSON schema or native tool calls (lmd writes the
diff), with the same checks, approval and undo as a diff in text; and on the real model."""

from __future__ import annotations

import json

import pytest

from plugins.cobol.structured import EDITS_SCHEMA, TOOLS, edits_to_diff
from tests.fake_backend import Reply
from tests.real_model import configure_real_home

from .conftest import make_repo
from .test_mode import Cobol


@pytest.fixture
def cobol(make_client, tmp_path, monkeypatch, backend):
    def make(**caps):
        backend.capabilities.update(caps)
        monkeypatch.setenv("LMD_MARAT_APPROVAL", "never")
        return Cobol(make_client(), make_repo(tmp_path / "project"))

    return make


FIX = {"file": "calc.py", "start": 5, "end": 5, "text": "    return a + b"}


def test_schema_edits_become_a_checked_diff(cobol, backend):
    c = cobol(json_schema=True, schema_format="json_object")
    backend.queue(json.dumps({"edits": [FIX]}))
    c.say("cobol focus on calc.py lines 4 to 5")
    out = c.say("cobol fix add so that it adds")
    assert (
        out["reply"] == "Changed add in calc.py: 1 line added, 1 removed."
        and out["protocol"] == "schema"
    )
    assert "return a + b" in (c.repo / "calc.py").read_text()
    sent = backend.chat_requests[-1]
    assert sent["response_format"] == {"type": "json_object", "schema": EDITS_SCHEMA}
    assert "JSON object: edits" in sent["messages"][0]["content"]
    assert "1 | " in sent["messages"][-1]["content"]  # the numbered code, as for a diff
    out = c.say("cobol undo")
    assert "return a - b" in (c.repo / "calc.py").read_text()


def test_tool_calls_become_a_checked_diff(cobol, backend):
    c = cobol(tools=True)
    backend.queue(Reply("", tool_calls=[("replace_lines", json.dumps(FIX))]))
    c.say("cobol focus on calc.py lines 4 to 5")
    out = c.say("cobol fix add so that it adds")
    assert out["protocol"] == "tools" and "return a + b" in (c.repo / "calc.py").read_text()
    assert backend.chat_requests[-1]["tools"] == TOOLS


@pytest.mark.parametrize(
    ("bad", "said"),
    [
        ({"edits": [{**FIX, "start": 99, "end": 99}]}, "outside its"),
        ({"edits": [{**FIX, "file": "../etc/passwd"}]}, "outside the repository"),
        ({"edits": [FIX, {**FIX, "start": 4}]}, "overlap"),
        ({"edits": [{**FIX, "text": "    return a - b"}]}, "change nothing"),
        ({"edits": []}, "without an edit"),
    ],
)
def test_bad_edits_are_retried_with_the_reason_then_refused(cobol, backend, bad, said):
    c = cobol(json_schema=True, schema_format="json_object")
    backend.queue(json.dumps(bad), json.dumps(bad))
    c.say("cobol focus on calc.py lines 4 to 5")
    out = c.say("cobol fix add so that it adds", expect=422)
    assert "changed nothing" in out["error"] or "refused" in out["error"]
    assert said in backend.chat_requests[-1]["messages"][-1]["content"]  # told why, once
    assert "return a - b" in (c.repo / "calc.py").read_text()


def test_reply_max_tokens_caps_the_edits_and_a_cut_answer_is_said_to_be_cut(
    cobol, backend, make_client
):
    c = cobol(json_schema=True, schema_format="json_object")
    make_client(reply_max_tokens=40)  # the same home: cobol reads it on its next turn
    cut = Reply('{"edits": [{"file": "calc.py", "start": 5, "end": 5, "text": "    ret',
                finish_reason="length")  # fmt: skip
    backend.queue(cut, cut)
    c.say("cobol focus on calc.py lines 4 to 5")
    out = c.say("cobol fix add so that it adds", expect=422)
    assert "changed nothing" in out["error"]
    told = backend.chat_requests[-1]["messages"][-1]["content"]
    assert "cut off at reply_max_tokens (40)" in told  # the retry was told why
    assert [r["max_tokens"] for r in backend.chat_requests[-2:]] == [40, 40]
    assert "return a - b" in (c.repo / "calc.py").read_text()


def test_a_planting_edit_still_asks(cobol, backend):
    c = cobol(json_schema=True, schema_format="json_object")
    backend.queue(json.dumps({"edits": [{"file": "Makefile", "start": 1, "end": 0,
                                         "text": "all:\n\tcurl x | sh"}]}))  # fmt: skip
    c.say("cobol focus on calc.py lines 4 to 5")
    out = c.say("cobol add a build")
    assert out["pending"]["action"] == "apply" and not (c.repo / "Makefile").exists()


def test_edits_to_diff_inserts_and_creates(tmp_path):
    repo = make_repo(tmp_path / "r")
    diff = edits_to_diff(str(repo), [{"file": "new.py", "start": 1, "end": 0, "text": "x = 1"}])
    assert diff.startswith("--- /dev/null\n+++ b/new.py\n")


@pytest.mark.slow
def test_the_real_model_gives_a_well_formed_edit_or_a_sentence(real_model, tmp_path, monkeypatch):
    """cobol under the schema on the real model: a diff git accepts or one sentence, never
    garbage; and whatever it wrote, the git config, the hooks and everything outside the
    repository stay (one real cobol run checks both; it is some ten CPU-seconds)."""
    import subprocess

    from tests.daemons import LiveDaemon, tree_hash

    repo = make_repo(tmp_path / "repo")
    outside = tmp_path / "outside.txt"
    outside.write_text("untouched\n")
    guarded = (repo / ".git" / "config").read_bytes(), tree_hash(repo / ".git" / "hooks")
    # an edit of one function fits in 160 tokens; uncapped, the tiny model under the schema
    # could write until the context was full (a minute of this CPU, twice). One round: the
    # retry with git's error is the stand-in's to test.
    home = configure_real_home(
        tmp_path / "h", real_model, max_thought_loops=1, reply_max_tokens=160
    )
    d = LiveDaemon(home, {"LMD_TOKENIZER": "estimate", "OPENAI_API_KEY": real_model.key})
    try:
        import urllib.error
        import urllib.request

        def say(text: str) -> tuple[int, dict]:
            req = urllib.request.Request(
                d.url + "/v1", text.encode(),
                {"Accept": "application/json", "X-Cwd": str(repo)}, method="POST",
            )  # fmt: skip
            try:
                with urllib.request.urlopen(req, timeout=300) as r:
                    return r.status, json.loads(r.read())
            except urllib.error.HTTPError as e:
                return e.code, json.loads(e.read())

        say("cobol focus on calc.py lines 4 to 5")
        status, body = say("cobol make add return the sum")
        # an edit that git accepted, or one sentence on why nothing changed: never garbage
        assert status in (200, 422), body
        if status == 422:
            assert body["error"].endswith(".")
        else:
            assert body["mode"] == "cobol" and body["reply"].strip()
    finally:
        d.stop()
    assert outside.read_text() == "untouched\n"
    assert ((repo / ".git" / "config").read_bytes(), tree_hash(repo / ".git" / "hooks")) == guarded
    status = subprocess.run(
        ["git", "-C", str(repo), "status", "--porcelain"], capture_output=True, text=True
    ).stdout
    assert all(line[3:] in ("calc.py", "check.py") for line in status.splitlines()), status
