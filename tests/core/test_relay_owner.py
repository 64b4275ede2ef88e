"""A command that asks the daemon's embedded model through the daemon (`lmd score`, `lmd sql`,
SelectIT, the arena: daemon/backends/for_commands.py) sends the daemon's token as its key and
the user's words with every call. lmd's clients check that the program on a loopback port runs
as the user (daemon/client.py), but the command's model calls made connections of their own,
unchecked. The attack, through live processes as root and as an ordinary second Unix user: the
command finds the user's daemon; the daemon stops (a restart, a crash) while the command runs;
another Unix user takes the port; the command's next call went there, with the token (the
daemon's own, for every later request: protected settings, rules) and the user's words.

Every connection the command's model client makes to the daemon is now checked, before a
byte is sent, as lmd's clients check theirs. And the relay itself (GET /backend/embedded and
/backend/embedded/<path>) answers neither another Unix user (401) nor a web page the user's
browser would send (403)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from daemon.backends.embedded import bundled_model_path
from tests.daemons import ROOT, LiveDaemon, as_user_argv, configure
from tests.worlds import give_to, second_user_or_skip

pytestmark = pytest.mark.skipif(bundled_model_path() is None, reason="no bundled model file")

SECRET = "the words I score 5e1f"

# The user's command: find the daemon's embedded model, then (when told) ask it once.
COMMAND = """
import asyncio, os, sys, time
from pathlib import Path
from daemon.api import command_backend, open_daemon_state
home, url, go, words = sys.argv[1:5]
_, store, settings = open_daemon_state(Path(home))
backend = command_backend(settings, daemon=url, say=lambda line: None)
print("KIND", backend.kind, flush=True)
while not os.path.exists(go):
    time.sleep(0.02)
async def ask():
    llm = backend.client()
    try:
        said = await llm.chat([{"role": "user", "content": words}], max_tokens=4)
        print("ANSWER", said, flush=True)
    except Exception as e:
        print("REFUSED", e, flush=True)
asyncio.run(ask())
"""

# Another user's program on the freed port: it keeps every byte it is sent.
IMPOSTOR = """
import socket, sys, threading
port, out = int(sys.argv[1]), sys.argv[2]
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("127.0.0.1", port))
s.listen()
print("LISTENING", flush=True)
def serve(c):
    c.settimeout(5)
    got = b""
    try:
        while b"\\r\\n\\r\\n" not in got:
            chunk = c.recv(65536)
            if not chunk:
                break
            got += chunk
    except OSError:
        pass
    with open(out, "ab") as f:
        f.write(got + b"\\n--\\n")
    body = b'{"choices":[{"index":0,"message":{"role":"assistant","content":"pwned"}}]}'
    head = b"HTTP/1.1 200 OK\\r\\nContent-Length: %d\\r\\n\\r\\n"
    c.sendall(head % len(body) + body)
    c.close()
while True:
    c, _ = s.accept()
    threading.Thread(target=serve, args=(c,)).start()
"""


# Status codes of the relay's routes for whoever runs this (headers: a JSON object).
KNOCK = """
import json, sys, urllib.request, urllib.error
url, headers = sys.argv[1], json.loads(sys.argv[2])
for path in ("/backend/embedded", "/backend/embedded/v1/models"):
    try:
        asked = urllib.request.Request(url + path, headers=headers)
        with urllib.request.urlopen(asked, timeout=30) as r:
            print(r.status)
    except urllib.error.HTTPError as e:
        print(e.code)
"""


def _run_as(user: str | None) -> tuple[list[str], dict[str, str]]:
    if user is None:
        return [sys.executable], {**os.environ}
    prefix, extra = as_user_argv(user)
    return prefix, {**os.environ, **extra}


@pytest.mark.parametrize("world", ["root", "user"])
def test_a_command_never_sends_the_token_to_another_users_program_on_the_port(world):
    other = second_user_or_skip()
    user = other if world == "user" else None  # the daemon's and the command's user
    stranger = "root" if world == "user" else other  # who takes the port
    root = Path(tempfile.mkdtemp(prefix=f"lmd-relay-owner-{world}-"))
    root.chmod(0o755)
    home = root / "lmd-home"
    configure(home, embedded_context=2048, embedded_threads=1)
    token = "tok-relay-owner-" + world + "-9c8b7a6d5e4f"
    (home / "token").write_text(token + "\n")
    (home / "token").chmod(0o600)
    caught = root / "caught"
    caught.mkdir()
    give_to(user, home)
    if stranger != "root":
        subprocess.run(["chown", f"{stranger}:{stranger}", str(caught)], check=True)
    env = {"LMD_TOKENIZER": "estimate", "HOME": str(root)}
    daemon = LiveDaemon(home, env, user=user)
    go = root / "go"
    argv, run_env = _run_as(user)
    command = subprocess.Popen(
        [*argv, "-c", COMMAND, str(home), daemon.url, str(go), SECRET],
        env={**run_env, **env, "LMD_HOME": str(home)},
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    impostor = None
    try:
        assert command.stdout is not None
        first = command.stdout.readline()
        assert first.strip() == "KIND daemon", first
        # the relay itself: another user gets nowhere, nor does a web page run by the user
        for who, headers, codes in (
            (stranger, {}, ["401", "401"]),
            (user or "root", {"Origin": "http://evil.example"}, ["403", "403"]),
        ):
            kargv, kenv = _run_as(None if who == "root" else who)
            knock = [*kargv, "-c", KNOCK, daemon.url, json.dumps(headers)]
            said = subprocess.run(knock, env=kenv, capture_output=True, text=True, timeout=60)
            assert said.stdout.split() == codes, (who, headers, said.stdout, said.stderr)
        daemon.stop()  # the daemon goes away while the command runs
        iargv, ienv = _run_as(None if stranger == "root" else stranger)
        impostor = subprocess.Popen(
            [*iargv, "-c", IMPOSTOR, str(daemon.port), str(caught / "bytes")],
            env=ienv,
            stdout=subprocess.PIPE,
            text=True,
        )
        assert impostor.stdout is not None and impostor.stdout.readline().strip() == "LISTENING"
        go.touch()
        out, err = command.communicate(timeout=120)
        got = (caught / "bytes").read_bytes() if (caught / "bytes").exists() else b""
        assert token.encode() not in got and SECRET.encode() not in got, got
        assert b"POST" not in got, got
        assert "ANSWER pwned" not in out, out
        assert "REFUSED" in out and "runs as another user" in out, (out, err)
    finally:
        if impostor is not None:
            impostor.kill()
            impostor.wait()
        if command.poll() is None:
            command.kill()
        daemon.stop()
        daemon.log.close()
        shutil.rmtree(root, ignore_errors=True)
