"""SelectIT in parts: `--shard I/N` runs and `lmd selectit merge`, against the fake backend."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections import Counter

import pytest
from click.testing import CliRunner

from daemon.core.shards import part_of
from plugins.selectit.datasets import id_key
from tests.daemons import ROOT

from .conftest import alpaca, asked_tasks, read_jsonl, run_cli, task_handler, write_jsonl

pytestmark = pytest.mark.slow  # a thousand and more scored samples


def merge(*args):
    from daemon.cli import cli

    return CliRunner().invoke(cli, ["selectit", "merge", *map(str, args)])


def dataset(n: int) -> list[dict]:
    """Alpaca records; even ones carry a string id, odd ones use their line number; every
    97th lacks its output (scored 3.0 without a request)."""
    rows = alpaca(n)
    for i, row in enumerate(rows, start=1):
        if i % 2 == 0:
            row["id"] = f"rec-{i}"
        if i % 97 == 0:
            del row["output"]
    return rows


def parts_of(tmp_path, n: int) -> list:
    return [tmp_path / f"part{i}.jsonl" for i in range(1, n + 1)]


def test_parts_of_600_samples_merge_to_the_single_run_byte_for_byte(home, backend, tmp_path):
    backend.handler = task_handler
    records = dataset(600)
    data = write_jsonl(tmp_path / "data.jsonl", records)
    whole = tmp_path / "whole.jsonl"
    r = run_cli(home, data, "-o", whole, "--details")
    assert r.exit_code == 0, r.stderr
    valid = sum("output" in rec for rec in records)
    assert len(backend.requests) == valid
    backend.clear()
    parts = parts_of(tmp_path, 3)
    for i, part in enumerate(parts, start=1):
        r = run_cli(home, data, "--shard", f"{i}/3", "-o", part, "--details")
        assert r.exit_code == 0, r.stderr
        assert f": part {i}/3: " in r.stderr
    # every valid sample was asked for exactly once over the three parts
    assert Counter(asked_tasks(backend)) == Counter(
        i for i, rec in enumerate(records, start=1) if "output" in rec
    )
    sizes = [len(read_jsonl(p)) for p in parts]
    assert sum(sizes) == 600 and all(150 < s < 250 for s in sizes), sizes
    for i, part in enumerate(parts, start=1):  # a part holds its own ids, in dataset order
        keys = [id_key(row["id"]) for row in read_jsonl(part)]
        assert {part_of(k, 3) for k in keys} == {i}
    merged = tmp_path / "merged.jsonl"
    r = merge(merged, *reversed(parts))  # any order of the parts
    assert r.exit_code == 0, r.stderr
    assert "merged 3 parts, 600 scores" in r.stderr
    assert merged.read_bytes() == whole.read_bytes()
    meta = tmp_path / "merged.jsonl.meta.json"
    assert meta.read_bytes() == (tmp_path / "whole.jsonl.meta.json").read_bytes()
    assert json.loads(meta.read_text())["shard"] == "all"
    # the merged file is an ordinary scores file: resuming it asks nothing
    backend.clear()
    assert run_cli(home, data, "-o", merged, "--details").exit_code == 0
    assert backend.requests == [] and merged.read_bytes() == whole.read_bytes()


def test_a_part_killed_with_sigkill_resumes_without_asking_again(home, backend, tmp_path):
    backend.handler = task_handler
    data = write_jsonl(tmp_path / "data.jsonl", alpaca(80))
    reference = tmp_path / "ref.jsonl"
    assert run_cli(home, data, "-o", reference).exit_code == 0
    mine = {n for n in range(1, 81) if part_of(id_key(n), 2) == 1}
    backend.latency = 0.03
    part1, part2 = parts_of(tmp_path, 2)
    env = {**os.environ, "LMD_HOME": str(home)}
    cmd = [sys.executable, "-m", "daemon.cli", "selectit", str(data), "--shard", "1/2"]
    proc = subprocess.Popen(
        [*cmd, "-o", str(part1), "--concurrency", "2"], env=env, cwd=ROOT, stderr=subprocess.PIPE
    )
    deadline = time.time() + 30
    while time.time() < deadline and (not part1.exists() or part1.read_text().count("\n") < 6):
        time.sleep(0.02)
    proc.send_signal(signal.SIGKILL)
    proc.communicate(timeout=20)
    assert proc.returncode == -signal.SIGKILL
    complete = part1.read_text().split("\n")[:-1]  # a torn last line is not written
    written = {json.loads(line)["id"] for line in complete}
    assert 5 <= len(written) < len(mine) and written <= mine
    backend.latency = 0
    backend.clear()
    r = run_cli(home, data, "--shard", "1/2", "-o", part1)
    assert r.exit_code == 0, r.stderr
    asked = Counter(asked_tasks(backend))
    # nothing written before the kill was asked again; everything else of the part was (a
    # request cut by the kill may still arrive late, so at most twice)
    assert not set(asked) & written
    assert set(asked) == mine - written and max(asked.values()) <= 2, asked
    assert run_cli(home, data, "--shard", "2/2", "-o", part2).exit_code == 0
    merged = tmp_path / "merged.jsonl"
    r = merge(merged, part1, part2)
    assert r.exit_code == 0, r.stderr
    assert merged.read_bytes() == reference.read_bytes()


@pytest.fixture
def three_parts(home, backend, tmp_path):
    """A 40-sample dataset scored in three parts."""
    backend.handler = task_handler
    data = write_jsonl(tmp_path / "data.jsonl", alpaca(40))
    parts = parts_of(tmp_path, 3)
    for i, part in enumerate(parts, start=1):
        assert run_cli(home, data, "--shard", f"{i}/3", "-o", part).exit_code == 0
    return data, parts


def refused(result, *sentences: str) -> None:
    assert result.exit_code == 1, result.output
    assert "Traceback" not in result.output
    for s in sentences:
        assert s in result.stderr, result.stderr
    assert result.stderr.count("\n") == 1, result.stderr  # one sentence


def test_merge_refuses_a_missing_part(three_parts, tmp_path):
    _, (p1, p2, p3) = three_parts
    out = tmp_path / "merged.jsonl"
    refused(merge(out, p1, p3), "Part 2/3 is missing; run `lmd selectit DATASET --shard I/3`")
    assert not out.exists()
    refused(merge(out, p1), "Parts 2/3 and 3/3 are missing")


def test_merge_refuses_a_duplicated_part(three_parts, tmp_path):
    _, (p1, p2, p3) = three_parts
    copy = tmp_path / "copy.jsonl"
    shutil.copy(p2, copy)
    shutil.copy(str(p2) + ".meta.json", str(copy) + ".meta.json")
    out = tmp_path / "merged.jsonl"
    first_id = read_jsonl(p2)[0]["id"]
    refused(
        merge(out, p1, p2, copy, p3),
        f"Part 2/3 is given twice ({p2} and {copy}; both hold the ids {first_id},",
        "give each part once",
    )
    assert not out.exists()


def test_merge_names_the_ids_no_part_holds(three_parts, tmp_path):
    _, (p1, p2, p3) = three_parts
    lines = p2.read_text().splitlines(keepends=True)
    lost = json.loads(lines[1])["id"]
    p2.write_text(lines[0] + "".join(lines[2:]))
    out = tmp_path / "merged.jsonl"
    refused(
        merge(out, p1, p2, p3),
        f"1 ids are in no part (first: {lost}); run part 2/3 ({p2}) again",
    )
    assert not out.exists()


def test_merge_refuses_a_torn_part_and_leaves_it_whole(three_parts, tmp_path):
    _, (p1, p2, p3) = three_parts
    with p3.open("a") as fh:
        fh.write('{"id": 9')
    before = p3.read_bytes()
    refused(merge(tmp_path / "m.jsonl", p1, p2, p3), f"The part {p3} ends in a cut-off line")
    assert p3.read_bytes() == before  # merge only reads the parts


def test_merge_refuses_files_that_are_not_parts(three_parts, home, tmp_path):
    data, (p1, p2, p3) = three_parts
    out = tmp_path / "m.jsonl"
    stranger = tmp_path / "notes.jsonl"
    stranger.write_text('{"id": 1, "score": 2}\n')
    refused(merge(out, p1, p2, stranger), f"{stranger} is not the output of a part")
    shutil.copy(str(p3) + ".meta.json", str(stranger) + ".meta.json")
    stranger.write_text("hello\n")
    refused(merge(out, p1, p2, stranger), f"Line 1 of the part {stranger} is not a score record")
    refused(merge(out, p1, p2, tmp_path / "nope.jsonl"), "There is no part")
    refused(merge(p1, p1, p2, p3), f"{p1} is one of the parts; merge into another file")
    whole = tmp_path / "whole.jsonl"
    assert run_cli(home, data, "-o", whole).exit_code == 0
    refused(merge(out, p1, p2, whole), f"{whole} is the output of a whole run, not of a part")
    out.write_text("precious\n")
    refused(merge(out, p1, p2, p3), f"{out} already exists and would be overwritten")
    assert out.read_text() == "precious\n"
    assert merge(out, p1, p2, p3, "--force").exit_code == 0


def test_merge_refuses_parts_of_different_runs(three_parts, home, tmp_path):
    data, (p1, p2, p3) = three_parts
    other = tmp_path / "k2.jsonl"
    assert run_cli(home, data, "--shard", "3/3", "-o", other, "--k", "2").exit_code == 0
    refused(
        merge(tmp_path / "m.jsonl", p1, p2, other),
        "are parts of different runs (k 2 in k2.jsonl, 1 in part1.jsonl",
    )
    halves = tmp_path / "half.jsonl"
    assert run_cli(home, data, "--shard", "1/2", "-o", halves).exit_code == 0
    refused(
        merge(tmp_path / "m.jsonl", p1, p2, halves),
        "is part 1/2 and",
        "they split the data differently",
    )


def test_merge_checks_the_dataset_it_reads(three_parts, tmp_path):
    data, parts = three_parts
    moved = tmp_path / "moved.jsonl"
    shutil.move(data, moved)
    out = tmp_path / "m.jsonl"
    refused(merge(out, *parts), f"The dataset the parts read, {data}, is gone; give it with")
    r = merge(out, *parts, "--dataset", moved)
    assert r.exit_code == 0, r.stderr
    assert [row["id"] for row in read_jsonl(out)] == list(range(1, 41))
    write_jsonl(moved, alpaca(41))
    refused(
        merge(tmp_path / "m2.jsonl", *parts, "--dataset", moved),
        "is not the dataset the parts read (its content differs)",
    )


def test_merge_selects_the_best_fraction(three_parts, tmp_path):
    data, parts = three_parts
    best = tmp_path / "best.jsonl"
    r = merge(tmp_path / "m.jsonl", *parts, "--top", "0.25", "--select-out", best)
    assert r.exit_code == 0, r.stderr
    kept = read_jsonl(best)
    assert len(kept) == 10
    # task n scores 4 + (n % 5 + 1) / 10: best first, ties in dataset order
    tasks = [int(k["instruction"].split()[2].rstrip(".")) for k in kept]
    assert tasks == [4, 9, 14, 19, 24, 29, 34, 39, 3, 8]
    refused(merge(tmp_path / "m3.jsonl", *parts, "--top", "2", "--select-out", best), "--top")


@pytest.mark.parametrize(
    "spec,sentence",
    [
        ("3/2", "--shard 3/2 asks for part 3 of only 2; I runs from 1 to N."),
        ("0/0", "--shard 0/0 has no parts; N must be at least 1"),
        ("a/b", "--shard a/b is not a part: write I/N with whole numbers"),
        ("0/4", "--shard 0/4: parts are numbered from 1 to 4 (for a Slurm job array use"),
        ("1/2/3", "is not a part"),
    ],
)
def test_bad_shards_are_one_sentence_before_any_call(home, backend, tmp_path, spec, sentence):
    data = write_jsonl(tmp_path / "data.jsonl", alpaca(3))
    refused(run_cli(home, data, "--shard", spec), sentence)
    assert backend.requests == [] and not list(tmp_path.glob("data.selectit*"))


def test_a_part_resumes_only_as_itself(home, backend, tmp_path):
    backend.handler = task_handler
    data = write_jsonl(tmp_path / "data.jsonl", alpaca(12))
    r = run_cli(home, data, "--shard", "2/4")
    assert r.exit_code == 0, r.stderr
    part = tmp_path / "data.selectit.2-of-4.jsonl"  # the default name of a part
    assert part.exists()
    backend.clear()
    refused(
        run_cli(home, data, "--shard", "3/4", "-o", part),
        "was started with other settings (shard '2/4' then, '3/4' now)",
    )
    refused(run_cli(home, data, "-o", part), "(shard '2/4' then, 'all' now)")
    whole = tmp_path / "whole.jsonl"
    assert run_cli(home, data, "-o", whole).exit_code == 0
    backend.clear()
    refused(run_cli(home, data, "--shard", "1/4", "-o", whole), "(shard 'all' then, '1/4' now)")
    assert backend.requests == []
    refused(
        run_cli(home, data, "--shard", "1/4", "--top", "0.5", "--select-out", tmp_path / "b"),
        "--top selects from the whole dataset; give it to `lmd selectit merge`",
    )


def test_selectit_help_lists_score_and_merge(home):
    from daemon.cli import cli

    r = CliRunner().invoke(cli, ["selectit", "--help"])
    assert r.exit_code == 0 and "merge" in r.output and "score" in r.output
    r = CliRunner().invoke(cli, ["selectit", "merge", "--help"])
    assert r.exit_code == 0 and "--dataset" in r.output
