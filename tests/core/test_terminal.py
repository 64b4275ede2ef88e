"""A model's reply on a terminal: `lmd say` drops control characters and escape sequences
(OSC 52 clipboard writes, window titles, colours, cursor moves, C1 codes) when it writes to a
terminal, keeps them with --raw or into a pipe; `lmd propose` never puts them into the
command line."""

from __future__ import annotations

import os
import pty
import subprocess
import sys

from hypothesis import given
from hypothesis import strategies as st

from daemon.core.terminal import clean, clean_json_text
from tests.daemons import ROOT

EVIL = (
    "Done.\x1b]52;c;cm0gLXJmIH4K\x07 Title\x1b]0;pwned\x1b\\ red \x1b[31mtext\x1b[0m"
    "\x1b[2J\x1b[H bell\x07 back\x08space\r\noverprint\rline \x9b31m c1 \x9d2;t\x9c tab\tend\x7f"
)
CLEAN = "Done. Title red text bell backspace\noverprintline  c1  tab\tend"


def test_clean_removes_sequences_and_controls():
    assert clean(EVIL) == CLEAN
    assert clean("unterminated \x1b]52;c;Zm9v\nnext") == "unterminated \nnext"
    kept = "é 😀 \u202e kept, newlines\n and tabs\t"
    assert clean(kept) == kept
    assert clean_json_text('"\x9b31m"') == '"\\u009b31m"'


@given(st.text())
def test_clean_leaves_no_control_character(text):
    out = clean(text)
    assert not [c for c in out if (ord(c) < 32 and c not in "\n\t") or 0x7F <= ord(c) <= 0x9F]


def say_on_a_terminal(url: str, *args: str) -> bytes:
    """Run `lmd say` with its stdout on a pseudo-terminal; what the terminal received."""
    master, slave = pty.openpty()
    proc = subprocess.Popen(
        [sys.executable, "-m", "daemon.cli", "say", *args, "dali", "go"],
        stdout=slave,
        stderr=subprocess.PIPE,
        cwd=ROOT,
        env={**os.environ, "LMD_URL": url},
    )
    os.close(slave)
    received = b""
    while True:
        try:
            chunk = os.read(master, 65536)
        except OSError:  # EIO: the other side closed
            break
        if not chunk:
            break
        received += chunk
    os.close(master)
    assert proc.wait(30) == 0, proc.stderr.read()
    return received.replace(b"\r\n", b"\n")  # the terminal's own line discipline


PROPOSAL = "ls -la\x1b]52;c;cm0gLXJmIH4K\x07 \x1b[8mrm -rf ~\x1b[0m"


def test_lmd_say_and_propose_on_a_terminal(live, backend):
    """One daemon whose model answers with escape sequences, four ways to print them."""

    def reply(body: dict) -> str:
        system = body["messages"][0]["content"] if body["messages"] else ""
        return PROPOSAL if "exactly one bash command" in system else EVIL

    backend.handler = reply
    d = live()
    # On a terminal: clean.
    assert say_on_a_terminal(d.url).decode() == CLEAN + "\n"
    # --raw: as it came.
    out = say_on_a_terminal(d.url, "--raw").decode()
    assert "\x1b]52;c;cm0gLXJmIH4K\x07" in out and "\x9b31m" in out
    # --json on a terminal: valid JSON, C1 escaped, no ESC (json.dumps escapes C0).
    out = say_on_a_terminal(d.url, "--json").decode()
    assert "\x1b" not in out and "\x9b" not in out and "\\u009b31m" in out
    # Into a pipe: the bytes as they came (a program reading them decides).
    done = subprocess.run(
        [sys.executable, "-m", "daemon.cli", "say", "dali", "go"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env={**os.environ, "LMD_URL": d.url},
    )
    assert "\x1b]52;c;cm0gLXJmIH4K\x07" in done.stdout and "\x9b31m" in done.stdout
    # lmd propose: always clean, since the line goes into the shell's command line; nothing
    # is hidden (the concealed `rm -rf ~` shows).
    done = subprocess.run(
        [sys.executable, "-m", "daemon.cli", "propose", "list", "files"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env={**os.environ, "LMD_URL": d.url},
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout == "ls -la rm -rf ~\n"
