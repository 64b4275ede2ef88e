r"""Is a bash command clearly read-only? Advice only: under `unsafe` approval it decides whether
a command runs at once (inside the OS sandbox) or waits for a spoken yes.

The command is read with a real bash grammar (tree-sitter-bash, the grammar GitHub and the
editors use, maintained by the tree-sitter project; bashlex, the other choice, has been
unmaintained for years and misses newer syntax): lists, pipelines, redirections, quoting,
heredocs and comments are what bash makes of them, not what string splitting guesses. Before
parsing, backslash-newline pairs are joined as bash joins them (`find X -f\<newline>printf`
is one command with the word `-fprintf`; the grammar itself would read two words).

A reading of bash cannot be complete, so nothing relies on it for safety: the sandbox
(`daemon.execution.sandbox`) is what stops a command that lies. It errs on the side of asking:
anything it does not model — command substitution, expansions of any kind, subshells, compound
statements, background jobs, here-documents, variable assignments, redirection to a file,
brace expansion, control characters, a parse error, an unknown program, a path to a program,
GNU option abbreviations of a dangerous option — makes it ask.
"""

from __future__ import annotations

from collections.abc import Iterator

from daemon.api import SimpleCommand, Unmodelled, join_continuations, simple_commands

# Programs that only read, whatever their (non-excluded) arguments.
READ_ONLY_PROGRAMS = frozenset(
    """
    pwd ls cat head tail wc grep egrep fgrep rg find tree stat file du df free uptime whoami
    id uname which type echo printf basename dirname realpath readlink cut tr nl tac rev
    cmp diff md5sum sha1sum sha256sum sort uniq column jq true false test cd date hostname
    env printenv ps locale lsb_release seq groups
    """.split()
)

# Arguments that make an otherwise read-only program write, delete or run something: exact
# words (find's single-dash options cannot be abbreviated or bundled)...
FORBIDDEN_ARGS = {
    "find": {
        "-exec",
        "-execdir",
        "-ok",
        "-okdir",
        "-delete",
        "-fprint",
        "-fprint0",
        "-fprintf",
        "-fls",
    },
}
# ...short options, also inside a bundle (`sort -uo out`)...
FORBIDDEN_SHORT = {"sort": "oT", "tree": "o", "date": "s", "file": "C", "uniq": ""}
# ...and long options, also abbreviated (GNU getopt and git take any unique prefix:
# `sort --outp=x`, `sort --compress-prog=sh`).
FORBIDDEN_LONG = {
    "sort": ("--output", "--compress-program", "--temporary-directory"),
    "tree": ("--output",),
    "date": ("--set",),
    "file": ("--compile",),
    "rg": ("--pre", "--pre-glob"),
}
_GIT_FORBIDDEN_LONG = ("--output", "--ext-diff", "--exec", "--open-files-in-pager", "--textconv")
_GIT_FORBIDDEN_SHORT = {"grep": "O"}  # git grep -O<program> opens matches with it
# Programs whose options a glob could turn dangerous (a file named `-o` in the directory).
_GLOB_SENSITIVE = {"find", "git", *FORBIDDEN_SHORT, *FORBIDDEN_LONG}

# git subcommands that only read (some have extra rules below).
GIT_READ_ONLY = frozenset(
    "status log diff show branch rev-parse ls-files blame describe shortlog remote tag "
    "config reflog grep show-ref ls-tree cat-file count-objects".split()
)
_GIT_BRANCH_LISTING = {
    "-a", "--all", "-r", "--remotes", "-v", "-vv", "--verbose", "--list", "-l",
    "--show-current", "--merged", "--no-merged", "--contains", "--no-contains", "--sort",
    "--color", "--no-color", "--column", "--no-column",
}  # fmt: skip
# Never read-only wherever they stand, even quoted: a quoted `$(...)` still runs when a
# program evaluates its argument (`test -v 'a[$(touch x)]'`), and /dev/tcp opens a socket.
_NEVER = ("`", "$(", "<(", ">(", "/dev/tcp", "/dev/udp")

# The reading of bash lives in the core (daemon/execution/bash.py): the approval rules use it.
__all__ = ["SimpleCommand", "Unmodelled", "is_read_only", "join_continuations", "simple_commands"]


def is_read_only(command: str) -> bool:
    """True only when every part of `command` is a known read-only program use."""
    if not command.strip() or any(mark in command for mark in _NEVER):
        return False
    try:
        commands = simple_commands(command)
    except Unmodelled:
        return False
    if any(c.globbed and c.program in _GLOB_SENSITIVE for c in commands):
        return False
    return all(_segment_read_only(list(c.words)) for c in commands)


def parts(command: str) -> Iterator[SimpleCommand] | None:
    """The simple commands of `command`, or None when it cannot be read (then nothing about
    it is known: ask)."""
    try:
        return iter(simple_commands(command))
    except Unmodelled:
        return None


def _long_hit(arg: str, dangerous: tuple[str, ...]) -> bool:
    """`--outp=x` is `--output=x` to GNU getopt and git: any prefix of a dangerous option."""
    if not arg.startswith("--") or arg == "--":
        return False
    name = arg.split("=", 1)[0]
    return any(d.startswith(name) for d in dangerous)


def _short_hit(arg: str, letters: str) -> bool:
    """`-uo` bundles -u and -o; any forbidden letter in a bundle asks."""
    return (
        bool(letters)
        and arg.startswith("-")
        and not arg.startswith("--")
        and any(c in letters for c in arg[1:])
    )


def _segment_read_only(words: list[str]) -> bool:
    program, args = words[0], words[1:]
    if "=" in program or "/" in program:
        return False  # variable assignments and paths to programs: ask
    if program == "git":
        return _git_read_only(args)
    if program not in READ_ONLY_PROGRAMS:
        return False
    if any(a.startswith("--output") for a in args):
        return False
    forbidden = FORBIDDEN_ARGS.get(program, set())
    letters = FORBIDDEN_SHORT.get(program, "")
    long = FORBIDDEN_LONG.get(program, ())
    if any(a in forbidden or _short_hit(a, letters) or _long_hit(a, long) for a in args):
        return False
    positional = [a for a in args if not a.startswith("-")]
    if program in ("hostname", "env") and args:
        return False  # `hostname x` renames the machine; `env cmd` runs cmd
    if program == "uniq" and len(positional) > 1:
        return False  # `uniq in out` writes out
    return True


def _git_read_only(args: list[str]) -> bool:
    while (
        args
        and args[0] in ("--no-pager", "-C", "-P", "--paginate")
        or (args and args[0].startswith("--git-dir"))
    ):
        args = args[2:] if args[0] == "-C" else args[1:]
    if not args or args[0] not in GIT_READ_ONLY:
        return False
    sub, rest = args[0], args[1:]
    if any(_long_hit(a, _GIT_FORBIDDEN_LONG) for a in rest):
        return False
    if any(_short_hit(a, _GIT_FORBIDDEN_SHORT.get(sub, "")) for a in rest):
        return False
    flags = [a for a in rest if a.startswith("-")]
    positional = [a for a in rest if not a.startswith("-")]
    if sub == "branch":
        listing = "--list" in flags or "-l" in flags
        return all(f.split("=")[0] in _GIT_BRANCH_LISTING for f in flags) and (
            listing or not positional or _after_value_flag(rest)
        )
    if sub == "tag":
        return "--list" in flags or "-l" in flags or not rest
    if sub == "remote":
        return all(a in ("-v", "--verbose") for a in rest) or (rest[:1] == ["show"])
    if sub == "config":
        return bool(rest) and rest[0] in ("--get", "--get-all", "--list", "-l", "--get-regexp")
    if sub == "reflog":
        return not positional or positional[0] == "show"
    return True


def _after_value_flag(args: list[str]) -> bool:
    """`git branch --contains abc`: the only positionals are values of flags that take one."""
    takes_value = {"--contains", "--no-contains", "--merged", "--no-merged", "--sort"}
    i = 0
    while i < len(args):
        if args[i] in takes_value:
            i += 2
            continue
        if not args[i].startswith("-"):
            return False
        i += 1
    return True
