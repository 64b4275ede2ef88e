"""Protected settings by construction (issue 37 item 6): every setting that shapes what the
model is told, or how long and for what an approval holds, is the user's alone.

A setting declares what it shapes (`Setting.shapes`: prompt, approval, safety) and is protected
because of it. Over every setting lmd and its plugins declare, these tests check that:
- the protection follows the declaration, for every one;
- an agent (a request marked X-Lmd-Agent, as `lmd mcp serve` sends, token or not) changes no
  setting at all, and a local program without the token no protected one, by PUT, DELETE or
  knob; the user's own client (the token) and the CLI can;
- no unprotected setting changes what dali, marat or cobol send the model: each is set to
  another value and a fresh turn of each mode is compared with the turn under the defaults
  (system message, every message, the tools and the response format). A new setting that
  shapes a prompt without declaring it fails here;
- no unprotected setting changes which model and which server answer: the same turns, then
  LM_SCORE and SelectIT over HTTP and the judge `lmd elo judge` picks, and the server path and
  model id of every call the stand-in backend received are compared the same way.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
from pathlib import Path

import pytest

from daemon.core.settings import SHAPES, Setting

TOKEN = "tok-protected-settings-test"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
AGENT = {**AUTH, "X-Lmd-Agent": "1"}  # what `lmd mcp serve` sends

# A valid value other than the default, where the generic choice would not do.
OTHER = {
    "openai_chat_endpoint": "http://127.0.0.1:9/v1",
    "embedded_model_path": "",  # checked as a GGUF file: the empty default is the only easy one
    "default_prompt": "marat",
    "elo_models_file": "other.yaml",
    "lm_score_endpoint": "http://127.0.0.1:9/v1",
    "backend_capabilities": {"tools": False},
    "directive_aliases": {"marat": ["murat"]},
    "project_memory_files": ["CLAUDE.md"],
    "allowed_origins": ["http://localhost:3000"],
    "sandbox_hide_paths": ["/srv/keys"],
    "command_env_passthrough": ["GOPATH"],
    "selectit_device": "cpu",
}


def other_value(spec: Setting):
    """A valid value that is not the default."""
    if spec.name in OTHER:
        return OTHER[spec.name]
    if spec.type == "bool":
        return not spec.default
    if spec.type == "choice":
        return next(c for c in spec.choices if c != spec.default)
    if spec.type in ("int", "float"):
        low = spec.min if spec.min is not None else 0
        high = spec.max if spec.max is not None else (spec.default or 1) * 4 + 10
        value = spec.default + 1 if spec.default + 1 <= high else low
        return int(value) if spec.type == "int" else float(value) + 0.5 * (value + 0.5 <= high)
    if spec.type == "json":
        raise AssertionError(f"add a value for the JSON setting {spec.name} to OTHER")
    return f"{spec.default}-other" if spec.default else "other"


def as_text(value) -> str:
    if isinstance(value, (dict, list)):
        return json.dumps(value)
    return str(value).lower() if isinstance(value, bool) else str(value)


@pytest.fixture
def guarded(make_client):
    return make_client(token=TOKEN)


def specs(client) -> dict[str, Setting]:
    return client.app.state.daemon.registry.specs


def test_every_setting_is_protected_exactly_when_it_declares_what_it_shapes(guarded):
    found = specs(guarded)
    assert len(found) > 80  # the core's and every plugin's
    for spec in found.values():
        assert set(spec.shapes) <= set(SHAPES), spec.name
        assert spec.protected == bool(spec.shapes), spec.name
    # the named ones
    for name, shape in [
        ("system", "prompt"),
        ("project_memory_files", "prompt"),
        ("project_memory_max_chars", "prompt"),
        ("action_protocol", "prompt"),
        ("mcp_max_tools", "prompt"),
        ("end_session_after_idle_secs", "approval"),
        ("directive_aliases", "approval"),
        ("marat_approval", "approval"),
        ("marat_start_dir", "safety"),
    ]:
        assert shape in found[name].shapes, name
    # a setting declaring something else is refused when declared
    with pytest.raises(ValueError, match="declares shapes"):
        Setting("x", 1, "int", shapes=("mood",))
    assert Setting("y", 1, "int", protected=True).shapes == ("safety",)


def test_no_agent_or_tokenless_program_changes_a_protected_setting(guarded, make_client):
    tokenless = make_client()  # the kernel vouches for the owner's process: no token
    found = specs(guarded)
    protected = [s for s in found.values() if s.protected]
    assert len(protected) >= 25
    for spec in found.values():
        value = as_text(other_value(spec))
        path = f"/settings/{spec.name}"
        before = guarded.get(path, headers=AUTH).json()["value"]
        agent = guarded.put(path, content=value, headers=AGENT)
        peer = tokenless.put(path, content=value)
        if spec.protected:
            for r in (agent, peer):
                assert r.status_code == 403, (spec.name, r.text)
                assert r.json()["error"].startswith(f"The setting {spec.name} is protected")
            assert guarded.delete(path, headers=AGENT).status_code == 403
            assert tokenless.delete(path).status_code == 403
            assert guarded.get(path, headers=AUTH).json()["value"] == before, spec.name
            # the user's own client (the token) may
            mine = guarded.put(path, content=value, headers=AUTH)
            assert mine.status_code == 200, (spec.name, mine.text)
            assert guarded.delete(path, headers=AUTH).status_code == 200
        else:
            # an agent changes no setting at all; a program of the user's without the token
            # changes the unprotected ones
            assert agent.status_code == 403, (spec.name, agent.text)
            assert agent.json()["error"].startswith(
                f"The setting {spec.name} is protected from agents: a client relaying a "
                "model's words changes no setting;"
            )
            assert guarded.delete(path, headers=AGENT).status_code == 403
            assert peer.status_code == 200, (spec.name, peer.text)
            assert tokenless.delete(path).status_code == 200


@pytest.mark.parametrize(
    ("said", "name"),
    [
        ("knob set system to pirate speak", "system"),
        ("knob set end session after idle secs to 999999", "end_session_after_idle_secs"),
        ('knob set project memory files to ["NOTES.md"]', "project_memory_files"),
        ("knob set project memory max chars to 0", "project_memory_max_chars"),
        ("knob set action protocol to text", "action_protocol"),
        ("knob set default prompt to marat", "default_prompt"),
        ('knob set directive aliases to {"marat": ["yes"]}', "directive_aliases"),
        ("knob reset system", "system"),
        ("knob set marat approval to never", "marat_approval"),
        # who answers (issue 37 leftovers): the model, the scorer, the judge, the rater
        ("knob set openai model to gpt-4o", "openai_model"),
        ("knob set lm score model to agents-own-model", "lm_score_model"),
        ("knob set elo judge model to agents-own-model", "elo_judge_model"),
        ("knob set selectit backend to transformers", "selectit_backend"),
        ("knob set selectit api to chat", "selectit_api"),
        ("knob reset openai model", "openai_model"),
    ],
)
def test_an_agent_cannot_change_them_by_knob(guarded, said, name):
    before = guarded.get(f"/settings/{name}", headers=AUTH).json()["value"]
    r = guarded.post(
        "/v1", content=said, headers={**AGENT, "Accept": "application/json", "X-Session": "a"}
    )
    assert r.status_code == 403, r.text
    assert r.json()["error"].startswith(f"The setting {name} is protected")
    assert guarded.get(f"/settings/{name}", headers=AUTH).json()["value"] == before
    # the user, by voice through their own client (lmd say sends the token), can
    if not said.startswith("knob reset"):
        mine = guarded.post(
            "/v1", content=said, headers={**AUTH, "Accept": "application/json", "X-Session": "u"}
        )
        assert mine.status_code == 200, mine.text


# -- no unprotected setting shapes a prompt ----------------------------------------------------
def project(root: Path) -> Path:
    """A git project with project memory, for marat and cobol to read."""
    repo = root / "proj"
    repo.mkdir()
    (repo / "AGENTS.md").write_text("Always answer in haiku.\n")
    (repo / "app.py").write_text("def add(a, b):\n    return a + b\n")
    env = {"GIT_CONFIG_NOSYSTEM": "1", "HOME": str(root), "PATH": "/usr/bin:/bin"}
    for args in (["init", "-q", "-b", "main"], ["add", "-A"]):
        subprocess.run(["git", *args], cwd=repo, check=True, env=env, capture_output=True)
    subprocess.run(
        ["git", "-c", "user.name=T", "-c", "user.email=t@x", "commit", "-qm", "start"],
        cwd=repo,
        check=True,
        env=env,
        capture_output=True,
    )
    return repo


TURNS = [
    ("dali", "dali tell me about rivers"),
    ("marat", "marat list the files here"),
    ("cobol", "cobol add a docstring to add in app.py"),
    # dictated: lmd adds a hint beside the words (spoken punctuation, names here)
    ("dictated", "marat show me app dot pie"),
]


def prompts(client, backend, repo: Path, tag: str, asked: set | None = None) -> dict[str, str]:
    """What each mode's first turn in a fresh session sent the model (and, into `asked`,
    which server path and model id each of its calls went to)."""
    seen = {}
    for mode, said in TURNS:
        backend.clear()
        backend.queue("Thought: done.\nFinal Thought: ok", "ok", "ok")
        headers = {**AUTH, "X-Session": f"{tag}-{mode}", "X-Cwd": str(repo)}
        client.post("/v1", content=said, headers=headers)
        assert backend.chat_requests, (mode, tag)
        first = backend.chat_requests[0]
        seen[mode] = json.dumps(
            {k: first.get(k) for k in ("messages", "tools", "response_format")}, sort_keys=True
        )
        if asked is not None:
            asked |= calls(backend, mode)
    return seen


def calls(backend, feature: str) -> set[tuple[str, str, str]]:
    """(feature, server path, model id) of every model call the backend received."""
    return {
        (feature, r.path, r.body.get("model"))
        for r in backend.requests
        if isinstance(r.body, dict) and "model" in r.body
    }


def answer(body: dict):
    """The stand-in model for the features: a rating for SelectIT, a score for LM_SCORE."""
    from tests.fake_backend import Reply
    from tests.plugins.selectit.conftest import TASK, prompt_of, task_handler

    text = prompt_of(body)
    if TASK.search(text):
        return task_handler(body)
    return Reply("Score: 7" if "Is it large?" in text else "A is better.")


def answerers(client, backend, repo: Path, tag: str) -> set[tuple[str, str, str]]:
    """Who answers each feature: the modes' turns, LM_SCORE and SelectIT over HTTP, and the
    judge `lmd elo judge` picks from the same settings (plugins.elo.backends.resolve)."""
    from plugins.elo.backends import lmd_backend, resolve

    asked: set = set()
    prompts(client, backend, repo, tag, asked)
    backend.clear()
    backend.handler = answer
    try:
        body = {"contents": ["a blue whale"], "question": "Is it large?", "cache": False}
        client.post("/lm_score", json=body, headers=AUTH)
        asked |= calls(backend, "lm_score")
        backend.clear()
        record = {"instruction": "Do task 3.", "output": "Answer 3 done."}
        client.post("/selectit", json={"records": [record]}, headers=AUTH)
        asked |= calls(backend, "selectit")
        backend.clear()
        settings = client.app.state.daemon.settings()
        quiet = [].append
        with lmd_backend(settings, quiet) as backend_for:
            judge = resolve(settings["elo_judge_model"], settings, None, backend_for, quiet)

            async def ask() -> None:
                llm = judge.client()
                try:
                    await llm.chat([{"role": "user", "content": "Which is better?"}])
                finally:
                    await llm.close()

            asyncio.run(ask())
        asked |= calls(backend, "elo judge")
    finally:
        backend.handler = None
    return asked


def unprotected_that_change(guarded, observe, baseline) -> list[str]:
    """The unprotected settings whose other value makes `observe(label)` differ from
    `baseline`: each set over HTTP in turn, observed, and put back."""
    changed = []
    for spec in specs(guarded).values():
        if spec.protected:
            continue
        path = f"/settings/{spec.name}"
        r = guarded.put(path, content=as_text(other_value(spec)), headers=AUTH)
        assert r.status_code == 200, (spec.name, r.text)
        try:
            if observe(spec.name) != baseline:
                changed.append(spec.name)
        finally:
            guarded.delete(path, headers=AUTH)
    return changed


def test_no_unprotected_setting_changes_what_the_model_is_told(guarded, backend, tmp_path):
    repo = project(tmp_path)
    baseline = prompts(guarded, backend, repo, "base")
    assert prompts(guarded, backend, repo, "again") == baseline  # the same turn, the same prompt
    assert "Always answer in haiku." in baseline["marat"]  # the world is read at all
    shaping = unprotected_that_change(
        guarded, lambda name: prompts(guarded, backend, repo, name), baseline
    )
    assert shaping == [], f"these shape a prompt: declare shapes=('prompt',) on {shaping}"
    # and the check can see a change: a protected prompt setting does change the prompt
    guarded.put("/settings/system", content="Plan 9", headers=AUTH)
    assert prompts(guarded, backend, repo, "plan9")["marat"] != baseline["marat"]


def test_no_unprotected_setting_changes_which_model_answers(guarded, backend, tmp_path):
    repo = project(tmp_path)
    baseline = answerers(guarded, backend, repo, "base")
    assert answerers(guarded, backend, repo, "again") == baseline
    # every feature was answered, each by the configured server's model
    assert {feature for feature, _, _ in baseline} == {
        *(mode for mode, _ in TURNS),
        "lm_score",
        "selectit",
        "elo judge",
    }
    assert {model for _, _, model in baseline} == {"fake-model"}
    choosing = unprotected_that_change(
        guarded, lambda name: answerers(guarded, backend, repo, name), baseline
    )
    assert choosing == [], f"these pick who answers: declare shapes=('model',) on {choosing}"
    # and the check can see a change: each protected model setting does change who answers
    for name, value in [
        ("openai_model", "other-model"),
        ("lm_score_model", "scorer"),
        ("elo_judge_model", "judge"),
        ("selectit_model", "rater"),
    ]:
        assert "model" in specs(guarded)[name].shapes, name
        before = guarded.get(f"/settings/{name}", headers=AUTH).json()["value"]
        guarded.put(f"/settings/{name}", content=value, headers=AUTH)
        try:
            changed = answerers(guarded, backend, repo, name) - baseline
        finally:
            guarded.put(f"/settings/{name}", content=before, headers=AUTH)
        assert {model for _, _, model in changed} == {value}, (name, changed)
