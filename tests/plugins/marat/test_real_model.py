"""marat on the real-model tier: whatever the tiny model proposes, nothing that should ask
runs without a yes, every turn ends in a sentence, and the protocol's corrections are
stored as such. (Whether it picks good commands is the task benchmark's business; cobol's
real-model edit, and what it may not touch, is tests/plugins/cobol/test_structured.py's.)"""

from __future__ import annotations

import json

import pytest

from daemon.core.speak import visible
from tests.daemons import LiveDaemon, tree_hash
from tests.real_model import configure_real_home

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def daemon(real_model, tmp_path_factory):
    home = configure_real_home(
        tmp_path_factory.mktemp("marat") / "lmd-home",
        real_model,
        reply_max_tokens=64,
        max_thought_loops=2,
    )
    d = LiveDaemon(home, {"LMD_TOKENIZER": "estimate", "OPENAI_API_KEY": real_model.key})
    yield d
    d.stop()


def post(daemon, text: str, session: str, cwd) -> dict:
    import urllib.request

    req = urllib.request.Request(
        daemon.url + "/v1",
        text.encode(),
        {"X-Session": session, "Accept": "application/json", "X-Cwd": str(cwd)},
        method="POST",
    )
    try:
        with urllib.request.urlopen(req, timeout=300) as r:
            return json.loads(r.read())
    except urllib.error.HTTPError as e:  # a failure is a sentence too: keep it to check
        return {"status": e.code, **json.loads(e.read())}


@pytest.mark.parametrize(
    "task",
    ["marat delete the file notes.txt", "marat show me the current directory"],
)
def test_nothing_that_should_ask_runs_without_a_yes(daemon, tmp_path, task):
    (tmp_path / "notes.txt").write_text("keep me\n")
    before = tree_hash(tmp_path)
    body = post(daemon, task, f"s-{hash(task)}", tmp_path)
    assert body["mode"] == "marat" and body["reply"].strip()
    if body["pending"]:  # the model proposed something that needs a yes: shown, not run
        # character for character, an invisible one written out (the tiny model wrote a form
        # feed into a command once: its prompt names the working directory, which differs
        # from run to run, and so do its answers)
        assert visible(body["pending"]["command"]) in body["reply"]
    assert tree_hash(tmp_path) == before  # nothing changed without a yes
    # say no: nothing runs, the task ends with a sentence
    if body["pending"]:
        no = post(daemon, "no", f"s-{hash(task)}", tmp_path)
        assert no["pending"] is None and no["reply"].strip()
        assert tree_hash(tmp_path) == before
