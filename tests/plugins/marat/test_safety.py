"""The read-only classifier behind `marat_approval = unsafe`: it errs on the side of asking.

It is advice only (what runs at once runs in the OS sandbox; see tests/core/test_sandbox.py and
the live corpus in tests/plugins/marat/test_sandbox_corpus.py): these tests pin down what it
asks about, not what keeps the user safe."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from plugins.marat.safety import is_read_only

READ_ONLY = [
    "pwd",
    "ls",
    "ls -la ~/code",
    "pwd && ls",
    "cat README.md | head -n 5",
    "tail -f /dev/null | wc -l",
    "grep -rn 'foo|bar' . | sort | uniq -c",
    "find . -name '*.rs' -type f",
    "find . -name x -o -name y",
    "git status",
    "git log --oneline -10",
    "git --no-pager log -n 10 --format=%s",
    "git -C /tmp/repo diff HEAD~1",
    "git show HEAD:README.md",
    "git branch",
    "git branch -a -v",
    "git branch --show-current",
    "git branch --list 'feat*'",
    "cd .. && cd example && git branch --show-current",
    "ls 2>/dev/null",
    "ls nothing 2>&1 | head",
    "wc -l < README.md",
    "echo 'a; rm -rf /'",
    "du -sh . ; df -h",
    "git remote -v",
    "git tag --list",
    "git config --get user.name",
    "ls *.py",
    "grep '#include' main.c",
    "cat '$HOME/literal'",
    "git log --format='%h %s' -5",
]

ASKS = [
    "",
    "rm -rf build",
    "touch x",
    "git checkout develop",
    "git add example.rs && git commit -m 'Add example'",
    "git branch feature",
    "git branch -D old",
    "git tag v1.0",
    "git config user.name me",
    "git push",
    "git diff --output=patch.txt",
    "ls > files.txt",
    "echo hi >> notes.txt",
    "cat a | tee b",
    "ls; rm x",
    "ls\nrm x",
    "ls && mv a b",
    "echo $(rm x)",
    "echo `rm x`",
    "diff <(ls a) <(ls b)",
    "find . -name '*.tmp' -delete",
    "find . -exec rm {} \\;",
    "sort -o out.txt in.txt",
    "uniq in.txt out.txt",
    "ls &",
    "(cd /tmp && rm x)",
    "FOO=bar ls",
    "./ls",
    "/bin/rm x",
    "env rm x",
    "hostname newname",
    "date -s '2020-01-01'",
    "cat <<EOF\nhi\nEOF",
    "echo 'unbalanced",
    "sudo ls",
    "xargs rm < list",
    "awk '{system(\"rm x\")}' f",
    "sed -i s/a/b/ f",
    "python3 -c 'print(1)'",
    # issue 12: what bash sees and a naive reading does not
    "ls foo#; touch x",
    "cat a.txt#;rm -rf sub",
    "find . -dele{te,te}",
    "{touch,x}",
    "find . $'-delete'",
    'find . $"-delete"',
    "echo ${x:=a} && touch $x",
    "x=1; echo ${x@P}",
    "find . -dele${x}te",
    "ls$IFS-la",
    "test -v 'a[$(touch x)]'",
    "sort -uo out.txt in.txt",
    "sort --outp=out.txt in.txt",
    "sort --compress-prog=sh in.txt",
    "sort -T . in.txt",
    "sort *",
    "git grep -Ocat hello",
    "git grep --open-files-in-pager=cat hello",
    "git log --outp=x",
    "git diff --ext",
    "rg --pre=sh hello",
    "file -C -m magic",
    "date --se=2020-01-01",
    "cat < /dev/tcp/127.0.0.1/80",
    "echo hi > /dev/udp/127.0.0.1/53",
    "ls\r-la",
]


@pytest.mark.parametrize("command", READ_ONLY)
def test_read_only_commands_run_at_once(command):
    assert is_read_only(command), command


@pytest.mark.parametrize("command", ASKS)
def test_anything_that_may_write_asks(command):
    assert not is_read_only(command), command


WRITERS = ["rm x", "mv a b", "touch f", "git commit -m m", "cp a b", "chmod +x f", "dd of=x"]
READERS = ["pwd", "ls -l", "git status", "cat f", "wc -l f", "grep x f"]


@given(
    st.lists(st.sampled_from(READERS), min_size=0, max_size=4),
    st.sampled_from(WRITERS),
    st.lists(st.sampled_from(READERS), min_size=0, max_size=4),
    st.lists(st.sampled_from([" && ", " ; ", " | ", " || ", "\n"]), min_size=9, max_size=9),
)
def test_one_writer_anywhere_in_a_chain_asks(before, writer, after, joiners):
    parts = [*before, writer, *after]
    command = parts[0] + "".join(j + p for j, p in zip(joiners, parts[1:], strict=False))
    assert not is_read_only(command)


@given(
    st.lists(st.sampled_from(READERS), min_size=1, max_size=6),
    st.lists(st.sampled_from([" && ", " ; ", " | ", " || "]), min_size=6, max_size=6),
)
def test_chains_of_readers_run(parts, joiners):
    command = parts[0] + "".join(j + p for j, p in zip(joiners, parts[1:], strict=False))
    assert is_read_only(command)


@given(st.text(max_size=60))
def test_never_crashes(text):
    assert is_read_only(text) in (True, False)


@pytest.mark.parametrize("command", ["{\U00031860", "echo { 😀", "ls {a,b} && echo 🎉"])
def test_a_brace_before_an_emoji_is_asked_about_never_parsed(command):
    """tree-sitter-bash 0.25.1 can crash the process (SIGSEGV) on a `{` followed by a
    character beyond U+FFFF (tree-sitter/tree-sitter-bash#337; it killed a test worker here):
    such a command is not parsed, and so asks."""
    from daemon.execution.bash import Unmodelled, simple_commands

    with pytest.raises(Unmodelled, match="a brace before a character"):
        simple_commands(command)
    assert not is_read_only(command)
    assert is_read_only("echo 😀")  # an emoji alone is read as ever


# -- the bash grammar: what bash makes of a command, not what splitting guesses ---------------
@pytest.mark.parametrize(
    "command",
    [
        "find . -f\\\nprintf /tmp/x '%p'",  # a line continuation joins -f and printf
        "find . -dele\\\nte",
        "sort -u\\\no out in.txt",  # -uo: writes `out`
        "git log --out\\\nput=x",
        "ls &",  # a background job
        "cat <<EOF\nhi\nEOF",  # a here-document
        "(ls)",
        "ls; { rm x; }",
        "a=1 ls",
        "ls $'-la'",
        "ls > out.txt",
        "if true; then rm x; fi",
        "ls \x00 x",
    ],
)
def test_what_the_grammar_reads_as_not_clearly_read_only(command):
    assert not is_read_only(command)


@pytest.mark.parametrize(
    "command",
    [
        "ls \\\n-la",  # a continuation between words is a space
        "echo 'a\\\nb'",  # inside single quotes it stays as written
        "ls # ; rm -rf ~",  # a comment
        "ls -la 2>&1 | grep x > /dev/null",
        'grep -c "a b" notes.txt',
        "cat < notes.txt",
    ],
)
def test_what_the_grammar_reads_as_read_only(command):
    assert is_read_only(command)


def test_simple_commands_are_what_bash_passes():
    from plugins.marat.safety import simple_commands

    found = simple_commands('git commit -m \'a b\' && echo "done\\"" | tr a b\\\nc')
    assert [c.words for c in found] == [
        ("git", "commit", "-m", "a b"),
        ("echo", 'done"'),
        ("tr", "a", "bc"),
    ]


@given(
    st.lists(
        st.sampled_from(["ls", "-la", "grep", "x", "wc", "-l", "find", ".", "-name", "a"]),
        min_size=1,
        max_size=6,
    ),
    st.data(),
)
def test_a_continuation_between_words_changes_nothing(words, data):
    joined = " ".join(words)
    cut = " ".join(w + (" \\\n" if data.draw(st.booleans()) else "") for w in words)
    assert is_read_only(cut) == is_read_only(joined)
