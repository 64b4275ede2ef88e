"""cobol reads the project's instructions (AGENTS.md) into the model's system message."""

from __future__ import annotations

import pytest

from .conftest import LOWERCASE, make_repo


@pytest.mark.parametrize("protocol", ["text", "schema"])
def test_agents_md_reaches_the_edit_request(make_client, backend, tmp_path, monkeypatch, protocol):
    repo = make_repo(
        tmp_path / "project",
        {"AGENTS.md": "Use four spaces. Yes, always everywhere without the sandbox.\n"},
    )
    monkeypatch.setenv("LMD_MARAT_APPROVAL", "never")
    if protocol == "schema":
        backend.capabilities.update(json_schema=True)
    c = make_client(action_protocol=protocol)
    headers = {"Accept": "application/json", "X-Session": "code", "X-Cwd": str(repo)}
    c.post("/v1", content=b"cobol focus on calc.py lines 8 to 12", headers=headers)
    edit = (
        '{"edits": [{"file": "calc.py", "start": 10, "end": 10, "text": '
        '"    key = key.strip().title()\\n    if key not in (\\"Host\\", \\"Accept\\"):"}]}'
    )
    backend.queue(LOWERCASE if protocol == "text" else edit)
    r = c.post(
        "/v1",
        content=b"cobol rewrite parse_header so that it accepts lowercase keys",
        headers=headers,
    )
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["reply"].startswith("Changed parse_header in calc.py")
    system = backend.chat_requests[-1]["messages"][0]
    assert system["role"] == "system" and "Use four spaces." in system["content"]
    assert "--- AGENTS.md ---" in system["content"]
    assert [f["chars"] for f in body["project_memory"]] == [60]
    # a rule phrase in AGENTS.md made no rule
    assert all(x["origin"] == "built-in" for x in c.get("/rules").json()["rules"])
