"""The sample files the docs' examples use ship in examples/, and are what they say they are
(the doc-example tests run the examples on them: tests/doc_examples.py)."""

from __future__ import annotations

import json
import re
import sqlite3

from tests.daemons import ROOT

EXAMPLES = ROOT / "examples"
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")), EXAMPLES / "README.md"]


def test_every_example_file_the_docs_name_ships():
    named = set()
    for page in PAGES:
        named |= set(re.findall(r"\bexamples/([\w.-]+\.\w+)", page.read_text()))
    assert {"company.db", "alpaca.jsonl", "questions.csv", "qa.csv", "selectit.yaml"} <= named
    for name in sorted(named):
        # an output the docs write beside an input is not shipped (examples/.gitignore)
        if ".selectit." in name or ".SelectitTokenScorer." in name:
            continue
        assert (EXAMPLES / name).is_file(), f"the docs name examples/{name}, which is missing"


def test_company_db_is_what_company_sql_makes(tmp_path):
    made = sqlite3.connect(tmp_path / "made.db")
    made.executescript((EXAMPLES / "company.sql").read_text())
    shipped = sqlite3.connect(f"file:{EXAMPLES / 'company.db'}?mode=ro", uri=True)
    assert list(shipped.iterdump()) == list(made.iterdump())
    assert shipped.execute("SELECT count(*) FROM emails").fetchone() == (5,)
    assert shipped.execute("SELECT count(*) FROM invoices").fetchone() == (5,)


def test_the_datasets_read_as_lmd_reads_them():
    from plugins.elo.files import read_qa, read_question_source
    from plugins.selectit.datasets import parse_fields, read_dataset

    records = [json.loads(line) for line in (EXAMPLES / "alpaca.jsonl").read_text().splitlines()]
    assert len(records) == 8 and all({"instruction", "input", "output"} <= set(r) for r in records)
    dataset = read_dataset(EXAMPLES / "alpaca.jsonl", parse_fields(None), False)
    assert len(dataset.samples) == 8 and all(s.valid for s in dataset.samples)
    said: list[str] = []
    questions = read_question_source(EXAMPLES / "questions.csv", said.append)
    assert questions.questions == [
        "What is the capital of France?", "Name a prime number.", "Who wrote Hamlet?"
    ]  # fmt: skip
    qa = read_qa(EXAMPLES / "qa.csv")
    assert qa.questions == questions.questions
    assert qa.models == ["sample-brief", "sample-chatty"]
    assert all(qa.answer(m, q) for m in qa.models for q in qa.questions)
