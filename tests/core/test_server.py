"""`lmd serve` as a real process: policy, signals and the database it keeps."""

import os
import signal
import socket
import subprocess
import sys
import threading
import urllib.request

import pytest

from daemon.http.server import check_policy, is_loopback, parse_bind
from tests.daemons import ROOT, LiveDaemon, free_port, wait_for


def serve(*args, home, env=None, timeout=20):
    return subprocess.run(
        [sys.executable, "-m", "daemon.cli", "serve", "--home", str(home), *args],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=timeout,
        env={**os.environ, "LMD_TOKENIZER": "estimate", **(env or {})},
    )


@pytest.mark.parametrize(
    ("bind", "host", "port"),
    [
        ("127.0.0.1:8420", "127.0.0.1", 8420),
        ("9000", "127.0.0.1", 9000),
        ("localhost:81", "localhost", 81),
        ("[::1]:8420", "::1", 8420),
        ("0.0.0.0:8420", "0.0.0.0", 8420),
    ],
)
def test_parse_bind(bind, host, port):
    assert parse_bind(bind) == (host, port)


def test_loopback_detection_and_policy():
    assert is_loopback("127.0.0.1") and is_loopback("::1") and is_loopback("localhost")
    assert not is_loopback("0.0.0.0") and not is_loopback("192.168.1.2")
    check_policy("127.0.0.1", None)
    check_policy("0.0.0.0", "token")
    with pytest.raises(Exception, match="without a token"):
        check_policy("0.0.0.0", None)


def test_non_loopback_bind_without_token_refuses_to_start(home):
    r = serve("--bind", f"0.0.0.0:{free_port()}", home=home)
    assert r.returncode == 2 and "Refusing to listen on 0.0.0.0 without a token" in r.stderr
    r = serve(home=home, env={"LMD_BIND": f"0.0.0.0:{free_port()}"})
    assert r.returncode == 2 and "LMD_TOKEN" in r.stderr


def test_a_bad_bind_and_a_busy_port_are_explained(home):
    r = serve("--bind", "127.0.0.1:notaport", home=home)
    assert r.returncode == 2 and "no valid port" in r.stderr
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        r = serve("--bind", f"127.0.0.1:{s.getsockname()[1]}", home=home)
    assert r.returncode == 2 and "is another lmd running" in r.stderr


def test_invalid_settings_stop_the_start_with_sentences(home):
    r = serve("--bind", str(free_port()), home=home, env={"LMD_MAX_TOKENS": "many"})
    assert r.returncode == 2 and "LMD_MAX_TOKENS" in r.stderr and "max_tokens cannot be" in r.stderr


def test_sigterm_finishes_in_flight_requests_and_exits_zero(home, backend):
    d = LiveDaemon(home, {"LMD_TOKENIZER": "estimate"})
    backend.latency = 1.0
    result = {}

    def slow():
        req = urllib.request.Request(d.url + "/v1", data=b"dali take your time", method="POST")
        with urllib.request.urlopen(req, timeout=10) as r:
            result["status"], result["body"] = r.status, r.read().decode()

    t = threading.Thread(target=slow)
    t.start()
    assert wait_for(lambda: backend.active == 1, 10)  # the turn is in flight at the backend
    d.proc.send_signal(signal.SIGTERM)
    t.join(10)
    assert d.proc.wait(15) == 0
    assert result == {"status": 200, "body": "ok\n"}
    assert "lmd stopped." in d.output()
    d.log.close()


def test_database_lives_in_home_with_wal(live, home, backend):
    d = live()
    urllib.request.urlopen(urllib.request.Request(d.url + "/v1", data=b"hi", method="POST"))
    assert (home / "lmd.db").exists() and (home / "lmd.db-wal").exists()


def test_token_on_the_command_line_is_refused(home):
    # lmd's own entry point, as the `lmd` script calls it, from a command line that `lmd
    # doctor`'s look for such daemons does not take for one: run as `python -m daemon.cli`,
    # a doctor on another test worker (docs/install.md's) warned of it for the second it lived
    entry = "import sys; from daemon.cli import main; sys.exit(main())"
    r = subprocess.run(
        [sys.executable, "-c", entry, "serve", "--home", str(home), "--token", "abc"],
        capture_output=True,
        text=True,
        timeout=30,
        cwd=ROOT,
    )
    assert r.returncode == 2
    assert r.stderr.startswith("--token is refused: a command line is visible to every user")
    assert "--token-file FILE, or set LMD_TOKEN" in r.stderr


def test_token_required_without_peer_auth(live, backend):
    token = "abc-0123456789-xyz"
    d = live(env={"LMD_TOKEN": token}, args=["--no-peer-auth"])
    with pytest.raises(urllib.error.HTTPError) as e:
        urllib.request.urlopen(urllib.request.Request(d.url + "/v1", data=b"hi", method="POST"))
    assert e.value.code == 401
    ok = urllib.request.Request(
        d.url + "/v1", data=b"hi", method="POST", headers={"Authorization": f"Bearer {token}"}
    )
    assert urllib.request.urlopen(ok).read() == b"ok\n"
    assert urllib.request.urlopen(d.url + "/healthz").status == 200
