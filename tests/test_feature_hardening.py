"""Reliability round 2, on the features: their parsers fuzzed, their outputs never clobber a
file, their HTTP paths stay inside the daemon's home, their secrets stay private."""

from __future__ import annotations

import json
import os
import re
import stat
import subprocess
import sys
import unicodedata

import pytest
from conftest import ROOT
from elo_helpers import lmd, write_csv
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from selectit_helpers import alpaca, dist_reply, prompt_of, run_cli, write_jsonl

from daemon.errors import LmdError
from daemon.paths import allowed_http_path, refuse_overwrite
from plugins.elo.judge import parse_scores, verdict
from plugins.lm_score.parse import parse_score

FUZZ = settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
# Text without digits: whatever surrounds the one number we plant.
PLAIN = st.text(
    alphabet=st.characters(blacklist_categories=("Nd", "No", "Cs")), max_size=60
).filter(lambda t: "<think" not in t.lower() and "</think" not in t.lower())


# -- 1. the LM_SCORE score parser -----------------------------------------------------------------
@FUZZ
@given(st.text(max_size=300))
@example("<think>7</think>")
@example("score: 11")
@example("Score: 1e-05")  # regression: read as 1
@example("９/10")  # a full-width digit: NFKC makes it 9
def test_score_parser_never_raises_and_never_invents(reply):
    """Any text: None or an int 0-10 that is literally written in the (NFKC) reply."""
    score = parse_score(reply)
    assert score is None or (isinstance(score, int) and 0 <= score <= 10)
    if score is not None:
        digits = re.findall(r"\d+(?:\.\d+)?", unicodedata.normalize("NFKC", reply))
        near = {int(float(d) + 0.5) for d in digits if float(d) <= 10}
        assert score in near, (reply, score)


@FUZZ
@given(
    st.integers(0, 10),
    st.sampled_from(
        [
            "{n}",
            "**{n}**",
            "{n}.",
            "Score: {n}",
            "score = {n}",
            "{n}/10",
            "{n} out of 10",
            "I give it {n}",
            "The score is {n}.",
        ]
    ),
    PLAIN,
)
def test_one_clean_number_is_read_as_written(n, shape, noise):
    """A reply with exactly one integer 0-10 (in any of the shapes models use) is read as it."""
    reply = (
        shape.format(n=n) if shape.startswith(("{n}", "**")) else noise + " " + shape.format(n=n)
    )
    assert parse_score(reply) == n, reply


@FUZZ
@given(st.integers(11, 999), PLAIN)
def test_a_number_out_of_range_is_no_score(n, noise):
    assert parse_score(f"{noise} Score: {n}") is None


@pytest.mark.parametrize("reply", ["Score: 1e-05", "5e1", "score is 2E+1"])
def test_score_in_exponent_form_is_no_score(reply):
    """Regression: the digits before the exponent were read ("1e-05" -> 1)."""
    assert parse_score(reply) is None


@FUZZ
@given(st.integers(0, 10), st.text(max_size=80).filter(lambda t: "think>" not in t.lower()))
def test_thinking_never_gives_the_score(n, thought):
    """A number only inside an unfinished <think> is not an answer; after </think> it is."""
    assert parse_score(f"<think>{thought} score: {n}") is None
    if not re.search(r"\d", unicodedata.normalize("NFKC", thought)):
        assert parse_score(f"<think>{thought} 3</think>\n{n}") == n


# -- 1. the Elo judge parser ----------------------------------------------------------------------
@FUZZ
@given(st.text(max_size=300))
@example("Score of Model 1: 1e9\nScore of Model 2: 0")
def test_judge_parser_never_raises_and_only_known_verdicts(response):
    winner, why, valid = verdict(response)
    assert isinstance(why, str)
    assert valid == (winner is not None)
    assert winner in (None, "model_a", "model_b", "tie", "tie (bothbad)")
    scores = parse_scores(response)
    if valid:
        assert scores is not None
        assert all(
            str(s).rstrip("0").rstrip(".") in response or f"{s:g}" in response for s in scores
        )


SCORES = {(1, 0): "model_a", (0, 1): "model_b", (0.5, 0.5): "tie", (0, 0): "tie (bothbad)"}


@FUZZ
@given(
    st.sampled_from(sorted(SCORES)),
    st.sampled_from(
        [
            "Score of Model {i}: {s}",
            "**Score of Model {i}:** {s}",
            "score of model{i} = {s}",
            "SCORE OF MODEL {i}:{s}",
        ]
    ),
    st.from_regex(r"[A-Za-z][A-Za-z ,.;!?()0-9]{0,50}", fullmatch=True),
    st.booleans(),
)
def test_judge_reads_the_scores_it_was_given(pair, line, why, model_2_first):
    lines = [line.format(i=1, s=pair[0]), line.format(i=2, s=pair[1])]
    if model_2_first:
        lines.reverse()
    text = "\n".join(lines) + "\nBrief Explanation: " + why
    winner, justification, valid = verdict(text)
    assert valid and winner == SCORES[pair], text
    assert justification == why.strip()


@FUZZ
@given(st.floats(0, 1).filter(lambda x: x not in (0, 0.5, 1)), st.sampled_from([0, 1, 0.5]))
@example(1e-05, 0)  # regression: "1e-05" was read as 1, a made-up win for model 1
def test_judge_scores_outside_the_table_are_invalid(a, b):
    winner, _, valid = verdict(f"Score of Model 1: {a}\nScore of Model 2: {b}")
    assert winner is None and not valid


@pytest.mark.parametrize("written", ["1e-05", "1/2", "0.5e1", "1.0.0", "10"])
def test_judge_never_reads_part_of_a_number(written):
    """Regression: the score was the longest leading run of digits ("1/2" -> 1)."""
    winner, _, valid = verdict(f"Score of Model 1: {written}\nScore of Model 2: 0")
    assert winner is None and not valid
    assert verdict("Score of Model 1: 1.\nScore of Model 2: 0.")[0] == "model_a"


def test_judge_with_one_score_missing_is_invalid():
    winner, why, valid = verdict("Score of Model 1: 1\nModel 2 was worse.")
    assert (winner, valid) == (None, False) and why == "Model 2 was worse."


# -- 2. outputs never clobber a file --------------------------------------------------------------
def test_refuse_overwrite_rules(tmp_path):
    f = tmp_path / "x.csv"
    refuse_overwrite(f, False)  # missing: fine
    f.write_text("")
    refuse_overwrite(f, False)  # empty: nothing to lose
    f.write_text("data")
    with pytest.raises(LmdError, match=r"x.csv already exists .* add --force"):
        refuse_overwrite(f, False)
    refuse_overwrite(f, True)
    refuse_overwrite("-", False)


@pytest.fixture
def battles(tmp_path):
    return write_csv(
        tmp_path / "battles.csv",
        ["model_a", "model_b", "winner"],
        [["x", "y", "model_a"], ["y", "z", "model_b"], ["x", "z", "tie"]],
    )


@pytest.mark.parametrize(
    "command",
    [
        ["elo", "leaderboard", "{battles}", "-o", "{out}"],
        ["elo", "report", "{battles}", "-o", "{out}"],
        ["elo", "matrix", "{battles}", "-o", "{out}"],
        ["elo", "arrange", "{qa}", "-o", "{out}"],
        ["elo", "convert", "{qa}", "{out}"],
    ],
    ids=["leaderboard", "report", "matrix", "arrange", "convert"],
)
def test_elo_outputs_refuse_to_overwrite_without_force(tmp_path, home, battles, command):
    qa = write_csv(tmp_path / "qa.csv", ["question", "m1", "m2"], [["Why?", "a", "b"]])
    out = tmp_path / "precious.csv"
    out.write_text("a day of work\n")
    args = [a.format(battles=battles, out=out, qa=qa) for a in command]
    r = lmd(home, *args)
    assert r.exit_code == 1, r.output
    assert "precious.csv already exists and would be overwritten" in r.stderr
    assert "--force" in r.stderr and "Traceback" not in r.output
    assert out.read_text() == "a day of work\n"
    r = lmd(home, *args, "--force")
    assert r.exit_code == 0, r.output
    assert out.read_text() != "a day of work\n"
    fresh = tmp_path / "fresh.csv"  # a new file needs no flag
    r = lmd(home, *[a.replace(str(out), str(fresh)) for a in args])
    assert r.exit_code == 0 and fresh.stat().st_size > 0


def test_elo_ablation_consistent_out_refuses_to_overwrite(tmp_path, home, battles):
    out = tmp_path / "kept.csv"
    out.write_text("mine\n")
    r = lmd(home, "elo", "ablation", str(battles), "--consistent-out", str(out))
    assert r.exit_code == 1 and "kept.csv already exists" in r.stderr
    assert out.read_text() == "mine\n"


def selectit_backend(backend):
    backend.handler = lambda body: dist_reply({"4": 1.0})


def test_selectit_select_out_refuses_to_overwrite(tmp_path, home, backend):
    selectit_backend(backend)
    data = write_jsonl(tmp_path / "a.jsonl", alpaca(4))
    best = tmp_path / "best.jsonl"
    best.write_text('{"someone": "else"}\n')
    r = run_cli(home, data, "--top", 0.5, "--select-out", best)
    assert r.exit_code == 1 and "best.jsonl already exists" in r.stderr
    assert best.read_text() == '{"someone": "else"}\n'
    assert not backend.requests  # refused before any scoring
    r = run_cli(home, data, "--top", 0.5, "--select-out", best, "--force")
    assert r.exit_code == 0, r.stderr
    assert len(best.read_text().splitlines()) == 2


@pytest.mark.parametrize(
    "content",
    [b'[{"instruction": "a", "output": "b"}]', b"hello", b"line one\nline two"],
    ids=["json-array-no-newline", "text-no-newline", "two-lines-no-newline"],
)
def test_selectit_output_that_is_not_ours_is_left_whole(tmp_path, home, backend, content):
    """Regression: resuming cut a 'torn last line' off ANY file given as -o before checking
    that it was a scores file, destroying e.g. another dataset saved without a newline."""
    selectit_backend(backend)
    data = write_jsonl(tmp_path / "a.jsonl", alpaca(2))
    other = tmp_path / "other.json"
    other.write_bytes(content)
    r = run_cli(home, data, "-o", other)
    assert r.exit_code == 1, r.output
    assert "is not a scores file" in r.stderr or "is not a score record" in r.stderr
    assert other.read_bytes() == content
    assert not backend.requests


def test_selectit_resume_still_cuts_its_own_torn_line(tmp_path, home, backend):
    selectit_backend(backend)
    data = write_jsonl(tmp_path / "a.jsonl", alpaca(3))
    out = tmp_path / "s.jsonl"
    assert run_cli(home, data, "-o", out).exit_code == 0
    whole = out.read_text().splitlines()
    out.write_text(whole[0] + "\n" + whole[1][:7])  # a crash mid-write of line 2
    backend.clear()
    assert run_cli(home, data, "-o", out).exit_code == 0
    assert out.read_text().splitlines() == whole
    assert len(backend.requests) == 2  # samples 2 and 3 scored again, 1 kept


def test_lm_score_bench_csv_refuses_to_overwrite(tmp_path):
    out = tmp_path / "scores.csv"
    out.write_text("table,id\nold,1\n")
    cmd = [sys.executable, str(ROOT / "benchmarks" / "bench_lm_score.py"), "--company", "--fake"]
    r = subprocess.run([*cmd, "--csv", str(out)], capture_output=True, text=True, timeout=30)
    assert r.returncode == 2
    assert "scores.csv already exists; give another --csv, or add --force" in r.stderr
    assert out.read_text() == "table,id\nold,1\n"


# -- 3. paths over HTTP stay inside the daemon's home ---------------------------------------------
def test_allowed_http_path_rules(tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    (home / "rp.txt").write_text("x")
    outside = tmp_path / "secret.txt"
    outside.write_text("secret")
    (home / "link.txt").symlink_to(outside)
    assert allowed_http_path("rp.txt", home) == (home / "rp.txt").resolve()
    assert allowed_http_path(str(home / "rp.txt"), home) == (home / "rp.txt").resolve()
    from plugins.selectit.prompts import BUILTIN_FILE

    assert allowed_http_path(str(BUILTIN_FILE), home) == BUILTIN_FILE.resolve()  # our own file
    for bad in ["../secret.txt", str(outside), "link.txt", "/etc/passwd", "sub/../../secret.txt"]:
        with pytest.raises(LmdError) as e:
            allowed_http_path(bad, home, "rp_file")
        assert e.value.status == 403 and "inside the daemon's home" in e.value.message
    with pytest.raises(LmdError) as e:
        allowed_http_path("a\x00b", home)
    assert e.value.status == 400


def test_selectit_route_rp_file_cannot_escape_home(make_client, home, backend, tmp_path):
    backend.handler = lambda body: dist_reply({"4": 1.0} if "Inside" in prompt_of(body) else {})
    client = make_client()
    secret = tmp_path / "secret.txt"
    secret.write_text("TOP SECRET prompt line\n")
    (home / "rp.txt").write_text("Inside judge.\n")
    (home / "escape.txt").symlink_to(secret)
    for bad in [
        "../secret.txt",
        str(secret),
        "escape.txt",
        "/etc/passwd",
        "../../../../etc/shadow",
    ]:
        r = client.post("/selectit", json={"record": alpaca(1)[0], "rp_file": bad})
        assert r.status_code == 403, (bad, r.text)
        assert "inside the daemon's home" in r.json()["error"]
    assert not backend.requests  # nothing was read, nothing reached the model
    r = client.post("/selectit", json={"record": alpaca(1)[0], "rp_file": "rp.txt"})
    assert r.status_code == 200, r.text
    assert r.json()["score"] == 4.0
    assert all("Inside judge." in prompt_of(q.body) for q in backend.requests)
    assert not any("TOP SECRET" in prompt_of(q.body) for q in backend.requests)


def test_selectit_route_local_model_cannot_escape_home(make_client, tmp_path):
    client = make_client()
    r = client.post(
        "/selectit",
        json={"record": alpaca(1)[0], "backend": "transformers", "model": str(tmp_path)},
    )
    assert r.status_code == 403 and "model directory" in r.json()["error"]


def test_elo_and_lm_score_routes_take_no_paths(make_client, backend):
    """Their options are names and numbers: a path is just text, never opened."""
    backend.handler = lambda body: "7"
    client = make_client()
    r = client.get("/elo/leaderboard", params={"anchor": "../../etc/passwd=1000"})
    assert r.status_code == 200 and "root:" not in r.text  # no battles: nothing to anchor
    r = client.post(
        "/lm_score", json={"contents": ["/etc/passwd"], "question": "Is it fine?", "cache": False}
    )
    assert r.status_code == 200 and r.json()["score"] == 7
    sent = json.dumps(backend.chat_requests)
    assert "/etc/passwd" in sent and "root:" not in sent  # the words went, not the file


# -- 6. secrets -----------------------------------------------------------------------------------
def test_openai_chat_endpoint_is_protected(make_client, home, backend):
    """Regression: any local program could repoint the endpoint and receive the API key."""
    client = make_client()
    for name in ("openai_chat_endpoint", "lm_score_endpoint", "elo_models_file"):
        r = client.put(f"/settings/{name}", content="http://127.0.0.1:9/v1")
        assert r.status_code == 403, r.text
        assert f"The setting {name} is protected" in r.json()["error"]
        assert client.delete(f"/settings/{name}").status_code == 403
    row = next(
        s for s in client.get("/settings").json()["settings"] if s["name"] == "openai_chat_endpoint"
    )
    assert row["protected"] is True and row["value"] == backend.url
    secured = make_client(token="t" * 20)
    auth = {"Authorization": "Bearer " + "t" * 20}
    r = secured.put("/settings/openai_chat_endpoint", content=backend.url + "/", headers=auth)
    assert r.status_code == 200, r.text


def test_knob_cannot_repoint_the_endpoint(make_client, backend):
    client = make_client()
    r = client.post(
        "/v1", content="knob set openai_chat_endpoint to http://127.0.0.1:9/v1",
        headers={"Accept": "application/json"},
    )  # fmt: skip
    assert "protected" in r.text, r.text
    row = next(
        s for s in client.get("/settings").json()["settings"] if s["name"] == "openai_chat_endpoint"
    )
    assert row["value"] == backend.url


def test_service_install_writes_no_secret_anywhere(tmp_path):
    """The clients plugin writes only the unit; secrets stay in the 0600 env file the unit
    names (and the user creates)."""
    sentinel = "sk-SENTINEL-service-0123456789"
    env = {**os.environ, "OPENAI_API_KEY": sentinel, "LMD_TOKEN": sentinel + "tok"}
    target = tmp_path / "units"
    cmd = [str(ROOT / ".venv" / "bin" / "lmd"), "service", "install", "--platform", "linux"]
    r = subprocess.run([*cmd, "--dir", str(target), "--no-start"], capture_output=True,
                       text=True, timeout=60, env=env)  # fmt: skip
    assert r.returncode == 0, r.stderr
    written = [p for p in target.rglob("*") if p.is_file()]
    assert written
    for p in written:
        assert sentinel not in p.read_text(), p
        assert not stat.S_IMODE(p.stat().st_mode) & 0o022  # not writable by others
    assert "EnvironmentFile=-%h/.config/lmd/env" in (target / "lmd.service").read_text()
    assert sentinel not in r.stdout + r.stderr
    assert json.dumps(sentinel) not in r.stdout


# -- 6. the API key in a full live session across every feature ---------------------------------
SENTINEL = "sk-SENTINEL-features-5e7d1c9a3b"


def test_api_key_never_leaks_across_all_features(home, backend, live, tmp_path):
    """marat, cobol, LM_SCORE, SelectIT, Elo, chat completions and propose in one live
    daemon with a sentinel key, DEBUG logs and a backend that echoes the key in its errors:
    the key is in no response, header, log line or CLI output."""
    import urllib.error
    import urllib.request

    from cobol_helpers import BUILD, FIX_ADD, make_repo
    from conftest import Reply, configure
    from marat_helpers import action, final

    def auth() -> str:
        return backend.requests[-1].headers.get("authorization", "")

    def echoing(body: dict) -> Reply | str:
        text = json.dumps(body)
        if "refuse" in text:
            return Reply(f"Incorrect API key provided: {auth()}", status=401)
        if "break" in text:
            return Reply(f"upstream failed for {auth()}", status=500)
        if body.get("logprobs"):
            return dist_reply({"4": 1.0})
        return "7"

    repo = make_repo(tmp_path / "project")
    configure(home, marat_approval="never", cobol_build_command=BUILD, llm_max_retries=0)
    backend.handler = echoing
    d = live(env={"OPENAI_API_KEY": SENTINEL, "LMD_LOG_LEVEL": "DEBUG"})
    seen: list[str] = []
    statuses: list[tuple[str, int]] = []

    def call(method, path, body=None, headers=None, expect=(200,)):
        data = body if isinstance(body, bytes | None) else json.dumps(body).encode()
        req = urllib.request.Request(d.url + path, data=data, method=method)
        for k, v in {"Accept": "application/json", **(headers or {})}.items():
            req.add_header(k, v)
        if not isinstance(body, bytes | None):
            req.add_header("Content-Type", "application/json")
        try:
            with urllib.request.urlopen(req, timeout=30) as r:
                status, text = r.status, json.dumps(dict(r.headers)) + r.read().decode()
        except urllib.error.HTTPError as e:
            status, text = e.code, json.dumps(dict(e.headers)) + e.read().decode()
        seen.append(text)
        statuses.append((path, status))
        assert status in expect, (method, path, status, text[-500:])
        return text

    # marat: one command run, then a backend echoing the key
    backend.handler = None
    backend.queue(action("ls"), final("Listed."))
    call("POST", "/v1", b"marat list the files", {"X-Session": "m", "X-Cwd": str(repo)})
    backend.handler = echoing
    call("POST", "/v1", b"marat please refuse", {"X-Session": "m2"}, expect=(200, 502))
    assert '"command":"ls"' in call("GET", "/marat/commands").replace(" ", "")
    # cobol: a focus, a rewrite applied, a failing backend
    cwd = {"X-Session": "c", "X-Cwd": str(repo)}
    call("POST", "/v1", b"cobol focus on calc.py lines 1 to 8", cwd)
    backend.handler = None
    backend.queue(FIX_ADD)
    call("POST", "/v1", b"cobol fix the add function", cwd, expect=(200, 400, 409, 422, 502))
    backend.handler = echoing
    call("POST", "/v1", b"cobol now break it", cwd, expect=(200, 400, 409, 422, 502))
    # LM_SCORE, SelectIT, Elo
    call("POST", "/lm_score", {"contents": ["a"], "question": "Is it fine?", "cache": False})
    call("POST", "/lm_score", {"prompt": "break it", "cache": False}, expect=(502, 422))
    call("POST", "/selectit", {"record": alpaca(1)[0], "details": True})
    call("POST", "/selectit", {"instruction": "break", "output": "x"}, expect=(200, 502))
    call("POST", "/elo/battles", {"battles": [{"model_a": "x", "model_b": "y", "winner": "tie"}]})
    call("GET", "/elo/leaderboard?bootstrap=0")
    call("GET", "/elo?bootstrap=0", headers={"Accept": "text/html"})
    # OpenAI-compatible chat, streamed and not, and a refused key; propose
    for stream in (False, True):
        for words in ("hello", "please refuse", "now break"):
            body = {"model": "lmd-dali", "stream": stream,
                    "messages": [{"role": "user", "content": words}]}  # fmt: skip
            session = {"X-Session": f"chat-{stream}-{words.split()[-1]}"}
            want = (200,) if words == "hello" else (502,)
            call("POST", "/v1/chat/completions", body, session, expect=want)
    call("GET", "/v1/models")
    call("POST", "/v1/propose", b"list files", {"Accept": "text/plain"})
    call("POST", "/v1/propose", b"please refuse", {"Accept": "text/plain"}, expect=(502,))
    call("GET", "/settings")
    call("GET", "/history?limit=1000")
    # the key really went out on every call, and the echoing errors really happened
    assert backend.requests and all(
        r.headers.get("authorization") == f"Bearer {SENTINEL}" for r in backend.requests
    )
    assert sum(s >= 500 for _, s in statuses) >= 5, statuses
    env = {**os.environ, "OPENAI_API_KEY": SENTINEL, "LMD_HOME": str(home)}
    for args in (["history", "--json", "--limit", "1000"], ["settings", "list", "--json"],
                 ["marat", "commands", "--json"], ["elo", "leaderboard", "-h"]):  # fmt: skip
        out = subprocess.run([sys.executable, "-m", "daemon.cli", *args], capture_output=True,
                             text=True, env=env, cwd=ROOT, timeout=30)  # fmt: skip
        seen.append(out.stdout + out.stderr)
    d.stop()
    seen.append(d.output())
    assert "DEBUG" in d.output() or "debug" in d.output().lower()
    leaks = [s for s in seen if SENTINEL in s or SENTINEL[3:] in s]
    assert not leaks, leaks[0][:2000]
    assert "[redacted]" in "".join(seen)


@pytest.mark.parametrize("name", ["selectit_rp_file", "marat_start_dir"])
def test_path_settings_are_protected_over_http(make_client, name, tmp_path):
    open_client = make_client()
    r = open_client.put(f"/settings/{name}", content=str(tmp_path))
    assert r.status_code == 403 and f"{name} is protected" in r.json()["error"]
    guarded = make_client(token="tok")
    r = guarded.put(
        f"/settings/{name}", content=str(tmp_path), headers={"Authorization": "Bearer tok"}
    )
    assert r.status_code == 200 and r.json()["value"] == str(tmp_path)
