"""Talking to the daemon: stray answers, settings by voice and by SQL, history and karma
across modes, two clients at once, an answer abandoned mid-way, a restart mid-session."""

from __future__ import annotations

import json
import signal
import threading

import pytest

from tests.daemons import wait_for

from .conftest import journey, marat_step, messages_text, one, said_first, steered

pytestmark = pytest.mark.slow  # the journeys tier: real daemons on the embedded model

STORY = "dali Write a very long story about a lighthouse keeper, in many chapters."


def nothing_waiting(reply: str) -> bool:
    return "nothing is waiting" in reply.lower()


@journey()
def test_a_stray_yes_in_a_fresh_session(person):
    """A dictation tool sends "yes" (and "yes, always here", "no") where nothing was asked,
    in a fresh session and in a cobol session: lmd says nothing is waiting, asks no model,
    makes no rule; what was said is stored."""
    calls = person.calls()
    _, rules_before = person.http("GET", "/rules")
    fresh = person.session("stray")
    ran = person.lmd("say", "-s", fresh, "yes")
    assert ran.returncode == 0 and nothing_waiting(ran.stdout), ran
    for words in ("Yes, always here.", "no"):
        said = person.say(words, person.session("stray"))
        assert said["status"] == 200 and nothing_waiting(said["reply"]), said
    # in a session whose last words went to cobol (show the diff asks no model), too
    repo = person.git_repo("stray", {"a.txt": "a\n"})
    cobol = person.session("stray")
    assert person.say("cobol show the diff", cobol, cwd=repo)["status"] == 200
    said = person.say("yes", cobol, cwd=repo)
    assert said["status"] == 200 and nothing_waiting(said["reply"]), said
    assert calls.chats() == []  # not a model call
    assert person.http("GET", "/rules")[1] == rules_before  # no rule from a stray answer
    assert [r["content"] for r in person.prompts(fresh) if r["role"] == "user"] == ["yes"]


@journey()
def test_knob_then_dali_uses_the_new_value(person):
    """ "knob set reply max tokens to twenty" changes the setting without the model; the next
    dali answer is asked for with that limit and, cut there, says so."""
    s = person.session("knob")
    calls = person.calls()
    said = person.say("knob set reply max tokens to twenty", s)
    assert said["status"] == 200 and said["setting"] == {"name": "reply_max_tokens", "value": 20}
    assert calls.chats() == []
    try:
        said = person.say(STORY, s)
        assert said["status"] == 200, said
        call = one(calls.chats(), "model call")
        assert call["body"]["max_tokens"] == 20
        stored = person.prompts(s)[-1]
        if call["finish_reason"] == "length":  # cut at the limit: said, and kept marked
            assert said["finish_reason"] == "length" and "cut off" in said["reply"]
            assert stored["status"] == "cut"
        else:
            assert stored["status"] == "ok"
        assert said_first(stored["content"], call)
    finally:
        said = person.say("knob set reply max tokens to forty eight", s)
        assert said["setting"] == {"name": "reply_max_tokens", "value": 48}, said


@journey()
def test_wake_words_and_spoken_numbers(person):
    """Voice-style utterances as a speech engine writes them: a wake word before the
    directive picks the mode; numbers in words set a knob; a word that only begins like a
    directive stays content."""
    s = person.session("voice")
    calls = person.calls()
    said = person.say("Hey marat, what are my rules?", s)
    assert said["mode"] == "marat" and "rule" in said["reply"].lower(), said
    try:
        said = person.say("OK knob, set max tokens to four thousand five hundred, please.", s)
        assert said.get("setting") == {"name": "max_tokens", "value": 4500}, said
        said = person.say("knob set max tokens to forty three hundred", s)
        assert said.get("setting") == {"name": "max_tokens", "value": 4300}, said
        assert calls.chats() == []
    finally:
        person.http("DELETE", "/settings/max_tokens")
    said = person.say("Marathon results are in: I came fourth.", person.session("voice"))
    assert said["mode"] == "dali", said


@journey()
def test_history_and_karma_across_modes(person):
    """dali, then cobol's focus, then dali again in one session: the focus is instructive
    history that the next dali turn sees; a new focus makes the old one decorative; a prompt
    promoted from the CLI is operative and stays in context."""
    repo = person.git_repo("karma", {"calc.py": "def add(a, b):\n    return a - b\n",
                                     "util.py": "def twice(x):\n    return 2 * x\n"})  # fmt: skip
    s = person.session("karma")
    calls = person.calls()
    hello = person.say("dali hello, I am writing a pocket calculator", s)
    assert hello["status"] == 200, hello
    focus = person.say("cobol focus on calc.py", s, cwd=repo)
    assert focus["status"] == 200 and focus["reply"].startswith("Focused on calc.py"), focus
    assert len(calls.chats()) == 1  # a focus asks no model
    said = person.say("dali what am I working on?", s)
    assert said["status"] == 200, said
    assert "Focused on calc.py" in messages_text(calls.chats()[-1])
    person.say("cobol focus on util.py", s, cwd=repo)
    ran = person.lmd("history", "--json", "-s", s, "-n", "50")
    assert ran.returncode == 0, ran
    rows = {r["id"]: r for r in json.loads(ran.stdout)}
    old, new = focus["prompt_ids"], person.prompts(s)[-1]["id"]
    assert rows[old["user"]]["kind"] == rows[old["reply"]]["kind"] == "decorative"
    assert rows[new]["kind"] == "instructive" and rows[new]["mode"] == "cobol"
    assert [rows[i]["mode"] for i in sorted(rows)][:2] == ["dali", "dali"]
    ran = person.lmd("history", "promote", hello["prompt_ids"]["user"])
    assert ran.returncode == 0, ran
    row = one([r for r in person.prompts(s) if r["id"] == hello["prompt_ids"]["user"]], "row")
    assert row["kind"] == "operative" and row["karma"] == 25000  # operative_karma
    said = person.say("dali and what comes next?", s)
    assert said["status"] == 200
    assert "pocket calculator" in messages_text(calls.chats()[-1])


@journey()
def test_each_mode_keeps_its_own_protocol(person):
    """A marat task (a command, its observation, a final answer), then dali in the same
    session: dali's model sees none of marat's protocol (steps, observations, format help)."""
    proj = person.mkdir("iso")
    person.write(proj / "notes.txt", "call the plumber\n")
    s = person.session("iso")
    person.steer(
        ("list the files", marat_step("bash", "ls")),
        ("Observation", marat_step("final", "One file: notes.")),
    )
    calls = person.calls()
    said = person.say("marat list the files", s, cwd=proj)
    assert said["status"] == 200, said
    assert len(steered(calls.chats())) == 2
    assert [c["command"] for c in said.get("commands", [])] == ["ls"], said
    said = person.say("dali hello again", s)
    assert said["status"] == 200, said
    shown = messages_text(calls.chats()[-1])
    for protocol in ('"thought"', '"action"', "Observation:", "Format help"):
        assert protocol not in shown, f"{protocol} reached dali's context:\n{shown}"


@journey()
def test_a_voice_client_and_an_editor_at_once(person):
    """`lmd say` (a voice client) and an editor's OpenAI-compatible request, at the same
    moment, in two sessions: both are answered in full, each from its own words, each stored
    in its own session."""
    voice, editor = person.session("voice"), person.session("editor")
    calls = person.calls()
    done: dict = {}

    def speak() -> None:
        done["voice"] = person.lmd("say", "-s", voice, "dali tell me about the sea")

    t = threading.Thread(target=speak)
    t.start()
    status, body = person.http(
        "POST", "/v1/chat/completions",
        {"model": "lmd-dali", "messages": [{"role": "user", "content": "tell me about hills"}]},
        headers={"X-Session": editor},
    )  # fmt: skip
    t.join(300)
    assert status == 200 and body["object"] == "chat.completion", body
    assert done["voice"].returncode == 0, done["voice"]
    made = calls.chats()
    assert len(made) == 2 and all(c["complete"] and c["status"] == 200 for c in made), made
    by_words = {("sea" in c["body"]["messages"][-1]["content"]): c for c in made}
    for session, sea in ((voice, True), (editor, False)):
        rows = person.prompts(session)
        assert [r["role"] for r in rows] == ["user", "assistant"], rows
        words = rows[0]["content"]
        assert ("sea" in words) == sea and ("hills" in words) == (not sea)
        assert said_first(rows[1]["content"], by_words[sea])
    assert said_first(body["choices"][0]["message"]["content"], by_words[False])


@journey()
def test_an_editor_hears_the_servers_usage(person):
    """An editor's chat completion, plain and streamed with include_usage: `usage` is what
    the model server counted, not lmd's estimate."""
    s = person.session("usage")
    calls = person.calls()
    ask = {"model": "lmd-dali", "messages": [{"role": "user", "content": "hello"}]}
    status, body = person.http("POST", "/v1/chat/completions", ask, {"X-Session": s})
    assert status == 200, body
    call = one(calls.chats(), "model call")
    assert call["usage"], "lmd did not get the server's usage (stream_options.include_usage)"
    assert body["usage"]["prompt_tokens"] == call["usage"]["prompt_tokens"]
    assert body["usage"]["completion_tokens"] == call["usage"]["completion_tokens"]


@journey()
def test_ctrl_c_mid_answer_then_the_next_turn(person):
    """Ctrl-C on `lmd say` while the model is answering: the daemon stops asking the model
    (it closes the answer's stream), keeps what was said marked as cut, and the next turn in
    the same session is answered; Ctrl-C while the model still reads the prompt likewise."""
    s = person.session("ctrl-c")
    # no bound on the answer's length: on a loaded machine 200 tokens were all said before
    # the Ctrl-C came, and the test then saw a finished answer, not the stop
    assert person.lmd("settings", "set", "reply_max_tokens", "0").returncode == 0
    try:
        calls = person.calls()
        say = person.popen_lmd("say", "-s", s, STORY)
        assert wait_for(lambda: any(c["started"] for c in calls.chats()), 120), say.poll()
        say.send_signal(signal.SIGINT)
        out, err = say.communicate(timeout=60)
        assert say.returncode != 0, (out, err)
        one(calls.chats(), "model call")
        assert wait_for(lambda: calls.chats()[0]["ended"], 30), "the answer's stream stays open"
        assert not calls.chats()[0]["complete"], "lmd read the whole answer after the client left"
        # the next turn bounded again: the tiny model may write to the end of its window
        assert person.lmd("settings", "set", "reply_max_tokens", "48").returncode == 0
        ran = person.lmd("say", "-s", s, "dali now tell me a short one")
        assert ran.returncode == 0, ran
        assert person.lmd("settings", "set", "reply_max_tokens", "0").returncode == 0
        rows = person.prompts(s)
        assert [r["role"] for r in rows] == ["user", "assistant", "user", "assistant"], rows
        assert rows[1]["status"] in ("cut", "partial"), dict(rows[1])
        # Ctrl-C before the answer began (the model still reading the prompt): the same
        again = person.calls()
        say = person.popen_lmd("say", "-s", s, STORY)
        assert wait_for(lambda: again.chats(), 120), say.poll()
        say.send_signal(signal.SIGINT)
        say.communicate(timeout=60)

        # the request cancelled before the server's answer began (a busy machine reads the
        # prompt for longer: the probe records it as an error), or its stream closed after
        def stopped() -> bool:
            call = again.chats()[0]
            return call["ended"] or "CancelledError" in call.get("error", "")

        assert wait_for(stopped, 30), f"the answer's stream stays open: {again.chats()[0]}"
        assert not again.chats()[0].get("complete"), "lmd read the whole answer after Ctrl-C"
    finally:
        assert person.lmd("settings", "set", "reply_max_tokens", "48").returncode == 0


@journey()
def test_a_restart_mid_session(person):
    """The daemon restarts (an upgrade, a reboot) between two turns of a session: the history
    carries on, the embedded model is not probed again, the old server and its private
    folder are gone."""
    s = person.session("restart")
    said = person.say("dali my name is Ada Lovelace", s)
    assert said["status"] == 200, said
    old = person.daemon.model_servers()
    assert len(old) == 1
    assert person.daemon.stop() == 0
    assert wait_for(lambda: not any(_alive(pid) for pid in old), 20)
    calls = person.calls()
    person.start_daemon()
    ran = person.lmd("say", "-s", s, "dali what is my name?")
    assert ran.returncode == 0, ran
    made = calls.read()
    assert not any(c["probe"] for c in made)  # capabilities kept per model file
    turn = one(calls.chats(), "model call")
    assert "Ada Lovelace" in messages_text(turn)
    folders = [p for p in person.tmp.iterdir() if p.name.startswith("lmd-embedded-")]
    assert len(folders) <= 1, folders  # the old server's folder went with it


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


@journey()
def test_settings_changed_by_sql_then_used(person):
    """The user edits the settings table with sqlite3 while the daemon runs: the next turn
    asks the model with the new value; a broken value is one sentence naming the setting
    and the fix, and loses nothing; fixed from the CLI, the next turn is answered."""
    db = person.lmd_home / "lmd.db"
    s = person.session("sql-settings")

    def sqlite(value: str) -> None:
        sql = f"UPDATE settings SET value = '{value}' WHERE name = 'reply_max_tokens'"
        ran = person.run(["sqlite3", str(db), sql])
        assert ran.returncode == 0, ran

    calls = person.calls()
    try:
        sqlite("16")
        ran = person.lmd("say", "-s", s, "dali tell me about the moon")
        assert ran.returncode == 0, ran
        assert [c["body"]["max_tokens"] for c in calls.chats()] == [16]
        sqlite("lots")
        ran = person.lmd("say", "-s", s, "dali and the sun?")
        assert ran.returncode != 0
        sentence = ran.stderr.strip()
        assert "reply_max_tokens" in sentence and "lmd settings set" in sentence, ran
        assert len(sentence.splitlines()) == 1
        assert len(calls.chats()) == 1  # no model call with a broken setting
        said = [r["content"] for r in person.prompts(s) if r["role"] == "user"]
        assert said[-1].endswith("and the sun?"), said  # what was said is kept
        ran = person.lmd("doctor", "--offline")
        assert "[FAIL] settings" in ran.stdout and "reply_max_tokens" in ran.stdout
    finally:
        assert person.lmd("settings", "set", "reply_max_tokens", "48").returncode == 0
    ran = person.lmd("say", "-s", s, "dali and the sun?")
    assert ran.returncode == 0, ran
    assert calls.chats()[-1]["body"]["max_tokens"] == 48
