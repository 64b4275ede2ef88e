"""Dictated requests with exact targets: how often marat's first proposed command contains
every target exactly (paths, flags, identifiers, programs), with lmd's dictation hint and
without it (issue 38 item 5). Prints numbers and ratios measured in this run; asserts
nothing.

Each request is said as a speech engine writes it ("git check out dash b feature slash
login") to a live daemon whose marat asks before every command (marat_approval always), in a
git repository with files and branches, with a few programs on PATH and one entry in the
user's dictionary (kube cuddle: kubectl). The command marat asks about is compared with the
request's targets; nothing runs.

Backends:
  --embedded   the embedded model (SmolLM2-135M-Instruct through lmd's launcher), started here
  --stand-in   the scripted stand-in as a literal transcriber: it proposes the request's words
               as the command, with the hint's rewritings applied when a hint is there (what a
               model that follows the hint exactly would get; the harness's own check)
Both by default. Options: --quick (the first 8 requests), --loops N (max_thought_loops).

Run: .venv/bin/python benchmarks/bench_dictation.py [--embedded|--stand-in] [--quick]
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.daemons import LiveDaemon, configure  # noqa: E402
from tests.fake_backend import FakeBackend  # noqa: E402

QUICK = "--quick" in sys.argv
LOOPS = int(sys.argv[sys.argv.index("--loops") + 1]) if "--loops" in sys.argv else 2
GIT = {"GIT_AUTHOR_NAME": "Ada", "GIT_AUTHOR_EMAIL": "ada@example.com",
       "GIT_COMMITTER_NAME": "Ada", "GIT_COMMITTER_EMAIL": "ada@example.com"}  # fmt: skip


@dataclass(frozen=True)
class Request:
    said: str  # as a speech engine writes it
    targets: tuple[str, ...]  # each must be in the proposed command, exactly


REQUESTS = [
    Request("git check out dash b feature slash login", ("checkout", "-b", "feature/login")),
    Request("show the first ten lines of daemon slash core dot pie", ("daemon/core.py",)),
    Request(
        "run pie test on tests slash test underscore login dot pie",
        ("pytest", "tests/test_login.py"),
    ),  # fmt: skip
    Request(
        "count the lines in plugins slash marat slash loop dot pie", ("plugins/marat/loop.py",)
    ),  # fmt: skip
    Request(
        "kube cuddle get pods dash dash all dash namespaces", ("kubectl", "--all-namespaces")
    ),  # fmt: skip
    Request("print the name field of package dot jason with jay queue", ("jq", "package.json")),
    Request("show read me dot md", ("README.md",)),
    Request("git diff dash dash stat", ("--stat",)),
    Request("list the files with el ess dash la", ("ls", "-la")),
    Request("delete the branch feature slash login", ("feature/login",)),
    Request("grep for parse underscore header in the source folder", ("parse_header",)),
    Request("show the make file", ("Makefile",)),
    Request("tail dash n twenty daemon slash core dot pie", ("-n", "daemon/core.py")),
    Request("show disk usage of docs with du dash s h", ("du", "docs")),
    Request("count the words in docs slash voice dot md", ("docs/voice.md",)),
    Request("git log dash dash one line dash five", ("--oneline", "-5")),
]


def make_world(root: Path) -> tuple[Path, Path]:
    """A git repository with files and branches, and a folder of programs for PATH."""
    repo = root / "proj"
    for rel in ("daemon/core.py", "plugins/marat/loop.py", "src/parse_header.py",
                "tests/test_login.py", "README.md", "docs/voice.md", "Makefile",
                "package.json"):  # fmt: skip
        (repo / rel).parent.mkdir(parents=True, exist_ok=True)
        (repo / rel).write_text('{"name": "demo"}\n' if rel.endswith(".json") else "x\n")
    env = {**os.environ, **GIT}
    subprocess.run(["git", "init", "-q", "-b", "main", str(repo)], check=True, env=env)
    subprocess.run(["git", "-C", str(repo), "add", "-A"], check=True, env=env)
    subprocess.run(["git", "-C", str(repo), "commit", "-qm", "x"], check=True, env=env)
    subprocess.run(["git", "-C", str(repo), "branch", "feature/login"], check=True, env=env)
    bin_dir = root / "bin"
    bin_dir.mkdir()
    for program in ("pytest", "kubectl", "jq", "rg"):
        (bin_dir / program).write_text("#!/bin/sh\n")
        (bin_dir / program).chmod(0o755)
    return repo, bin_dir


def call(d: LiveDaemon, method: str, path: str, text: str = "", session: str = "s") -> dict:
    req = urllib.request.Request(
        d.url + path,
        data=text.encode() if method != "GET" else None,
        headers={"Accept": "application/json", "X-Session": session},
        method=method,
    )
    try:
        with urllib.request.urlopen(req, timeout=600) as r:
            return json.loads(r.read() or b"{}")
    except urllib.error.HTTPError as e:  # a turn that failed: its sentence, no command
        return {"error": e.read().decode(errors="replace")}


def transcriber(body: dict) -> str:
    """The stand-in's model: the request's words as the command, the hint applied if any."""
    messages = body.get("messages") or []
    system = "\n".join(m["content"] for m in messages if m["role"] == "system")
    said = next(m["content"] for m in reversed(messages) if m["role"] == "user")
    command = said
    m = re.search(r"spoken punctuation written out: (.+)", system)
    if m:
        command = m.group(1)
    for heard, meant in re.findall(r'- "([^"]+)": (\S+) \(', system):
        command = re.sub(rf"\b{re.escape(heard)}\b", meant, command, flags=re.I)
    return f"Thought: I run it.\nAction:\n```bash\n{command}\n```"


def run(d: LiveDaemon, requests: list[Request], hints: bool, tag: str) -> tuple[int, float]:
    call(d, "PUT", "/settings/dictation_hints", "true" if hints else "false")
    hits, started = 0, time.perf_counter()
    for i, r in enumerate(requests):
        body = call(d, "POST", "/v1", f"marat {r.said}", session=f"{tag.split()[0]}-{hints}-{i}")
        command = (body.get("pending") or {}).get("command") or ""
        if "error" in body:
            print(f"    (failed: {body['error'][:150]})")
        ok = all(t in command for t in r.targets)
        hits += ok
        mark = "ok  " if ok else "miss"
        print(f"    {mark} {'hint' if hints else 'bare'} {r.said!r} -> {command[:70]!r}")
    return hits, time.perf_counter() - started


def bench(name: str, d: LiveDaemon, requests: list[Request]) -> None:
    print(f"\n{name}: {len(requests)} dictated requests, marat's first proposed command")
    bare, bare_s = run(d, requests, False, name)
    hinted, hint_s = run(d, requests, True, name)
    n = len(requests)
    print(f"  without the hint: {bare}/{n} commands hold every target ({bare / n:.0%}), "
          f"{bare_s / n:.1f} s a request")  # fmt: skip
    print(f"  with the hint:    {hinted}/{n} ({hinted / n:.0%}), {hint_s / n:.1f} s a request")
    ratio = f"{hinted / bare:.2f}x" if bare else "from none"
    print(f"  ratio with/without: {ratio} (+{hinted - bare} requests)")


def daemon_for(
    home: Path, repo: Path, bin_dir: Path, env: dict | None = None, **settings: object
) -> LiveDaemon:
    configure(home, marat_approval="always", marat_start_dir=str(repo),
              max_thought_loops=LOOPS, **settings)  # fmt: skip
    path = f"{bin_dir}{os.pathsep}{os.environ['PATH']}"
    d = LiveDaemon(home, {"LMD_TOKENIZER": "estimate", "PATH": path, **(env or {})})
    subprocess.run(
        [sys.executable, "-m", "daemon.cli", "words", "add", "kube cuddle", "kubectl",
         "--home", str(home)],
        check=True, capture_output=True, cwd=ROOT,
    )  # fmt: skip
    return d


def main() -> None:
    which = [a for a in ("--embedded", "--stand-in") if a in sys.argv] or [
        "--stand-in",
        "--embedded",
    ]
    requests = REQUESTS[:8] if QUICK else REQUESTS
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        repo, bin_dir = make_world(root)
        if "--stand-in" in which:
            backend = FakeBackend().start()
            backend.handler = transcriber
            d = daemon_for(root / "home-stand-in", repo, bin_dir,
                           openai_chat_endpoint=backend.url, openai_model="fake-model",
                           action_protocol="text", llm_max_retries=0)  # fmt: skip
            try:
                bench("stand-in (literal transcriber)", d, requests)
            finally:
                d.stop()
                backend.stop()
        if "--embedded" in which:
            from tests.real_model import configure_real_home, start_real_model

            server = start_real_model()
            home = configure_real_home(root / "home-embedded", server)
            key = {"OPENAI_API_KEY": server.key}
            d = daemon_for(home, repo, bin_dir, key, action_protocol="auto")
            try:
                bench("embedded model (SmolLM2-135M-Instruct)", d, requests)
            finally:
                d.stop()
                server.stop()


if __name__ == "__main__":
    main()
