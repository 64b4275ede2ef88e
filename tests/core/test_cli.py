"""The CLI: `lmd say` against a real daemon, history, and a light client path.

The entry point runs as a process where that is the point (exit codes, stdin, imports); the
history commands run in-process (click's CliRunner), where a process proves nothing more."""

import json
import os
import subprocess
import sys

import click
import pytest

from tests.daemons import ROOT, lmd_in_process

HEAVY = ("openai", "tiktoken", "numpy", "starlette", "hypercorn", "httpx", "llama_cpp", "mcp")
HEAVY += ("mcp_types", "pandas")


@pytest.fixture
def backend(shared_backend):
    """The say tests share one live daemon (shared_daemon), each in its own session."""
    return shared_backend


def lmd(*args, input=None, env=None):
    return subprocess.run(
        [sys.executable, "-m", "daemon.cli", *args],
        capture_output=True,
        text=True,
        input=input,
        cwd=ROOT,
        env={**os.environ, **(env or {})},
    )


def test_say_prints_the_reply_and_sends_the_utterance(shared_daemon, backend):
    d = shared_daemon
    backend.queue("It is blue because of scattering.")
    r = lmd("say", "dali", "why", "is", "the", "sky", "blue?", "--url", d.url)
    assert r.returncode == 0 and r.stdout == "It is blue because of scattering.\n"
    assert backend.chat_requests[-1]["messages"][-1] == {
        "role": "user",
        "content": "why is the sky blue?",
    }


def test_say_reads_stdin_and_uses_session_and_json(shared_daemon, backend):
    d = shared_daemon
    backend.queue("first", "You asked: what did I just ask you?")
    lmd("say", "--session", "kitchen", input="dali remember the milk\n", env={"LMD_URL": d.url})
    r = lmd(
        "say", "--json", "-s", "kitchen", "dali", "what did I just ask you?", env={"LMD_URL": d.url}
    )
    data = json.loads(r.stdout)
    assert data["session"] == "kitchen" and data["mode"] == "dali"
    assert data["reply"] == "You asked: what did I just ask you?"
    msgs = backend.chat_requests[-1]["messages"]
    assert msgs[0] == {"role": "user", "content": "remember the milk"}
    assert len(msgs) == 3


def test_say_fails_with_the_error_sentence(shared_daemon, backend):
    d = shared_daemon
    backend.queue(backend.default.__class__(status=500))
    r = lmd("say", "dali", "hi", "--url", d.url)
    assert r.returncode == 1 and "failed with HTTP 500" in r.stderr and r.stdout == ""
    r = lmd("say", "hi", "--url", "http://127.0.0.1:9")
    assert r.returncode == 1 and "could not reach lmd" in r.stderr and "lmd serve" in r.stderr
    r = lmd("say", input="  \n")
    assert r.returncode == 1 and "Nothing to say" in r.stderr


def test_history_shows_karma_and_score(live, backend, home):
    d = live()
    backend.queue("answer one")
    lmd("say", "dali", "question one", "--url", d.url)
    r = lmd_in_process("history", "--limit", "5", "--home", str(home))
    assert r.returncode == 0
    lines = r.stdout.strip().splitlines()
    # a header, the two prompts (newest first) and the legend, all within 100 columns
    assert lines[0].split()[:3] == ["id", "when", "session"]
    assert "question one" in lines[1] and " you " in lines[1] and " 1k " in lines[1]
    assert lines[3].startswith("kind: oper(ative)") and "karma" in lines[3]
    assert all(len(line) <= 100 for line in lines)
    wide = lmd_in_process("history", "--wide", "--home", str(home)).stdout.splitlines()
    assert len(wide) == 2 and "karma    1000" in wide[0] and "question one" in wide[0]
    rows = json.loads(lmd_in_process("history", "--json", "--home", str(home)).stdout)
    assert rows[0]["content"] == "question one" and rows[0]["karma"] == 1000
    # seconds old, so only the age factor 1/(300 t) discounts the newest; the older one is
    # also one prompt away (1/3)
    assert 0 < rows[0]["score"] < rows[1]["score"] <= 10.0 * 1000
    r = lmd_in_process("history", "promote", str(rows[0]["id"]), "--home", str(home))
    assert r.returncode == 0 and "operative (karma 25000)" in r.stdout  # operative_karma
    lmd_in_process("settings", "set", "operative_karma", "30000", "--home", str(home))
    r = lmd_in_process("history", "promote", str(rows[1]["id"]), "--home", str(home))
    assert r.returncode == 0 and "operative (karma 30000)" in r.stdout
    rows = json.loads(lmd_in_process("history", "--json", "--home", str(home)).stdout)
    assert [(r["kind"], r["karma"]) for r in rows] == [("operative", 25000), ("operative", 30000)]
    assert lmd_in_process("history", "promote", "9999", "--home", str(home)).returncode == 1


def test_history_numbers_read_at_a_glance():
    from daemon.cli import readable

    cases = {0: "0", 11530: "12k", 1000: "1k", 1234: "1.2k", 980: "980", 4.5: "4.5",
             0.37: "0.37", 2e-05: "2e-05", 2.5e6: "2.5M", -1500: "-1.5k"}  # fmt: skip
    assert {x: readable(x) for x in cases} == cases


def modules_after(args: list[str]) -> set[str]:
    code = (
        "import sys\nfrom daemon.cli import cli\n"
        f"try:\n    cli.main({args!r})\nexcept SystemExit:\n    pass\n"
        f"print(','.join(m for m in {HEAVY!r} if m in sys.modules), file=sys.stderr)"
    )
    r = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, input=""
    )
    assert r.returncode == 0, r.stderr
    return {m for m in r.stderr.rstrip("\n").split("\n")[-1].split(",") if m}


def test_help_and_say_import_nothing_heavy(shared_daemon):
    d = shared_daemon
    assert modules_after(["--help"]) == set()
    assert modules_after(["say", "--url", d.url, "hello"]) == set()
    code = f"import sys, daemon.client; print([m for m in {HEAVY!r} if m in sys.modules])"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert out.stdout.strip() == "[]"


def test_commands_on_the_database_import_nothing_heavy(tmp_path):
    """sqlite-utils imports numpy and pandas where installed (the extras bring them) for a
    type mapping lmd never uses, and `lmd history` needs karma, not the HTTP app: commands
    that open the database start without them."""
    home = str(tmp_path / "h")
    assert modules_after(["settings", "set", "marat_approval", "never", "--home", home]) == set()
    assert modules_after(["settings", "list", "--home", home]) == set()
    assert modules_after(["history", "--home", home]) == set()
    code = "import sys, daemon.core.store; print(sorted({'numpy', 'pandas'} & set(sys.modules)))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert out.stdout.strip() == "[]", out.stderr
    # where numpy is in use already, sqlite-utils gets it as before
    code = (
        "import sys, numpy, daemon.core.store; print(daemon.core.store.sqlite_utils.db.np is numpy)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert out.stdout.strip() == "True", out.stderr


def test_help_lists_plugin_commands_without_importing_them():
    """`lmd --help` shows each plugin command's line from its LazyCommand, read from the real
    command's docstring in its source (written once); the code is imported only when it runs."""
    from daemon.cli import HistoryGroup
    from daemon.lazy import LazyCommand
    from daemon.plugins import get_plugin_manager

    code = (
        "import sys\nfrom daemon.cli import cli\n"
        "try:\n    cli.main(['--help'])\nexcept SystemExit:\n    pass\n"
        "print(sorted(m for m in sys.modules if m.startswith(('plugins.', 'daemon.'))\n"
        "             or m in ('dataclasses', 'json', 'shutil')), file=sys.stderr)"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    loaded = set(json.loads(r.stderr.strip().splitlines()[-1].replace("'", '"')))
    assert not loaded & {"plugins.elo.commands", "plugins.selectit.command",
                         "plugins.lm_score.commands", "plugins.marat.audit",
                         "plugins.clients.commands", "plugins.mcp.commands",
                         "daemon.spoken.commands"}  # fmt: skip
    # Listing makes no Setting or Mode (plugins make theirs in the hooks that register them),
    # and the help's width is read without shutil.
    assert not loaded & {
        "daemon.core.settings",
        "daemon.core.modes",
        "dataclasses",
        "json",
        "shutil",
    }
    for name in ("elo", "selectit", "score", "sql", "doctor", "history"):
        assert f"  {name} " in r.stdout
    # A group of its own: other tests in this process may have run (and so resolved) some
    group = click.Group(name="lmd")
    history = HistoryGroup(name="history")
    group.add_command(history)
    get_plugin_manager().hook.register_commands(cli=group)
    lazies = [(n, c) for g in (group, history) for n, c in g.commands.items()]
    lazies = [(n, c) for n, c in lazies if isinstance(c, LazyCommand)]
    assert {n for n, _ in lazies} >= {"elo", "selectit", "score", "sql", "commands", "mcp",
                                      "doctor", "propose", "service", "shell-init"}  # fmt: skip
    for name, lazy in lazies:
        real = lazy.load()
        assert real.name == name, name
        assert lazy.get_short_help_str(1000) == real.get_short_help_str(1000), name
        if lazy.short_help is None:  # shortened to fit, as the real command's own help is
            for limit in range(20, 100):
                assert lazy.get_short_help_str(limit) == real.get_short_help_str(limit), name
    r = lmd("elo", "--help")
    assert r.returncode == 0 and "leaderboard" in r.stdout


def test_a_lazy_commands_line_is_its_docstring_read_from_the_source(tmp_path, monkeypatch):
    from daemon.lazy import docstring, lazy_command

    package = tmp_path / "lazydemo"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "cmds.py").write_text(
        "import click\n\n"
        "@click.command()\n"
        "@click.option('--n', type=int)\n"
        "def first(\n    n: int | None = None,\n) -> None:\n"
        '    """Do the first thing.\n\n    Longer help.\n    """\n\n'
        "@click.command()\n"
        "def escaped() -> None:\n"
        '    """A tab\\there."""\n'
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    assert docstring("lazydemo.cmds:first") == "Do the first thing.\n\nLonger help."
    assert docstring("lazydemo.cmds:escaped") is None  # an escape: the command is asked
    assert docstring("lazydemo.cmds:missing") is None
    assert docstring("lazydemo.nothing:first") is None
    assert "lazydemo.cmds" not in sys.modules  # read, not imported
    assert lazy_command("first", "lazydemo.cmds:first").get_short_help_str() == (
        "Do the first thing."
    )
    assert lazy_command("escaped", "lazydemo.cmds:escaped").help == "A tab\there."
    with pytest.raises(TypeError):
        lazy_command("x", "lazydemo.cmds:first", "one", help="two")


@pytest.mark.parametrize("columns", [None, "", "abc", "0", "-3", "40", "100", "300"])
def test_help_width_is_read_as_shutil_reads_it(monkeypatch, columns):
    import shutil

    from daemon.cli import terminal_columns

    if columns is None:
        monkeypatch.delenv("COLUMNS", raising=False)
    else:
        monkeypatch.setenv("COLUMNS", columns)
    assert terminal_columns() == shutil.get_terminal_size().columns


def test_light_commands_leave_nothing_for_the_exit_to_collect():
    """After the group's help and `say`, lmd's objects are frozen: the interpreter's exit skips
    them (gc.freeze). Other commands exit as Python always does."""
    code = (
        "import atexit, gc, sys\nimport daemon.cli\n"
        "atexit.register(lambda: print('frozen', gc.get_freeze_count() > 0))\n"
        "sys.argv = ['lmd', *sys.argv[1:]]\ndaemon.cli.main()"
    )

    def frozen(*args: str) -> tuple[int, str]:
        r = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True,
                           cwd=ROOT, input="")  # fmt: skip
        return r.returncode, r.stdout.strip().splitlines()[-1]

    assert frozen("--help") == (0, "frozen True")
    assert frozen("no-such-command") == (2, "frozen True")
    assert frozen("say", "--url", "http://127.0.0.1:9", "hi") == (1, "frozen True")
    assert frozen("settings", "--help") == (0, "frozen False")


def test_version():
    r = lmd("--version")
    assert r.returncode == 0 and "0.1.0" in r.stdout


def test_say_without_words_on_a_terminal_says_what_it_expects():
    """On a terminal `lmd say` alone would wait silently for stdin: it says what it needs."""
    import pty
    import subprocess
    import sys

    main, sub = pty.openpty()
    try:
        done = subprocess.run(
            [sys.executable, "-m", "daemon.cli", "say"],
            stdin=sub, capture_output=True, text=True, timeout=30, cwd=ROOT,
        )  # fmt: skip
    finally:
        os.close(main)
        os.close(sub)
    assert done.returncode == 1
    assert "Say something: lmd say WORDS, or pipe the words in" in done.stderr


def test_python_m_daemon_cli_has_the_plugins_additions(tmp_path):
    # `python -m daemon.cli` runs the module as __main__; what plugins add to the imported
    # daemon.cli (marat's `history --commands`) must be on the CLI that runs
    env = {**os.environ, "LMD_HOME": str(tmp_path)}
    r = subprocess.run(
        [sys.executable, "-m", "daemon.cli", "history", "--commands"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=env,
    )
    assert (r.returncode, r.stdout.strip()) == (0, "No commands have been run yet."), r.stderr
