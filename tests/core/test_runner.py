"""The command runner: real bash, cut output, timeouts that kill the whole group."""

import asyncio
import os

import pytest

from daemon.execution.runner import cut, run_command, usable_cwd


def run(cmd, tmp_path, timeout=5.0, max_chars=100):
    return asyncio.run(run_command(cmd, str(tmp_path), timeout, max_chars))


def test_cut_counts_characters_and_unread_bytes():
    assert cut("abc", 5) == ("abc", False)
    assert cut("abcdef", 4) == ("abcd\n[output cut: 2 more characters]", True)
    assert cut("ab", 4, 10) == ("ab\n[output cut: 10 more bytes]", True)
    assert cut("abcdef", 4, 10)[0].endswith("[output cut: 2 more characters and 10 more bytes]")


def test_exit_code_output_and_cwd(tmp_path):
    r = run("echo hi; echo err >&2; pwd; exit 3", tmp_path)
    assert r.exit_code == 3 and r.output.splitlines() == ["hi", "err", str(tmp_path)]
    assert not r.timed_out and not r.truncated


def test_flood_is_cut_and_counted(tmp_path):
    r = run("head -c 1000000 /dev/zero | tr '\\0' x", tmp_path, max_chars=50)
    kept, marker = r.output.split("\n[output cut: ")
    assert kept == "x" * 50 and r.truncated
    counted = sum(int(n) for n in marker.replace("]", "").split() if n.isdigit())
    assert counted == 1_000_000 - 50


def test_invalid_utf8_and_nul_do_not_crash(tmp_path):
    r = run("printf 'ok \\xff\\xfe \\x00 end'", tmp_path)
    assert r.output.startswith("ok ") and r.output.endswith(" end") and "\ufffd" in r.output


def test_timeout_kills_the_process_group(tmp_path):
    marker = tmp_path / "child-survived"
    r = run(f"(sleep 1.5; touch {marker}) & sleep 30", tmp_path, timeout=0.5)
    assert r.timed_out and r.exit_code is None and r.duration < 5
    asyncio.run(asyncio.sleep(2))
    assert not marker.exists()


def test_no_stdin_and_no_terminal(tmp_path):
    r = run("cat; tty; echo done", tmp_path)
    assert "not a tty" in r.output and r.output.strip().endswith("done")


def test_vanished_directory_falls_back_to_its_parent(tmp_path):
    gone = tmp_path / "a" / "b"
    path, note = usable_cwd(str(gone))
    assert path == str(tmp_path) and "no longer exists" in note
    assert usable_cwd(str(tmp_path)) == (str(tmp_path), None)
    assert usable_cwd(None)[0] == os.path.expanduser("~")


@pytest.mark.parametrize("timeout", [10.0, 0.5])
def test_an_approved_commands_whole_tree_ends_with_it(tmp_path, timeout):
    """setsid, nohup, a subshell's background job and a double fork all end with the command
    (it finished, or its timeout cut it): unsandboxed, the reaper ends what a pid namespace
    ends in the sandbox."""
    from tests.daemons import processes_with

    marker = f"31.{os.getpid()}{int(timeout * 10)}"
    command = (
        f"setsid sleep {marker} & nohup sleep {marker} >/dev/null 2>&1 & "
        f"(sleep {marker} &) ; bash -c 'sleep {marker} & disown' ; "
        f"echo started; {'sleep 5' if timeout < 1 else 'true'}"
    )
    r = asyncio.run(run_command(command, str(tmp_path), timeout, 4000))
    assert "started" in r.output and r.timed_out == (timeout < 1)
    assert processes_with(marker) == []
