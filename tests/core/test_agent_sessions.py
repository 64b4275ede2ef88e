"""Agents get sessions of their own (daemon.approvals): a request marked X-Lmd-Agent speaks in
agent:NAME on every route that takes a turn, and shapes no context but its own sessions'."""

from __future__ import annotations

JSON = {"Accept": "application/json"}
AGENT = {"X-Lmd-Agent": "1"}


def test_an_agent_speaks_and_promotes_only_in_its_own_sessions(client, backend):
    backend.queue("hi", "hello", "hey")
    user = client.post("/v1", content="dali hi", headers=JSON).json()
    agent = client.post("/v1", content="dali hello", headers={**JSON, **AGENT}).json()
    assert (user["session"], agent["session"]) == ("default", "agent:default")
    chat = client.post(
        "/v1/chat/completions",
        json={"model": "lmd-dali", "messages": [{"role": "user", "content": "hey"}]},
        headers={**AGENT, "X-Session": "default"},
    )
    assert chat.status_code == 200
    # the agent's words never reached the user's context
    assert backend.chat_requests[-1]["messages"] == [
        {"role": "user", "content": "hello"},
        {"role": "assistant", "content": "hello"},
        {"role": "user", "content": "hey"},
    ]
    refused = client.post(f"/history/{user['prompt_ids']['user']}/promote", headers=AGENT)
    assert refused.status_code == 403
    assert refused.json()["error"].startswith("A client relaying a model's words changes only")
    own = client.post(f"/history/{agent['prompt_ids']['user']}/promote", headers=AGENT)
    assert own.status_code == 200
    assert client.post(f"/history/{user['prompt_ids']['user']}/promote").status_code == 200
