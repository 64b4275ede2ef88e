"""marat end to end: the seed's three scenarios, the approval flow, karma after a task and
operative prompts, against real bash, real git repos and the fake backend's scripted turns."""

from __future__ import annotations

import json
import time

import pytest
from click.testing import CliRunner

from tests.daemons import configure
from tests.fake_backend import Reply

from .conftest import (
    GIT_ENV,
    action,
    final,
    git,
    history,
    messages_text,
    say,
    say_live,
)


@pytest.fixture
def marat(make_client, projects):
    """A client whose marat sessions start in projects/other, on a named test system."""
    return make_client(marat_start_dir=str(projects["other"]), system="TestOS 7")


def by_id(rows: list[dict]) -> dict[int, dict]:
    return {r["id"]: r for r in rows}


# -- the seed's scenarios ------------------------------------------------------------------
def test_show_current_dir_and_list_files(marat, backend, projects):
    backend.queue(action("pwd && ls", "I list the directory."), final("Here are your files."))
    r = say(marat, "marat show me current dir and list files")
    assert r.status_code == 200, r.text
    body = r.json()
    other = str(projects["other"])
    assert body["mode"] == "marat" and body["pending"] is None
    assert body["reply"].startswith("Here are your files.")
    assert other in body["reply"] and "notes.txt" in body["reply"] and "todo.md" in body["reply"]
    first, second = backend.chat_requests
    system = first["messages"][0]
    assert system["role"] == "system" and "TestOS 7" in system["content"]
    assert other in system["content"]
    assert first["stop"] == ["\nObservation:"] and first["model"] == "fake-model"
    assert first["messages"][-1] == {
        "role": "user",
        "content": "show me current dir and list files",
    }
    observation = second["messages"][-1]
    assert observation["role"] == "user" and observation["content"].startswith(
        "Observation: exit code 0"
    )
    assert "notes.txt" in observation["content"] and other in observation["content"]
    assert second["messages"][-2]["content"] == action("pwd && ls", "I list the directory.")
    audit = marat.get("/marat/commands", params={"session": "s1"}).json()["commands"]
    assert [(c["command"], c["exit_code"], c["approval"], c["cwd"]) for c in audit] == [
        ("pwd && ls", 0, "read-only", other)
    ]


def test_go_up_change_dir_checkout_develop_log(marat, backend, projects):
    repo = projects["repo"]
    backend.queue(
        action("cd .. && cd example", "I move to the example repository."),
        action("git checkout develop", "I switch to the develop branch."),
    )
    text = (
        "marat go up one dir level. Next change to the example dir. Next make sure that we "
        "are on the develop branch. Next log the past 10 commits"
    )
    r = say(marat, text).json()
    assert r["reply"] == "I am about to run: git checkout develop. Say yes to run it, or no."
    assert r["pending"]["command"] == "git checkout develop"
    assert r["cwd"] == str(repo)  # the cd ran at once (read-only) and persisted
    assert git(repo, "branch", "--show-current") == "main"  # nothing written yet
    # The next request runs in the directory the first one left.
    backend.queue(
        action("git log -10 --format=%s", "I log the last ten commits."),
        final("These are the last ten commits on develop."),
    )
    r = say(marat, "yes").json()
    assert git(repo, "branch", "--show-current") == "develop"
    assert r["pending"] is None
    assert r["reply"].startswith("These are the last ten commits on develop.")
    for i in range(3, 13):
        assert f"Develop change number {i}" in r["reply"]
    assert "Develop change number 2\n" not in r["reply"] + "\n"
    assert [c["cwd"] for c in r["commands"]] == [str(repo), str(repo)]
    # The model saw the checkout's observation, then the log's.
    third, fourth = backend.chat_requests[2:]
    assert "Switched to branch 'develop'" in third["messages"][-1]["content"]
    assert str(repo) in third["messages"][0]["content"]
    assert "Develop change number 12" in fourth["messages"][-1]["content"]
    audit = marat.get("/marat/commands").json()["commands"]
    assert [(c["command"], c["approval"], c["answer"]) for c in audit] == [
        ("cd .. && cd example", "read-only", None),
        ("git checkout develop", "user", "yes"),
        ("git log -10 --format=%s", "read-only", None),
    ]


def test_git_add_and_commit_asks_then_commits(marat, backend, projects):
    repo = projects["repo"]
    command = "git add example.rs && git commit -m 'Add example.rs with a hello world main'"
    backend.queue(action(command, "I stage and commit the file."))
    r = say(marat, "marat git add example.rs. Next commit with a relevant message", cwd=str(repo))
    body = r.json()
    assert body["reply"] == f"I am about to run: {command}. Say yes to run it, or no."
    assert body["pending"]["command"] == command and body["pending"]["mode"] == "marat"
    assert "example.rs" not in git(repo, "ls-files")
    backend.queue(final("I committed example.rs."))
    body = say(marat, "Yes.").json()
    assert git(repo, "log", "-1", "--format=%s") == "Add example.rs with a hello world main"
    assert body["reply"].startswith("I committed example.rs.")
    assert "[main " in body["reply"] and "Add example.rs with a hello world main" in body["reply"]
    # the user's "Yes." and the observation are neighbours of one role: sent as one message
    last = backend.chat_requests[-1]["messages"][-1]["content"]
    assert last.startswith("Yes.\n\nObservation: exit code 0") and "1 file changed" in last
    # Karma after the task spans both requests.
    kinds = [(r["role"], r["kind"], r["content"][:20]) for r in history(marat)]
    assert kinds == [
        ("user", "contextual", "git add example.rs. "),
        ("assistant", "decorative", "Thought: I stage and"),
        ("assistant", "decorative", "I am about to run: g"),
        ("user", "decorative", "Yes."),
        ("user", "decorative", "Observation: exit co"),
        ("assistant", "decorative", "Thought: That is all"),
        ("assistant", "contextual", "I committed example."),
    ]


def test_seed_scenario_over_a_live_daemon(live, home, backend, projects):
    from daemon.cli import cli

    configure(home, marat_start_dir=str(projects["repo"]))
    daemon = live(env=GIT_ENV)
    command = "git add example.rs && git commit -m 'Add example.rs'"
    backend.queue(action(command))
    lmd = CliRunner()
    out = lmd.invoke(
        cli, ["say", "--url", daemon.url, "--json", "Marat, git add example.rs. Next commit it."]
    )
    assert out.exit_code == 0, out.output
    assert json.loads(out.output)["pending"]["command"] == command
    backend.queue(final("Done, example.rs is committed."))
    out = lmd.invoke(cli, ["say", "--url", daemon.url, "do it"])  # plain text, as heard
    assert out.exit_code == 0, out.output
    assert out.output.startswith("Done, example.rs is committed.\n\n[main ")
    assert git(projects["repo"], "log", "-1", "--format=%s") == "Add example.rs"
    # The daemon keeps the session's state: a JSON request still sees the repo as cwd.
    backend.queue(action("git status --short"), final("Clean."))
    status, body = say_live(daemon.url, "marat is the tree clean", session="default")
    assert status == 200 and body["commands"][0]["cwd"] == str(projects["repo"])
    # The audit is on disk: `lmd history --commands` reads it.
    out = lmd.invoke(cli, ["history", "--commands", "--home", str(home)])
    assert out.exit_code == 0, out.output
    assert "user ('do it')" in out.output and "git add example.rs && git commit" in out.output
    as_json = lmd.invoke(cli, ["history", "--commands", "--json", "--home", str(home)])
    rows = json.loads(as_json.output)
    assert [r["approval"] for r in rows] == ["user", "read-only"]
    assert rows[0]["cwd"] == str(projects["repo"]) and rows[0]["exit_code"] == 0


# -- approval --------------------------------------------------------------------------------
def _ask_to_touch(marat, backend, projects, name="made.txt"):
    backend.queue(action(f"touch {name}"))
    body = say(marat, f"marat create a file called {name}").json()
    assert body["pending"]["command"] == f"touch {name}"
    return projects["other"] / name


def test_no_drops_the_command(marat, backend, projects):
    target = _ask_to_touch(marat, backend, projects)
    calls = len(backend.chat_requests)
    body = say(marat, "No, cancel.").json()
    assert body["reply"] == "All right, I did not run touch made.txt."
    assert body["pending"] is None and not target.exists()
    assert len(backend.chat_requests) == calls  # no model call for a no
    assert marat.get("/marat/commands").json()["commands"] == []


def test_anything_else_drops_it_and_is_a_new_task(marat, backend, projects):
    target = _ask_to_touch(marat, backend, projects)
    backend.queue(action("ls"), final("Listed."))
    body = say(marat, "actually just list the files").json()
    assert not target.exists()
    assert body["dropped_command"] == "touch made.txt"
    assert body["reply"].startswith("Listed.") and "notes.txt" in body["reply"]
    assert backend.chat_requests[-2]["messages"][-1]["content"] == "actually just list the files"
    # A later yes has nothing to approve: it is an ordinary marat utterance now.
    backend.queue(final("There is nothing to confirm."))
    say(marat, "yes")
    assert not target.exists()


def test_pending_expires_with_the_idle_time(marat, backend, projects, home):
    configure(home, end_session_after_idle_secs=1)
    target = _ask_to_touch(marat, backend, projects)
    time.sleep(1.2)
    calls = len(backend.chat_requests)
    body = say(marat, "yes").json()
    # a bare yes to a question that expired is no request for any mode (issue 36 item 8)
    assert body["reply"] == (
        "Nothing is waiting for a yes or a no any more: my question went unanswered for over "
        "1 second, so I dropped it; say what you want done."
    )
    assert len(backend.chat_requests) == calls and not target.exists()
    # Even "marat yes" no longer approves an expired command.
    backend.queue(final("Nothing to do."))
    say(marat, "marat yes")
    assert not target.exists()


def test_marat_yes_with_the_directive_also_approves(marat, backend, projects):
    target = _ask_to_touch(marat, backend, projects)
    backend.queue(final("Created."))
    body = say(marat, "marat, yeah").json()
    assert target.exists() and body["reply"] == "Created."


def test_marat_yes_after_a_detour_does_not_approve(marat, backend, projects):
    target = _ask_to_touch(marat, backend, projects)
    backend.queue("A joke.")
    say(marat, "dali tell me a joke")
    asked = len(backend.chat_requests)
    body = say(marat, "marat yes").json()
    assert not target.exists()
    assert body["reply"] == "Nothing is waiting for a yes or a no; say what you want done."
    assert len(backend.chat_requests) == asked  # a bare yes is no task for the model
    # The unanswered question's loop no longer counts as ordinary history.
    thought = next(r for r in history(marat) if r["content"] == action("touch made.txt"))
    assert thought["kind"] == "decorative"


def test_start_dir_falls_back_to_home(make_client, backend, tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path))
    c = make_client(marat_start_dir=str(tmp_path / "missing"))
    backend.queue(action("pwd"), final("Home."))
    body = say(c, "marat where am I").json()
    assert body["commands"][0]["cwd"] == str(tmp_path)
    assert str(tmp_path) in backend.chat_requests[0]["messages"][0]["content"]


def test_empty_final_thought_still_answers(marat, backend):
    backend.queue("Final Thought:")
    assert say(marat, "marat nothing").json()["reply"] == "Done."


def test_approval_never_and_always(make_client, backend, projects):
    c = make_client(marat_start_dir=str(projects["other"]), marat_approval="never")
    backend.queue(action("touch direct.txt"), final("Made it."))
    assert say(c, "marat make direct.txt").json()["pending"] is None
    assert (projects["other"] / "direct.txt").exists()
    assert c.get("/marat/commands").json()["commands"][0]["approval"] == "never"
    configure(c.app.daemon.home, marat_approval="always")
    backend.queue(action("ls"))
    assert say(c, "marat list").json()["pending"]["command"] == "ls"


# -- the loop's format and karma ---------------------------------------------------------------
def test_format_help_is_decorative_then_worthless_and_karma_after_task(marat, backend):
    backend.queue(
        "I think you should look at the files.",  # no block
        action("sudo ls /root"),  # sudo
        "```bash\nls\n```\n```bash\npwd\n```",  # two blocks
        action("ls"),
        final("Your files are notes.txt and todo.md."),
    )
    body = say(marat, "marat what files are here").json()
    assert body["reply"].startswith("Your files are notes.txt and todo.md.")
    reqs = backend.chat_requests
    assert reqs[1]["messages"][-1]["content"].startswith("Format help: your reply had no")
    assert "never use sudo" in reqs[2]["messages"][-1]["content"]
    assert "had 2 code blocks" in reqs[3]["messages"][-1]["content"]
    rows = history(marat)
    kinds = [(r["role"], r["kind"]) for r in rows]
    assert kinds[0] == ("user", "contextual")  # the instruction
    assert kinds[-1] == ("assistant", "contextual")  # the final reply
    middle = rows[1:-1]
    # a sudo refusal is not a format error (the step was well formed) but is handled as one
    corrective = ("Format help", "Refused:")
    helps = [r for r in middle if r["content"].startswith(corrective)]
    assert len(helps) == 3 and all(r["kind"] == "none" and r["karma"] == 0 for r in helps)
    assert [r["content"].split(":")[0] for r in helps] == ["Format help", "Refused", "Format help"]
    loop = [r for r in middle if not r["content"].startswith(corrective)]
    assert len(loop) == 6  # five model turns and one observation
    assert all(r["kind"] == "decorative" and r["karma"] == 500 for r in loop)
    # The next task's context holds the finished task's instruction and answer; the worthless
    # format help is gone.
    backend.queue(final("Nothing else."))
    say(marat, "marat anything else")
    sent = messages_text(backend.chat_requests[-1])
    assert "what files are here" in sent and "Your files are notes.txt" in sent
    assert "Format help" not in sent and "Refused:" not in sent


def test_nonsense_every_turn_ends_after_max_thought_loops(make_client, backend):
    c = make_client(max_thought_loops=3)
    backend.default = Reply("blah blah")
    r = say(c, "marat do something")
    assert r.status_code == 200
    assert r.json()["reply"] == (
        "I stopped after 3 model turns without finishing the task. "
        "Say what to do next, or raise max_thought_loops."
    )
    assert len(backend.chat_requests) == 3
    # The daemon keeps serving.
    backend.default = Reply(final("Fine now."))
    assert say(c, "marat try again").json()["reply"] == "Fine now."


def test_one_model_turn_is_said_in_the_singular(make_client, backend):
    c = make_client(max_thought_loops=1)
    backend.default = Reply("blah blah")
    reply = say(c, "marat do something").json()["reply"]
    assert reply.startswith("I stopped after 1 model turn without finishing the task.")


# -- instructive: a running task's instruction ---------------------------------------------------
def test_a_running_tasks_instruction_outlives_its_own_observations(make_client, backend):
    """Long observations would push a default-karma instruction out of the context while its
    task still runs; marat marks the instruction instructive until the task ends."""
    # Score = 10 * karma / distance here (no age or length discount).
    c = make_client(
        expiring_created_at_discount=0,
        len_discount=0,
        expiring_id_discount=1,
        max_tokens=2500,
        marat_approval="never",
    )
    backend.queue(action("seq 1000 1400"), action("seq 2000 2400"), final("Counted."))
    body = say(c, "marat count from a thousand, then from two thousand").json()
    assert body["reply"].startswith("Counted.")
    third = messages_text(backend.chat_requests[2])
    # two observations of ~1,600 tokens (2,000 characters of digits, a token each) do not
    # both fit in 2,500: the older one goes, the instruction (distance 4, instructive) stays
    assert "count from a thousand, then from two thousand" in third
    assert "2400" in third and "1400" not in third
    rows = history(c)
    assert (rows[0]["kind"], rows[0]["karma"]) == ("contextual", 2500)  # after the task


def test_the_instruction_is_instructive_while_waiting_and_default_if_dropped(marat, backend):
    backend.queue(action("touch made.txt"))
    body = say(marat, "marat make a file").json()
    assert body["pending"]["command"] == "touch made.txt"
    instruction = history(marat)[0]
    assert (instruction["kind"], instruction["karma"]) == ("instructive", 10000)
    say(marat, "no")
    instruction = history(marat)[0]
    assert (instruction["kind"], instruction["karma"]) == ("default", 1000)


# -- operative prompts ---------------------------------------------------------------------------
def test_remember_phrase_endpoint_and_cli_promote(marat, backend, home):
    body = say(marat, "marat remember: my projects live in ~/code").json()
    assert body["reply"] == "I will remember: my projects live in ~/code"
    assert backend.chat_requests == []  # no model call
    rows = by_id(history(marat))
    fact = rows[body["promoted"]]
    assert fact["kind"] == "operative" and fact["karma"] == 25000
    assert fact["content"] == "remember: my projects live in ~/code"
    # "remember that" promotes the last answer.
    backend.queue(final("Your disk is 40 percent full."))
    answer_id = say(marat, "marat how full is my disk").json()["prompt_ids"]["reply"]
    body = say(marat, "marat, remember that.").json()
    assert body["promoted"] == answer_id
    assert by_id(history(marat))[answer_id]["kind"] == "operative"
    # The endpoint and the CLI promote any prompt by id.
    backend.queue("ok")
    other_id = say(marat, "dali hello", session="s2").json()["prompt_ids"]["user"]
    r = marat.post(f"/history/{other_id}/promote")
    assert r.json() == {"id": other_id, "kind": "operative", "karma": 25000}
    assert marat.post("/history/999999/promote").status_code == 404
    reply_id = history(marat, "s2")[-1]["id"]
    from daemon.cli import cli

    out = CliRunner().invoke(cli, ["history", "promote", str(reply_id), "--home", str(home)])
    assert out.exit_code == 0 and f"Prompt {reply_id} is now operative" in out.output
    assert by_id(history(marat, "s2"))[reply_id]["kind"] == "operative"


def test_promoted_prompt_survives_pruning(make_client, backend):
    # Score = 10 * karma / distance here: default prompts stay only within distance 3,
    # an operative one within distance 8.
    c = make_client(
        expiring_created_at_discount=0,
        len_discount=0,
        expiring_id_discount=1,
        min_score_to_include_prompt=3000,
    )
    say(c, "marat remember: the build server is called hopper")
    backend.queue("one", "two")
    say(c, "dali the weather is mild today")
    say(c, "dali tell me more")
    backend.queue(final("Noted."))
    say(c, "marat what is the build server called")
    sent = messages_text(backend.chat_requests[-1])
    assert "the build server is called hopper" in sent  # distance 5, operative
    assert "the weather is mild today" not in sent  # distance 4, default: pruned


def test_streaming_client_gets_the_question_and_the_pending(marat, backend):
    backend.queue(action("touch streamed.txt"))
    r = marat.post(
        "/v1",
        content=b"marat make streamed.txt",
        headers={"Accept": "text/event-stream", "X-Session": "sse"},
    )
    events = [line for line in r.text.split("\n") if line.startswith(("data:", "event:"))]
    assert json.loads(events[0][len("data: ") :]) == question_text("touch streamed.txt")
    outcome = json.loads(events[events.index("event: outcome") + 1][len("data: ") :])
    assert outcome["pending"]["command"] == "touch streamed.txt"
    assert events[-1] == "data: [DONE]"


def question_text(command: str) -> str:
    return f"I am about to run: {command}. Say yes to run it, or no."


def test_remember_to_do_something_is_a_task_not_a_promotion(marat, backend):
    backend.queue(final("I cannot set reminders."))
    body = say(marat, "marat remember to water the plants").json()
    assert "promoted" not in body and body["reply"] == "I cannot set reminders."
    assert backend.chat_requests[0]["messages"][-1]["content"] == "remember to water the plants"
    assert say(marat, "marat remember").json()["promoted"]  # bare: promotes the last answer


@pytest.mark.parametrize(
    ("reply", "command"),
    [
        ("Thought: list.\n```bash\nls -a\n```", "ls -a"),
        ("Thought: list.\n```sh\nls -a\n```", "ls -a"),
        ("Thought: list.\n```\nls -a\n```", "ls -a"),
        ("Thought: list.\n```shell\nls -a\n```", "ls -a"),
        ("Thought: run it.\n```python\nimport os; os.remove('x')\n```", None),
        ('Thought: data.\n```json\n{"a": 1}\n```', None),
        ("Thought: list.\n```console\n$ ls\nnotes.txt\n```", None),  # output would run
        ("Thought: list.\n```zsh\nls **/*(.)\n```", None),
    ],
)
def test_only_shell_fences_are_commands(reply, command):
    from plugins.marat.prompt import parse_reply

    step = parse_reply(reply)
    assert step.command == command
    if command is None:
        assert "not bash; I only run bash" in step.correction


def test_a_python_block_is_corrected_not_run(marat, backend, tmp_path):
    marker = tmp_path / "ran"
    backend.queue(
        f"Thought: write it.\n```python\nopen('{marker}', 'w').write('x')\n```",
        final("Done."),
    )
    body = say(marat, "marat make a marker").json()
    assert body["reply"].startswith("Done.") and not marker.exists()
    assert "your code block was python" in backend.chat_requests[1]["messages"][-1]["content"]


@pytest.mark.parametrize("word", ["no", "No.", "yes please", "OK"])
def test_a_bare_answer_with_nothing_pending_is_no_task(marat, backend, word):
    body = say(marat, f"marat {word}").json()
    assert body["reply"] == "Nothing is waiting for a yes or a no; say what you want done."
    assert backend.chat_requests == []
