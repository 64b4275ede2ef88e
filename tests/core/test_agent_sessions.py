"""Agents get sessions of their own (daemon.core.approvals): a request marked X-Lmd-Agent speaks
in agent:NAME on every route that takes a turn, and shapes no context but its own sessions'."""

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


def test_a_question_is_answered_only_by_who_heard_it():
    """daemon.core.approvals on its own: the id, who heard it, the echoed id, an agent's
    rights."""
    import contextvars

    contextvars.copy_context().run(_who_heard_it)  # the request's marks stay in here


def _who_heard_it() -> None:
    from daemon.core import approvals
    from daemon.core.approvals import REQUEST_AGENT, REQUEST_LISTENER, Listener

    def as_client(name: str = "", question: str = "", agent: str | None = None):
        REQUEST_LISTENER.set(Listener(name, question))
        REQUEST_AGENT.set(agent)

    as_client("term-1")
    asked = approvals.new_question({"kind": "approval", "command": "make test"}, "asked?")
    assert len(asked["id"]) == 16 and asked["heard_by"] == ["term-1"]
    assert approvals.public(asked) == {
        "kind": "approval",
        "command": "make test",
        "id": asked["id"],
    }
    assert approvals.heard(asked) and approvals.approval_allowed(asked)
    as_client("term-2")
    assert not approvals.heard(asked) and not approvals.approval_allowed(asked)
    assert approvals.not_heard_reply(asked).endswith("Here it is:\nasked?")
    told = approvals.new_question(asked)  # said to term-2 as well: the same question
    assert told["id"] == asked["id"] and told["heard_by"] == ["term-1", "term-2"]
    assert approvals.approval_fingerprint(told) == approvals.approval_fingerprint(asked)
    as_client("term-1")
    assert approvals.not_heard(told)["heard_by"] == ["term-2"]  # it left before hearing it
    as_client("", asked["id"])  # a plain client that echoes the id answers that question
    assert approvals.heard(told)
    as_client("term-1", "0" * 16)  # an echoed id decides, even for a client that heard it
    assert not approvals.heard(told)
    as_client("term-1", agent="")  # an agent: its own session, and never the user's yes
    assert approvals.own_session("default") == "agent:default"
    assert not approvals.approval_allowed(told)
    as_client("term-1", agent=approvals.approval_fingerprint(told))
    assert approvals.approval_allowed(told)
    as_client()
    assert approvals.own_session("default") == "default"
