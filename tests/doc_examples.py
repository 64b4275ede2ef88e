"""Every example of README.md and docs/*.md, run as written. sybil finds them (the root
conftest.py hands it to pytest, and pyproject.toml's testpaths name the pages), so each block
is a test item named by its page and line, e.g. `docs/knob.md::line:5,column:1`.

How a page runs (one set-up per page, shared by its blocks, in order):

- Its home: a temporary directory that is $HOME and the working directory, so `~` and the
  default LMD_HOME (~/.local/share/lmd) are the test's own. The checkout's examples/ folder
  (company.db, alpaca.jsonl, questions.csv, ...: the files the examples name) is copied there,
  as a user runs the examples from the checkout.
- Its model: the stand-in backend (tests/fake_backend.py), configured in that LMD_HOME.
- Its daemon: a live `lmd serve` of the page's own on a free port, started by the first block
  that runs (forked warm, like `lmd` below; a LiveDaemon with LMD_DOCS_COLD=1). The docs'
  fixed address, http://127.0.0.1:8420 (or localhost:8420), is rewritten to that daemon in
  every block, and LMD_URL points `lmd` at it. In what a command prints, the
  daemon's address reads http://127.0.0.1:8420 again, the stand-in's reads
  http://127.0.0.1:8000/v1 and the home reads /home/me, as the pages show them.
- ```sh blocks run with bash (aliases on), one process per block, PATH with this
  environment's bin first (so `lmd` is the checkout's). Each command must exit 0. `lmd` runs
  warm: forked from a process that imported lmd once (tests/warm_lmd.py says why that is the
  same command; pages that add no environment share that process); LMD_DOCS_COLD=1 runs the
  installed script instead.
- A command's shown output is the comment lines right under it that start with `#  ` (a hash
  and two spaces) or are a bare `#`; other comments are prose. All of the output is checked,
  whitespace ignored (pages wrap lines and space out JSON), `...` standing for any text.
- ```python blocks run in this process, in one namespace per page, with the same address
  rewritten, the page's home as the working directory and $HOME, and LMD_URL set.
- Hidden set-up, `<!-- invisible-code-block: python ... -->`, runs like a python block with
  `backend` (queue the stand-in's replies, or set its handler), `env` (variables for the
  blocks after it; a change restarts the daemon), `work` (the page's home) and `page` (e.g.
  `page.cwd`, where sh blocks run) at hand. `<!-- invisible-code-block: sh ... -->` runs
  commands the page does not show (e.g. to make the parts that a merge example merges).
- `<!-- skip: next "why" -->` skips the next block, and the test report gives the reason;
  `<!-- skip: next if(not sandbox, "why") -->` only where there is no bubblewrap sandbox
  (`shared`: where ../shared/data is).
"""

from __future__ import annotations

import contextlib
import functools
import json
import math
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from sybil import Example, Sybil
from sybil.parsers.markdown import CodeBlockParser, SkipParser

from tests.daemons import ROOT, SHARED, LiveDaemon, bwrap_reason, configure_fake, free_port
from tests.fake_backend import FakeBackend, Reply
from tests.warm_lmd import WarmLmd

DOCS_ADDRESS = re.compile(r"(?:http://)?(?:127\.0\.0\.1|localhost):8420")
SHOWN_HOME = "/home/me"
SHOWN_BACKEND = "http://127.0.0.1:8000/v1"  # a local model server, as the docs name one
BIN = Path(sys.executable).parent
BLOCK_TIMEOUT = 120  # seconds a whole block may take (its commands talk to a stand-in)
# What the developer's shell may hold that would point an example elsewhere.
FOREIGN = ("ENSEMBLE", "AGGREGATION", "THINKING", "SERVER_URL", "API_TOKEN", "MODEL")


def clean_environ() -> dict[str, str]:
    """os.environ without the developer's lmd and OpenAI variables."""
    return {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("LMD_", "OPENAI_", "XDG_")) and k not in FOREIGN
    }


# -- the page's world -------------------------------------------------------------------------


@dataclass
class Page:
    """A page's home, stand-in backend and (once needed) live daemon."""

    root: Path
    backend: FakeBackend
    env: dict[str, str] = field(default_factory=dict)
    daemon: LiveDaemon | WarmDaemon | None = None
    daemon_env: dict[str, str] = field(default_factory=dict)  # `env` when it started
    warm: WarmLmd | None = None
    warm_env: dict[str, str] = field(default_factory=dict)
    py: dict = field(default_factory=dict)  # the namespace of the page's python blocks
    text: str = ""  # the page's markdown
    cwd: Path | None = None  # where sh blocks run (hidden set-up may move it); default: home

    def block(self, lang: str, n: int = 0) -> str:
        """The text of the page's n-th ```lang block (hidden set-up saves one as a file)."""
        return re.findall(rf"^```{lang}\n(.*?)^```", self.text, re.M | re.S)[n]

    @property
    def work(self) -> Path:
        return self.root / "me"

    @property
    def lmd_home(self) -> Path:
        return self.work / ".local" / "share" / "lmd"

    def environ(self) -> dict[str, str]:
        """The environment every example runs in."""
        env = {
            **clean_environ(),
            "HOME": str(self.work),
            "PATH": f"{BIN}:{os.environ.get('PATH', '/usr/bin:/bin')}",
            "LMD_TOKENIZER": "estimate",
            **self.env,
        }
        if self.daemon:
            env["LMD_URL"] = self.daemon.url
        return env

    def start_daemon(self) -> LiveDaemon:
        """The page's daemon; started anew when hidden set-up changed `env` since (e.g. put
        a plugin on PYTHONPATH), as a user restarts theirs."""
        if self.daemon is not None and self.daemon_env != self.env:
            self.stop_daemon()
        if self.daemon is None and self.warm_bin():  # forked warm, as `lmd` is
            self.daemon = WarmDaemon(self.warm, self.lmd_home, self.environ())
            self.daemon_env = dict(self.env)
        if self.daemon is None:
            saved = dict(os.environ)
            try:  # LiveDaemon starts from os.environ
                os.environ.clear()
                os.environ.update(self.environ())
                self.daemon = LiveDaemon(self.lmd_home)
                self.daemon_env = dict(self.env)
            finally:
                os.environ.clear()
                os.environ.update(saved)
        return self.daemon

    def warm_bin(self) -> Path | None:
        """The directory of the warm `lmd` (tests/warm_lmd.py), started or restarted with the
        page's environment; None with LMD_DOCS_COLD=1 (then the installed script runs)."""
        if os.environ.get("LMD_DOCS_COLD") == "1":
            return None
        if self.warm is not None and self.warm_env != self.env:
            self.stop_daemon()  # it came from the old warm process
            if self.warm is not _SHARED_WARM.get("plain"):
                self.warm.stop()
            self.warm = None
        if self.warm is None:
            # Pages whose set-up adds no environment share one warm process per test process
            # (each command gets the page's environment, directory and streams anyway): its
            # imports, some two seconds of CPU, are paid once rather than once a page.
            self.warm = shared_warm(self.environ()) if not self.env else (
                WarmLmd(self.root / "warm", self.environ()).start())  # fmt: skip
            self.warm_env = dict(self.env)
        return self.warm.bin

    def stop_daemon(self) -> None:
        if self.daemon:
            self.daemon.stop()
            self.daemon.log.close()
            self.daemon = None

    def rewrite(self, source: str) -> str:
        """The docs' fixed address -> this page's daemon."""
        port = self.start_daemon().port
        return DOCS_ADDRESS.sub(lambda m: m[0].replace("8420", str(port)).replace(
            "localhost", "127.0.0.1"), source)  # fmt: skip

    def as_shown(self, output: str) -> str:
        """What a command printed, with the daemon's address and the home as the docs show."""
        if self.daemon:
            output = output.replace(f"127.0.0.1:{self.daemon.port}", "127.0.0.1:8420")
        output = output.replace(self.backend.url, SHOWN_BACKEND)
        return output.replace(str(self.work), SHOWN_HOME)

    @contextlib.contextmanager
    def inside(self) -> Iterator[None]:
        """This process, for a python block: the page's cwd and environment, then back."""
        saved_env, saved_cwd = dict(os.environ), os.getcwd()
        os.environ.clear()
        os.environ.update(self.environ())
        os.chdir(self.work)
        try:
            yield
        finally:
            os.chdir(saved_cwd)
            os.environ.clear()
            os.environ.update(saved_env)

    def close(self) -> None:
        if self.warm is not None and self.warm is not _SHARED_WARM.get("plain"):
            self.warm.stop()
        self.stop_daemon()
        self.backend.stop()
        shutil.rmtree(self.root, ignore_errors=True)


_SHARED_WARM: dict[str, WarmLmd] = {}


def shared_warm(environ: dict[str, str]) -> WarmLmd:
    """The warm `lmd` of the pages that add no environment, started by the first of them
    (its environment is the first page's, but every command runs in its own page's) and
    stopped when the test process ends."""
    warm = _SHARED_WARM.get("plain")
    if warm is None or warm.proc is None or warm.proc.poll() is not None:
        import atexit

        directory = Path(tempfile.mkdtemp(prefix="lmd-docs-warm-"))
        warm = _SHARED_WARM["plain"] = WarmLmd(directory, environ).start()
        atexit.register(shutil.rmtree, directory, True)
        atexit.register(warm.stop)
    return warm


class WarmDaemon:
    """`lmd serve` on a free port, forked from the page's warm process (tests/warm_lmd.py)
    rather than started cold: the same daemon a second sooner, 20-odd times a run."""

    def __init__(self, warm: WarmLmd, home: Path, env: dict[str, str]) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = open(home.parent / f"lmd-serve-{self.port}.log", "w+b")  # noqa: SIM115
        argv = ["serve", "--bind", f"127.0.0.1:{self.port}", "--home", str(home)]
        self.pid = warm.spawn(argv, env, ROOT, self.log.fileno())
        deadline = time.monotonic() + 60
        while not self.ready():
            if time.monotonic() > deadline or not self.alive():
                self.stop()
                self.log.seek(0)
                raise RuntimeError(f"lmd serve did not start:\n{self.log.read().decode()}")
            time.sleep(0.05)  # nothing to await: the port opens when it is ready

    def ready(self) -> bool:
        try:
            with urllib.request.urlopen(self.url + "/healthz", timeout=1) as r:
                return r.status == 200
        except OSError:
            return False

    def alive(self) -> bool:
        try:
            state = Path(f"/proc/{self.pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            return False
        return state != "Z"

    def stop(self) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.kill(self.pid, signal.SIGKILL)  # its files are thrown away with the page


def docs_backend(body: dict) -> Reply | str | None:
    """The stand-in's default answers, by what is asked (a page's hidden set-up may queue
    others): a score where a score is asked, else a short sentence."""
    messages = body.get("messages") or []
    prompt = body.get("prompt") or (messages[-1].get("content") if messages else "") or ""
    if isinstance(prompt, list):
        prompt = json.dumps(prompt)
    if prompt.rstrip().endswith("Score:"):  # LM_SCORE's question
        return "10"
    if prompt.rstrip().endswith("The answer is:"):  # SelectIT's rating: 4 or 5, score 4.21
        top = [(" 5", math.log(0.21)), ("4", math.log(0.79))]
        return Reply("4", logprobs=[("4", math.log(0.79), top)])
    if "Score of Model 1" in prompt:  # the Elo judge prefers the first answer
        return "Score of Model 1: 1\nScore of Model 2: 0\nBrief Explanation: it is clearer."
    return None  # the queue, else "ok"


def setup_page(namespace: dict) -> None:
    backend = FakeBackend().start()
    backend.handler = docs_backend
    page = Page(Path(tempfile.mkdtemp(prefix="lmd-docs-")), backend)
    page.work.mkdir()
    os.chmod(page.root, 0o755)  # as root, sandboxed commands run as nobody: let them in
    configure_fake(page.lmd_home, backend)
    make_fixtures(page.work)
    page.py.update(page=page, backend=backend, env=page.env, work=page.work)
    # for skip conditions: the workplace's data beside the checkout, a real command sandbox
    namespace.update(page=page, shared=SHARED.is_dir(), sandbox=has_sandbox())


@functools.cache
def has_sandbox() -> bool:
    return bwrap_reason() is None


def teardown_page(namespace: dict) -> None:
    namespace["page"].close()


def make_fixtures(work: Path) -> None:
    """The files the examples name: the checkout's examples/ folder (its sample database,
    datasets and questions), where a user running the docs from the checkout finds it."""
    shutil.copytree(ROOT / "examples", work / "examples")
    # the home is a git repository (cobol works in one)
    git = ["git", "-c", "user.name=Me", "-c", "user.email=me@example.com"]
    subprocess.run([*git, "init", "-q", "-b", "main"], cwd=work, check=True)
    subprocess.run([*git, "add", "-A"], cwd=work, check=True)
    subprocess.run([*git, "commit", "-q", "-m", "Start"], cwd=work, check=True)
    (work / ".gitconfig").write_text("[user]\n\tname = Me\n\temail = me@example.com\n")
    (work / ".git" / "info" / "exclude").write_text(".gitconfig\n.local/\n.config/\n")
    if SHARED.is_dir():  # `../shared/data/...`, as from a checkout beside the workplace's data
        (work.parent / "shared").symlink_to(SHARED)


# -- sh blocks --------------------------------------------------------------------------------


@dataclass
class Step:
    """One command (possibly several lines) and the output the page shows under it."""

    line: int  # within the block, from 0
    source: str
    shown: list[str] = field(default_factory=list)


def is_shown_output(line: str) -> bool:
    stripped = line.strip()
    return stripped == "#" or stripped.startswith("#  ")


def complete(source: str) -> bool:
    """Whether bash reads `source` as whole commands (no open quote, loop or continuation)."""
    if source.rstrip().endswith("\\"):
        return False
    done = subprocess.run(["bash", "-n", "-c", source], capture_output=True)
    return done.returncode == 0


def steps_of(block: str) -> list[Step]:
    steps: list[Step] = []
    current: list[str] = []
    start = 0
    for i, line in enumerate(block.splitlines()):
        if not current:
            if is_shown_output(line) and steps:
                steps[-1].shown.append(line.strip()[1:].strip())
                continue
            if not line.strip() or line.lstrip().startswith("#"):
                continue  # prose
            start = i
        current.append(line)
        if complete("\n".join(current)):
            steps.append(Step(start, "\n".join(current)))
            current = []
    if current:
        steps.append(Step(start, "\n".join(current)))  # bash will say what is wrong
    return steps


def matches(shown: list[str], printed: str) -> bool:
    """The shown output against what was printed: whitespace ignored (pages wrap long lines
    and space out JSON), `...` any text."""
    pattern = "".join(  # line by line: a line's "." never joins the next line's "..."
        ".*?".join(re.escape(part) for part in "".join(line.split()).split("...")) for line in shown
    )
    return re.fullmatch(pattern, "".join(printed.split()), re.S) is not None


MARK = "\x1e"


def run_sh(example: Example) -> str | None:
    page: Page = example.namespace["page"]
    steps = steps_of(example.parsed)
    script = ["shopt -s expand_aliases"]
    for n, step in enumerate(steps):
        script.append(page.rewrite(step.source))
        script.append(f"printf '{MARK}%d %d{MARK}' {n} $?")
    env = page.environ()
    if warm := page.warm_bin():
        env["PATH"] = f"{warm}:{env['PATH']}"
    proc = subprocess.Popen(
        ["bash", "-c", "\n".join(script)],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=env,
        cwd=page.cwd or page.work,
        start_new_session=True,  # its own process group: nothing it started outlives it
    )
    try:
        printed, _ = proc.communicate(timeout=BLOCK_TIMEOUT)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        printed = proc.communicate()[0] + "\n[timed out]"
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
    parts = printed.split(MARK)  # output, "n rc", output, "n rc", ..., trailing output
    problems = []
    for n, step in enumerate(steps):
        where = f"line {example.line + 1 + step.line}: {step.source.splitlines()[0]}"
        if 2 * n + 1 >= len(parts):
            problems.append(f"{where}\n  did not finish; it printed:\n{parts[-1][-2000:]}")
            break
        output = page.as_shown(parts[2 * n])
        rc = int(parts[2 * n + 1].split()[1])
        if rc != 0:
            problems.append(f"{where}\n  exited {rc}; it printed:\n{output[-2000:]}")
        elif step.shown and not matches(step.shown, output):
            shown = "\n".join(step.shown)
            problems.append(f"{where}\n  the page shows:\n{shown}\n  it printed:\n{output[-2000:]}")
    return "\n\n".join(problems) or None


# -- python blocks ----------------------------------------------------------------------------


def run_python(example: Example) -> None:
    page: Page = example.namespace["page"]
    page.text = example.document.text
    if example.document.text.startswith("<!--", example.region.start):
        source = example.parsed  # hidden set-up: runs before any daemon is needed
    else:
        source = page.rewrite(example.parsed)
    # line numbers of a failure are the page's
    code = compile("\n" * example.line + source, example.path, "exec")
    with page.inside():
        exec(code, page.py)


sybil = Sybil(
    parsers=[
        CodeBlockParser("sh", evaluator=run_sh),
        CodeBlockParser("python", evaluator=run_python),
        SkipParser(),
    ],
    path=str(ROOT),
    patterns=["README.md", "docs/*.md"],
    setup=setup_page,
    teardown=teardown_page,
)
