"""Hostile input: huge, slow, invalid UTF-8, NUL, deeply nested and very long bodies; and
hypothesis fuzzing of the directive parser and the settings parser.

Each gets one clear sentence (or a correct answer), never a 500, never a hang.
"""

from __future__ import annotations

import functools
import json
import socket
import string
import time

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.daemons import configure

JSON = {"Accept": "application/json"}


def test_body_over_the_limit_is_413_before_it_is_read(make_client, backend):
    client = make_client(max_body_bytes=1000)
    r = client.post("/v1", content=b"dali " + b"x" * 2000, headers=JSON)
    assert r.status_code == 413
    assert r.json()["error"] == (
        "The request is larger than 1000 bytes; send less, or raise max_body_bytes."
    )

    def chunks():  # no Content-Length: counted as it arrives
        yield b"dali "
        for _ in range(100):
            yield b"y" * 100

    r = client.post("/v1", content=chunks(), headers=JSON)
    assert r.status_code == 413
    assert backend.chat_requests == []


def test_huge_chunked_body_is_cut_off_over_real_http(home, live, backend):
    """1 MiB limit, a 64 MiB chunked body: refused early, the daemon keeps serving."""
    d = live()
    s = socket.create_connection(("127.0.0.1", d.port), timeout=10)
    s.sendall(
        b"POST /v1 HTTP/1.1\r\nHost: 127.0.0.1\r\nTransfer-Encoding: chunked\r\n"
        b"Accept: application/json\r\n\r\n"
    )
    chunk = b"%x\r\n%s\r\n" % (65536, b"z" * 65536)
    sent, answer = 0, b""
    s.settimeout(0.05)
    started = time.monotonic()
    while sent < 1024 and time.monotonic() - started < 10:
        try:
            s.sendall(chunk)
            sent += 1
        except OSError:
            break
        try:
            answer = s.recv(4096)
            if answer:
                break
        except TimeoutError:
            pass
    if not answer:
        s.settimeout(5)
        answer = s.recv(4096)
    s.close()
    assert answer.startswith(b"HTTP/1.1 413"), answer[:200]
    assert sent < 256, f"the daemon took {sent * 64} KiB of 64 MiB before refusing"
    backend.queue("still up")
    from tests.daemons import say

    assert say(d.url, "default", "dali still there?")[:2] == (200, "still up")


def test_slow_body_gets_408_and_does_not_block_others(home, live, backend):
    """Slowloris on the body: one byte every 0.2 s is refused after body_read_timeout_secs."""
    configure(home, body_read_timeout_secs=1)
    d = live()
    s = socket.create_connection(("127.0.0.1", d.port), timeout=10)
    s.sendall(b"POST /v1 HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 100\r\n\r\ndali ")
    s.settimeout(0.2)
    started, answer = time.monotonic(), b""
    from tests.daemons import say

    backend.queue("not blocked")
    assert say(d.url, "default", "dali meanwhile")[:2] == (200, "not blocked")
    while time.monotonic() - started < 5 and not answer:
        try:
            s.sendall(b"a")
            answer = s.recv(4096)
        except TimeoutError:
            pass
    took = time.monotonic() - started
    s.settimeout(2)
    try:  # the body may come in a second packet
        while b"send it in one go." not in answer:
            more = s.recv(4096)
            if not more:
                break
            answer += more
    except OSError:
        pass
    s.close()
    assert answer.startswith(b"HTTP/1.1 408"), answer[:200]
    assert b"The request body took longer than 1 seconds to arrive; send it in one go." in answer
    assert took < 4


@pytest.mark.parametrize(
    ("body", "status", "sentence"),
    [
        (b"dali \xff\xfe hello", 400, "The request is not valid UTF-8 (bad byte at position 5)"),
        (b"dali caf\xc3", 400, "The request is not valid UTF-8 (bad byte at position 8)"),
        (b"\xed\xa0\x80 surrogate", 400, "The request is not valid UTF-8"),
        (b"dali hello\x00world", 400, "The utterance contains a NUL character; send plain text."),
        (b"\x00", 400, "The utterance contains a NUL character; send plain text."),
        (b"", 400, "I heard nothing: the utterance is empty; say something."),
        (b" \n\t\r\n ", 400, "I heard nothing: the utterance is empty; say something."),
    ],
    ids=["ff-fe", "cut-sequence", "surrogate", "nul", "only-nul", "empty", "whitespace"],
)
def test_bad_bytes_get_one_sentence_and_reach_nobody(client, backend, body, status, sentence):
    for headers in ({}, JSON):
        r = client.post("/v1", content=body, headers=headers)
        assert r.status_code == status
        text = r.json()["error"] if headers else r.text
        assert text.startswith(sentence)
    assert backend.chat_requests == []
    assert client.app.daemon.store.history(None, 10) == []


@pytest.mark.parametrize(
    ("body", "sentence"),
    [
        (
            "[" * 50_000 + "]" * 50_000,
            'The request body is not valid JSON (it is nested too deeply); send {"input": "your',
        ),
        (
            '{"input": ' * 20_000 + '"x"' + "}" * 20_000,
            "The request body is not valid JSON (it is nested too deeply)",
        ),
        (
            '{"input": "dali \\u0000 nul"}',
            "The utterance contains a NUL character; send plain text.",
        ),
        ('{"input": 5}', 'The JSON body needs an "input" string; send {"input": "your words"}.'),
        ('{"input": ["dali"]}', 'The JSON body needs an "input" string'),
        ("[1, 2]", 'The JSON body needs an "input" string'),
        ('{"input": "dali hi", "session": "bad name!"}', "The session name must be"),
        ('{"input": "dali hi", "session": ["x"]}', "The session name must be"),
        ('{"input": "dali \\ud800"}', "The request contains an invalid character (a lone"),
        ('{"input": "dali hi", "session": "\\udfff"}', "The request contains an invalid"),
        ("{'input': 'single quotes'}", "The request body is not valid JSON (Expecting property"),
    ],
    ids=[
        "deep-array",
        "deep-object",
        "nul",
        "number",
        "list",
        "not-object",
        "bad-session",
        "session-list",
        "lone-surrogate",
        "surrogate-session",
        "single-quotes",
    ],
)
def test_hostile_json_bodies(client, backend, body, sentence):
    r = client.post(
        "/v1", content=body.encode(), headers={**JSON, "Content-Type": "application/json"}
    )
    assert r.status_code == 400, r.text
    assert r.json()["error"].startswith(sentence)
    assert backend.chat_requests == []


def test_lone_surrogate_in_a_json_setting_value_is_400(client):
    r = client.put(
        "/settings/selectit_device",
        content='{"value": "cpu \\ud800"}',
        headers={"Content-Type": "application/json"},
    )
    assert r.status_code == 400 and r.json()["error"].startswith("The request contains an invalid")
    assert client.get("/settings/selectit_device").json()["value"] == "auto"  # as it was


def test_very_long_single_line_arrives_intact(make_client, backend):
    client = make_client(max_tokens=10_000_000)
    line = "dali " + "".join(string.ascii_letters[i % 52] for i in range(900_000))
    backend.queue("read it all")
    r = client.post("/v1", content=line, headers=JSON)
    assert r.status_code == 200 and r.json()["reply"] == "read it all"
    assert backend.chat_requests[-1]["messages"][-1]["content"] == line[5:]


def test_control_and_exotic_characters_are_content(client, backend):
    text = "dali \u202eevil\u202c \ufeff\u0301 \U0001f600 \x1b[31mred\x1b[0m \x07"
    backend.queue("ok")
    r = client.post("/v1", content=text.encode(), headers=JSON)
    assert r.status_code == 200
    assert backend.chat_requests[-1]["messages"][-1]["content"] == text[5:]


# -- hypothesis: the directive parser ---------------------------------------------------------
MODES = ["dali", "marat", "cobol", "settings"]
TABLE_ALIASES = {"marat": ["murat", "ma rat"], "dali": ["dolly"]}


def table():
    from daemon.core.directives import build_table

    return build_table(MODES, TABLE_ALIASES)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.text(max_size=200))
def test_directive_parser_never_fails_on_any_text(text):
    from daemon.core.directives import parse

    parsed = parse(text, table())
    assert parsed.mode is None or parsed.mode in MODES
    assert parsed.rest in text  # the rest is always a piece of what was said
    if parsed.mode is None:
        assert parsed.rest == text.strip()


@settings(max_examples=300, deadline=None)
@given(
    st.sampled_from(["dali", "Dali", "DALI", "dolly", "Marat", "ma rat", "murat", "cobol"]),
    st.sampled_from(["", " ", ", ", ". ", "! ", "\n", " - ", ": ", "... "]),
    st.sampled_from(["", '"', "  ", "\n", "(", "¿"]),
    st.text(alphabet=st.characters(blacklist_categories=["Cs"]), max_size=60),
)
def test_a_spoken_directive_is_found_whatever_surrounds_it(word, sep, lead, rest):
    from daemon.core.directives import fold, parse

    rest = rest.strip()
    text = f"{lead}{word}{sep or ' '}{rest}"
    parsed = parse(text, table())
    expected = {"dolly": "dali", "ma rat": "marat", "murat": "marat"}.get(fold(word), fold(word))
    assert parsed.mode == expected, (text, parsed)
    assert rest.strip(" ,.:;!?-\n\"'") in text


# -- hypothesis: the settings parser ----------------------------------------------------------
@functools.cache
@functools.cache
def all_specs():
    """Every setting: the core's and every built-in plugin's."""
    from daemon.core.registry import collect
    from daemon.plugins import load_plugins

    return list(collect(load_plugins()).specs.values())


RAW = st.one_of(
    st.text(max_size=40),
    st.integers(),
    st.floats(allow_nan=True, allow_infinity=True),
    st.booleans(),
    st.none(),
    st.lists(st.integers(), max_size=3),
    st.dictionaries(st.text(max_size=5), st.integers(), max_size=3),
    st.sampled_from(["1e309", "-0", "0x10", "1_000", " 12 ", "true", "NaN", "inf", "{}", "[]"]),
)


@settings(max_examples=600, deadline=None)
@given(st.deferred(lambda: st.sampled_from(all_specs())), RAW)
def test_settings_parser_refuses_with_a_sentence_or_round_trips(spec, raw):
    from daemon.core.settings import SettingError

    try:
        value = spec.parse(raw)
    except SettingError as e:
        assert spec.name in e.message and "\n" not in e.message
        assert e.status == 400
        return
    # What is accepted is stored as text and reads back as the same value.
    assert spec.parse(spec.dump(value)) == value
    json.dumps(value)  # every value can be shown in the JSON API


@pytest.mark.parametrize("cwd", ["relative/dir", "/tmp%00/x", "~/x", "..%2F..%2Fetc"])
def test_bad_working_directory_is_refused(client, backend, cwd):
    r = client.post(f"/v1?cwd={cwd}", content="dali hi", headers=JSON)
    assert r.status_code == 400
    assert r.json()["error"] == "The working directory must be an absolute path."
    assert backend.chat_requests == []


def test_client_leaving_mid_stream_keeps_the_partial_reply(home, live, backend):
    """The client hangs up after the first words: what was said is stored as cut, the
    utterance kept, and the daemon keeps serving the session."""
    import sqlite3

    from tests.daemons import say, wait_for
    from tests.fake_backend import Reply

    d = live()
    backend.queue(Reply("one two three four five six seven eight", chunk_delay=0.2))
    s = socket.create_connection(("127.0.0.1", d.port), timeout=10)
    body = b"dali count slowly"
    s.sendall(
        b"POST /v1 HTTP/1.1\r\nHost: 127.0.0.1\r\nAccept: text/event-stream\r\n"
        b"Content-Length: %d\r\n\r\n%s" % (len(body), body)
    )
    got = b""
    while b'data: "two "' not in got:
        got += s.recv(4096)
    s.close()  # gone mid-answer

    def stored() -> list:
        conn = sqlite3.connect(home / "lmd.db")
        try:
            return conn.execute(
                "SELECT role, status, content FROM prompts WHERE session = 'default' ORDER BY id"
            ).fetchall()
        finally:
            conn.close()

    assert wait_for(lambda: len(stored()) == 2, 10), stored()
    (user, reply) = stored()
    assert user == ("user", "ok", "count slowly")
    assert reply[:2] == ("assistant", "cut") and reply[2].startswith("one two")
    assert len(reply[2]) < len("one two three four five six seven eight")
    backend.queue("after the hang-up")
    assert say(d.url, "default", "dali still there")[:2] == (200, "after the hang-up")


def test_hundreds_of_idle_connections_do_not_stop_service(home, live, backend):
    from tests.daemons import say

    d = live()
    idle = [socket.create_connection(("127.0.0.1", d.port), timeout=5) for _ in range(300)]
    try:
        for s in idle[::2]:
            s.sendall(b"POST /v1 HTTP/1.1\r\nHost: 127.0.0.1\r\n")  # headers never finished
        backend.queue("served anyway")
        assert say(d.url, "default", "dali anyone there")[:2] == (200, "served anyway")
    finally:
        for s in idle:
            s.close()
