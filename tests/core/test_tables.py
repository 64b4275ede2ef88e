"""Formula cells are neutralised in every CSV lmd writes and read back unchanged."""

from __future__ import annotations

import csv

import pytest
from hypothesis import given
from hypothesis import strategies as st

from daemon.core.tables import csv_cell, csv_value

HOSTILE = ['=HYPERLINK("http://x","y")', "+cmd|' /C calc'!A0", "-2+3", "@SUM(A1)", "\tx", "\rx"]


@pytest.mark.parametrize("value", HOSTILE)
def test_formulas_become_text(value):
    assert csv_cell(value) == "'" + value
    assert csv_value(csv_cell(value)) == value


@pytest.mark.parametrize("value", ["-2.5", "+3", "1e-5", "model-a", "tie (bothbad)", 7, None])
def test_numbers_and_ordinary_cells_stay(value):
    assert csv_cell(value) == value


@given(st.text())
def test_every_text_round_trips_and_never_starts_a_formula(text):
    cell = csv_cell(text)
    assert csv_value(cell) == text
    bare = cell if cell[:1] != "'" else ""
    if bare[:1] in ("=", "+", "-", "@", "\t", "\r"):
        float(bare)  # only a number may start so


def test_elo_files_round_trip_hostile_answers_and_names(tmp_path):
    from plugins.elo.files import read_table, write_table

    rows = [{"question": v, "model_a": v, "answer_a": v} for v in HOSTILE]
    path = tmp_path / "qa.csv"
    write_table(path, ["question", "model_a", "answer_a"], rows)
    with open(path, newline="", encoding="utf-8") as f:
        raw = list(csv.reader(f))
    assert all(not cell.startswith(("=", "+", "@", "\t", "\r")) for r in raw[1:] for cell in r)
    assert all(cell.startswith("'") for r in raw[1:] for cell in r)
    back = read_table(path, "qa.csv").rows
    assert [r["answer_a"] for r in back] == HOSTILE
