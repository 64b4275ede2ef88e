"""marat under bad commands and faults: hangs, floods, invalid UTF-8, background jobs, a
vanishing cwd, concurrent requests and a backend that fails mid-loop. Real bash throughout."""

from __future__ import annotations

import re
import threading
import time

import pytest

from tests.daemons import configure
from tests.fake_backend import Reply

from .conftest import action, final, history, say, say_live


@pytest.fixture
def work(tmp_path):
    d = tmp_path / "work"
    d.mkdir()
    return d


@pytest.fixture
def runs(make_client, work):
    """A client that runs every command at once, with a short timeout and output limit."""
    return make_client(
        marat_start_dir=str(work),
        marat_approval="never",
        marat_command_timeout_secs=0.5,
        max_bash_output_len_for_response=200,
    )


def observation(backend) -> str:
    """The observation sent with the latest model call."""
    return backend.chat_requests[-1]["messages"][-1]["content"]


def test_hanging_command_is_killed_with_its_group(runs, backend, work):
    # The background child would create the marker after 1s if the group survived.
    backend.queue(action("(sleep 1; touch survived) & sleep 30"), final("It hung."))
    start = time.monotonic()
    body = say(runs, "marat wait forever").json()
    assert time.monotonic() - start < 5
    assert body["reply"].startswith("It hung.")
    obs = observation(backend)
    assert re.search(r"^Observation: timed out after \d+ seconds and was killed", obs)
    assert body["commands"][0]["timed_out"] is True
    time.sleep(1.2)
    assert not (work / "survived").exists()
    backend.queue(action("echo next"), final("Fine."))
    assert "next" in say(runs, "marat say next").json()["reply"]


def test_flood_is_cut_with_a_marker(runs, backend):
    backend.queue(action("yes 'flood line' | head -n 2000000"), final("Flooded."))
    body = say(runs, "marat flood me").json()
    obs = observation(backend)
    assert "[output cut:" in obs
    assert len(obs) < 400
    assert body["reply"].startswith("Flooded.") and "[output cut:" in body["reply"]
    audit = runs.get("/marat/commands").json()["commands"][0]
    assert audit["truncated"] is True and audit["exit_code"] == 0


def test_invalid_utf8_and_binary_output(runs, backend):
    backend.queue(action(r"printf 'ok \xff\xfe\x00 bin \xc3'"), final("Odd bytes."))
    body = say(runs, "marat print junk").json()
    obs = observation(backend)
    assert "ok \ufffd\ufffd\\0 bin \ufffd" in obs
    assert body["reply"].startswith("Odd bytes.")


def test_output_is_cut_on_a_character_boundary(runs, backend):
    backend.queue(action("printf 'é%.0s' $(seq 1 500)"), final("Accents."))
    say(runs, "marat accents")
    obs = observation(backend)
    body = obs.split("\n", 1)[1]
    kept = body.split("\n[output cut")[0]
    assert kept == "é" * 200 and "\n[output cut: " in body


def test_background_job_does_not_hold_the_reply(runs, backend):
    backend.queue(action("sleep 30 & echo started"), final("Started it."))
    start = time.monotonic()
    body = say(runs, "marat start a job").json()
    assert time.monotonic() - start < 5
    assert "started" in observation(backend)
    assert body["reply"].startswith("Started it.")


def test_command_deleting_its_own_cwd(runs, backend, work):
    backend.queue(action("mkdir gone && cd gone && rmdir ../gone && pwd"), final("Deleted."))
    body = say(runs, "marat make and remove a dir").json()
    assert body["cwd"] == str(work)
    assert f"no longer exists; I am in {work} instead" in observation(backend)
    backend.queue(action("pwd"), final("Here."))
    body = say(runs, "marat where am I").json()
    assert str(work) in body["reply"] and body["commands"][0]["cwd"] == str(work)


def test_session_cwd_deleted_between_requests(runs, backend, work):
    sub = work / "sub"
    sub.mkdir()
    backend.queue(action("cd sub"), final("In sub."))
    assert say(runs, "marat go to sub").json()["cwd"] == str(sub)
    sub.rmdir()
    backend.queue(action("pwd"), final("Moved."))
    body = say(runs, "marat where now").json()
    assert body["commands"][0]["cwd"] == str(work)
    obs = observation(backend)
    assert f"The directory {sub} no longer exists" in obs and str(work) in obs


def test_cd_persists_per_session_and_exit_still_records_cwd(runs, backend, work):
    (work / "a").mkdir()
    backend.queue(action("cd a && exit 3"), final("Failed on purpose."))
    body = say(runs, "marat go to a and fail", session="one").json()
    assert body["cwd"] == str(work / "a")
    assert observation(backend).startswith("Observation: exit code 3")
    backend.queue(action("pwd"), final("Other session."))
    body = say(runs, "marat where", session="two").json()
    assert body["commands"][0]["cwd"] == str(work)  # sessions do not share a cwd


def test_no_stdin_and_no_terminal(runs, backend):
    backend.queue(action("cat; tty; echo done"), final("No input."))
    say(runs, "marat read stdin")
    obs = observation(backend)
    assert "not a tty" in obs and "done" in obs


def test_backend_failing_mid_loop_keeps_every_turn(runs, backend):
    backend.queue(action("echo step one"), Reply(status=500))
    r = say(runs, "marat do two steps")
    assert r.status_code == 502
    assert "HTTP 500" in r.json()["error"]
    rows = history(runs)
    assert [(x["role"], x["status"]) for x in rows] == [
        ("user", "failed"),
        ("assistant", "ok"),
        ("user", "ok"),
        ("error", "error"),
    ]
    assert rows[1]["content"] == action("echo step one")
    assert (
        rows[2]["content"].startswith("Observation: exit code 0")
        and "step one" in (rows[2]["content"])
    )
    # The next request works and sees the stored turns.
    backend.queue(final("Recovered."))
    assert say(runs, "marat go on").json()["reply"] == "Recovered."
    assert "step one" in "\n".join(m["content"] for m in backend.chat_requests[-1]["messages"])


def _timed(name: str) -> str:
    stamp = "$(date +%s.%N) >> ../log"
    return f"echo {name} start {stamp}; sleep 0.8; echo {name} end {stamp}"


def test_same_session_serialised_different_sessions_parallel(live, home, backend, tmp_path):
    work = tmp_path / "w"
    work.mkdir()
    configure(home, marat_start_dir=str(work), marat_approval="never")
    (tmp_path / "log").touch()
    daemon = live()

    def reply(body):
        last = body["messages"][-1]["content"]
        if last.startswith("Observation"):
            return final("Done.")
        return action(_timed(last.split()[-1]))

    backend.handler = reply
    results = []

    def go(text, session):
        results.append(say_live(daemon.url, text, session))

    def run_pair(a, b):
        threads = [threading.Thread(target=go, args=x) for x in (a, b)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(30)

    run_pair(("marat run A", "same"), ("marat run B", "same"))
    run_pair(("marat run C", "left"), ("marat run D", "right"))
    assert [s for s, _ in results] == [200] * 4
    spans = {}
    for line in (tmp_path / "log").read_text().split("\n"):
        if line:
            name, edge, stamp = line.split()
            spans.setdefault(name, {})[edge] = float(stamp)

    def overlap(x, y):
        return spans[x]["start"] < spans[y]["end"] and spans[y]["start"] < spans[x]["end"]

    assert not overlap("A", "B")  # one session: one request at a time
    assert overlap("C", "D")  # two sessions: side by side
