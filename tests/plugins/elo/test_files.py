"""The Elo files as the seed writes them: question files with or without a header, pandas'
missing-value cells, and the `language` column of judged battles."""

from __future__ import annotations

import pytest

from plugins.elo.files import NA_VALUES, read_qa, read_questions

from .conftest import JUDGE, arena_handler, is_judge_request, lmd, models_file, read_csv, write_csv


def ok(result) -> str:
    assert result.exit_code == 0, result.output
    return result.stderr


# -- question files -------------------------------------------------------------------------
def test_a_question_file_without_a_header_loses_no_question(tmp_path, home, backend):
    """Issue 14: `printf 'What is 2+2?\\nWho are you?\\n' > q.csv; lmd elo answer q.csv` asked
    1 of 1 questions: the first line was taken for a header."""
    backend.handler = arena_handler()
    models_file(home / "elo_models.yaml", backend, ["alpha-7b"])
    q = tmp_path / "q.csv"
    q.write_text("What is 2+2?\nWho are you?\n")
    said = ok(lmd(home, "elo", "answer", str(q), "-m", "alpha-7b", "-o", str(tmp_path / "qa.csv")))
    assert "alpha-7b answered 2 of 2 questions." in said
    assert (
        f"{q} has no `question` header line, so its first line ('What is 2+2?') is read as a "
        "question too." in said
    )
    asked = sorted(b["messages"][-1]["content"] for b in backend.chat_requests)
    assert asked == ["What is 2+2?", "Who are you?"]
    assert [r["question"] for r in read_csv(tmp_path / "qa.csv")] == [
        "What is 2+2?",
        "Who are you?",
    ]


def test_question_file_headers_are_required_or_said(tmp_path):
    notes: list[str] = []

    def questions(text: str) -> list[str]:
        f = tmp_path / "q.csv"
        f.write_text(text, encoding="utf-8")
        notes.clear()
        return read_questions(f, notes.append)

    # the header `question` (any case): silent
    assert questions("question\nWhat is CUDA?\n") == ["What is CUDA?"]
    assert questions("Question\nWhat is CUDA?\n") == ["What is CUDA?"] and notes == []
    # one question alone, no header
    assert questions("What is CUDA?\n") == ["What is CUDA?"]
    assert notes and "is read as a question too" in notes[0]
    # a first line that is no question but no header either: a question, said so
    assert questions("Tell me a joke\nWrite a poem\n") == ["Tell me a joke", "Write a poem"]
    assert "its first line ('Tell me a joke') is read as a question too" in notes[0]
    # a first line that looks like a column name: a header, said so
    assert questions("prompt\nWhat is CUDA?\n") == ["What is CUDA?"]
    assert notes == [
        f"{tmp_path / 'q.csv'}: its first line, 'prompt', is read as the column name, not as a "
        "question; name it `question` to say so."
    ]
    # a pandas index column and a question column: silent
    assert questions(",question\n0,What is CUDA?\n1,Why?\n") == ["What is CUDA?", "Why?"]
    assert notes == []


@pytest.mark.parametrize(
    "text,sentence",
    [
        ("What is 2+2, really?\nWho?\n", "has no header line: its first line is a question"),
        ("prompt,model\nq,a\n", "lacks the column question"),
        ("", "is empty"),
        ("question\n", "has a header but no rows"),
        ("prompt\n", "has a header but no questions"),
        ("What?\nWhat?\n", "line 2 repeats the question of line 1"),
        ("question\nWhat?\nNaN\n", "has an empty question at line 3"),
    ],
)
def test_bad_question_files_get_one_sentence(tmp_path, home, text, sentence):
    q = tmp_path / "q.csv"
    q.write_text(text, encoding="utf-8")
    r = lmd(home, "elo", "answer", str(q), "-m", "alpha-7b", "-o", str(tmp_path / "qa.csv"))
    assert r.exit_code == 1 and sentence in r.stderr, r.stderr
    assert r.stderr.count("\n") == 1 and not (tmp_path / "qa.csv").exists()


# -- missing answers as pandas writes them ----------------------------------------------------
def test_nan_none_and_empty_cells_are_no_answer(tmp_path, home, backend):
    """Issue 14: a literal NaN cell (pandas' missing answer) counted as an answer."""
    qa = tmp_path / "qa.csv"
    qa.write_text(
        ",question,alpha-7b,beta-13b,gamma-70b\n"
        "0,What is CUDA?,a CUDA answer,NaN,another\n"
        "1,Why is the sky blue?,nan,,None\n"
        "2,When is it today?,today,b today,g today\n"
        "3,Who are you?,NULL,#N/A,<NA>\n",
        encoding="utf-8",
    )
    parsed = read_qa(qa)
    assert parsed.answered("What is CUDA?") == ["alpha-7b", "gamma-70b"]
    assert parsed.answered("Why is the sky blue?") == []
    assert parsed.answered("Who are you?") == []
    ok(lmd(home, "elo", "arrange", str(qa), "-o", str(tmp_path / "battles.csv")))
    battles = [
        (r["question"], r["model_a"], r["model_b"]) for r in read_csv(tmp_path / "battles.csv")
    ]
    assert battles == [
        ("What is CUDA?", "alpha-7b", "gamma-70b"),
        ("When is it today?", "alpha-7b", "beta-13b"),
        ("When is it today?", "alpha-7b", "gamma-70b"),
        ("When is it today?", "beta-13b", "gamma-70b"),
    ]
    # `answer` asks a model exactly the questions its NaN cells leave open
    backend.handler = arena_handler()
    models_file(home / "elo_models.yaml", backend, ["beta-13b"])
    said = ok(lmd(home, "elo", "answer", str(qa), "-m", "beta-13b", "-o", str(qa)))
    assert "beta-13b answered 3 of 3 questions." in said
    asked = sorted(b["messages"][-1]["content"] for b in backend.chat_requests)
    assert asked == ["What is CUDA?", "Who are you?", "Why is the sky blue?"]


def test_the_missing_values_are_pandas_defaults():
    # pandas.read_csv's STR_NA_VALUES (pandas is no dependency; the list is small and fixed)
    assert NA_VALUES == {
        "", "#N/A", "#N/A N/A", "#NA", "-1.#IND", "-1.#QNAN", "-NaN", "-nan", "1.#IND",
        "1.#QNAN", "<NA>", "N/A", "NA", "NULL", "NaN", "None", "n/a", "nan", "null",
    }  # fmt: skip


# -- the language column ----------------------------------------------------------------------
def test_judged_battles_carry_the_questions_language(tmp_path, home, backend):
    """Issue 14: the `language` column of the full format was always empty."""
    backend.handler = arena_handler()
    models_file(home / "elo_models.yaml", backend, ["alpha-7b", "beta-13b"])
    questions = [
        "What is the difference between OpenCL and CUDA?",
        "Wie spät ist es in Berlin, und warum?",
        "¿Cuál es la capital de Francia?",
        "2+2?",
    ]
    battles = write_csv(
        tmp_path / "battles.csv",
        ["question", "model_a", "model_b", "answer_a", "answer_b"],
        [[q, "alpha-7b", "beta-13b", "a", "b"] for q in questions],
    )
    out = tmp_path / "judged.csv"
    ok(lmd(home, "elo", "judge", str(battles), "--judge-model", JUDGE, "-o", str(out)))
    assert sum(is_judge_request(b) for b in backend.chat_requests) == 8  # both orders
    by_question = {r["question"]: r["language"] for r in read_csv(out)}
    assert by_question == {questions[0]: "en", questions[1]: "de", questions[2]: "es", "2+2?": ""}
