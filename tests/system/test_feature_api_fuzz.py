"""Schemathesis over the features' routes, each documented with `endpoint.openapi`: responses
must match the documented status codes, content types and schemas; nothing is a 500."""

from __future__ import annotations

import collections
import time

import pytest

from tests.daemons import IN_PROCESS, configure
from tests.plugins.selectit.conftest import dist_reply

from .conftest import HOST, fuzz

FEATURE_ROUTES = {
    ("POST", "/lm_score"),
    ("POST", "/selectit"),
    ("GET", "/elo"),
    ("GET", "/elo/leaderboard"),
    ("POST", "/elo/battles"),
    ("POST", "/v1/chat/completions"),
    ("GET", "/v1/models"),
    ("GET", "/v1/models/{model}"),
    ("POST", "/v1/propose"),
    ("GET", "/marat/commands"),
}
# Schema-valid but still refused with a sentence, by design: a record without the fields
# SelectIT needs, an empty utterance, an empty shell line, an unknown model name, a model
# battling itself. Their
# descriptions say what is accepted; the refusals are checked to be documented 4xx.
LOOSE = {"/selectit", "/v1/chat/completions", "/v1/propose", "/lm_score", "/v1/models/{model}"}
LOOSE |= {"/elo/battles"}


def test_feature_routes_are_documented(make_client):
    spec = make_client().get("/openapi.json").json()
    for method, path in FEATURE_ROUTES:
        op = spec["paths"][path][method.lower()]
        assert not op.get("x-lmd-undocumented"), (method, path)
        assert "200" in op["responses"] and op["summary"]


def test_schemathesis_on_feature_routes(home, backend, tmp_path):
    import schemathesis  # here, not at collection: every worker would import it
    from schemathesis import checks

    from daemon.http.app import create_app

    # a score for LM_SCORE and a command for propose; rating logprobs for SelectIT
    backend.handler = lambda body: dist_reply({"4": 1.0}) if body.get("logprobs") else "7"
    seen: collections.Counter = collections.Counter()
    started = time.monotonic()
    ops = [
        r.ok()
        for r in schemathesis.openapi.from_asgi(
            "/openapi.json", create_app(home=home, peer_check=IN_PROCESS), headers=HOST
        ).get_all_operations()
    ]
    ops = [op for op in ops if (op.method.upper(), op.path) in FEATURE_ROUTES]
    assert {(op.method.upper(), op.path) for op in ops} == FEATURE_ROUTES
    for i, op in enumerate(ops):
        op_home = tmp_path / f"op{i}"
        configure(
            op_home,
            openai_chat_endpoint=backend.url,
            openai_model="m",
            llm_max_retries=0,
            llm_timeout_secs=2,
        )
        op.schema.app = create_app(home=op_home, peer_check=IN_PROCESS)
        excluded = [checks.positive_data_acceptance] if op.path in LOOSE else []
        fuzz(op, seen, excluded=excluded, examples=25)
    took = time.monotonic() - started
    print(f"schemathesis (features): {sum(seen.values())} requests in {took:.1f} s")
    for key, n in sorted(seen.items()):
        print(" ", *key, n)
    assert not [k for k in seen if k[2] >= 500], [k for k in seen if k[2] >= 500]
    ok = {k[:2] for k in seen if k[2] == 200}
    # random model names and message lists rarely make a valid turn: one valid call each
    rare = {
        ("POST", "/v1/propose"),
        ("POST", "/v1/chat/completions"),
        ("GET", "/v1/models/{model}"),
    }
    for route in FEATURE_ROUTES - rare:
        assert route in ok, f"{route} never answered 200 to a generated request"
    from starlette.testclient import TestClient

    with TestClient(
        create_app(home=tmp_path / "op0", peer_check=IN_PROCESS), base_url="http://127.0.0.1:8420"
    ) as c:
        r = c.post("/v1/chat/completions", json={"messages": [{"role": "user", "content": "hi"}]})
        assert r.status_code == 200 and r.json()["choices"][0]["message"]["content"] == "7"
        assert c.get("/v1/models/lmd-dali").json()["id"] == "lmd-dali"
        assert c.post("/v1/propose", content="list files").text == "7\n"


@pytest.mark.parametrize("path", sorted(p for _, p in FEATURE_ROUTES))
def test_feature_route_description_is_valid_openapi(client, path):
    """Each documented operation's 200 names a content type and every error a schema."""
    spec = client.get("/openapi.json").json()
    for op in spec["paths"][path].values():
        for code, response in op["responses"].items():
            assert response.get("content"), (path, code)
