"""Only the daemon's owner drives it: a second real Unix user is refused on every route but
/healthz, while the owner's curl (as the README prints it), `lmd say`, the bash functions and
the official openai client all work; protected settings need the token itself; the kernel's
peer lookups (netlink and /proc) agree; lmd's clients refuse a daemon run by another user."""

from __future__ import annotations

import json
import os
import pwd
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import openai
import pytest

from daemon.http import peer
from daemon.http.guard import NEEDS_OWNER
from tests.daemons import ROOT, apt_tool, free_port

LMD = str(Path(sys.executable).parent / "lmd")
pytestmark = pytest.mark.skipif(not peer.supported(), reason="peer lookups are Linux only")


# -- the kernel's word -----------------------------------------------------------------------
@pytest.mark.parametrize("host", ["127.0.0.1", "::1"])
def test_netlink_and_proc_name_the_same_owner(host):
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family) as server:
        server.bind((host, 0))
        server.listen()
        client = socket.socket(family)
        client.connect(server.getsockname()[:2])
        conn, addr = server.accept()
        mine, theirs = addr[:2], conn.getsockname()[:2]
        assert peer.socket_uid(mine, theirs) == os.geteuid()
        assert peer.proc_uid(mine, theirs) == os.geteuid()
        assert peer.socket_uid(theirs, mine) == os.geteuid()  # the client's question
        assert peer.socket_uid((mine[0], mine[1] ^ 1), theirs) is None  # no such socket
        assert peer.proc_uid((mine[0], mine[1] ^ 1), theirs) is None
        client.close()
        time.sleep(0.05)
        # Closed (TIME_WAIT or FIN_WAIT, reported with uid 0): never anybody's, never root's.
        assert peer.socket_uid(mine, theirs) is None
        assert peer.proc_uid(mine, theirs) is None
        conn.close()


def test_ipv4_mapped_addresses_of_a_dual_stack_server():
    with socket.socket(socket.AF_INET6) as server:
        server.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
        server.bind(("::", 0))
        server.listen()
        with socket.create_connection(("127.0.0.1", server.getsockname()[1])):
            conn, addr = server.accept()
            assert addr[0] == "::ffff:127.0.0.1"
            assert peer.socket_uid(addr[:2], conn.getsockname()[:2]) == os.geteuid()
            assert peer.proc_uid(addr[:2], conn.getsockname()[:2]) == os.geteuid()
            conn.close()


def test_garbage_addresses_are_nobodys():
    assert peer.socket_uid(("testclient", 50000), ("127.0.0.1", 8420)) is None
    assert peer.proc_uid(("", 1), ("nope", 2)) is None


def test_websockets_never_get_past_the_guard(client):
    from starlette.websockets import WebSocketDisconnect

    with pytest.raises(WebSocketDisconnect) as e, client.websocket_connect("/v1"):
        pass
    assert e.value.code == 1008


# -- a second Unix user ----------------------------------------------------------------------
@pytest.fixture(scope="module")
def stranger():
    """A real second user, removed afterwards (the test machines and CI run as root)."""
    if os.geteuid() != 0 or not shutil.which("useradd"):
        pytest.skip("a second Unix user needs root and useradd (CI and the dev machine have both)")
    name = f"lmdt{os.getpid() % 1_000_000}"
    made = subprocess.run(
        ["useradd", "--system", "--no-create-home", "--shell", "/usr/sbin/nologin", name],
        capture_output=True,
        text=True,
    )
    if made.returncode != 0:
        pytest.skip(f"useradd failed: {made.stderr.strip()}")
    try:
        yield pwd.getpwnam(name)
    finally:
        subprocess.run(["userdel", name], capture_output=True)


def as_user(user, argv: list[str], **kw) -> subprocess.CompletedProcess:
    """Run argv as `user` (no groups, a bare environment)."""
    env = {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": "/tmp", "LANG": "C.UTF-8"}
    return subprocess.run(
        argv,
        user=user.pw_uid,
        group=user.pw_gid,
        extra_groups=[],
        env={**env, **kw.pop("env", {})},
        capture_output=True,
        text=True,
        timeout=60,
        cwd="/",
        **kw,
    )


def every_route(home: Path) -> list[tuple[str, str]]:
    """(method, concrete path) of every route the daemon serves, from the app itself."""
    from daemon.http.app import create_app
    from tests.daemons import IN_PROCESS

    app = create_app(home=home, peer_check=IN_PROCESS)
    found = []
    for route in app.app.routes:
        path = re.sub(r"\{[^}]+\}", "1", route.path.replace("{name}", "max_tokens"))
        for method in sorted(route.methods - {"HEAD"}):
            found.append((method, path))
    return found


@pytest.fixture
def curl() -> str:
    return apt_tool("curl")


def test_another_user_is_refused_everywhere_but_healthz(
    stranger, live, backend, home, curl, tmp_path
):
    d = live()
    routes = every_route(tmp_path / "routes-home")
    assert ("POST", "/v1") in routes and ("GET", "/history") in routes
    assert ("POST", "/v1/chat/completions") in routes and ("POST", "/lm_score") in routes
    assert len(routes) >= 18
    for method, path in routes:
        done = as_user(
            stranger,
            [curl, "-s", "-X", method, "-d", "dali hello", "-w", "\n%{http_code}", d.url + path],
        )
        body, _, status = done.stdout.rpartition("\n")
        if path == "/healthz":
            assert status == "200", done
            continue
        assert status == "401", (method, path, done.stdout)
        said = body.strip() if path == "/v1" else json.loads(body)["error"]
        assert said == NEEDS_OWNER
    # The token that would let them in is out of their reach.
    token_file = home / "token"
    assert token_file.stat().st_mode & 0o777 == 0o600
    denied = as_user(stranger, ["cat", str(token_file)])
    assert denied.returncode != 0 and "Permission denied" in denied.stderr
    # Nothing they sent reached the model or the history.
    assert backend.requests == []
    out = subprocess.run(
        [LMD, "history", "--json", "--home", str(home)], capture_output=True, text=True
    )
    assert json.loads(out.stdout) == []


def readme_curl() -> str:
    """The first curl example of the README, exactly as printed."""
    text = (ROOT / "README.md").read_text()
    return re.search(r"^curl -d 'dali [^\n]*http://127\.0\.0\.1:8420/v1$", text, re.M).group(0)


def test_the_owners_own_clients_all_work(stranger, live, backend, home, tmp_path, curl):
    d = live()
    backend.handler = lambda body: "answer " + body["messages"][-1]["content"]
    url_env = {**os.environ, "LMD_URL": d.url}
    # curl exactly as the README prints it (only the port differs).
    line = readme_curl().replace("http://127.0.0.1:8420", d.url)
    line = line.replace("curl ", f"{curl} ", 1)  # the same command, wherever curl lives
    done = subprocess.run(["bash", "-c", line], capture_output=True, text=True, timeout=60)
    assert done.stdout == "answer summarise why the sky is blue in one line\n", done
    # lmd say, with the token found in LMD_HOME/token, and without it (the kernel vouches).
    for env in ({**url_env, "LMD_HOME": str(home)}, {**url_env, "HOME": str(tmp_path)}):
        done = subprocess.run(
            [LMD, "say", "dali", "from lmd say"], capture_output=True, text=True, env=env
        )
        assert done.stdout == "answer from lmd say\n", done.stderr
    # The bash functions of `lmd shell-init bash`.
    script = f'eval "$({LMD} shell-init bash --no-bind)"; dali from the shell'
    done = subprocess.run(
        ["bash", "--noprofile", "--norc", "-c", script],
        capture_output=True,
        text=True,
        env={**url_env, "HOME": str(tmp_path)},
        timeout=60,
    )
    assert done.stdout == "answer from the shell\n", done.stderr
    # The official openai client; its api_key is not lmd's token, and need not be.
    client = openai.OpenAI(base_url=d.url + "/v1", api_key="anything", max_retries=0)
    reply = client.chat.completions.create(
        model="lmd-dali", messages=[{"role": "user", "content": "from openai now"}]
    )
    assert reply.choices[0].message.content == "answer from openai now"
    sent = [r["messages"][-1]["content"] for r in backend.chat_requests]
    assert sent == [
        "summarise why the sky is blue in one line",
        "from lmd say",
        "from lmd say",
        "from the shell",
        "from openai now",
    ]
    # The stranger, meanwhile, gets nothing with the same tools.
    done = as_user(stranger, [curl, "-s", "-d", "dali sneaky", d.url + "/v1"])
    assert done.stdout == NEEDS_OWNER + "\n"
    assert len(backend.chat_requests) == 5


def test_protected_settings_need_the_token_itself(live, home, backend, curl):
    """The kernel's word is not enough for these: a command the user approved runs as the
    owner too. lmd say sends the token, so the owner's spoken knob still works."""
    d = live()
    env = {**os.environ, "LMD_URL": d.url, "LMD_HOME": str(home)}
    put = [curl, "-s", "-X", "PUT", "-d", "never", d.url + "/settings/marat_approval"]
    done = subprocess.run(put, capture_output=True, text=True)
    assert json.loads(done.stdout)["error"].startswith("The setting marat_approval is protected")
    token = (home / "token").read_text().strip()
    done = subprocess.run(
        [*put, "-H", f"Authorization: Bearer {token}"], capture_output=True, text=True
    )
    assert json.loads(done.stdout)["value"] == "never"
    # knob through curl (no token): refused; through lmd say (token): done.
    done = subprocess.run(
        [curl, "-s", "-d", "knob set marat approval to always", d.url + "/v1"],
        capture_output=True,
        text=True,
    )
    assert done.stdout.startswith("The setting marat_approval is protected")
    say = subprocess.run(
        [LMD, "say", "knob set marat approval to always"], capture_output=True, text=True, env=env
    )
    assert say.stdout == "marat approval is now always.\n", say.stderr
    assert backend.requests == []  # settings talk never reaches the model


SQUATTER = """
import http.server, sys
log = open(sys.argv[2], "a")
class H(http.server.BaseHTTPRequestHandler):
    def do_POST(self):
        log.write(repr(dict(self.headers)) + "\\n"); log.flush()
        self.send_response(200); self.end_headers(); self.wfile.write(b"gotcha")
    do_GET = do_POST
http.server.HTTPServer(("127.0.0.1", int(sys.argv[1])), H).serve_forever()
"""


@pytest.fixture
def stranger_dir(stranger):
    """A directory the stranger owns, reachable by them (pytest's tmp_path is not)."""
    folder = Path(tempfile.mkdtemp(prefix="lmd-stranger-"))
    folder.chmod(0o755)
    os.chown(folder, stranger.pw_uid, stranger.pw_gid)
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


def test_clients_refuse_a_daemon_run_by_another_user(stranger, stranger_dir, home, monkeypatch):
    """Another user listening where your lmd should be (it is down) gets neither your words
    nor your token."""
    folder = stranger_dir
    (folder / "squat.py").write_text(SQUATTER)
    (folder / "squat.py").chmod(0o644)
    log = folder / "requests.log"
    port = free_port()
    proc = subprocess.Popen(
        ["/usr/bin/python3", str(folder / "squat.py"), str(port), str(log)],
        user=stranger.pw_uid,
        group=stranger.pw_gid,
        extra_groups=[],
        cwd=folder,
    )
    try:
        deadline = time.time() + 15
        while time.time() < deadline:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                time.sleep(0.05)
        (home / "token").write_text("my-own-secret-token-value\n")
        env = {**os.environ, "LMD_URL": f"http://127.0.0.1:{port}", "LMD_HOME": str(home)}
        done = subprocess.run(
            [LMD, "say", "dali", "my secret plan"], capture_output=True, text=True, env=env
        )
        assert done.returncode == 1
        assert done.stderr.startswith(
            f"The program listening at 127.0.0.1:{port} runs as another user "
            f"(uid {stranger.pw_uid}), not as you, so I sent it nothing."
        )
        from plugins.lm_score.client import LM_SCORE, ClientError

        monkeypatch.setenv("LMD_HOME", str(home))
        with pytest.raises(ClientError, match="runs as another user"):
            LM_SCORE("x", "Is it?", url=f"http://127.0.0.1:{port}")
        time.sleep(0.2)
        assert not log.exists() or log.read_text() == ""
    finally:
        proc.terminate()
        proc.wait(10)
