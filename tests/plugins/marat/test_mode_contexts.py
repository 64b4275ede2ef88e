"""Each mode's context holds only what it should (issue 36): marat's protocol (its raw JSON
steps, tool calls, observations, format corrections) never reaches another mode's model
context, while what was said and answered does; marat's own next step still reads its steps.
Asserted on the bodies the stand-in backend received."""

from __future__ import annotations

import json

import pytest

from tests.fake_backend import Reply

STEP = {"thought": "list it", "action": "bash", "text": "ls"}
FINAL = {"thought": "done", "action": "final", "text": "Two files."}


@pytest.fixture
def client(make_client, projects, backend):
    backend.capabilities.update(json_schema=True)  # marat answers in JSON steps
    return make_client(marat_start_dir=str(projects["other"]))


def say(client, text: str) -> dict:
    r = client.post("/v1", content=text, headers={"Accept": "application/json"})
    assert r.status_code == 200, r.text
    return r.json()


def test_dali_hears_what_marat_said_never_how(client, backend):
    backend.queue("not json at all", json.dumps(STEP), json.dumps(FINAL))
    assert say(client, "marat list the files")["reply"].startswith("Two files.")
    marat_saw = backend.chat_requests[-1]["messages"]
    assert any(m["content"].startswith("Format help") for m in marat_saw)  # its own, kept
    assert any(m["content"].startswith("Observation:") for m in marat_saw)

    backend.queue("Hello.")
    assert say(client, "dali what did you just do")["reply"] == "Hello."
    dali_saw = backend.chat_requests[-1]["messages"]
    assert [(m["role"], m["content"].split("\n")[0]) for m in dali_saw] == [
        ("user", "list the files"),
        ("assistant", "Two files."),
        ("user", "what did you just do"),
    ]
    sent = json.dumps(dali_saw)
    for protocol in ("thought", "Observation", "Format help", "not json at all"):
        assert protocol not in sent

    # marat's next task still reads its own earlier steps (kept by karma as it keeps them)
    backend.queue(json.dumps(FINAL))
    say(client, "marat and now")
    marat_again = json.dumps(backend.chat_requests[-1]["messages"])
    assert "Hello." in marat_again and "what did you just do" in marat_again


def test_tool_calls_stay_in_marat(make_client, projects, backend):
    backend.capabilities.update(tools=True, tool_choice=True)
    client = make_client(marat_start_dir=str(projects["other"]))
    backend.queue(
        Reply("", tool_calls=[("bash", json.dumps({"command": "ls"}))]),
        Reply("", tool_calls=[("final", json.dumps({"answer": "Listed."}))]),
        "Sure.",
    )
    say(client, "marat list them")
    say(client, "dali thanks")
    dali_saw = backend.chat_requests[-1]["messages"]
    assert all("tool_calls" not in m and m["role"] != "tool" for m in dali_saw)
    assert [m["content"] for m in dali_saw] == [
        "list them",
        "Listed.\n\nnotes.txt\ntodo.md",
        "thanks",
    ]


def test_rows_from_an_older_lmd_are_told_apart(tmp_path):
    """The migration marks marat's old thoughts, observations and corrections as steps."""
    import sqlite3

    from daemon.core.store import Store

    path = tmp_path / "lmd.db"
    db = sqlite3.connect(path)
    db.execute(
        "CREATE TABLE prompts (id INTEGER PRIMARY KEY, session TEXT NOT NULL, role TEXT NOT "
        "NULL, content TEXT NOT NULL, tokens INTEGER NOT NULL, karma REAL NOT NULL, kind TEXT "
        "NOT NULL DEFAULT 'default', mode TEXT, created_at REAL NOT NULL, status TEXT NOT NULL "
        "DEFAULT 'ok', meta TEXT NOT NULL DEFAULT '{}')"
    )
    old = [
        ("user", "list files", "{}"),
        ("assistant", '{"thought": "x", "action": "bash", "text": "ls"}', '{"marat": "thought"}'),
        ("user", "Observation: exit code 0", '{"marat": "observation", "command": "ls"}'),
        ("user", "Format help: reply with one JSON object", "{}"),
        ("assistant", "Two files.", "{}"),
    ]
    for role, content, meta in old:
        db.execute(
            "INSERT INTO prompts (session, role, content, tokens, karma, mode, created_at, meta)"
            " VALUES ('s', ?, ?, 1, 100, 'marat', 1, ?)",
            [role, content, meta],
        )
    db.commit()
    db.close()
    store = Store(path)
    store.migrate()
    seen = [p.content for p in store.recent("s", 50, "dali")]
    store.close()
    assert seen == ["list files", "Two files."]
