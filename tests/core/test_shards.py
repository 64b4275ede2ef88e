"""Shards of batch jobs (`--shard I/N`) and the `lmd` group saying an LmdError once."""

from __future__ import annotations

from collections import Counter

import click
import pytest
from click.testing import CliRunner
from hypothesis import given
from hypothesis import strategies as st

from daemon.cli import LmdGroup
from daemon.core.errors import LmdError
from daemon.core.shards import Shard, describe_parts, parse_shard, part_of


@pytest.mark.parametrize(
    "text,shard", [("1/1", Shard(1, 1)), ("2/8", Shard(2, 8)), (" 3 / 4 ", Shard(3, 4))]
)
def test_parse_shard(text, shard):
    assert parse_shard(text) == shard and str(shard) == text.replace(" ", "")
    assert parse_shard(None) is None


@pytest.mark.parametrize(
    "text,sentence",
    [
        ("3/2", "--shard 3/2 asks for part 3 of only 2; I runs from 1 to N."),
        ("0/0", "--shard 0/0 has no parts; N must be at least 1, e.g. --shard 1/4."),
        ("a/b", "--shard a/b is not a part: write I/N with whole numbers"),
        ("0/4", "--shard 0/4: parts are numbered from 1 to 4 (for a Slurm job array use --a"),
        ("-1/4", "is not a part"),
        ("1/2000000", "too many parts"),
        ("", "is not a part"),
    ],
)
def test_bad_shards_are_one_sentence(text, sentence):
    with pytest.raises(LmdError) as e:
        parse_shard(text)
    assert sentence in e.value.message and e.value.message.count(". ") <= 1


def test_parts_never_change():
    """Parts of a run may be computed on different machines and lmd versions: pinned."""
    assert [part_of('"rec-1"', 4), part_of("1", 4), part_of("What is CUDA?", 7)] == [1, 2, 1]


@given(st.sets(st.text(max_size=30), max_size=60), st.integers(1, 12))
def test_parts_cover_every_item_exactly_once(ids, n):
    owners = {i: [k for k in range(1, n + 1) if Shard(k, n).owns(i)] for i in ids}
    assert all(len(parts) == 1 for parts in owners.values())
    assert all(1 <= part_of(i, n) <= n for i in ids)


def test_parts_are_balanced():
    counts = Counter(part_of(str(i), 8) for i in range(16000))
    assert set(counts) == set(range(1, 9))
    assert all(1800 < c < 2200 for c in counts.values()), counts


def test_describe_parts():
    assert describe_parts([3], 4) == "part 3/4"
    assert describe_parts([4, 2, 1], 4) == "parts 1/4, 2/4 and 4/4"


def test_the_lmd_group_says_an_lmd_error_once_for_every_command():
    group = LmdGroup(name="lmd")
    group._plugins_loaded = True  # a bare group: no plugins

    @group.command()
    def broken() -> None:
        raise LmdError("The thing is missing; give it with --thing.")

    @group.group()
    def nested() -> None:
        pass

    @nested.command()
    def deeper() -> None:
        raise LmdError("Deeper trouble; try again.")

    @group.command()
    def crash() -> None:
        raise ValueError("a bug")

    runner = CliRunner()
    r = runner.invoke(group, ["broken"])
    assert r.exit_code == 1 and r.stderr == "The thing is missing; give it with --thing.\n"
    assert r.stdout == ""
    r = runner.invoke(group, ["nested", "deeper"])
    assert r.exit_code == 1 and r.stderr == "Deeper trouble; try again.\n"
    r = runner.invoke(group, ["crash"])  # bugs are not dressed up as sentences
    assert isinstance(r.exception, ValueError)
    assert isinstance(group, click.Group)
