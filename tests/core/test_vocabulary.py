"""The hint about dictated words (daemon/spoken/vocabulary.py) and `lmd words`: spoken
punctuation written out, names here that the words sound like, the user's own dictionary;
what marat and cobol send the model (the request bodies the stand-in received)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from daemon.spoken.vocabulary import add_word, dictation_hint
from tests.daemons import lmd_in_process
from tests.plugins.marat.conftest import GIT_ENV, action, final, say


@pytest.fixture
def repo(tmp_path: Path, monkeypatch) -> Path:
    for k, v in GIT_ENV.items():
        monkeypatch.setenv(k, v)
    repo = tmp_path / "proj"
    (repo / "daemon").mkdir(parents=True)
    (repo / "daemon" / "core.py").write_text("x = 1\n")
    (repo / "README.md").write_text("hi\n")
    subprocess.run(["git", "init", "-q", "-b", "main", str(repo)], check=True)
    subprocess.run(["git", "-C", str(repo), "add", "-A"], check=True)
    subprocess.run(["git", "-C", str(repo), "commit", "-qm", "x"], check=True)
    subprocess.run(["git", "-C", str(repo), "branch", "feature/login"], check=True)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for program in ("pytest", "kubectl", "jq"):
        (bin_dir / program).write_text("#!/bin/sh\n")
        (bin_dir / program).chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    return repo


def test_spoken_punctuation_and_names_here(repo):
    hint = dictation_hint("git check out dash b feature slash login", str(repo))
    assert "- spoken punctuation written out: git check out -b feature/login" in hint
    assert "feature/login: a name here" in hint
    hint = dictation_hint("run pie test on daemon slash core dot pie", str(repo))
    assert '- "pie test": pytest (a program)' in hint
    assert "daemon/core.py: a name here" in hint
    assert '"read me": README.md (a file here)' in dictation_hint("show read me", str(repo))
    assert '"jay queue": jq (a program)' in dictation_hint("pipe it to jay queue", str(repo))


def test_a_repositorys_own_configuration_runs_nothing(repo, tmp_path):
    """The hint reads names for whatever directory marat is in; a repository's configuration
    there can name a program for git to run (core.fsmonitor on ls-files): lmd reads the
    files and branches itself and runs no git in it."""
    mark = tmp_path / "ran"
    subprocess.run(
        ["git", "-C", str(repo), "config", "core.fsmonitor", f"touch {mark}; false"], check=True
    )
    subprocess.run(["git", "-C", str(repo), "pack-refs", "--all"], check=True)  # packed-refs
    subprocess.run(["git", "-C", str(repo), "branch", "topic/spoken"], check=True)  # loose
    hint = dictation_hint("git check out topic slash spoken and feature slash login", str(repo))
    assert "topic/spoken: a name here" in hint and "feature/login: a name here" in hint
    assert not mark.exists()


def test_ordinary_words_and_plain_requests_get_no_hint(repo):
    assert dictation_hint("list the files and show the logs", str(repo)) == ""
    assert dictation_hint("run the tests", str(repo)) == ""
    assert dictation_hint("", None) == ""


def test_the_users_own_words(repo, store):
    assert dictation_hint("kube cuddle get pods", str(repo), store) == ""
    add_word(store, "Kube Cuddle", "kubectl")
    hint = dictation_hint("Kube cuddle, get pods", str(repo), store)
    assert '- "kube cuddle": kubectl (the user\'s own word)' in hint


def test_lmd_words(tmp_path):
    home = tmp_path / "home"
    ran = lmd_in_process("words", "add", "kube cuddle", "kubectl", "--home", str(home))
    assert ran.returncode == 0, ran.stderr
    assert (
        ran.stdout.strip()
        == 'When a dictated request says "kube cuddle", I tell the model it means kubectl.'
    )
    ran = lmd_in_process("words", "list", "--home", str(home))
    assert ran.stdout == "kube cuddle\tkubectl\n"
    bad = lmd_in_process("words", "add", "   ", "x", "--home", str(home))
    assert bad.returncode == 1 and bad.stderr.strip() == (
        "Say the words as the speech engine writes them, like kube cuddle."
    )
    bad = lmd_in_process("words", "add", "x" * 200, "y", "--home", str(home))
    assert bad.returncode == 1 and "at most 80 characters" in bad.stderr
    gone = lmd_in_process("words", "remove", "Kube Cuddle", "--home", str(home))
    assert gone.returncode == 0 and gone.stdout.strip() == 'Removed "kube cuddle".'
    missing = lmd_in_process("words", "remove", "nothing", "--home", str(home))
    assert missing.returncode == 1 and "There is no entry for 'nothing'" in missing.stderr


def test_marat_sends_the_hint_beside_the_users_words(make_client, backend, repo):
    c = make_client(marat_start_dir=str(repo), marat_approval="never")
    backend.queue(action("git checkout -b feature/login"), final("Switched."))
    body = say(c, "marat git check out dash b feature slash login").json()
    assert "spoken punctuation written out" in body["dictation_hint"]
    first = backend.chat_requests[0]["messages"]
    assert first[0]["role"] == "system" and body["dictation_hint"] in first[0]["content"]
    assert first[-1] == {"role": "user", "content": "git check out dash b feature slash login"}
    # the next model turn of the same task has it too
    assert body["dictation_hint"] in backend.chat_requests[1]["messages"][0]["content"]
