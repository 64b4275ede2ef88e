"""The Elo arena end to end: the spec's three flows with the fake backend as the models and
the judge, the ablation, human labels, the leaderboard, the report and the daemon routes."""

from __future__ import annotations

import json
from itertools import combinations
from pathlib import Path

import pytest

from tests.daemons import SHARED

from .conftest import (
    JUDGE,
    answer_text,
    arena_handler,
    is_judge_request,
    lmd,
    models_file,
    read_csv,
    write_csv,
)

MODELS = ["alpha-7b", "beta-13b", "gamma-70b"]
QUESTIONS = ["What is CUDA?", "Why is the sky blue?", "Fuji vs. Nikon, which is better?"]
ARENA = SHARED / "data" / "arena" / "arena_2023_english_singleturn_battles.csv"
FULL = (
    "model_a model_b winner judge turn language tstamp question answer_a answer_b "
    "gpt_4_response gpt_4_justification is_valid"
).split()


@pytest.fixture
def arena(tmp_path, home, backend):
    """A working directory with questions, a models file, and the fake arena backend."""
    backend.handler = arena_handler()
    write_csv(tmp_path / "questions.csv", ["question"], [[q] for q in QUESTIONS])
    models_file(home / "elo_models.yaml", backend, [*MODELS, "delta-1t"])
    return tmp_path


def ok(result) -> str:
    assert result.exit_code == 0, result.output
    return result.stdout


def setup_dataset(d: Path, home: Path, *judge_flags: str) -> None:
    """The spec's 'set up a dataset' steps up to judged battles."""
    for m in MODELS:
        ok(lmd(home, "elo", "answer", str(d / "questions.csv"), "-m", m, "-o", str(d / "qa.csv")))
    ok(lmd(home, "elo", "arrange", str(d / "qa.csv"), "-o", str(d / "battles.csv")))
    ok(
        lmd(
            home,
            "elo",
            "judge",
            str(d / "battles.csv"),
            "--qa",
            str(d / "qa.csv"),
            "--judge-model",
            JUDGE,
            "-o",
            str(d / "judged.csv"),
            *judge_flags,
        )
    )


def test_set_up_a_dataset_flow(arena, home, backend):
    d = arena
    setup_dataset(d, home)
    answers = [b for b in backend.chat_requests if not is_judge_request(b)]
    # each model was asked each question once, with its own model id and the bare question
    assert sorted((b["model"], b["messages"][-1]["content"]) for b in answers) == sorted(
        (f"{m}-id", q) for m in MODELS for q in QUESTIONS
    )
    qa = read_csv(d / "qa.csv")
    assert list(qa[0]) == ["question", *MODELS]
    assert qa[1]["beta-13b"] == answer_text("beta-13b-id", QUESTIONS[1])

    battles = read_csv(d / "battles.csv")
    expected = [(q, a, b) for q in QUESTIONS for a, b in combinations(MODELS, 2)]
    assert [(r["question"], r["model_a"], r["model_b"]) for r in battles] == expected
    assert list(battles[0]) == ["question", "model_a", "model_b"]

    judged = read_csv(d / "judged.csv")
    assert list(judged[0])[: len(FULL)] == FULL
    assert len(judged) == 9
    by_pair = {(r["question"], r["model_a"], r["model_b"]): r for r in judged}
    row = by_pair[(QUESTIONS[0], "alpha-7b", "gamma-70b")]
    assert row["winner"] == "model_b" and row["is_valid"] == "true" and row["judge"] == JUDGE
    assert row["gpt_4_justification"] == "alpha-7b vs gamma-70b."
    assert row["gpt_4_response"].startswith("Score of Model 1: 0\n")
    assert float(row["tstamp"]) > 1.6e9
    # the judge saw the question and both answers, in both orders, at temperature 0
    judge_calls = [b for b in backend.chat_requests if is_judge_request(b)]
    assert len(judge_calls) == 18 and all(b["model"] == f"{JUDGE}-id" for b in judge_calls)
    prompts = [
        b["messages"][0]["content"]
        for b in judge_calls
        if "alpha-7b-id answers: What is CUDA?" in b["messages"][0]["content"]
        and "gamma-70b-id answers: What is CUDA?" in b["messages"][0]["content"]
    ]
    # the two orders go out together, so either may reach the backend first
    first = sorted(
        p.index("alpha-7b-id answers") < p.index("gamma-70b-id answers") for p in prompts
    )
    assert first == [False, True]
    assert all("Question:\nWhat is CUDA?" in p for p in prompts)
    assert all(b["temperature"] == 0 for b in judge_calls)

    board = json.loads(ok(lmd(home, "elo", "leaderboard", str(d / "judged.csv"), "--json")))
    assert board["method"] == "bt"
    assert board["battles"] == {m: 6 for m in MODELS}
    ranking = sorted(board["ratings"], key=board["ratings"].get, reverse=True)
    assert ranking == ["gamma-70b", "beta-13b", "alpha-7b"]
    assert sum(board["ratings"].values()) == pytest.approx(3000, abs=1e-6)
    # the report, with the spec's data-exploration plots from the Q&A file
    ok(
        lmd(
            home,
            "elo",
            "report",
            str(d / "judged.csv"),
            "--qa",
            str(d / "qa.csv"),
            "-o",
            str(d / "report.html"),
        )
    )
    page = (d / "report.html").read_text()
    assert page.count("<svg") == 8
    assert "<title>3 models: 3 questions</title>" in page  # every question answered by all 3
    assert "<title>gamma-70b: 3 answers</title>" in page


def test_add_a_model_flow(arena, home, backend):
    d = arena
    setup_dataset(d, home)
    backend.clear()
    qa = str(d / "qa.csv")
    ok(lmd(home, "elo", "answer", qa, "-m", "delta-1t", "-o", qa))
    asked = backend.chat_requests
    assert sorted(b["messages"][-1]["content"] for b in asked) == sorted(QUESTIONS)
    assert {b["model"] for b in asked} == {"delta-1t-id"}
    # only the new model's battles are arranged; the judged ones count as arranged
    ok(
        lmd(
            home,
            "elo",
            "arrange",
            qa,
            "--existing",
            str(d / "judged.csv"),
            "-o",
            str(d / "new.csv"),
        )
    )
    new = read_csv(d / "new.csv")
    assert len(new) == 3 * 3
    assert all("delta-1t" in (r["model_a"], r["model_b"]) for r in new)
    backend.clear()
    ok(
        lmd(
            home,
            "elo",
            "judge",
            str(d / "new.csv"),
            "--qa",
            qa,
            "--judge-model",
            JUDGE,
            "-o",
            str(d / "judged.csv"),
        )
    )
    assert len(backend.chat_requests) == 18  # 9 new battles in both orders, nothing twice
    assert len(read_csv(d / "judged.csv")) == 18
    board = json.loads(ok(lmd(home, "elo", "leaderboard", str(d / "judged.csv"), "--json")))
    assert max(board["ratings"], key=board["ratings"].get) == "delta-1t"


def test_add_a_question_flow(arena, home, backend):
    d = arena
    setup_dataset(d, home)
    backend.clear()
    new_q = "How to build an arena for chatbots?"
    write_csv(d / "questions.csv", ["question"], [[q] for q in [*QUESTIONS, new_q]])
    qa = str(d / "qa.csv")
    for m in MODELS:
        ok(lmd(home, "elo", "answer", str(d / "questions.csv"), "-m", m, "-o", qa))
    assert [b["messages"][-1]["content"] for b in backend.chat_requests] == [new_q] * 3
    assert read_csv(d / "qa.csv")[3]["question"] == new_q
    ok(
        lmd(
            home,
            "elo",
            "arrange",
            qa,
            "--existing",
            str(d / "battles.csv"),
            "-o",
            str(d / "new.csv"),
        )
    )
    new = read_csv(d / "new.csv")
    assert [(r["question"], r["model_a"], r["model_b"]) for r in new] == [
        (new_q, a, b) for a, b in combinations(MODELS, 2)
    ]
    backend.clear()
    ok(
        lmd(
            home,
            "elo",
            "judge",
            str(d / "new.csv"),
            "--qa",
            qa,
            "--judge-model",
            JUDGE,
            "-o",
            str(d / "judged.csv"),
        )
    )
    assert len(backend.chat_requests) == 6  # 3 new battles, both orders
    assert len(read_csv(d / "judged.csv")) == 12


def test_judge_resumes_and_keeps_invalid_verdicts(arena, home, backend):
    d = arena
    setup_dataset(d, home)
    # a second run judges nothing
    backend.clear()
    ok(
        lmd(
            home,
            "elo",
            "judge",
            str(d / "battles.csv"),
            "--qa",
            str(d / "qa.csv"),
            "--judge-model",
            JUDGE,
            "-o",
            str(d / "judged.csv"),
        )
    )
    assert [b for b in backend.chat_requests if is_judge_request(b)] == []
    # a judge reply without scores is kept raw and marked invalid
    backend.handler = arena_handler(broken_judge=True)
    ok(
        lmd(
            home,
            "elo",
            "judge",
            str(d / "battles.csv"),
            "--qa",
            str(d / "qa.csv"),
            "--judge-model",
            "delta-1t",
            "-o",
            str(d / "bad.csv"),
        )
    )
    rows = read_csv(d / "bad.csv")
    assert {r["is_valid"] for r in rows} == {"false"} and {r["winner"] for r in rows} == {""}
    assert rows[0]["gpt_4_response"] == "Both answers have merits; I cannot decide."
    result = lmd(home, "elo", "leaderboard", str(d / "bad.csv"))
    assert result.exit_code == 1
    assert "no usable battles" in result.stderr


def test_judge_failure_keeps_what_was_done(arena, home, backend):
    from tests.fake_backend import Reply

    d = arena
    for m in MODELS:
        ok(lmd(home, "elo", "answer", str(d / "questions.csv"), "-m", m, "-o", str(d / "qa.csv")))
    ok(lmd(home, "elo", "arrange", str(d / "qa.csv"), "-o", str(d / "battles.csv")))
    good = arena_handler()
    backend.handler = lambda body: (
        Reply("down", status=500) if "Fuji" in body["messages"][0]["content"] else good(body)
    )
    result = lmd(
        home,
        "elo",
        "judge",
        str(d / "battles.csv"),
        "--qa",
        str(d / "qa.csv"),
        "--judge-model",
        JUDGE,
        "-o",
        str(d / "judged.csv"),
    )
    assert result.exit_code == 1
    assert "3 battles were not judged" in result.stderr and "run the same command" in result.stderr
    assert len(read_csv(d / "judged.csv")) == 6
    backend.handler = good
    backend.clear()
    ok(
        lmd(
            home,
            "elo",
            "judge",
            str(d / "battles.csv"),
            "--qa",
            str(d / "qa.csv"),
            "--judge-model",
            JUDGE,
            "-o",
            str(d / "judged.csv"),
        )
    )
    assert len(backend.chat_requests) == 6  # the 3 failed battles, both orders
    assert len(read_csv(d / "judged.csv")) == 9


def test_answer_failure_is_resumable(arena, home, backend):
    from tests.fake_backend import Reply

    d = arena
    backend.handler = lambda body: (
        Reply("oops", status=503)
        if "sky" in body["messages"][-1]["content"]
        else Reply(f"answer to {body['messages'][-1]['content']}")
    )
    result = lmd(
        home, "elo", "answer", str(d / "questions.csv"), "-m", "alpha-7b", "-o", str(d / "qa.csv")
    )
    assert result.exit_code == 1 and "1 question got no answer" in result.stderr
    rows = read_csv(d / "qa.csv")
    assert [r["alpha-7b"] != "" for r in rows] == [True, False, True]
    backend.handler = arena_handler()
    backend.clear()
    ok(
        lmd(
            home,
            "elo",
            "answer",
            str(d / "questions.csv"),
            "-m",
            "alpha-7b",
            "-o",
            str(d / "qa.csv"),
        )
    )
    assert [b["messages"][-1]["content"] for b in backend.chat_requests] == [QUESTIONS[1]]


def test_ablation_measures_position_bias(arena, home, backend):
    d = arena
    backend.handler = arena_handler(first_position_bias=True)
    setup_dataset(d, home, "--one-order")  # ablation is for files judged in one order
    backend.clear()
    out = ok(
        lmd(
            home,
            "elo",
            "ablation",
            str(d / "judged.csv"),
            "--json",
            "-o",
            str(d / "swapped.csv"),
            "--consistent-out",
            str(d / "both.csv"),
        )
    )
    report = json.loads(out)[JUDGE]
    # with gamma-70b in a battle the judge picks Model 1: gamma (always B) loses in the
    # original order and wins swapped, so its 6 battles disagree; alpha vs beta agree
    assert report["battles"] == 9
    assert report["agreement"] == pytest.approx(3 / 9)
    # position 1 won: originals 6 (gamma battles) + 0 (beta as B); swapped 6 + 3
    assert report["decisive_verdicts"] == 18
    assert report["first_position_wins"] == pytest.approx(15 / 18)
    judge_calls = [b for b in backend.chat_requests if is_judge_request(b)]
    assert len(judge_calls) == 9
    # swapped: B's answer is shown as Model 1
    p = next(
        b["messages"][0]["content"]
        for b in judge_calls
        if "alpha-7b-id answers: What is CUDA?" in b["messages"][0]["content"]
        and "beta-13b-id" in b["messages"][0]["content"]
    )
    assert p.index("beta-13b-id answers") < p.index("alpha-7b-id answers")
    both = read_csv(d / "both.csv")
    assert len(both) == 3 and all(
        {r["model_a"], r["model_b"]} == {"alpha-7b", "beta-13b"} for r in both
    )
    # resumable: a second run asks nothing
    backend.clear()
    ok(lmd(home, "elo", "ablation", str(d / "judged.csv"), "-o", str(d / "swapped.csv")))
    assert backend.chat_requests == []


def test_label_in_the_terminal(arena, home):
    d = arena
    write_csv(
        d / "qa.csv",
        ["question", *MODELS],
        [[q, *(answer_text(m, q) for m in MODELS)] for q in QUESTIONS],
    )
    ok(lmd(home, "elo", "arrange", str(d / "qa.csv"), "-o", str(d / "battles.csv")))
    args = (
        "elo",
        "label",
        str(d / "battles.csv"),
        "--qa",
        str(d / "qa.csv"),
        "-o",
        str(d / "labels.csv"),
        "--name",
        "ann",
    )
    # a, b, (bad key) t, x, skip, quit
    out = ok(lmd(home, *args, input="a\nb\nz\nt\nx\ns\nq\n"))
    assert "Question:\nWhat is CUDA?" in out and "--- Answer A ---" in out
    assert "alpha-7b answers: What is CUDA?" in out
    assert "Press one of a, b, t, x, s or q ('z' is not one of them)." in out
    assert "Labelled 4, skipped 1; 5 left for next time." in out
    rows = read_csv(d / "labels.csv")
    assert [r["winner"] for r in rows] == ["model_a", "model_b", "tie", "tie (bothbad)"]
    assert {r["judge"] for r in rows} == {"ann"} and {r["is_valid"] for r in rows} == {"true"}
    # resumable: the next session starts at the skipped battle (the 5th), ends at EOF
    out = ok(lmd(home, *args, input="b\nb\nb\nb\nb\n"))
    assert "Battle 1 of 5" in out and "Labelled 5, skipped 0; 0 left" in out
    rows = read_csv(d / "labels.csv")
    assert len(rows) == 9
    board = json.loads(ok(lmd(home, "elo", "leaderboard", str(d / "labels.csv"), "--json")))
    assert set(board["ratings"]) == set(MODELS)


def test_leaderboard_formats_and_bootstrap(tmp_path, home):
    f = write_csv(
        tmp_path / "b.csv",
        ["model_a", "model_b", "winner"],
        [["x", "y", "model_a"]] * 6
        + [["y", "x", "model_a"]] * 2
        + [["x", "z", "tie"], ["z", "y", "tie (bothbad)"], ["z", "x", "model_b"]],
    )
    board = json.loads(
        ok(lmd(home, "elo", "leaderboard", str(f), "--json", "--bootstrap", "200", "--seed", "3"))
    )
    assert set(board) == {"method", "ratings", "battles", "median", "ci", "rank"}
    assert board["battles"] == {"x": 10, "y": 9, "z": 3}
    for m in board["ratings"]:
        lo, hi = board["ci"][m]
        assert lo <= board["median"][m] <= hi
    again = json.loads(
        ok(lmd(home, "elo", "leaderboard", str(f), "--json", "--bootstrap", "200", "--seed", "3"))
    )
    assert again == board  # seeded: same numbers
    online = json.loads(
        ok(lmd(home, "elo", "leaderboard", str(f), "--method", "online", "--json", "--k", "32"))
    )
    assert set(online) == {"method", "ratings", "battles"} and online["method"] == "online"
    assert sum(online["ratings"].values()) == pytest.approx(3000)
    table = ok(lmd(home, "elo", "leaderboard", str(f)))
    assert table.splitlines()[1].split() == ["Rank", "Model", "Rating", "Battles", "Win", "rate"]
    assert table.splitlines()[3].split()[:2] == ["1", "x"]
    md = ok(lmd(home, "elo", "leaderboard", str(f), "--format", "markdown", "--bootstrap", "50"))
    assert md.splitlines()[0].startswith("| Rank | Model | Rating | Median | 95% CI |")
    csv_out = ok(lmd(home, "elo", "leaderboard", str(f), "--format", "csv"))
    assert csv_out.splitlines()[0] == "rank,model,rating,battles,win_rate"
    anchored = json.loads(
        ok(lmd(home, "elo", "leaderboard", str(f), "--json", "--anchor", "z=1500"))
    )
    assert anchored["ratings"]["z"] == pytest.approx(1500)
    gap = board["ratings"]["x"] - board["ratings"]["z"]
    assert anchored["ratings"]["x"] - anchored["ratings"]["z"] == pytest.approx(gap)


def test_settings_change_the_defaults(tmp_path, home):
    from tests.daemons import configure

    f = write_csv(
        tmp_path / "b.csv",
        ["model_a", "model_b", "winner"],
        [["x", "y", "model_a"], ["x", "y", "model_b"], ["x", "y", "model_a"]],
    )
    configure(home, elo_method="online", elo_k=16, elo_initial=1500)
    board = json.loads(ok(lmd(home, "elo", "leaderboard", str(f), "--json")))
    assert board["method"] == "online"
    # hand computed: +8, then e_a = 1/(1+10^(-16/400)) -> ..., K = 16
    e1 = 1 / (1 + 10 ** (-16 / 400))
    ra = 1508 + 16 * (0 - e1)
    e2 = 1 / (1 + 10 ** ((3000 - 2 * ra) / 400))
    assert board["ratings"]["x"] == pytest.approx(ra + 16 * (1 - e2))


def test_report_page_is_self_contained(arena, home, tmp_path):
    f = write_csv(
        tmp_path / "b.csv",
        ["model_a", "model_b", "winner", "question"],
        [
            ["x", "y", "model_a", "q1"],
            ["y", "z", "tie", "q1"],
            ["z", "x", "model_b", "q2"],
            ["x", "<b>y</b>", "model_b", "q2"],
        ],
    )
    ok(lmd(home, "elo", "report", str(f), "-o", str(tmp_path / "r.html"), "--bootstrap", "100"))
    page = (tmp_path / "r.html").read_text()
    assert page.count("<svg") == 8
    assert "src=" not in page and "https://" not in page and "<link" not in page
    assert "&lt;b&gt;y&lt;/b&gt;" in page and "<b>y</b>" not in page  # names are escaped
    assert "Answers per model" in page and "Battles per model" in page
    assert "Predicted against observed" in page and "Online Elo ratings over" in page


# -- the daemon's routes ------------------------------------------------------------------------
def test_routes_store_and_show_battles(client):
    assert client.get("/elo/leaderboard").json()["ratings"] == {}
    assert "No battles yet" in client.get("/elo").text
    battles = [
        {"model_a": "x", "model_b": "y", "winner": "model_a", "question": "q"},
        {"model_a": "y", "model_b": "x", "winner": "tie(all bad)"},
        {"model_a": "x", "model_b": "y", "winner": "model_b", "is_valid": "false"},
    ]
    r = client.post("/elo/battles", json={"battles": battles})
    assert r.status_code == 200 and r.json() == {"added": 2, "skipped_invalid": 1}
    board = client.get("/elo/leaderboard?bootstrap=50&seed=1").json()
    assert board["battles"] == {"x": 2, "y": 2}
    assert set(board) == {"method", "ratings", "battles", "median", "ci", "rank"}
    online = client.get("/elo/leaderboard?method=online&bootstrap=0").json()
    assert online["ratings"]["x"] == pytest.approx(1002 + 4 * (0.5 - 1 / (1 + 10 ** (-4 / 400))))
    page = client.get("/elo?bootstrap=20")
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    assert page.text.count("<svg") == 8
    # a new battle shows at once (the cached leaderboard is dropped)
    assert client.post("/elo/battles", json=[{"model_a": "z", "model_b": "x", "winner": "tie"}])
    assert client.get("/elo/leaderboard?bootstrap=50&seed=1").json()["battles"]["z"] == 1


@pytest.mark.parametrize(
    "body, sentence",
    [
        ({"battles": []}, "Send {"),
        ([1], "Battle 1 is not an object"),
        (
            {"battles": [{"model_a": "x", "model_b": "y", "winner": "maybe"}]},
            "The request has 1 row with an unknown winner (first 'maybe' at battle 1); use "
            "model_a, model_b, tie or tie (bothbad).",
        ),
        (
            {
                "battles": [{"model_a": "x", "model_b": "y", "winner": "tie"}] * 2
                + [{"model_a": "x", "model_b": "x", "winner": "tie"}]
            },
            "The request has a model battling itself at battle 3; fix it.",
        ),
        ({"battles": [{"model_a": "x", "winner": "tie"}]}, "lacks the column model_b"),
    ],
)
def test_routes_refuse_bad_battles(client, body, sentence):
    r = client.post("/elo/battles", json=body)
    assert r.status_code == 400 and sentence in r.json()["error"]
    assert client.get("/elo/leaderboard").json()["ratings"] == {}  # nothing stored


def test_routes_refuse_bad_queries(client):
    assert "not valid JSON" in client.post("/elo/battles", content=b"{").json()["error"]
    assert client.get("/elo/leaderboard?method=magic").status_code == 400
    assert (
        client.get("/elo/leaderboard?bootstrap=lots")
        .json()["error"]
        .startswith("The query parameter bootstrap")
    )


def test_import_then_serve(tmp_path, home, make_client):
    f = write_csv(
        tmp_path / "b.csv",
        ["", "model_a", "model_b", "winner"],
        [[0, "x", "y", "model_a"], [1, "y", "z", "model_b"]],
    )
    assert "Imported 2 battles." in ok(lmd(home, "elo", "import", str(f)))
    board = make_client().get("/elo/leaderboard?bootstrap=0").json()
    assert board["battles"] == {"x": 1, "y": 2, "z": 1}


# -- bad input ----------------------------------------------------------------------------------
def fails(result, *sentences: str) -> None:
    assert result.exit_code == 1, result.output
    assert "Traceback" not in result.output
    for s in sentences:
        assert s in result.stderr, result.stderr


def test_unknown_winners_stop_unless_skipped(tmp_path, home):
    f = write_csv(
        tmp_path / "b.csv",
        ["model_a", "model_b", "winner"],
        [["x", "y", "model_a"], ["x", "y", "A wins"], ["y", "x", "tie"], ["y", "x", ""]],
    )
    out = tmp_path / "out.txt"
    out.write_text("keep me")
    fails(
        lmd(home, "elo", "leaderboard", str(f), "-o", str(out), "--force"),
        "has 2 rows with an unknown winner (first 'A wins' at line 3, 5)",
        "--skip-invalid",
    )
    assert out.read_text() == "keep me"  # nothing written half-way
    result = lmd(home, "elo", "leaderboard", str(f), "--skip-invalid", "--json")
    assert result.exit_code == 0 and "Left out 2 rows" in result.stderr
    assert json.loads(result.stdout)["battles"] == {"x": 2, "y": 2}


@pytest.mark.parametrize(
    "header, rows, sentence",
    [
        (["model_a", "model_b", "winner"], [["x", "x", "tie"]], "model battling itself at line 2"),
        (["model_a", "winner"], [["x", "tie"]], "lacks the column model_b"),
        (["model_a", "model_b", "winner"], [], "has a header but no rows"),
    ],
)
def test_bad_battle_files(tmp_path, home, header, rows, sentence):
    f = write_csv(tmp_path / "b.csv", header, rows)
    fails(lmd(home, "elo", "leaderboard", str(f)), sentence)


def test_empty_and_non_utf8_files(tmp_path, home):
    (tmp_path / "empty.csv").write_bytes(b"")
    fails(lmd(home, "elo", "leaderboard", str(tmp_path / "empty.csv")), "is empty")
    (tmp_path / "latin.csv").write_bytes(b"model_a,model_b,winner\nx,y,model_a\ncaf\xe9,y,tie\n")
    fails(
        lmd(home, "elo", "leaderboard", str(tmp_path / "latin.csv")),
        "is not UTF-8 (bad byte at line 3); save it as UTF-8",
    )
    fails(lmd(home, "elo", "leaderboard", str(tmp_path / "nope.csv")), "There is no file")


def test_bad_qa_files(tmp_path, home):
    one = write_csv(tmp_path / "one.csv", ["question", "alpha"], [["q1", "a"], ["q2", "b"]])
    out = tmp_path / "battles.csv"
    fails(
        lmd(home, "elo", "arrange", str(one), "-o", str(out)),
        "has 1 model column; battles need answers from at least two models",
    )
    assert not out.exists()
    dup = write_csv(
        tmp_path / "dup.csv",
        ["question", "a", "b"],
        [["q1", "x", "y"], ["q2", "x", "y"], ["q1", "x", "y"]],
    )
    fails(lmd(home, "elo", "arrange", str(dup)), "line 4 repeats the question of line 2")
    fails(lmd(home, "elo", "answer", str(dup), "-m", "a", "-o", str(out)), "repeats the question")
    noq = write_csv(tmp_path / "noq.csv", ["prompt", "a"], [["q1", "x"]])
    fails(lmd(home, "elo", "arrange", str(noq)), "lacks the column question")


def test_bad_options(tmp_path, home):
    f = write_csv(tmp_path / "b.csv", ["model_a", "model_b", "winner"], [["x", "y", "tie"]])
    fails(lmd(home, "elo", "leaderboard", str(f), "--anchor", "nobody=1"), "has no battles here")
    fails(lmd(home, "elo", "leaderboard", str(f), "--anchor", "x"), "must look like MODEL=RATING")
    fails(lmd(home, "elo", "leaderboard", str(f), "--base", "1"), "the base above 1")
    battles = write_csv(tmp_path / "arr.csv", ["question", "model_a", "model_b"], [["q", "x", "y"]])
    fails(
        lmd(home, "elo", "judge", str(battles), "-o", str(tmp_path / "j.csv")),
        "has no answer_a/answer_b columns; give the Q&A file with --qa",
    )
    qa = write_csv(tmp_path / "qa.csv", ["question", "x", "y"], [["q", "ans", ""]])
    fails(
        lmd(home, "elo", "judge", str(battles), "--qa", str(qa), "-o", str(tmp_path / "j.csv")),
        "1 battle lacks an answer (first at line 2",
    )


def test_qa_json_round_trip(tmp_path, home):
    qa = write_csv(tmp_path / "qa.csv", ["question", "a", "b"], [["q1", "x", ""], ["q2", "", "y"]])
    ok(lmd(home, "elo", "convert", str(qa), str(tmp_path / "qa.json")))
    data = json.loads((tmp_path / "qa.json").read_text())
    assert data == {"q1": [{"model": "a", "answer": "x"}], "q2": [{"model": "b", "answer": "y"}]}
    ok(lmd(home, "elo", "convert", str(tmp_path / "qa.json"), str(tmp_path / "back.csv")))
    assert read_csv(tmp_path / "back.csv") == read_csv(qa)
    (tmp_path / "bad.json").write_text('{"q": "not a list"}')
    fails(
        lmd(home, "elo", "convert", str(tmp_path / "bad.json"), str(tmp_path / "x.csv")),
        "must be a list of",
    )


# -- the shared arena file --------------------------------------------------------------------
@pytest.mark.skipif(not ARENA.exists(), reason="../shared (the arena battles file) is absent")
def test_shared_arena_file(home):
    board = json.loads(
        ok(
            lmd(
                home,
                "elo",
                "leaderboard",
                str(ARENA),
                "--json",
                "--bootstrap",
                "100",
                "--seed",
                "0",
            )
        )
    )
    assert len(board["ratings"]) == 20
    assert sum(board["battles"].values()) == 2 * 25938
    top = sorted(board["ratings"], key=board["ratings"].get, reverse=True)
    assert top[:2] == ["gpt-4", "claude-v1"] and top[-1] == "llama-13b"
    assert board["rank"]["gpt-4"] == 1
    assert sum(board["ratings"].values()) / 20 == pytest.approx(1000)
    online = json.loads(
        ok(lmd(home, "elo", "leaderboard", str(ARENA), "--method", "online", "--json"))
    )
    assert sum(online["ratings"].values()) == pytest.approx(20000)
    assert max(online["ratings"], key=online["ratings"].get) == "gpt-4"


def test_arrange_shuffle_and_order_from(tmp_path, home):
    models = ["a", "b", "c", "d"]
    qa = write_csv(
        tmp_path / "qa.csv",
        ["question", *models],
        [["q1", "1", "2", "3", "4"], ["q2", "1", "", "3", "4"]],
    )
    ok(lmd(home, "elo", "arrange", str(qa), "-o", str(tmp_path / "plain.csv")))
    plain = [tuple(r.values()) for r in read_csv(tmp_path / "plain.csv")]
    assert plain == [("q1", a, b) for a, b in combinations(models, 2)] + [
        ("q2", "a", "c"),
        ("q2", "a", "d"),
        ("q2", "c", "d"),
    ]
    args = ("elo", "arrange", str(qa), "--shuffle", "--seed", "5", "-o")
    ok(lmd(home, *args, str(tmp_path / "s1.csv")))
    ok(lmd(home, *args, str(tmp_path / "s2.csv")))
    s1 = [tuple(r.values()) for r in read_csv(tmp_path / "s1.csv")]
    assert s1 == [tuple(r.values()) for r in read_csv(tmp_path / "s2.csv")]
    assert s1 != plain and sorted(s1) == sorted(plain)
    # someone else's order (and orientation) is reproduced; their unknown battle is reported
    theirs = write_csv(
        tmp_path / "theirs.csv",
        ["question", "model_a", "model_b"],
        [["q2", "d", "c"], ["q1", "b", "a"], ["q9", "x", "y"]],
    )
    result = lmd(
        home, "elo", "arrange", str(qa), "--order-from", str(theirs), "-o", str(tmp_path / "o.csv")
    )
    assert result.exit_code == 0 and "1 battle of" in result.stderr and "line 4" in result.stderr
    got = [tuple(r.values()) for r in read_csv(tmp_path / "o.csv")]
    assert got[:2] == [("q2", "d", "c"), ("q1", "b", "a")] and len(got) == 9
    assert got[2:] == [p for p in plain if p not in (("q2", "c", "d"), ("q1", "a", "b"))]


def test_answers_run_concurrently_and_accept_json_qa(tmp_path, home, backend):
    backend.handler = arena_handler()
    backend.latency = 0.3
    models_file(home / "elo_models.yaml", backend, MODELS)
    qs = {f"question {i}?": [] for i in range(8)}
    (tmp_path / "q.json").write_text(json.dumps(qs))
    ok(
        lmd(
            home,
            "elo",
            "answer",
            str(tmp_path / "q.json"),
            "-m",
            "alpha-7b",
            "-j",
            "8",
            "-o",
            str(tmp_path / "qa.json"),
        )
    )
    assert backend.max_active >= 4  # not one after another
    data = json.loads((tmp_path / "qa.json").read_text())
    assert data["question 3?"] == [
        {"model": "alpha-7b", "answer": "alpha-7b-id answers: question 3?"}
    ]


def test_leaderboard_and_matrix_csv_neutralise_model_names(tmp_path, home):
    """Model names come from models' configs and battle files: in lmd's CSV a formula name is
    text (a leading apostrophe), never a cell a spreadsheet runs."""
    import csv
    import io

    evil, at = '=HYPERLINK("http://x","y")', "@SUM(A1)"
    f = write_csv(
        tmp_path / "b.csv",
        ["model_a", "model_b", "winner"],
        [[evil, "y", "model_a"], ["y", evil, "tie"], [at, "y", "model_b"], [evil, at, "model_a"]],
    )
    for args in (["leaderboard", str(f), "--format", "csv"], ["matrix", str(f)]):
        cells = [c for row in csv.reader(io.StringIO(ok(lmd(home, "elo", *args)))) for c in row]
        assert "'" + evil in cells and "'" + at in cells, args
        assert not any(c.startswith(("=", "+", "@", "\t", "\r")) for c in cells), args


def test_matrices_as_csv(tmp_path, home):
    f = write_csv(
        tmp_path / "b.csv",
        ["model_a", "model_b", "winner"],
        [["x", "y", "model_a"], ["y", "x", "tie"], ["x", "z", "model_b"]],
    )
    rate = ok(lmd(home, "elo", "matrix", str(f))).splitlines()
    order = rate[0].split(",")[1:]
    assert sorted(order) == ["x", "y", "z"]
    rows = {
        line.split(",")[0]: dict(zip(order, line.split(",")[1:], strict=True)) for line in rate[1:]
    }
    assert rows["x"]["y"] == "0.7500" and rows["y"]["x"] == "0.2500" and rows["y"]["z"] == ""
    counts = ok(lmd(home, "elo", "matrix", str(f), "--kind", "battles")).splitlines()
    assert counts[1:] == [
        ",".join(
            [m] + [str({("x", "y"): 2, ("x", "z"): 1}.get(tuple(sorted((m, o))), 0)) for o in order]
        )
        for m in order
    ]
    predicted = ok(lmd(home, "elo", "matrix", str(f), "--kind", "predicted", "--method", "online"))
    cells = [line.split(",")[1:] for line in predicted.splitlines()[1:]]
    assert float(cells[0][1]) + float(cells[1][0]) == pytest.approx(1, abs=1e-3)


def test_custom_prompt_and_its_bad_forms(arena, home, backend):
    d = arena
    write_csv(
        d / "qa.csv",
        ["question", *MODELS],
        [[q, *(answer_text(m, q) for m in MODELS)] for q in QUESTIONS[:1]],
    )
    ok(lmd(home, "elo", "arrange", str(d / "qa.csv"), "-o", str(d / "b.csv")))
    prompt = d / "prompt.txt"
    prompt.write_text("Q: {question}\n1: {model1_answer}\n2: {model2_answer}\nScore of Model 1?")
    backend.handler = lambda body: "Score of Model 1: 1\nScore of Model 2: 0"
    ok(
        lmd(
            home,
            "elo",
            "judge",
            str(d / "b.csv"),
            "--qa",
            str(d / "qa.csv"),
            "--prompt-file",
            str(prompt),
            "--judge-model",
            JUDGE,
            "-o",
            str(d / "j.csv"),
        )
    )
    sent = sorted(b["messages"][0]["content"] for b in backend.chat_requests)
    assert sent[0] == (
        "Q: What is CUDA?\n1: alpha-7b answers: What is CUDA?\n"
        "2: beta-13b answers: What is CUDA?\nScore of Model 1?"
    )
    # "Model 1" wins in both orders: the orders disagree on every battle, so all are ties
    assert {r["winner"] for r in read_csv(d / "j.csv")} == {"tie"}
    prompt.write_text("Judge {question} please")
    fails(
        lmd(
            home,
            "elo",
            "judge",
            str(d / "b.csv"),
            "--qa",
            str(d / "qa.csv"),
            "--prompt-file",
            str(prompt),
            "-o",
            str(d / "j2.csv"),
        ),
        "lacks {model1_answer}",
    )
    selfish = write_csv(
        d / "self.csv", ["question", "model_a", "model_b"], [[QUESTIONS[0], "alpha-7b", "alpha-7b"]]
    )
    fails(
        lmd(home, "elo", "judge", str(selfish), "--qa", str(d / "qa.csv"), "-o", str(d / "j3.csv")),
        "model battling itself at line 2",
    )
    (home / "elo_models.yaml").write_text("judge-model: [not, a, mapping\n")
    fails(
        lmd(
            home,
            "elo",
            "judge",
            str(d / "b.csv"),
            "--qa",
            str(d / "qa.csv"),
            "--judge-model",
            JUDGE,
            "-o",
            str(d / "j4.csv"),
        ),
        "cannot be read",
    )
    assert not (d / "j2.csv").exists() and not (d / "j4.csv").exists()


def test_ablation_of_a_plain_battles_file(arena, home, backend):
    d = arena
    f = write_csv(
        d / "b.csv",
        ["question", "model_a", "model_b", "winner", "answer_a", "answer_b"],
        [
            ["q", "alpha-7b", "beta-13b", "model_b", "alpha-7b answers: q", "beta-13b answers: q"],
            [
                "q",
                "beta-13b",
                "gamma-70b",
                "tie(all bad)",
                "beta-13b answers: q",
                "gamma-70b answers: q",
            ],
        ],
    )
    out = ok(lmd(home, "elo", "ablation", str(f), "--judge-model", JUDGE, "--json"))
    report = json.loads(out)
    # the judge of the rows is unnamed: they are grouped under "?"
    assert report["?"]["battles"] == 2 and report["?"]["agreement"] == pytest.approx(0.5)


def test_label_reads_single_keys_on_a_terminal(tmp_path, home):
    """On a real terminal (a pty) each key counts at once, without Enter."""
    import os
    import pty
    import subprocess
    import sys
    import time

    from tests.daemons import ROOT

    write_csv(
        tmp_path / "qa.csv",
        ["question", "m1", "m2"],
        [["What is 2+2?", "four", "five"], ["Capital of France?", "Paris", "Lyon"]],
    )
    ok(lmd(home, "elo", "arrange", str(tmp_path / "qa.csv"), "-o", str(tmp_path / "b.csv")))
    master, slave = pty.openpty()
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "daemon.cli",
            "elo",
            "label",
            str(tmp_path / "b.csv"),
            "--qa",
            str(tmp_path / "qa.csv"),
            "-o",
            str(tmp_path / "labels.csv"),
            "--name",
            "tty",
        ],
        stdin=slave,
        stdout=slave,
        stderr=slave,
        cwd=ROOT,
        env={**os.environ, "LMD_HOME": str(home)},
    )
    os.close(slave)
    seen = b""

    def read_until(text: bytes, timeout: float = 60.0) -> None:
        import select

        nonlocal seen
        deadline = time.monotonic() + timeout
        while text not in seen and time.monotonic() < deadline:
            ready, _, _ = select.select([master], [], [], 0.5)  # never block past the deadline
            if not ready:
                continue
            try:
                seen += os.read(master, 4096)
            except OSError:
                break
        assert text in seen, seen.decode(errors="replace")

    try:
        read_until(b"[q] quit")
        os.write(master, b"b")  # no Enter: a terminal key press
        read_until(b"Battle 2 of 2")
        os.write(master, b"x")
        read_until(b"Labelled 2")
        assert proc.wait(timeout=20) == 0
    finally:
        proc.kill()
        os.close(master)
    rows = read_csv(tmp_path / "labels.csv")
    assert [(r["question"], r["winner"], r["judge"]) for r in rows] == [
        ("What is 2+2?", "model_b", "tty"),
        ("Capital of France?", "tie (bothbad)", "tty"),
    ]
