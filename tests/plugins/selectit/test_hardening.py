"""SelectIT outputs never clobber a file; its HTTP paths stay inside LMD_HOME/files."""

from __future__ import annotations

import json

import pytest

from .conftest import alpaca, dist_reply, prompt_of, run_cli, write_jsonl


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


def test_selectit_route_rp_file_cannot_escape_home(make_client, home, backend, tmp_path):
    backend.handler = lambda body: dist_reply({"4": 1.0} if "Inside" in prompt_of(body) else {})
    client = make_client()
    secret = tmp_path / "secret.txt"
    secret.write_text("TOP SECRET prompt line\n")
    (home / "files").mkdir()
    (home / "files" / "rp.txt").write_text("Inside judge.\n")
    (home / "files" / "escape.txt").symlink_to(secret)
    (home / "token").write_text("tok-" + "x" * 40 + "\n")  # as a live daemon keeps it
    token = (home / "token").read_text().strip()
    for bad in [
        "../secret.txt",
        str(secret),
        "escape.txt",
        "/etc/passwd",
        "../../../../etc/shadow",
        "../token",  # the daemon's own files: its token, its database
        str(home / "token"),
        "../lmd.db",
    ]:
        r = client.post("/selectit", json={"record": alpaca(1)[0], "rp_file": bad})
        assert r.status_code == 403, (bad, r.text)
        assert "must be a file in" in r.json()["error"] and token not in r.text
    assert not backend.requests  # nothing was read, nothing reached the model
    r = client.post("/selectit", json={"record": alpaca(1)[0], "rp_file": "rp.txt"})
    assert r.status_code == 200, r.text
    assert r.json()["score"] == 4.0
    assert all("Inside judge." in prompt_of(q.body) for q in backend.requests)
    assert not any("TOP SECRET" in prompt_of(q.body) for q in backend.requests)


def test_selectit_route_local_model_cannot_escape_home(make_client, tmp_path):
    client = make_client(token="hardening-token")
    body = {"record": alpaca(1)[0], "backend": "transformers", "model": str(tmp_path)}
    mine = {"Authorization": "Bearer hardening-token"}
    r = client.post("/selectit", json=body, headers=mine)
    assert r.status_code == 403 and "model directory" in r.json()["error"]
    # without the token (a program, an agent) it may not pick the model at all
    for headers in ({}, {**mine, "X-Lmd-Agent": "1"}):
        r = client.post("/selectit", json=body, headers=headers)
        assert r.status_code == 403
        assert r.json()["error"].startswith('The option "backend" picks the model that rates')


def test_selectit_route_reads_a_named_file_only_in_the_files_folder(make_client, home, backend):
    """{"file": NAME} (what `lmd mcp serve`'s selectit tool sends): the daemon reads the file
    under the rule for every path a request names, so an agent cannot make it read another
    project's file, a key or its own token and send it to the model."""
    backend.handler = lambda body: dist_reply({"4": 1.0})
    client = make_client()
    outside = home.parent / "other-project"
    outside.mkdir()
    secret = outside / "secret.jsonl"
    secret.write_text(json.dumps({"instruction": "TOP SECRET", "output": "key"}) + "\n")
    files = home / "files"
    files.mkdir()
    write_jsonl(files / "records.jsonl", alpaca(3))
    (files / "escape.jsonl").symlink_to(secret)
    (files / "token.json").symlink_to(home / "token")
    for bad in [str(secret), "../other-project/secret.jsonl", "escape.jsonl", "token.json",
                "/etc/passwd", "~/.ssh/id_rsa.json", "../lmd.db"]:  # fmt: skip
        r = client.post("/selectit", json={"file": bad})
        assert r.status_code == 403, (bad, r.text)
        assert r.json()["error"].startswith("Over HTTP the file of records must be a file in")
    assert not backend.requests  # nothing was read, nothing reached the model
    r = client.post("/selectit", json={"file": "records.jsonl", "details": True})
    assert r.status_code == 200, r.text
    assert [x["score"] for x in r.json()["results"]] == [4.0, 4.0, 4.0]
    assert len(backend.requests) == 3  # one rating prompt each
    assert not any("TOP SECRET" in prompt_of(q.body) for q in backend.requests)
    # bad inputs: one sentence each, nothing scored
    backend.clear()
    for body, status, sentence in [
        ({"file": "records.jsonl", "max_records": 2}, 400, "That is 3 records; this request "
         "scores at most 2 (lmd selectit scores any number)."),
        ({"file": "records.jsonl", "max_records": 0}, 400, '"max_records" must be a whole'),
        ({"file": "records.jsonl", "records": alpaca(1)}, 400, 'Send the records or a "file"'),
        ({"file": 7}, 400, "The file of records must be a file name as text."),
        ({"file": "missing.jsonl"}, 400, "The dataset "),
    ]:  # fmt: skip
        r = client.post("/selectit", json=body)
        assert (r.status_code, r.json()["error"][: len(sentence)]) == (status, sentence), body
    client.put("/settings/max_body_bytes", content="64")
    r = client.post("/selectit", json={"file": "records.jsonl"})
    size = (files / "records.jsonl").stat().st_size
    assert r.status_code == 413 and r.json()["error"] == (
        f"records.jsonl is {size} bytes, more than a request may carry (max_body_bytes, 64); "
        "score it with lmd selectit."
    )
    assert not backend.requests
    # a record that merely has a "file" field is still a record
    client.delete("/settings/max_body_bytes")
    r = client.post("/selectit", json={**alpaca(1)[0], "file": "notes"})
    assert r.status_code == 200 and r.json()["score"] == 4.0
