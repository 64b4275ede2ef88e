"""The user's four design documents (../shared/seeds/), run as written.

The daemon README's settings and karma, the LM_SCORE spec's four examples, the SelectIT
scorer's YAML, and the EloBench notes' CSV layouts: each is copied here as the seed writes it
and run through lmd, with the fake backend standing in for the models.
"""

from __future__ import annotations

import json
import math
import sqlite3

import pytest

from daemon.core import karma
from daemon.core.registry import collect
from daemon.core.settings import Settings
from daemon.plugins import get_plugin_manager
from tests.daemons import configure
from tests.fake_backend import Reply
from tests.plugins.elo.conftest import lmd, models_file, read_csv
from tests.plugins.selectit.conftest import dist_reply, prompt_of, read_jsonl, run_cli

# -- the daemon README (seed 001) --------------------------------------------------------------
# "## Configuration": the 18 settings, in the seed's order; the karma section's "eg." values
# are the defaults of the four discounts.
SEED_SETTINGS = {
    "openai_model": "gpt-4.1-mini",  # the seed's gpt-3.5-turbo is retired
    "openai_chat_endpoint": "https://api.openai.com/v1/chat/completions",
    "system": "Ubuntu 22.04",
    "default_prompt": "dali",
    "end_session_after_idle_secs": 300,
    "max_thought_loops": 6,
    "max_tokens": 3500,
    "max_bash_output_len_for_response": 2000,
    "recent_history_limit": 50,
    "default_karma": 1000,
    "instructive_karma": 10000,
    "contextual_karma": 2500,
    "decorative_karma": 500,
    "expiring_id_discount": 3.0,  # ζ, "eg. 3.0"
    "expiring_created_at_discount": 300.0,  # τ, "eg. 300.0"
    "len_discount": 0.01,  # φ, "eg. 0.01"
    "karma_multiplier": 10.0,  # ξ, "eg. 10"
    "min_score_to_include_prompt": 0.00001,
}


def test_the_daemon_readmes_eighteen_settings_live_in_the_settings_table(tmp_path):
    assert len(SEED_SETTINGS) == 18
    home = tmp_path / "fresh-home"
    configure(home)  # a new database: settings.sql applied, nothing changed
    specs = collect(get_plugin_manager()).specs
    rows = dict(sqlite3.connect(home / "lmd.db").execute("SELECT name, value FROM settings"))
    table = Settings(specs, {})
    for name, default in SEED_SETTINGS.items():
        assert specs[name].default == default, name
        assert specs[name].parse(rows[name]) == default, name  # settings.sql put it there
        assert table[name] == default
    # "We use settings table to configure some behavior of the system": change one, see it
    r = lmd(home, "settings", "set", "karma_multiplier", "20")
    assert r.exit_code == 0, r.output
    stored = dict(sqlite3.connect(home / "lmd.db").execute("SELECT name, value FROM settings"))
    assert Settings(specs, stored)["karma_multiplier"] == 20.0


def test_the_karma_sections_order_and_score_equation():
    s = {name: default for name, default in SEED_SETTINGS.items()}
    s["operative_karma"] = collect(get_plugin_manager()).specs["operative_karma"].default
    # "operative; user explicitly promoted it > instructive > default > decorative"
    order = [karma.karma_for(k, s) for k in ("operative", "instructive", "default", "decorative")]
    assert order == sorted(order, reverse=True) and len(set(order)) == 4
    # s_i = (ξ k_i) min(1, 1/(φ|i|)) min(1, 1/(τ t_i)) min(1, 1/(ζ (n - i))), the seed's values
    xi, tau, zeta, phi = 10, 300.0, 3.0, 0.01
    k, length, minutes, distance = 1000, 250, 0.5, 4
    by_hand = (
        (xi * k)
        * min(1, 1 / (phi * length))
        * min(1, 1 / (tau * minutes))
        * min(1, 1 / (zeta * distance))
    )
    p = karma.Params.from_settings(s)
    assert karma.score(k, length, minutes, distance, p) == pytest.approx(by_hand)
    assert by_hand == pytest.approx(10000 * 0.4 / 150 / 12)


def test_promote_reports_the_operative_karma(make_client, backend, home):
    client = make_client()
    backend.queue("noted")
    first = client.post("/v1", content="dali my projects live in ~/code").text
    assert first.strip() == "noted"
    prompts = client.get("/history").json()["prompts"]
    r = client.post(f"/history/{prompts[0]['id']}/promote")
    assert r.json() == {"id": prompts[0]["id"], "kind": "operative", "karma": 25000}
    out = lmd(home, "history", "promote", str(prompts[1]["id"]))
    assert out.stdout == f"Prompt {prompts[1]['id']} is now operative (karma 25000).\n"


# -- the LM_SCORE spec (seed 000) ----------------------------------------------------------------
def seed_prompt(*args: str) -> str:
    """The spec's prompt, as its own code builds it (copied from the seed)."""
    content_parts, question = args[:-1], args[-1]
    content = "\n".join(content_parts)

    prompt = f"""Based on the following content, answer this yes/no question: {question}

Content: 
{content}

Provide a score from 0 to 10 based on your confidence in the answer:
- 10 = strongly yes, definitely true
- 7-9 = probably yes, likely true
- 5-6 = uncertain, could go either way
- 3-4 = probably no, likely false
- 0-2 = strongly no, definitely false

Provide only a single number from 0 to 10.
Score:"""  # noqa: W291 (the seed's space after "Content:")
    return prompt


def test_the_lm_score_specs_four_examples(live, backend):
    from plugins.lm_score.client import LM_SCORE

    # What a good model answers to each, scripted by question.
    answers = {
        "Is this a test?": "10",
        "Are we meeting today at 3:00?": "10",
        "Are we meeting today at 4:00?": "3",
        "Is my invoice greater than $5,000?": "10",
    }
    backend.handler = lambda body: Reply(
        next(a for q, a in answers.items() if q in body["messages"][0]["content"])
    )
    url = live().url
    examples = [
        (("This is a test", "Is this a test?"), 10),
        (("We have a meeting today at 3:00", "Are we meeting today at 3:00?"), 10),
        (("We have a meeting today at 3:00", "Are we meeting today at 4:00?"), 3),
        (("Weekly invoice 12/12/2022", "$14,000", "Is my invoice greater than $5,000?"), 10),
    ]
    for args, expected in examples:
        assert LM_SCORE(*args, url=url) == expected
    sent = [b["messages"] for b in backend.chat_requests]
    assert sent == [[{"role": "user", "content": seed_prompt(*args)}] for args, _ in examples]


# -- the SelectIT scorer (seed 002) --------------------------------------------------------------
SELECTIT_YAML = """\
name: SelectitTokenScorer
model: meta-llama/Llama-3.1-8B
rp_file: scorers/SelectIT/rating_prompt.txt
k: 1
alpha: 0.2
max_length: 2048
batch_size: 8
"""


def test_the_selectit_yaml_runs_unchanged(home, backend, tmp_path, monkeypatch, caplog):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "SelectitTokenScorer.yaml").write_text(SELECTIT_YAML)
    records = [
        {"id": 1, "instruction": "Add 2 and 2.", "output": "4"},
        {"id": 2, "instruction": "Name a prime.", "input": "", "output": "7"},
        {"id": 3, "instruction": "Say hi."},  # no output: the spec's default score
    ]
    data = tmp_path / "alpaca.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in records))
    probs = {"5": 0.5, "4": 0.3, "3": 0.1, "2": 0.06, "1": 0.04}
    backend.handler = lambda body: dist_reply(probs)
    r = run_cli(home, data, "--config", tmp_path / "SelectitTokenScorer.yaml")
    assert r.exit_code == 0, r.stderr
    # the spec's output format, one line per sample, named by the YAML's name
    expected = sum(int(k) * p for k, p in probs.items())  # Σ rating × P(rating), k = 1
    rows = read_jsonl(tmp_path / "alpaca.SelectitTokenScorer.jsonl")
    assert [row["id"] for row in rows] == [1, 2, 3]
    assert [row["score"] for row in rows] == pytest.approx([expected, expected, 3.0])
    # the spec's prompt layout, with the shipped prompt standing in for its rp_file
    bodies = [q.body for q in backend.requests]
    assert {b["model"] for b in bodies} == {"meta-llama/Llama-3.1-8B"}
    # (any request: at concurrency 32 the two samples' requests may arrive in either order)
    layout = "\nInstruction: Add 2 and 2.\nResponse: 4\nThe answer is:"
    assert sum(prompt_of(b).endswith(layout) for b in bodies) == 1
    assert sum("does not exist here; using the shipped" in m for m in caplog.messages) == 1


def test_the_selectit_yaml_on_the_local_backend_says_the_model_is_missing(
    home, tmp_path, monkeypatch
):
    pytest.importorskip("transformers", reason="the transformers backend needs lmd[local]")
    monkeypatch.chdir(tmp_path)
    (tmp_path / "s.yaml").write_text(SELECTIT_YAML)
    data = tmp_path / "a.jsonl"
    data.write_text('{"instruction": "Add 2 and 2.", "output": "4"}\n')
    r = run_cli(home, data, "--config", tmp_path / "s.yaml", "--backend", "transformers")
    assert r.exit_code == 1 and r.stderr.count("\n") == 1
    assert r.stderr.startswith(
        "I could not load the model 'meta-llama/Llama-3.1-8B' (no such directory, and not in "
        "the Hugging Face cache)"
    )


# -- the EloBench notes (seed 003) ---------------------------------------------------------------
# "## arrange battles" / "# Example": the first and last rows the seed shows.
SEED_BATTLES = """\
,model_a,model_b,winner
0,chatglm-6b,koala-13b,model_b
1,oasst-pythia-12b,alpaca-13b,tie
2,koala-13b,oasst-pythia-12b,model_b
3,vicuna-13b,oasst-pythia-12b,model_b
4,vicuna-13b,koala-13b,model_a
25933,palm-2,chatglm-6b,model_a
25934,alpaca-13b,claude-instant-v1,tie
25935,claude-instant-v1,guanaco-33b,model_a
25936,guanaco-33b,koala-13b,model_a
25937,chatglm-6b,wizardlm-13b,tie
"""
SEED_QUESTIONS = [
    "What is the difference between OpenCL and CUDA?",
    "Why did my parent not invite me to their wedding?",
    "Fuji vs. Nikon, which is better?",
    "How to build an arena for chatbots?",
    "When is it today?",
]
# "## tie(all bad) 0 0": the seed's GPT-4 evaluation of two answers that repeat the question.
TIE_ALL_BAD = """Score of Model 1: 0
Score of Model 2: 0
Brief Explanation:
Both models have simply repeated the question instead of providing an answer, which is not \
helpful or relevant. Therefore, neither model deserves a score."""
ALL_COLUMNS = (
    "model_a model_b winner judge turn language tstamp question answer_a answer_b "
    "gpt_4_response gpt_4_justification is_valid"
).split()


def test_the_elobench_battled_pairs_with_winners(tmp_path, home):
    battles = tmp_path / "battled_pairs.csv"
    battles.write_text(SEED_BATTLES)
    board = json.loads(lmd(home, "elo", "leaderboard", str(battles), "--json").stdout)
    assert board["battles"]["chatglm-6b"] == 3 and board["battles"]["koala-13b"] == 4
    assert sum(board["battles"].values()) == 2 * 10
    # the spec's interface: PairwiseRatingEntity.battle(winner)
    from plugins.elo.ratings import PairwiseRatingEntity

    table: dict[str, float] = {}
    for line in SEED_BATTLES.splitlines()[1:]:
        _, a, b, winner = line.split(",")
        PairwiseRatingEntity(a, b, table).battle(winner)
    assert table["claude-instant-v1"] > 1000 > table["chatglm-6b"]


def test_the_elobench_flow_with_every_layout(tmp_path, home, backend, monkeypatch):
    """Question collection -> Q&A (with NaN) -> battle pairs -> judged, all-columns format."""
    models = ["chatglm-6b", "koala-13b", "vicuna-13b"]
    models_file(home / "elo_models.yaml", backend, models)
    configure(home, elo_judge_model="judge-model")

    def handle(body: dict) -> Reply:
        text = body["messages"][-1]["content"]
        if "Score of Model 1" in text:  # the judge: the seed's tie (all bad) on one question
            if "wedding" in text:
                return Reply(TIE_ALL_BAD)
            first = text.split("Model 1's Answer:\n")[1].split("-id")[0]
            return Reply(
                "Score of Model 1: 1\nScore of Model 2: 0\nBrief Explanation: ok."
                if first == "vicuna-13b"
                else "Score of Model 1: 0\nScore of Model 2: 1\nBrief Explanation: ok."
            )
        return Reply(f"{body['model']} answers {text}")

    backend.handler = handle
    # 1. the question collection: a csv file, each row a question (a pandas index column too)
    questions = tmp_path / "questions.csv"
    questions.write_text(
        ",question\n" + "".join(f'{i},"{q}"\n' for i, q in enumerate(SEED_QUESTIONS))
    )
    qa = tmp_path / "qa.csv"
    for m in models[:2]:
        r = lmd(home, "elo", "answer", str(questions), "-m", m, "-o", str(qa))
        assert r.exit_code == 0 and "answered 5 of 5 questions" in r.stderr, r.output
    # 2. Q&A: question, model_1_name, ... with NaN where a model did not answer (pandas' way)
    rows = read_csv(qa)
    assert list(rows[0]) == ["question", *models[:2]]
    seed_qa = tmp_path / "seed_qa.csv"
    seed_qa.write_text(
        ",question," + ",".join(models) + "\n"
        + "".join(
            f'{i},"{r["question"]}","{r["chatglm-6b"]}",'
            + ("NaN" if i in (2, 3) else f'"{r["koala-13b"]}"')
            + (",NaN\n" if i < 4 else ",vicuna-13b-id answers When is it today?\n")
            for i, r in enumerate(rows)
        )
    )  # fmt: skip
    # 3. battle pairs with question: question, model_a, model_b (Cn1 2 per question)
    pairs = tmp_path / "battle_pairs.csv"
    r = lmd(home, "elo", "arrange", str(seed_qa), "-o", str(pairs))
    assert r.exit_code == 0, r.output
    arranged = [(b["question"], b["model_a"], b["model_b"]) for b in read_csv(pairs)]
    assert arranged == [
        (SEED_QUESTIONS[0], "chatglm-6b", "koala-13b"),
        (SEED_QUESTIONS[1], "chatglm-6b", "koala-13b"),
        (SEED_QUESTIONS[4], "chatglm-6b", "koala-13b"),
        (SEED_QUESTIONS[4], "chatglm-6b", "vicuna-13b"),
        (SEED_QUESTIONS[4], "koala-13b", "vicuna-13b"),
    ]  # questions 3 and 4 have one answer each (NaN for koala): no battle
    # the seed's own layout of battle pairs (an index column) judges as well
    seed_pairs = tmp_path / "seed_pairs.csv"
    seed_pairs.write_text(
        ",question,model_a,model_b\n"
        f'0,"{SEED_QUESTIONS[1]}",chatglm-6b,koala-13b\n'
        f'1,"{SEED_QUESTIONS[4]}",vicuna-13b,koala-13b\n'
    )
    # 4. battled pairs with winners, in the all-columns design
    judged = tmp_path / "judged.csv"
    r = lmd(home, "elo", "judge", str(seed_pairs), "--qa", str(qa), "-o", str(judged))
    assert r.exit_code != 0  # vicuna has no answers in qa.csv: said, not guessed
    assert "lacks an answer" in r.stderr
    r = lmd(home, "elo", "judge", str(seed_pairs), "--qa", str(seed_qa), "-o", str(judged))
    assert r.exit_code == 0, r.output
    out = read_csv(judged)
    # the seed's columns, then the second order's verdict (both orders are judged by default)
    both = ["winner_ab", "winner_ba", "gpt_4_response_ba", "gpt_4_justification_ba"]
    assert list(out[0])[: len(ALL_COLUMNS)] == ALL_COLUMNS
    assert sorted(list(out[0])[len(ALL_COLUMNS) :]) == sorted(both)
    wedding, today = out
    assert (wedding["winner"], wedding["is_valid"]) == ("tie (bothbad)", "true")
    assert wedding["gpt_4_justification"].startswith("Both models have simply repeated")
    assert (today["winner"], today["judge"], today["turn"]) == ("model_a", "judge-model", "1")
    assert {wedding["language"], today["language"]} == {"en"}
    assert math.isfinite(float(today["tstamp"]))
    # 5. the elo leaderboard from the all-columns file
    board = json.loads(lmd(home, "elo", "leaderboard", str(judged), "--json").stdout)
    assert board["ratings"]["vicuna-13b"] > board["ratings"]["koala-13b"]
    # the spec's judge interface, with the seed's "tie(all bad)" example
    from plugins.elo.judge import GPT4_PROMPT, gpt_4_completion, verdict

    monkeypatch.setenv("LMD_HOME", str(home))
    question = SEED_QUESTIONS[1]
    gpt4_response = gpt_4_completion(
        GPT4_PROMPT, question=question, model1_answer=question, model2_answer=question
    )
    assert gpt4_response == TIE_ALL_BAD
    assert verdict(gpt4_response)[0] == "tie (bothbad)"
