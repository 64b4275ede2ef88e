"""What a command line really runs: each command's effective program, subcommand and options,
read through wrappers, interpreters and global options.

The words come from the bash grammar (daemon/execution/bash.py, tree-sitter-bash). On top of
them this module knows how programs read their own arguments:

- **global options** of programs with subcommands (`git -C dir -c k=v --no-pager push`,
  `make -C dir -f file test`): which take a value, which are harmless, and which *move* the
  command (another directory, configuration or input file: the rule's scope no longer says
  where it works);
- **wrappers**, programs that run a command they are given (`timeout 9 git push`, `env`,
  `nice`, `xargs`, `find -exec`, `sh -c '...'`, `eval`, `watch`...): what they run is read as
  a command of its own, recursively;
- **interpreters**, programs that run code they are given (`python3 -c`, `perl -e`, `node`,
  `awk`...): what they run cannot be read, so nothing is known about it;
- **options that read files** (`--pathspec-from-file=F`, `git commit -F F`, `--file`, `@F`).

The approval rules (daemon/agent/rules.py) match on this reading: ask and forbid rules on every
command a line runs, wrappers' insides included; allow rules only on a command that runs
directly, with no option that moves it, and (outside the sandbox) none that reads a file.
Where the reading is unsure (an unknown option before a subcommand, a git alias), it says so
(`certain` false): ask and forbid rules then hold, allow rules do not.
"""

from __future__ import annotations

import fnmatch
import os
import re
from dataclasses import dataclass, field, replace
from functools import lru_cache
from typing import Any

import tree_sitter
import tree_sitter_bash

from daemon.execution.bash import Unmodelled, join_continuations, simple_commands

MAX_DEPTH = 6  # wrappers inside wrappers: deeper than this is not read (and so asks)
MAX_STARTS = 32  # a wrapper's own options and values fit in its first words


class Unread(ValueError):
    """A command line that cannot be read (see daemon.execution.bash.Unmodelled)."""


# -- programs with subcommands and their global options ---------------------------------------
@dataclass(frozen=True)
class Grammar:
    """How a program with subcommands reads the options before its subcommand.

    `value`: options that take a value (the next word, or attached: `-Cdir`, `--git-dir=x`);
    `flags`: options known to change neither where it works nor what it runs; `moving`:
    options (of either kind) that do: another directory, configuration, program or input
    file; `optional`: options whose value is optional and only attached (`make -j4`);
    `anywhere`: options may also follow the subcommand (GNU getopt, make), so moving ones are
    looked for in every word; `subcommands`: the program's own, where known (another word is
    an alias or a plug-in, which could be any of them)."""

    value: frozenset[str] = frozenset()
    flags: frozenset[str] = frozenset()
    moving: frozenset[str] = frozenset()
    optional: frozenset[str] = frozenset()
    anywhere: bool = False
    subcommands: frozenset[str] | None = None


def _set(text: str) -> frozenset[str]:
    return frozenset(text.split())


# `git --list-cmds=main,nohelpers` (git 2.39) and newer ones: anything else is an alias or a
# git-* program on PATH.
GIT_COMMANDS = _set(
    """add am annotate apply archive backfill bisect blame branch bugreport bundle cat-file
    check-attr check-ignore check-mailmap check-ref-format checkout checkout-index cherry
    cherry-pick clean clone column commit commit-graph commit-tree config count-objects
    credential credential-cache credential-store daemon describe diagnose diff diff-files
    diff-index diff-tree difftool fast-export fast-import fetch fetch-pack filter-branch
    fmt-merge-msg for-each-ref for-each-repo format-patch fsck fsck-objects gc
    get-tar-commit-id grep hash-object help hook http-backend http-fetch http-push imap-send
    index-pack init init-db instaweb interpret-trailers log ls-files ls-remote ls-tree
    mailinfo mailsplit maintenance merge merge-base merge-file merge-index merge-octopus
    merge-one-file merge-ours merge-recursive merge-recursive-ours merge-recursive-theirs
    merge-resolve merge-subtree merge-tree mergetool mktag mktree multi-pack-index mv name-rev
    notes pack-objects pack-redundant pack-refs patch-id pickaxe prune prune-packed pull push
    quiltimport range-diff read-tree rebase receive-pack reflog refs remote remote-ext
    remote-fd remote-ftp remote-ftps remote-http remote-https repack replace replay
    request-pull rerere reset restore rev-list rev-parse revert rm scalar send-email
    send-pack shell shortlog show show-branch show-index show-ref sparse-checkout stage stash
    status stripspace submodule subtree switch symbolic-ref tag unpack-file unpack-objects
    update-index update-ref update-server-info upload-archive upload-pack var verify-commit
    verify-pack verify-tag version whatchanged worktree write-tree"""
)

GRAMMARS: dict[str, Grammar] = {
    "git": Grammar(
        value=_set(
            "-C -c --git-dir --work-tree --namespace --config-env --super-prefix "
            "--attr-source --list-cmds"
        ),  # fmt: skip
        flags=_set(
            "--no-pager -P -p --paginate --no-replace-objects --no-lazy-fetch "
            "--literal-pathspecs --glob-pathspecs --noglob-pathspecs --icase-pathspecs "
            "--no-optional-locks --no-advice --version -v --help -h --html-path "
            "--man-path --info-path"
        ),  # fmt: skip
        moving=_set(
            "-C -c --git-dir --work-tree --namespace --config-env --super-prefix "
            "--attr-source --exec-path --bare"
        ),  # fmt: skip
        optional=_set("--exec-path"),
        subcommands=GIT_COMMANDS,
    ),
    "make": Grammar(
        value=_set(
            "-C --directory -f --file --makefile -I --include-dir -o --old-file "
            "--assume-old -W --what-if --new-file --assume-new -E --eval"
        ),  # fmt: skip
        flags=_set(
            "-b -m -B --always-make -d -e --environment-overrides -i --ignore-errors "
            "-k --keep-going -L --check-symlink-times -n --just-print --dry-run --recon "
            "-p --print-data-base -q --question -r --no-builtin-rules -R "
            "--no-builtin-variables -s --silent --quiet --no-silent -S --no-keep-going "
            "--stop -t --touch --trace -v --version -w --print-directory "
            "--no-print-directory --warn-undefined-variables -h --help"
        ),  # fmt: skip
        moving=_set("-C --directory -f --file --makefile -I --include-dir -E --eval"),
        optional=_set(
            "-j --jobs -l --load-average --max-load -O --output-sync --debug "
            "--shuffle --jobserver-style"
        ),  # fmt: skip
        anywhere=True,
    ),
    "npm": Grammar(
        value=_set(
            "--prefix -w --workspace --userconfig --globalconfig --cache --registry --loglevel"
        ),  # fmt: skip
        flags=_set(
            "-s --silent -q --quiet -d -dd --verbose -y --yes --no-color --color "
            "-ws --workspaces -g --global --version -v --help -h"
        ),  # fmt: skip
        moving=_set("--prefix --userconfig --globalconfig --cache -g --global"),
        anywhere=True,
    ),
    "pnpm": Grammar(
        value=_set("-C --dir --filter -F --workspace-dir --reporter --loglevel"),
        flags=_set("-s --silent -r --recursive -w --workspace-root --version -v --help -h"),
        moving=_set("-C --dir --workspace-dir --filter -F -g --global"),
        anywhere=True,
    ),
    "yarn": Grammar(
        value=_set("--cwd --modules-folder --cache-folder --use-yarnrc --global-folder"),
        flags=_set("-s --silent --verbose --offline --frozen-lockfile --version -v --help -h"),
        moving=_set("--cwd --modules-folder --cache-folder --use-yarnrc --global-folder"),
        anywhere=True,
    ),
    "bun": Grammar(
        value=_set("--cwd --config -c"),
        flags=_set("--silent --version -v --help -h"),
        moving=_set("--cwd --config -c"),
    ),
    "cargo": Grammar(
        value=_set("-C --config -Z --color --manifest-path"),
        flags=_set(
            "-q --quiet -v -vv --verbose --frozen --locked --offline --version -V --help -h --list"
        ),  # fmt: skip
        moving=_set("-C --config -Z --manifest-path"),
    ),
    "go": Grammar(value=_set("-C"), flags=_set("--help -h"), moving=_set("-C")),
    "docker": Grammar(
        value=_set(
            "-H --host --context -c --config -l --log-level --tlscacert --tlscert --tlskey"
        ),  # fmt: skip
        flags=_set("-D --debug --tls --tlsverify -v --version --help -h"),
        moving=_set("-H --host --context -c --config --tlscacert --tlscert --tlskey"),
    ),
    "podman": Grammar(
        value=_set(
            "--connection -c --url --identity --root --runroot --storage-driver "
            "--log-level --module"
        ),  # fmt: skip
        flags=_set("--remote -r --version -v --help -h"),
        moving=_set("--connection -c --url --identity --root --runroot --module --remote -r"),
    ),
    "kubectl": Grammar(
        value=_set(
            "--kubeconfig --context --cluster --user -n --namespace -s --server "
            "--token --as --as-group --certificate-authority --client-certificate "
            "--client-key -v"
        ),  # fmt: skip
        flags=_set("--insecure-skip-tls-verify --help -h"),
        moving=_set(
            "--kubeconfig --context --cluster --user -s --server --token --as "
            "--as-group --certificate-authority --client-certificate --client-key"
        ),
        anywhere=True,
    ),
    "helm": Grammar(
        value=_set(
            "--kubeconfig --kube-context -n --namespace --repository-config "
            "--registry-config --repository-cache"
        ),  # fmt: skip
        flags=_set("--debug --help -h"),
        moving=_set(
            "--kubeconfig --kube-context --repository-config --registry-config --repository-cache"
        ),  # fmt: skip
        anywhere=True,
    ),
    "uv": Grammar(
        value=_set("--directory --project --config-file --cache-dir --color --python -p"),
        flags=_set(
            "-q --quiet -v --verbose --offline --no-cache -n --no-config --native-tls "
            "--version -V --help -h"
        ),  # fmt: skip
        moving=_set("--directory --project --config-file --cache-dir"),
        anywhere=True,
    ),
    "poetry": Grammar(
        value=_set("-C --directory -P --project"),
        flags=_set(
            "-q --quiet -v -vv -vvv --verbose -n --no-interaction --no-ansi --ansi "
            "--no-plugins --no-cache --version -V --help -h"
        ),  # fmt: skip
        moving=_set("-C --directory -P --project"),
        anywhere=True,
    ),
    "pdm": Grammar(
        value=_set("-p --project -c --config"),
        flags=_set("-q --quiet -v --verbose --version -V --help -h"),
        moving=_set("-p --project -c --config -g --global"),
        anywhere=True,
    ),
    "terraform": Grammar(
        value=frozenset(),
        flags=_set("-version -help -v --version --help -h"),
        moving=_set("-chdir"),
    ),
    "just": Grammar(
        value=_set(
            "-f --justfile -d --working-directory --set --shell --shell-arg "
            "--dotenv-filename --dotenv-path"
        ),  # fmt: skip
        flags=_set("-q --quiet -v --verbose -n --dry-run --list -l --version -V --help -h"),
        moving=_set(
            "-f --justfile -d --working-directory --set --shell --shell-arg "
            "--dotenv-filename --dotenv-path"
        ),  # fmt: skip
        anywhere=True,
    ),
    "tox": Grammar(
        value=_set("-c --conf --root --workdir -e"),
        flags=_set("-q -v -vv -r --recreate -p --parallel --version --help -h"),
        moving=_set("-c --conf --root --workdir"),
        anywhere=True,
    ),
    "nox": Grammar(
        value=_set("-f --noxfile --envdir -s --session -t --tags -p --python"),
        flags=_set("-r --reuse-existing-virtualenvs -R -l --list --version --help -h"),
        moving=_set("-f --noxfile --envdir"),
        anywhere=True,
    ),
    "gradle": Grammar(
        value=_set(
            "-p --project-dir -b --build-file -c --settings-file -I --init-script "
            "-g --gradle-user-home"
        ),  # fmt: skip
        flags=_set(
            "-q --quiet -i --info -d --debug --offline --no-daemon --daemon -w --warn "
            "--version -v --help -h"
        ),  # fmt: skip
        moving=_set(
            "-p --project-dir -b --build-file -c --settings-file -I --init-script "
            "-g --gradle-user-home"
        ),  # fmt: skip
        anywhere=True,
    ),
    "mvn": Grammar(
        value=_set(
            "-f --file -s --settings -gs --global-settings -t --toolchains -pl "
            "--projects -P --activate-profiles -rf --resume-from -l --log-file"
        ),
        flags=_set(
            "-q --quiet -X --debug -o --offline -B --batch-mode -U -N -e -v --version -h --help"
        ),  # fmt: skip
        moving=_set("-f --file -s --settings -gs --global-settings -t --toolchains"),
        anywhere=True,
    ),
    "apt": Grammar(
        value=_set("-o --option -c --config-file -t --target-release"),
        flags=_set(
            "-y --yes --assume-yes -q --quiet -s --simulate --dry-run "
            "--no-install-recommends -h --help -v --version"
        ),  # fmt: skip
        moving=_set("-o --option -c --config-file"),
        anywhere=True,
    ),
    "systemctl": Grammar(
        value=_set("-H --host -M --machine -t --type --state -p --property --root"),
        flags=_set(
            "--user --system --no-pager -q --quiet --now -a --all -l --full "
            "--no-block --version -h --help"
        ),  # fmt: skip
        moving=_set("-H --host -M --machine --root"),
        anywhere=True,
    ),
    "pip": Grammar(
        value=_set("--python --cache-dir --log --proxy --retries --timeout"),
        flags=_set(
            "-q --quiet -v --verbose --isolated --no-cache-dir --no-color "
            "--disable-pip-version-check -V --version -h --help"
        ),  # fmt: skip
        moving=_set("--python"),
    ),
}
GRAMMARS["gmake"] = GRAMMARS["make"]
GRAMMARS["apt-get"] = GRAMMARS["apt"]
GRAMMARS["pip3"] = GRAMMARS["pip"]

# Programs whose first argument is a subcommand: a rule covers that subcommand only
# (`git commit`, not all of git).
SUBCOMMAND_PROGRAMS = frozenset(
    """git npm npx yarn pnpm bun deno cargo go docker podman kubectl helm pip pip3 uv poetry
    gh make gmake apt apt-get brew systemctl terraform bundle rails mvn gradle dotnet conda
    rustup just tox nox hatch pdm""".split()
)

# -- what runs other programs ----------------------------------------------------------------
# Wrappers: programs that run a command given in their arguments. Each names the options that
# take a value (so the command after them is found exactly); what a wrapper runs is read as a
# command of its own. A wrapper never becomes an allow rule's pattern, and an allow rule never
# covers what a wrapper runs.
WRAPPERS: dict[str, frozenset[str]] = {
    "timeout": _set("-s --signal -k --kill-after"),
    "nice": _set("-n --adjustment"),
    "ionice": _set("-c --class -n --classdata"),
    "nohup": frozenset(),
    "stdbuf": _set("-i --input -o --output -e --error"),
    "command": frozenset(),
    "builtin": frozenset(),
    "exec": _set("-a"),
    "time": _set("-o --output -f --format"),
    "env": _set(
        "-u --unset -C --chdir -S --split-string --block-signal --default-signal --ignore-signal"
    ),  # fmt: skip
    "xargs": _set(
        "-a --arg-file -d --delimiter -E --eof -I --replace -L --max-lines -n "
        "--max-args -P --max-procs -s --max-chars --process-slot-var"
    ),  # fmt: skip
    "setsid": frozenset(),
    "chrt": frozenset(),
    "taskset": _set("-c --cpu-list"),
    "numactl": _set("-C --cpunodebind -m --membind -N -p --preferred -i --interleave"),
    "flock": _set("-w --wait --timeout -E --conflict-exit-code -c --command"),
    "chroot": _set("--userspec --groups"),
    "unshare": _set("--mount-proc --setuid -S --setgid -G --root -R --wd -w"),
    "nsenter": _set("-t --target -S --setuid -G --setgid --root --wd"),
    "setpriv": _set(
        "--reuid --regid --ruid --rgid --euid --egid --groups --inh-caps "
        "--ambient-caps --bounding-set --securebits --pdeathsig --selinux-label "
        "--apparmor-profile --landlock-access --landlock-rule"
    ),  # fmt: skip
    "prlimit": _set("-p --pid"),
    "strace": _set("-e -o -p -s -u -E -a -b -I -O -S -P -X"),
    "ltrace": _set("-e -o -p -s -u -a -n -A -D -F -l -L"),
    "valgrind": frozenset(),
    "catchsegv": frozenset(),
    "fakeroot": _set("-l --lib --faked -s -i -b"),
    "eatmydata": frozenset(),
    "unbuffer": frozenset(),
    "faketime": _set("-m -f"),
    "torsocks": _set("-u -p -a -P"),
    "proxychains": _set("-f"),
    "proxychains4": _set("-f"),
    "firejail": frozenset(),
    "bwrap": frozenset(),
    "systemd-run": _set(
        "-u --unit -p --property --description --slice -E --setenv -M "
        "--machine -H --host --uid --gid --nice --working-directory -D"
    ),
    "sudo": _set(
        "-u --user -g --group -h --host -p --prompt -C --close-from -D --chdir "
        "-R --chroot -r --role -t --type -U --other-user -T --command-timeout"
    ),
    "doas": _set("-u -C"),
    "run0": _set("-u --user -g --group -D --chdir --setenv --property"),
    "runuser": _set("-u --user -g --group -G --supp-group -s --shell -w --whitelist-environment"),
    "su": _set("-g --group -G --supp-group -s --shell -w --whitelist-environment"),
    "pkexec": _set("--user"),
    "watch": _set("-n --interval -d --differences -q --equexit -s --shell"),
    "parallel": _set(
        "-j --jobs -S --sshlogin --joblog -a --arg-file -d --delimiter -I "
        "--colsep -C -n --max-args -N --max-replace-args --tmpdir"
    ),  # fmt: skip
    "busybox": frozenset(),
    "script": _set("-c --command -E --echo -I --log-in -O --log-out -T --log-timing"),
    "dbus-run-session": _set("--config-file --dbus-daemon"),
    "xvfb-run": _set(
        "-n --server-num -a -e --error-file -f --auth-file -p --xauth-protocol -s --server-args"
    ),  # fmt: skip
    "ssh": _set("-b -c -D -E -e -F -I -i -J -L -l -m -O -o -p -Q -R -S -W -w -B"),
    "caffeinate": _set("-t -w"),
    "entr": frozenset(),
    "cgexec": _set("-g"),
    "trap": frozenset(),
    "eval": frozenset(),
}
# Options whose value is itself a shell script (`flock -c 'cmd'`, `script -c 'cmd'`).
_SCRIPT_OPTIONS = {
    "flock": _set("-c --command"),
    "script": _set("-c --command"),
    "su": _set("-c --command"),
    "runuser": _set("-c --command"),
    "env": _set("-S --split-string"),
}
# Wrappers whose arguments are joined into one script (ssh's is run by the remote shell).
_JOINED = {"eval", "watch", "ssh", "trap"}
# Wrappers that take a fixed number of words before the command (timeout DURATION ...).
_LEADING = {"timeout": 1, "chrt": 1, "taskset": 1, "flock": 1, "chroot": 1, "faketime": 1,
            "ssh": 1, "cgexec": 0, "prlimit": 0}  # fmt: skip

SHELLS = _set("sh bash dash zsh ksh mksh ash fish tcsh csh yash posh rbash")
# Interpreters: programs that run code given as an argument, a file or standard input. What
# they run cannot be read here; so no rule's pattern is such a program, and no allow rule
# covers what it runs. Python's `-m MODULE` names a program (`python3 -m pytest`): that one is
# read as its module.
INTERPRETERS = _set(
    """python python2 python3 pypy pypy3 perl ruby irb node nodejs php lua luajit
    Rscript R tclsh wish expect awk gawk mawk nawk osascript pwsh powershell julia
    racket guile gdb lldb jshell groovy scala kotlin elixir erl escript swipl ghci runghc
    runhaskell ocaml m4 dc vim vi nvim emacs ed ex source ."""
)
_PYTHON = re.compile(r"python[\d.]*|pypy[\d.]*")

# Options that read a file whose content the program then uses (and, run outside the
# sandbox, can show): an unsandboxed rule never covers a command that names one. Long ones are
# matched with their abbreviations (`--pathspec-from-f=...` reads too); any long option whose
# name says file or from reads as well.
READING_LONG = _set(
    """--pathspec-from-file --file --files-from --from-file --arg-file --exclude-from
    --config-file --input-file --template --contents --no-index --rcfile --init-file
    --netrc-file --settings --blob --ignore-revs-file --mailmap-file --mailmap-blob
    --attr-source --data-binary --data --upload-file --key --cert --cacert
    --passphrase-file --password-file --dotenv-path --env-file"""
)
# Short options that read a file, per program and subcommand ("" for the program itself).
READING_SHORT: dict[tuple[str, str], str] = {
    ("git", "commit"): "Ft",
    ("git", "tag"): "F",
    ("git", "notes"): "F",
    ("git", "merge"): "F",
    ("git", "config"): "f",
    ("git", "grep"): "f",
    ("make", ""): "f",
    ("curl", ""): "dTKE",
    ("wget", ""): "i",
    ("grep", ""): "f",
    ("sed", ""): "f",
    ("awk", ""): "f",
    ("tar", ""): "T",
}
# git subcommands and options that run a program or script they are given.
_GIT_RUNS_OPTIONS: dict[str, frozenset[str]] = {
    "rebase": _set("-x --exec"),
    "difftool": _set("-x --extcmd -t --tool"),
    "mergetool": _set("-t --tool"),
    "grep": _set("-O --open-files-in-pager"),
    "fetch": _set("--upload-pack"),
    "pull": _set("--upload-pack"),
    "clone": _set("-u --upload-pack"),
    "ls-remote": _set("--upload-pack"),
    "push": _set("--receive-pack --exec"),
    "archive": _set("--exec"),
    "log": _set("--ext-diff --textconv"),
    "diff": _set("--ext-diff --textconv"),
    "show": _set("--ext-diff --textconv"),
}
_GIT_RUNS_SUBCOMMANDS = {
    ("bisect", "run"),
    ("submodule", "foreach"),
    ("filter-branch", None),
    ("instaweb", None),
}


# -- the reading ------------------------------------------------------------------------------
@dataclass(frozen=True)
class Run:
    """One command as it runs. `inner`: the commands it runs in turn (a wrapper's command, a
    shell script's commands, find -exec's, python -m's module); `opaque`: why what it runs
    cannot be read (interpreter code, a script file), or None."""

    words: tuple[str, ...]
    globs: tuple[bool, ...] = ()
    options: tuple[str, ...] = ()  # global options (with their values) before the subcommand
    subcommand: str | None = None
    args: tuple[str, ...] = ()  # after the subcommand (after the program when there is none)
    certain: bool = True  # the subcommand was found for sure
    wraps: str | None = None  # it runs a command it is given: how ("timeout", "sh -c")
    inner: tuple[Run, ...] = ()
    opaque: str | None = None
    moves: tuple[str, ...] = ()  # options that move it (another dir, config, program, file)
    runs: tuple[str, ...] = ()  # its own options that run a program or script
    reads: tuple[str, ...] = field(default=())  # options and words that read files
    guess: bool = False  # a later start of a wrapper's command, read in case it is the one

    @property
    def program(self) -> str:
        return self.words[0]

    @property
    def name(self) -> str:
        """The program's name without its directory (`/usr/bin/git` is git)."""
        return os.path.basename(self.words[0]) or self.words[0]

    def walk(self) -> list[Run]:
        """This command and every command it runs, outermost first."""
        found = [self]
        for run in self.inner:
            found += run.walk()
        return found

    def runs_first(self) -> list[Run]:
        """What it runs, as read (no guesses), outermost first."""
        found = [self]
        for run in self.inner:
            if not run.guess:
                found += run.runs_first()
        return found

    @property
    def said(self) -> str:
        """Its name for a sentence: the program, and the subcommand where it has one."""
        return f"{self.name} {self.subcommand}" if self.subcommand else self.name

    @property
    def direct(self) -> bool:
        """It runs as itself: no wrapper, no code lmd cannot read, no option moving it or
        running something it is given."""
        return not (self.wraps or self.opaque or self.moves or self.runs) and self.certain

    def key(self) -> tuple[str, ...]:
        """Its words without harmless global options: program, subcommand, the rest."""
        head = (self.program, self.subcommand) if self.subcommand is not None else (self.program,)
        return (*head, *self.args)


def read(command: str) -> list[Run]:
    """The commands a command line runs, each read through wrappers and global options;
    Unread when the line cannot be read (then nothing is known about it)."""
    return _read_line(command, 0)


def _read_line(command: str, depth: int) -> list[Run]:
    if depth > MAX_DEPTH:
        raise Unread("wrappers nested too deep")
    try:
        parts = simple_commands(command)
    except Unmodelled as e:
        raise Unread(str(e)) from None
    return [read_words(p.words, p.globs, depth) for p in parts]


def read_words(words: tuple[str, ...], globs: tuple[bool, ...] = (), depth: int = 0) -> Run:
    """One simple command's words (as bash passes them) read as it runs."""
    words = tuple(words)
    globs = tuple(globs) or (False,) * len(words)
    if not words:
        raise Unread("no program")
    name = os.path.basename(words[0]) or words[0]
    runs_others = name in SHELLS or name in WRAPPERS or name in INTERPRETERS or name == "find"
    if depth > MAX_DEPTH and (runs_others or _PYTHON.fullmatch(name)):
        return Run(words, globs, args=words[1:], opaque="wrappers nested too deep to read")
    if name in SHELLS:
        return _shell(words, globs, depth)
    if name in WRAPPERS:
        return _wrapper(name, words, globs, depth)
    if _PYTHON.fullmatch(name) or name in INTERPRETERS:
        return _interpreter(name, words, globs, depth)
    if name == "find":
        return _find(words, globs, depth)
    grammar = GRAMMARS.get(name)
    if grammar is not None or name in SUBCOMMAND_PROGRAMS:
        return _with_subcommand(name, words, globs, grammar or Grammar(), depth)
    return Run(words, globs, args=words[1:], reads=_reads(name, "", words[1:]))


def _with_subcommand(
    name: str, words: tuple[str, ...], globs: tuple[bool, ...], g: Grammar, depth: int
) -> Run:
    """A program with subcommands: its global options, then the subcommand."""
    options: list[str] = []
    moves: list[str] = []
    certain = True
    i = 1
    while i < len(words):
        word = words[i]
        if word == "--":
            i += 1
            break
        if not word.startswith("-") or word == "-":
            break
        opt, attached = _split_option(word, g)
        taken = [word]
        if opt in g.value and not attached and i + 1 < len(words):
            taken.append(words[i + 1])
        elif opt in g.optional and not attached and _at(words, i + 1).isdigit():
            taken.append(words[i + 1])  # make -j 4: a number after it is its value
        elif opt not in g.value and opt not in g.flags and opt not in g.optional:
            if opt not in g.moving:
                certain = False  # an option lmd does not know: it may take the next word
        if opt in g.moving:
            moves.append(" ".join(taken))
        options += taken
        i += len(taken)
    sub = words[i] if i < len(words) else None
    args = words[i + 1 :] if sub is not None else ()
    if sub is not None and g.subcommands is not None and sub not in g.subcommands:
        certain = False  # an alias or a plug-in: it could be any subcommand
    if name in ("make", "gmake"):
        # make's NAME=value words override the Makefile's variables (CC=, SHELL=): what runs
        tail = (sub, *args) if sub is not None else ()
        moves += [w for w in tail if _ASSIGNMENT.match(w)]
        if sub is not None and _ASSIGNMENT.match(sub):
            plain = [k for k, w in enumerate(tail) if not _ASSIGNMENT.match(w) and w[:1] != "-"]
            sub, args = (tail[plain[0]], tail[plain[0] + 1 :]) if plain else (None, tail)
    if g.anywhere:
        for j, word in enumerate(args):
            opt, attached = _split_option(word, g) if word.startswith("-") else ("", "")
            if opt in g.moving:
                value = word if attached or opt not in g.value else f"{word} {_at(args, j + 1)}"
                moves.append(value)
    runs: list[str] = []
    inner: list[Run] = []
    if name == "git" and sub is not None:
        runs, inner = _git_runs(sub, args, depth)
    reads = _reads(name, sub or "", args) + _reads(name, "", tuple(options))
    return Run(
        words,
        globs,
        options=tuple(options),
        subcommand=sub,
        args=tuple(args),
        certain=certain,
        inner=tuple(inner),
        moves=tuple(moves),
        runs=tuple(runs),
        reads=reads,
    )


_ASSIGNMENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\+?=")


def _at(words: tuple[str, ...], i: int) -> str:
    return words[i] if i < len(words) else ""


def _split_option(word: str, g: Grammar) -> tuple[str, str]:
    """(the option, its attached value): `--git-dir=x` -> (--git-dir, x); `-Cdir` -> (-C,
    dir) when -C takes a value; `-j4` -> (-j, 4) when -j's value is optional."""
    if word.startswith("--") or (word.startswith("-") and word[1:2].isalpha() and "=" in word):
        opt, eq, value = word.partition("=")
        return opt, value if eq else ""
    short = word[:2]
    if len(word) > 2 and (short in g.value or short in g.optional or short in g.moving):
        return short, word[2:]
    if word in g.value or word in g.flags or word in g.moving or word in g.optional:
        return word, ""
    return word, ""


def _git_runs(sub: str, args: tuple[str, ...], depth: int) -> tuple[list[str], list[Run]]:
    """git's own options and subcommands that run a program or script they are given."""
    runs: list[str] = []
    inner: list[Run] = []
    watched = _GIT_RUNS_OPTIONS.get(sub, frozenset())
    for j, word in enumerate(args):
        opt, eq, value = word.partition("=")
        if opt in watched or any(
            opt.startswith("--") and len(opt) > 3 and w.startswith(opt) for w in watched
        ):
            script = value if eq else _at(args, j + 1)
            runs.append(word)
            if opt in ("-x", "--exec", "--extcmd") or opt.startswith("--ex"):
                inner += _script(script, depth)
    first = args[0] if args else None
    if (sub, first) in _GIT_RUNS_SUBCOMMANDS or (sub, None) in _GIT_RUNS_SUBCOMMANDS:
        runs.append(f"{sub} {first or ''}".strip())
        rest = args[1:] if (sub, first) in _GIT_RUNS_SUBCOMMANDS else ()
        if sub == "bisect" and rest:
            inner.append(read_words(rest, depth=depth + 1))
        elif sub == "submodule" and rest:
            inner += _script(" ".join(rest), depth)
    return runs, inner


def _script(script: str, depth: int) -> list[Run]:
    """A shell script given as a word: its commands, or one opaque run when it cannot be
    read (so nothing allows it, and what reads it knows it is unknown)."""
    try:
        return _read_line(script, depth + 1)
    except Unread as e:
        return [Run(("sh", "-c", script), opaque=f"a script lmd cannot read ({e})")]


def _shell(words: tuple[str, ...], globs: tuple[bool, ...], depth: int) -> Run:
    """`bash -c 'script' ...`, `sh -ec '...'`, `bash script.sh`, `sh` (stdin)."""
    command_mode = False
    i = 1
    while i < len(words):
        word = words[i]
        if word == "--":
            i += 1
            break
        if word in ("-o", "+o", "-O", "+O", "--rcfile", "--init-file"):
            i += 2
            continue
        if word.startswith("--"):
            if word == "--command":
                command_mode = True
            i += 1
            continue
        if word[:1] in "-+" and len(word) > 1:
            command_mode = command_mode or "c" in word[1:]
            i += 1
            continue
        break
    how = f"{os.path.basename(words[0])} -c"
    if command_mode and i < len(words):
        inner = _script(words[i], depth)
        return Run(words, globs, args=words[1:], wraps=how, inner=tuple(inner))
    what = "a script file" if i < len(words) else "what it reads from its input"
    return Run(words, globs, args=words[1:], wraps=how, opaque=f"the shell runs {what}")


def _wrapper(name: str, words: tuple[str, ...], globs: tuple[bool, ...], depth: int) -> Run:
    """A program that runs a command given in its arguments."""
    values = WRAPPERS[name]
    args = words[1:]
    if name == "command" and any(a in ("-v", "-V") for a in args[:2]):
        return Run(words, globs, args=args)  # `command -v git` only says where git is
    if name == "exec" and not args:
        return Run(words, globs, args=args)
    inner: list[Run] = []
    scripts = _SCRIPT_OPTIONS.get(name, frozenset())
    for j, word in enumerate(args):  # a script option may stand anywhere (flock FILE -c ...)
        opt, eq, value = word.partition("=")
        if opt in scripts:
            inner += _script(value if eq else _at(args, j + 1), depth)
        elif not opt.startswith("--") and opt[:2] in scripts and len(opt) > 2:
            inner += _script(word[2:], depth)  # -c'script' written together
    i = 0
    while i < len(args):
        word = args[i]
        if word == "--":
            i += 1
            break
        if not word.startswith("-") or word == "-":
            if name == "env" and "=" in word:
                i += 1  # NAME=VALUE: the environment of the command
                continue
            break
        opt, eq, _ = word.partition("=")
        attached = eq or (not opt.startswith("--") and len(opt) > 2 and opt[:2] in values)
        i += 2 if opt in values and not attached else 1
    rest = args[i + _LEADING.get(name, 0) :]
    if name == "trap":
        inner += _script(args[0], depth) if args else []
    elif name in _JOINED:
        if rest if name == "ssh" else args[i:]:
            inner += _script(" ".join(rest if name == "ssh" else args[i:]), depth)
    elif name == "xargs":
        inner.append(read_words(rest or ("echo",), depth=depth + 1))
    elif rest:
        inner += _every_start(rest, depth)
    return Run(words, globs, args=args, wraps=name, inner=tuple(inner))


def _every_start(rest: tuple[str, ...], depth: int) -> list[Run]:
    """The command a wrapper runs begins at its first plain word; an option lmd does not know
    could take that word as its value, so each later plain word is read as a start too (ask
    and forbid rules then hold wherever the command begins). Those are read shallowly (no
    wrapper inside them is opened), which bounds the work."""
    found = [read_words(rest, depth=depth + 1)]
    for j in range(1, min(len(rest), MAX_STARTS)):
        if not rest[j].startswith("-"):
            found.append(replace(read_words(rest[j:], depth=MAX_DEPTH + 1), guess=True))
    return found


def _find(words: tuple[str, ...], globs: tuple[bool, ...], depth: int) -> Run:
    """find's -exec, -execdir, -ok and -okdir run the command up to `;` or `+`."""
    inner: list[Run] = []
    i = 1
    while i < len(words):
        if words[i] in ("-exec", "-execdir", "-ok", "-okdir"):
            end = i + 1
            while end < len(words) and words[end] not in (";", "+"):
                end += 1
            if end > i + 1:
                inner += _every_start(words[i + 1 : end], depth)
            i = end + 1
            continue
        i += 1
    execs = any(w in ("-exec", "-execdir", "-ok", "-okdir") for w in words[1:])
    wraps = "find -exec" if execs else None
    return Run(words, globs, args=words[1:], wraps=wraps, inner=tuple(inner))


def _interpreter(name: str, words: tuple[str, ...], globs: tuple[bool, ...], depth: int) -> Run:
    """Code given to an interpreter cannot be read; `python -m MODULE` runs that module."""
    args = words[1:]
    if _PYTHON.fullmatch(name) and len(args) >= 2 and args[0] == "-m":
        module = read_words(args[1:], depth=depth + 1)
        return Run(words, globs, args=args, inner=(module,), reads=_reads(name, "", args))
    return Run(words, globs, args=args, opaque=f"{name} runs code it is given")


def _reads(name: str, sub: str, args: tuple[str, ...]) -> tuple[str, ...]:
    """The options and words among `args` that read a file."""
    short = READING_SHORT.get((name, sub), "") + (READING_SHORT.get((name, ""), "") if sub else "")
    packages = name in ("npm", "npx", "pnpm", "yarn", "bun")
    at_files = name not in ("git",)  # to git, @ is HEAD (`git diff @~1`), never a file
    found = []
    for word in args:
        if word.startswith("--") and len(word) > 2:
            opt = word.partition("=")[0]
            named = opt[2:]
            if (
                re.search(r"(?<!pro)file", named)  # --file, --pathspec-from-file; not --profile
                or "from" in named
                or (len(named) >= 2 and any(r.startswith(opt) for r in READING_LONG))
            ):
                found.append(word)
        elif word.startswith("-") and len(word) > 1 and short and word[1] != "-":
            letters = word[1:] if word[1:].isalpha() else word[1]
            if any(c in short for c in letters):  # -F, and bundled: -aF
                found.append(word)
        elif word.startswith("@") and len(word) > 1 and at_files:
            rest = word[1:]
            if not packages or rest.startswith(("/", "~", ".")):
                found.append(word)
        elif "=@" in word:
            found.append(word)
    return tuple(found)


# -- matching a pattern -----------------------------------------------------------------------
def pattern_run(words: tuple[str, ...]) -> Run:
    """A rule's pattern read as a command."""
    return read_words(tuple(words))


def restricts(pattern: Run, run: Run) -> bool | None:
    """Does an ask or forbid pattern hold for `run` (one command a line runs, wrappers'
    insides included)? True: it does; None: it may (the reading is unsure, e.g. an alias);
    False: it does not. Broad on purpose: the program by name wherever it lives, a glob that
    could be the word, options in any order and bundle, long options abbreviated."""
    globbed = bool(run.globs and run.globs[0])
    if not _word_is(run.name, globbed, pattern.name):
        return False
    maybe = False
    if globbed and run.name != pattern.name:  # `g*t push` may be git push: read it so
        run = read_words((pattern.name, *run.words[1:]), (False, *run.globs[1:]), MAX_DEPTH)
        maybe = True
    if pattern.subcommand is not None:
        sub = run.subcommand
        if sub is not None and _glob_of(run, sub):
            if not fnmatch.fnmatchcase(pattern.subcommand, sub):
                return False  # a glob becomes only names it matches
            maybe = maybe or sub != pattern.subcommand
        elif sub != pattern.subcommand:
            unknown = sub is None or sub not in _known(run.name)
            if run.certain or not (unknown or pattern.subcommand in run.args):
                return False
            maybe = True  # an alias, or after an option lmd does not know: it may be
        wanted = pattern.args
        have = run.args
    else:
        wanted = pattern.args if not pattern.options else (*pattern.options, *pattern.args)
        have = run.words[1:]
    for w in wanted:
        found = _present(w, have, run)
        if found is False:
            return False
        maybe = maybe or found is None
    return None if maybe else True


def _known(name: str) -> frozenset[str]:
    g = GRAMMARS.get(name)
    return g.subcommands if g is not None and g.subcommands is not None else frozenset()


def _glob_of(run: Run, word: str) -> bool:
    for w, g in zip(run.words, run.globs, strict=False):
        if w == word:
            return g
    return False


def _word_is(word: str, globbed: bool, wanted: str) -> bool:
    if word == wanted:
        return True
    return globbed and fnmatch.fnmatchcase(wanted, word)


def _home(word: str) -> str:
    """A path word as the path it names: ~ expanded, `//x/./` is /x (other words as they are)."""
    if word == "~" or word.startswith("~/"):
        word = os.path.expanduser("~") + word[1:]
    if word.startswith("/"):
        return os.path.normpath("/" + word.lstrip("/"))
    return word


_BUNDLE = re.compile(r"-[A-Za-z]+")


def _present(wanted: str, have: tuple[str, ...], run: Run) -> bool | None:
    """Is the pattern's word among the command's words, read as the program reads them?
    None: a glob among them may become it."""
    letters = {c for w in have if _BUNDLE.fullmatch(w) for c in w[1:]}
    if wanted.startswith("--") and len(wanted) > 2:
        name = wanted.partition("=")[0]
        for w in have:
            opt = w.partition("=")[0]
            if w == wanted or (opt.startswith("--") and len(opt) > 2 and name.startswith(opt)):
                if "=" not in wanted or w.partition("=")[2] == wanted.partition("=")[2]:
                    return True
        return False
    if _BUNDLE.fullmatch(wanted):
        return all(c in letters for c in wanted[1:])
    target = _home(wanted)
    maybe = False
    for w in have:
        if w == wanted or _home(w) == target:
            return True
        if _glob_of(run, w) and _glob_may_be(w, target):
            maybe = True
    return None if maybe else False


def _glob_may_be(glob: str, path: str) -> bool:
    """Could bash's expansion of `glob` be `path`? A * or ? never crosses a slash."""
    a, b = _home(glob).split("/"), path.split("/")
    return len(a) == len(b) and all(fnmatch.fnmatchcase(y, x) for x, y in zip(a, b, strict=True))


def allows(pattern: Run, run: Run) -> bool:
    """Does an allow pattern cover `run`, a command the line runs? Only a command that runs
    directly (no wrapper, no interpreter code, no option that moves it or runs something
    given), by the same program word (no other path), with the pattern's subcommand for sure
    and the pattern's further words as the first words after it (global options known to be
    harmless aside)."""
    if not run.direct or (run.inner and not python_module(run)):
        return False
    if run.program != pattern.program:
        return False
    if pattern.options:  # a pattern with global options: its words begin the command's
        matched = len(pattern.words)
        if run.words[:matched] != pattern.words:
            return False
    else:
        if pattern.subcommand is not None and run.subcommand != pattern.subcommand:
            return False
        want = pattern.key()
        if run.key()[: len(want)] != want:
            return False
        matched = 1 + len(run.options) + (run.subcommand is not None) + len(pattern.args)
    # a glob in the matched words is not final: `g*t` is not git to an allow rule
    return not any(run.globs[:matched])


def python_module(run: Run) -> bool:
    """python -m MODULE: its one inner run is the module it names, not a wrapper's command."""
    return bool(_PYTHON.fullmatch(run.name)) and run.args[:1] == ("-m",) and len(run.args) > 1


def why_no_rule(run: Run) -> str | None:
    """Why no allow rule can hold this command, in words fit for a sentence; None when one can."""
    if run.opaque:
        return f"{run.opaque}, and a rule never covers what such a program runs"
    if run.wraps:
        return (
            f"{run.name} runs another command it is given, and a rule never covers what such a "
            "program runs"
        )
    if run.moves:
        return (
            f"the option {run.moves[0]} changes where {run.name} works or what it reads, and a "
            "rule never covers a command that says so"
        )
    if run.runs:
        return (
            f"the option {run.runs[0]} makes {run.name} run a program it is given, and a rule "
            "never covers that"
        )
    if not run.certain:
        return f"I cannot tell which {run.name} command it is"
    return None


@lru_cache(maxsize=256)
def _cached(command: str) -> tuple[Run, ...]:
    return tuple(read(command))


def read_cached(command: str) -> list[Run]:
    """read(), remembered for the last few command lines (a turn reads one several times)."""
    return list(_cached(command))


def stdin_files(command: str) -> tuple[str, ...]:
    """The files a command line feeds to a command's input (`< file`): read by it."""
    if "<" not in command:
        return ()

    parser = _parser(tree_sitter, tree_sitter_bash)
    tree = parser.parse(join_continuations(command).encode("utf-8", "surrogatepass"))
    found: list[str] = []

    def walk(node: Any) -> None:
        if node.type == "file_redirect":
            kinds = [c.type for c in node.children]
            if "<" in kinds:
                found.append(node.children[-1].text.decode("utf-8", "replace"))
        for child in node.children:
            walk(child)

    walk(tree.root_node)
    return tuple(found)


@lru_cache(maxsize=1)
def _parser(tree_sitter: Any, tree_sitter_bash: Any) -> Any:
    return tree_sitter.Parser(tree_sitter.Language(tree_sitter_bash.language()))
