"""Every malformed input is a 4xx with a sentence, on every JSON route (core and plugins, all
found from /openapi.json): huge integers, NaN and Infinity, numbers beyond a float, lone
surrogates, deep nesting, bad UTF-8; hypothesis builds such bodies by the thousand.
Also: default_prompt is checked against the registered modes wherever it is set."""

from __future__ import annotations

import json
import time

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from daemon.core.errors import LmdError
from daemon.http.body import MAX_INT_DIGITS, parse_json

TOKEN = "json-test-token"
# With the daemon's token, as lmd's own clients send it: routes that change what may run
# (/rules) take a body only with it, and their JSON is then checked like every other's.
CT = {
    "Content-Type": "application/json",
    "Accept": "application/json",
    "Authorization": f"Bearer {TOKEN}",
}


@pytest.fixture
def client(make_client):
    return make_client(token=TOKEN)


@pytest.fixture
def json_routes(client):
    """(method, path) of every operation that takes a JSON body, from the description."""
    spec = client.get("/openapi.json").json()
    found = []
    for path, item in spec["paths"].items():
        for method, op in item.items():
            if "application/json" in op.get("requestBody", {}).get("content", {}):
                found.append((method.upper(), path.replace("{name}", "max_tokens")))
    return found


HOSTILE = [
    ("huge-int", '{"input": ' + "9" * 5000 + "}", "a number has 5000 digits, more than 4300"),
    ("huge-negative", "[-" + "1" * 4301 + "]", "a number has 4301 digits, more than 4300"),
    ("huge-in-list", '{"records": [1, ' + "7" * 100_000 + "]}", "a number has 100000 digits"),
    ("nan", '{"input": NaN}', "NaN is not a JSON number"),
    ("infinity", '{"value": Infinity}', "Infinity is not a JSON number"),
    ("minus-infinity", "[-Infinity]", "-Infinity is not a JSON number"),
    ("float-overflow", '{"value": 1e999}', "the number 1e999 is too large"),
    ("deep", "[" * 100_000 + "]" * 100_000, "it is nested too deeply"),
    ("deep-objects", '{"a": ' * 5000 + "1" + "}" * 5000, "it is nested too deeply"),
    ("trailing", '{"input": "dali hi"} x', "Extra data at line 1 column 22"),
    ("single-quotes", "{'input': 'x'}", "Expecting property name enclosed in double quotes"),
    ("empty", "", "Expecting value at line 1 column 1"),
    ("control-char", '{"input": "a\x01b"}', "Invalid control character"),
]


def test_every_nesting_depth_is_data_or_a_sentence():
    """Near the recursion limit a body can decode and then fail to encode again (the surrogate
    check): every depth up to past the limit must give the data or the nesting sentence,
    never a RecursionError (hypothesis found one under xdist, where the stack runs deeper)."""
    import sys

    for depth in range(sys.getrecursionlimit() - 300, sys.getrecursionlimit() + 20):
        try:
            parse_json("[" * depth + "]" * depth)
        except LmdError as e:
            assert "it is nested too deeply" in str(e), depth


@pytest.mark.parametrize(("name", "body", "problem"), HOSTILE, ids=[h[0] for h in HOSTILE])
def test_hostile_json_gets_a_sentence_on_every_json_route(
    client, backend, json_routes, name, body, problem
):
    assert len(json_routes) >= 6
    for method, path in json_routes:
        r = client.request(method, path, content=body.encode(), headers=CT)
        assert r.status_code == 400, (path, r.status_code, r.text[:300])
        error = r.json()["error"]
        message = error["message"] if isinstance(error, dict) else error  # OpenAI's shape
        assert message.startswith("The request body is not valid JSON ("), (path, message)
        assert problem in message, (path, message)
    assert backend.requests == []
    assert client.app.daemon.store.history(None, 10) == []
    assert client.get("/settings/max_tokens").json()["value"] == 3500


def test_lone_surrogates_and_bad_utf8_on_every_json_route(client, backend, json_routes):
    for method, path in json_routes:
        for body, start in (
            ('{"input": "\\ud800", "value": "\\udfff", "x": ["\\udbff"]}', "The request contains"),
            (b'{"input": "caf\xc3"}', "The request is not valid UTF-8"),
            (b"\xff\xfe{}", "The request is not valid UTF-8"),
        ):
            content = body if isinstance(body, bytes) else body.encode()
            r = client.request(method, path, content=content, headers=CT)
            assert r.status_code == 400, (path, body)
            error = r.json()["error"]
            message = error["message"] if isinstance(error, dict) else error
            assert message.startswith(start), (path, message)
    assert backend.requests == []


def test_the_4300_digit_limit_is_exact():
    assert parse_json("[" + "9" * MAX_INT_DIGITS + "]")[0] == int("9" * MAX_INT_DIGITS)
    with pytest.raises(LmdError, match="4301 digits"):
        parse_json("[" + "9" * (MAX_INT_DIGITS + 1) + "]")
    assert parse_json("[1e308, -0.0, 5]") == [1e308, -0.0, 5]


# -- generated bodies ---------------------------------------------------------------------------
def _leaf() -> st.SearchStrategy[str]:
    huge = st.integers(MAX_INT_DIGITS - 2, MAX_INT_DIGITS + 50).map(lambda n: "8" * n)
    return st.one_of(
        huge,
        st.sampled_from(["NaN", "Infinity", "-Infinity", "1e400", "-1e999", "1E+309"]),
        st.sampled_from(['"\\ud800"', '"\\udfff x"', '"ok \\ud83d"', '"\\u0000"']),
        st.integers().map(str),
        st.floats(allow_nan=False, allow_infinity=False).map(json.dumps),
        st.text(max_size=20).map(lambda t: json.dumps(t)),
        st.sampled_from(["true", "false", "null"]),
    )


def _compose(children: st.SearchStrategy[str]) -> st.SearchStrategy[str]:
    return st.one_of(
        st.lists(children, max_size=4).map(lambda xs: "[" + ", ".join(xs) + "]"),
        st.dictionaries(
            st.sampled_from(["input", "value", "records", "contents", "question", "messages"]),
            children,
            max_size=4,
        ).map(lambda d: "{" + ", ".join(f'"{k}": {v}' for k, v in d.items()) + "}"),
    )


HOSTILE_JSON = st.one_of(
    st.recursive(_leaf(), _compose, max_leaves=12),
    st.integers(1000, 3000).map(lambda n: "[" * n + "]" * n),  # deep, but maybe not too deep
    st.integers(1000, 3000).map(lambda n: '{"input": ' * n + '"x"' + "}" * n),
)


@settings(
    max_examples=150,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(body=HOSTILE_JSON, which=st.integers(0, 100))
def test_generated_hostile_bodies_never_get_a_server_error(client, json_routes, body, which):
    method, path = json_routes[which % len(json_routes)]
    r = client.request(method, path, content=body.encode(), headers=CT)
    assert r.status_code < 500 or r.status_code in (502, 504), (path, body[:200], r.text[:300])
    if r.status_code >= 400 and r.status_code not in (502, 504):
        error = r.json()["error"]
        message = error["message"] if isinstance(error, dict) else error
        assert message.endswith((".", "?")) and len(message) < 400, message


# -- default_prompt is a registered mode ---------------------------------------------------------
def test_default_prompt_is_checked_over_http(make_client):
    # default_prompt picks which mode's prompt the user's words reach: protected (the token)
    client = make_client(token="t0k")
    auth = {"Authorization": "Bearer t0k"}
    r = client.put("/settings/default_prompt", content="nosuchmode", headers=auth)
    assert r.status_code == 400
    assert r.json()["error"].startswith(
        "default_prompt cannot be 'nosuchmode': there is no such mode; it must be one of "
    )
    assert "dali" in r.json()["error"] and "marat" in r.json()["error"]
    r = client.put("/settings/default_prompt", content="marat", headers=auth)
    assert r.json()["value"] == "marat"


def test_default_prompt_is_checked_by_the_cli(home):
    from click.testing import CliRunner

    from daemon.cli import cli

    def lmd(*args: str):
        return CliRunner().invoke(cli, [*args, "--home", str(home)])

    done = lmd("settings", "set", "default_prompt", "nosuchmode")
    assert done.exit_code == 1
    assert done.stderr.startswith("default_prompt cannot be 'nosuchmode': there is no such mode")
    assert lmd("settings", "get", "default_prompt").stdout == "dali\n"
    assert lmd("settings", "set", "default_prompt", "knob").exit_code == 0


def test_default_prompt_is_checked_by_knob(make_client, backend):
    client = make_client(token="t0k")
    auth = {"Authorization": "Bearer t0k"}
    r = client.post("/v1", content="knob set default prompt to nosuchmode", headers=auth)
    assert r.status_code == 400
    assert r.text.startswith("default prompt cannot be 'nosuchmode': there is no such mode")
    assert client.get("/settings/default_prompt", headers=auth).json()["value"] == "dali"
    r = client.post("/v1", content="knob set default prompt to marat", headers=auth)
    assert r.status_code == 200


def test_a_vanished_default_mode_is_a_503_sentence(make_client, backend, home):
    """default_prompt names dali, but dali is not loaded (LMD_LOAD_PLUGINS, an uninstall)."""
    from daemon.plugins import load_plugins

    client = make_client(pm=load_plugins({"settings_mode"}))
    r = client.post("/v1", content="hello there")
    assert r.status_code == 503
    assert r.text == (
        "The setting default_prompt names the mode 'dali', which is not loaded; start with a "
        "directive (knob), or set default_prompt to one of them with "
        "`lmd settings set default_prompt ...`.\n"
    )
    assert client.post("/v1", content="knob show max tokens").status_code == 200
    assert backend.requests == []


def test_a_session_left_in_a_vanished_mode_falls_back_to_the_default(make_client, backend):
    from daemon.plugins import load_plugins

    client = make_client(pm=load_plugins({"dali", "settings_mode"}))
    store = client.app.daemon.store
    session = store.session("kitchen")
    session.mode, session.last_active = "gone", time.time()
    store.save_session(session)
    backend.queue("dali answers")
    headers = {"X-Session": "kitchen", "Accept": "application/json"}
    r = client.post("/v1", content="hello", headers=headers)
    assert r.status_code == 200 and r.json()["mode"] == "dali"
