"""`lmd elo` outputs follow the umask like any other program's (they were all 0600, the
HTML report included, because the atomic write went through tempfile.mkstemp)."""

from __future__ import annotations

import os
import stat

import pytest

from .conftest import lmd, write_csv

COMMANDS = {
    "leaderboard": ["elo", "leaderboard", "{battles}", "-o", "{out}"],
    "report": ["elo", "report", "{battles}", "-o", "{out}"],
    "matrix": ["elo", "matrix", "{battles}", "-o", "{out}"],
    "arrange": ["elo", "arrange", "{qa}", "-o", "{out}"],
    "convert": ["elo", "convert", "{qa}", "{out}"],
}


@pytest.mark.parametrize("name", sorted(COMMANDS))
@pytest.mark.parametrize("umask", [0o022, 0o077, 0o002])
def test_elo_outputs_follow_the_umask(tmp_path, home, name, umask):
    battles = write_csv(
        tmp_path / "battles.csv",
        ["model_a", "model_b", "winner"],
        [["x", "y", "model_a"], ["y", "z", "model_b"], ["x", "z", "tie"]],
    )
    qa = write_csv(tmp_path / "qa.csv", ["question", "m1", "m2"], [["Why?", "a", "b"]])
    out = tmp_path / f"out-{name}.{'html' if name == 'report' else 'csv'}"
    args = [a.format(battles=battles, out=out, qa=qa) for a in COMMANDS[name]]
    old = os.umask(umask)
    try:
        r = lmd(home, *args)
    finally:
        os.umask(old)
    assert r.exit_code == 0, r.output
    assert stat.S_IMODE(out.stat().st_mode) == 0o666 & ~umask
    assert not [p for p in os.listdir(tmp_path) if p.endswith(".tmp")]
