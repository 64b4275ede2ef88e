"""daemon.client's own HTTP/1.1 on loopback (no http.client, no urllib: `lmd say` starts
faster): every way a real server may frame its answer, a server that is not HTTP, one that
cuts off, header values that cannot be sent, and UTF-8 session names and paths."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from urllib.parse import parse_qs, urlsplit

import pytest

from daemon.client import ClientError, request, say


@contextmanager
def one_answer(answer: bytes) -> Iterator[dict]:
    """A real TCP server on 127.0.0.1 that reads one request, sends `answer`, and closes."""
    seen: dict = {}
    server = socket.create_server(("127.0.0.1", 0))

    def serve() -> None:
        conn, _ = server.accept()
        with conn:
            data = b""
            while b"\r\n\r\n" not in data:
                data += conn.recv(65536)
            head, _, body = data.partition(b"\r\n\r\n")
            lines = head.decode("latin-1").split("\r\n")
            headers = dict(line.split(": ", 1) for line in lines[1:])
            while len(body) < int(headers.get("Content-Length", 0)):
                body += conn.recv(65536)
            seen.update(request_line=lines[0], headers=headers, body=body)
            conn.sendall(answer)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield {"url": f"http://127.0.0.1:{server.getsockname()[1]}", "seen": seen}
    finally:
        thread.join(10)
        server.close()


def test_content_length_answer_and_the_request_the_server_got(monkeypatch):
    monkeypatch.setenv("LMD_TOKEN", "t0ken")
    ok = b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 5\r\n\r\nhello"
    with one_answer(ok) as srv:
        status, headers, body = request("POST", "/v1", "héllo", url=srv["url"])
    assert (status, body, headers["content-type"]) == (200, b"hello", "text/plain")
    seen = srv["seen"]
    assert seen["request_line"] == "POST /v1 HTTP/1.1"
    assert seen["headers"]["Authorization"] == "Bearer t0ken"
    assert seen["headers"]["Content-Length"] == str(len("héllo".encode()))
    assert seen["body"] == "héllo".encode()


def test_chunked_and_close_delimited_answers(monkeypatch):
    monkeypatch.setenv("LMD_TOKEN", "t")
    chunked = (
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
        b"4\r\nwiki\r\n6;ext=1\r\npedia \r\nE\r\nin \r\n\r\nchunks.\r\n0\r\n\r\n"
    )
    with one_answer(chunked) as srv:
        assert request("GET", "/x", url=srv["url"])[2] == b"wikipedia in \r\n\r\nchunks."
    with one_answer(b"HTTP/1.0 200 OK\r\n\r\nuntil the close") as srv:
        assert request("GET", "/x", url=srv["url"])[2] == b"until the close"


def test_error_answers_become_the_daemons_sentence(monkeypatch):
    monkeypatch.setenv("LMD_TOKEN", "t")
    body = b'{"error": {"message": "Say it again."}}'
    answer = b"HTTP/1.1 400 Bad\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body)
    with one_answer(answer) as srv, pytest.raises(ClientError) as e:
        request("POST", "/v1", "x", url=srv["url"])
    assert (e.value.message, e.value.status) == ("Say it again.", 400)


@pytest.mark.parametrize(
    "answer",
    [
        b"SSH-2.0-OpenSSH_9.6\r\n",
        b"",
        b"HTTP/1.1 200 OK\r\nContent-Length: 50\r\n\r\nshort",
        b"HTTP/1.1 200 OK\r\n" + b"X-A: 1\r\n" * 101 + b"\r\n",
    ],
    ids=["not-http", "closed-at-once", "cut-off", "endless-headers"],
)
def test_a_server_that_is_not_a_daemon_is_one_sentence(monkeypatch, answer):
    monkeypatch.setenv("LMD_TOKEN", "t")
    with one_answer(answer) as srv, pytest.raises(ClientError) as e:
        request("GET", "/healthz", url=srv["url"])
    assert e.value.message.startswith(f"I could not reach lmd at {srv['url']}")
    assert e.value.message.endswith("start it with `lmd serve`.")


def test_nobody_listening_and_bad_urls():
    free = socket.create_server(("127.0.0.1", 0))
    port = free.getsockname()[1]
    free.close()
    with pytest.raises(ClientError, match="could not reach lmd"):
        request("GET", "/healthz", url=f"http://127.0.0.1:{port}", token="t")
    for bad in ("https://127.0.0.1:8420", "http://127.0.0.1:99999", "http://127.0.0.1:port"):
        with pytest.raises(ClientError, match="is not a daemon URL"):
            request("GET", "/healthz", url=bad, token="t")


def test_headers_cannot_smuggle_a_second_request_or_carry_utf8():
    with pytest.raises(ClientError, match="line break"):
        request("GET", "/x", url="http://127.0.0.1:9", token="t", headers={"X-A": "1\r\nX-B: 2"})
    with pytest.raises(ClientError, match="cannot carry"):
        request("GET", "/x", url="http://127.0.0.1:9", token="t", headers={"X-A": "★"})


def test_utf8_session_names_and_paths_go_in_the_query(monkeypatch):
    monkeypatch.setenv("LMD_TOKEN", "t")
    ok = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"
    with one_answer(ok) as srv:
        assert say("hi", session="café", cwd="/tmp/projet élève", url=srv["url"]) == "ok"
    target = srv["seen"]["request_line"].split()[1]
    query = parse_qs(urlsplit(target).query)
    assert query == {"session": ["café"], "cwd": ["/tmp/projet élève"]}
    assert "X-Session" not in srv["seen"]["headers"]
    with one_answer(ok) as srv:
        say("hi", session="work", cwd="/tmp", url=srv["url"])
    assert srv["seen"]["request_line"] == "POST /v1 HTTP/1.1"
    assert (srv["seen"]["headers"]["X-Session"], srv["seen"]["headers"]["X-Cwd"]) == (
        "work",
        "/tmp",
    )
