"""`lmd doctor`: check the installation and explain each finding in a sentence.

Checks: other distributions owning lmd's import names, plugins, database path and integrity,
invalid settings, backend reachable (and its models), logprobs support, the tokenizer in use,
the command sandbox, the bind/token policy, a running daemon.
A "fail" makes the exit code 1; a "warn" does not (it limits a feature, lmd still works).
"""

from __future__ import annotations

import importlib
import json
import os
import re
import sqlite3
import stat
import urllib.error
import urllib.request
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from importlib.metadata import distributions, entry_points
from pathlib import Path
from typing import Any

from daemon.api import (
    PRIVATE_FILES,
    LmdError,
    Settings,
    api_key,
    backend_state,
    choose_backend,
    collect,
    command_backend,
    daemon_url,
    endpoint_from,
    get_plugin_manager,
    is_loopback,
    parse_bind,
    read_settings_table,
    sandbox,
    sandbox_state,
    tokens,
    wanted_plugins,
)

OK, WARN, FAIL = "ok", "warn", "fail"

# lmd's import packages have generic names: another distribution that installs one of them
# (python-daemon installs `daemon`) overwrites lmd's files, or lmd overwrites its, in a
# shared environment. pipx or uv give lmd an environment of its own.
LMD_PACKAGES = ("daemon", "plugins")


@dataclass
class Finding:
    check: str
    status: str  # ok, warn or fail
    message: str


def check_package_names(providers: Mapping[str, list[str]] | None = None) -> Finding:
    """No other installed distribution provides `daemon` or `plugins` (lmd's import names).

    `providers` maps import names to distributions (by default import_name_providers()).
    """
    if providers is None:
        providers = import_name_providers(frozenset(LMD_PACKAGES))
    clashes = []
    for package in LMD_PACKAGES:
        others = {d for d in providers.get(package, []) if _dist_key(d) != "lmd"}
        clashes += [f"{other} installs `{package}`" for other in sorted(others)]
    if clashes:
        return Finding(
            "packages",
            WARN,
            f"Another distribution uses lmd's import names ({'; '.join(clashes)}), so one "
            "replaces or hides the other in this environment. Install lmd on its own with "
            "`pipx install .` or `uv tool install .` from its clone.",
        )
    return Finding(
        "packages", OK, "No other installed distribution provides `daemon` or `plugins`."
    )


def import_name_providers(names: frozenset[str]) -> dict[str, list[str]]:
    """The installed distributions that provide each top-level import name in `names`, as
    importlib.metadata's packages_distributions() gives them, without making a path object
    of every file every distribution lists (a quarter of a CPU-second with torch and Ray
    installed, for two names)."""
    found: dict[str, list[str]] = {name: [] for name in names}
    for dist in distributions():
        tops = set((dist.read_text("top_level.txt") or "").split()) or _inferred_tops(dist)
        for name in sorted(names & tops):
            found[name].append(dist.metadata["Name"])
    return found


def _inferred_tops(dist: Any) -> set[str]:
    """A distribution's top-level names from the Python files it lists, as the standard
    library infers them where no top_level.txt says (from RECORD's text when there is one)."""
    record = dist.read_text("RECORD")
    if record is None:  # an egg-info install and the like: the standard library's own reading
        return {
            f.parts[0] if len(f.parts) > 1 else f.with_suffix("").name
            for f in dist.files or ()
            if f.suffix == ".py"
        }
    tops = set()
    for line in record.splitlines():
        path = line.rsplit(",", 2)[0].strip('"')  # path,hash,size: only the path has commas
        if path.endswith(".py"):
            head, sep, _ = path.partition("/")
            tops.add(head if sep else path[:-3])
    return tops


def _dist_key(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def check_database(path: Path) -> tuple[Finding, Mapping[str, str]]:
    """The database file opens read-only and passes SQLite's integrity check."""
    if not path.exists():
        return Finding(
            "database", WARN, f"There is no database at {path} yet; `lmd serve` creates it."
        ), {}
    try:
        conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=5)
        try:
            result = conn.execute("PRAGMA integrity_check").fetchone()[0]
            stored = read_settings_table(conn)
        finally:
            conn.close()
    except sqlite3.Error as e:
        return Finding(
            "database",
            FAIL,
            f"The database {path} cannot be read ({e}); move it aside and `lmd serve` makes a "
            "new one.",
        ), {}
    if result != "ok":
        return Finding(
            "database",
            FAIL,
            f"The database {path} is damaged ({result}); restore a backup or move it aside.",
        ), stored
    return Finding("database", OK, f"The database {path} is intact."), stored


def check_settings(settings: Any) -> Finding:
    problems = settings.problems()
    if problems:
        return Finding("settings", FAIL, " ".join(problems))
    return Finding("settings", OK, "Every setting has a valid value (table and environment).")


def _http_json(
    url: str, key: str, timeout: float, body: dict | None = None
) -> tuple[int | None, Any, str]:
    """(status, parsed body, error sentence) for one request; never raises."""
    data = json.dumps(body).encode() if body is not None else None
    headers = {"Authorization": f"Bearer {key}", "Content-Type": "application/json"}
    req = urllib.request.Request(url, data=data, headers=headers)
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            return resp.status, json.loads(resp.read() or b"null"), ""
    except urllib.error.HTTPError as e:
        return e.code, None, f"HTTP {e.code}"
    except (urllib.error.URLError, OSError) as e:
        return None, None, str(getattr(e, "reason", e))
    except ValueError:
        return 200, None, "the answer is not JSON"


def check_backend(settings: Any) -> list[Finding]:
    """GET /models, then one tiny chat call asking for logprobs."""
    base = endpoint_from(settings)
    key = api_key()
    timeout = min(float(settings["llm_timeout_secs"]), 10.0)
    model = settings["openai_model"]
    status, data, error = _http_json(base + "/models", key, timeout)
    if status is None:
        return [
            Finding(
                "backend",
                FAIL,
                f"I could not reach the language model at {base} ({error}); start it or fix "
                "openai_chat_endpoint.",
            )
        ]
    if status in (401, 403):
        return [
            Finding(
                "backend", FAIL, f"{base} refused the API key; set OPENAI_API_KEY to a valid key."
            )
        ]
    found: list[Finding] = []
    ids = []
    if status == 200 and isinstance(data, dict) and isinstance(data.get("data"), list):
        ids = [m.get("id") for m in data["data"] if isinstance(m, dict)]
        shown = ", ".join(str(i) for i in ids[:10]) + (" ..." if len(ids) > 10 else "")
        if model in ids:
            found.append(Finding("backend", OK, f"{base} answers and serves {shown}."))
        else:
            found.append(
                Finding(
                    "backend",
                    WARN,
                    f"{base} answers but does not list the model {model!r} (it serves {shown}); "
                    "set openai_model to one of them.",
                )
            )
    else:
        found.append(
            Finding("backend", WARN, f"{base} answers but lists no models ({error or 'no list'}).")
        )
    probe = {
        "model": model,
        "messages": [{"role": "user", "content": "Say yes."}],
        "max_tokens": 1,
        "logprobs": True,
        "top_logprobs": 2,
    }
    status, data, error = _http_json(base + "/chat/completions", key, timeout, probe)
    try:
        content = data["choices"][0]["logprobs"]["content"]
    except (TypeError, KeyError, IndexError):
        content = None
    if status is None or (status != 200):
        found.append(
            Finding(
                "logprobs",
                FAIL,
                f"A one-token chat call to {base} failed ({error}); lmd's modes will fail too.",
            )
        )
    elif content:
        found.append(Finding("logprobs", OK, "The backend returns token log probabilities."))
    else:
        found.append(
            Finding(
                "logprobs",
                WARN,
                "The backend returns no token log probabilities; LM_SCORE and SelectIT need them.",
            )
        )
    return found


def check_embedded(settings: Any) -> Finding:
    """The embedded model: its engine installed, its GGUF file there."""
    state = backend_state(settings)
    return Finding("backend", FAIL if ", but: " in state else OK, state[0].upper() + state[1:])


def check_capabilities(environ: dict) -> Finding | None:
    """What the running daemon's backend can do (its cached probe), if a daemon answers."""
    url = daemon_url(environ.get("LMD_URL"))
    status, data, _ = _http_json(url + "/backend", environ.get("LMD_TOKEN") or "", 30.0)
    if status != 200 or not isinstance(data, dict):
        return None
    caps = data.get("capabilities") or {}
    has = [name for name, value in caps.items() if value and name != "top_logprobs"]
    lacks = [name for name, value in caps.items() if not value]
    return Finding(
        "capabilities",
        OK,
        f"{data.get('model')} at {data.get('endpoint')} ({data.get('source')}): has "
        f"{', '.join(has) or 'none'}; lacks {', '.join(lacks) or 'nothing'} (`lmd backend`).",
    )


def check_engine(environ: dict) -> Finding | None:
    """The running daemon's embedded model server: serving, starting, or down (crashing, or
    a model it cannot load) with why, if a daemon answers and runs one."""
    url = daemon_url(environ.get("LMD_URL"))
    status, data, _ = _http_json(url + "/backend", environ.get("LMD_TOKEN") or "", 30.0)
    engine = data.get("engine") if status == 200 and isinstance(data, dict) else None
    if not isinstance(engine, dict):
        return None
    slots = f"{engine.get('slots')} slots of {engine.get('context_per_slot')} tokens"
    restarts = engine.get("restarts") or 0
    again = f"; restarted {restarts} times since the daemon started" if restarts else ""
    if engine.get("status") == "running":
        said = f"{engine.get('engine')} is running ({slots}{again})."
        return Finding("engine", WARN if restarts else OK, said)
    if engine.get("status") == "starting":
        return Finding("engine", WARN, f"{engine.get('engine')} is starting{again}.")
    last = engine.get("last_words") or "it said nothing"
    return Finding(
        "engine",
        FAIL,
        f"{engine.get('why_down')} It has failed {engine.get('failures_in_a_row')} times in a row; "
        f"its last words: {last}.",
    )


def check_tokenizer(model: str) -> Finding:
    name = tokens.tokenizer_name(model)
    if name.startswith("tiktoken"):
        return Finding("tokenizer", OK, f"Token counts come from {name}.")
    return Finding(
        "tokenizer",
        WARN,
        "Token counts are estimated at 4 bytes a token: tiktoken has no encoding file here "
        "(put one in TIKTOKEN_CACHE_DIR for exact counts).",
    )


def check_sandbox(settings: Any) -> Finding:
    """Can commands run in the OS sandbox here? Without one, marat asks before every command."""
    try:
        level = settings["sandbox_level"]
    except LmdError:
        level = sandbox.READ_ONLY  # the settings check reports the bad value
    found = sandbox.detect()
    status = OK if level != sandbox.OFF and found.available and not found.warnings else WARN
    return Finding("sandbox", status, sandbox_state(level))


def check_policy(environ: dict) -> Finding:
    bind = environ.get("LMD_BIND") or "127.0.0.1:8420"
    token = environ.get("LMD_TOKEN") or environ.get("LMD_TOKEN_FILE")
    try:
        host, port = parse_bind(bind)
    except LmdError as e:
        return Finding("bind", FAIL, e.message)
    if not is_loopback(host) and not token:
        return Finding(
            "bind",
            FAIL,
            f"LMD_BIND is {bind} but neither LMD_TOKEN nor LMD_TOKEN_FILE is set: `lmd serve` "
            "refuses to listen beyond loopback without a token chosen on purpose. Set one, or "
            "bind 127.0.0.1.",
        )
    if environ.get("LMD_TOKEN") and len(environ["LMD_TOKEN"]) < 16:
        return Finding(
            "bind", WARN, "LMD_TOKEN is shorter than 16 characters; use a long random one."
        )
    where = "loopback only" if is_loopback(host) else "the network, with a token"
    return Finding("bind", OK, f"lmd serve would listen on {host}:{port} ({where}).")


def check_private_files(home: Path) -> Finding:
    """LMD_HOME 0700; the database, its WAL files and the token 0600 (serve fixes them)."""
    loose = []
    for path in [home, *(home / name for name in PRIVATE_FILES)]:
        try:
            mode = stat.S_IMODE(path.stat().st_mode)
        except OSError:
            continue
        if mode & 0o077:
            loose.append(f"{path} ({mode:o})")
    if loose:
        return Finding(
            "files",
            WARN,
            f"Other users can read {', '.join(loose)}; `lmd serve` fixes this when it starts, "
            f"or run `chmod 700 {home}` and `chmod 600` on the files now.",
        )
    return Finding("files", OK, f"{home} and its files are private to you.")


def token_command_lines(home: Path, proc: Path = Path("/proc")) -> list[tuple[int, str]]:
    """(pid, command) of this user's running `lmd serve` processes for `home` given a token
    on their command line (another home's daemon, or another user's, is not this home's
    business: its token opens another database)."""
    found = []
    try:
        entries = list(proc.iterdir())
    except OSError:
        return found
    for entry in entries:
        if not entry.name.isdigit():
            continue
        try:
            if entry.stat().st_uid != os.getuid():
                continue
            argv = (entry / "cmdline").read_bytes().decode("utf-8", "replace").split("\0")
        except OSError:
            continue
        lmd = any(a.endswith(("lmd", "lmd.pyz", "daemon.cli")) for a in argv[:3])
        token = any(a == "--token" or a.startswith("--token=") for a in argv)
        if lmd and token and "serve" in argv and _same_home(_serves_home(entry, argv), home):
            found.append((int(entry.name), " ".join(a for a in argv[:3] if a)))
    return found


def _serves_home(entry: Path, argv: list[str]) -> str | None:
    """The home a running `lmd serve` uses: its --home, else its environment's LMD_HOME,
    XDG_DATA_HOME or HOME as default_home reads them; None when unreadable."""
    for i, a in enumerate(argv):
        if a == "--home" and i + 1 < len(argv):
            return argv[i + 1]
        if a.startswith("--home="):
            return a.split("=", 1)[1]
    try:
        pairs = (entry / "environ").read_bytes().decode("utf-8", "replace").split("\0")
    except OSError:
        return None
    env = dict(p.split("=", 1) for p in pairs if "=" in p)
    if env.get("LMD_HOME"):
        return os.path.expanduser(env["LMD_HOME"])
    data = env.get("XDG_DATA_HOME") or os.path.join(env.get("HOME", "/"), ".local", "share")
    return os.path.join(data, "lmd")


def _same_home(theirs: str | None, home: Path) -> bool:
    """Whether `theirs` names `home` (an unreadable home counts: warn rather than miss)."""
    return theirs is None or os.path.realpath(theirs) == os.path.realpath(home)


def check_token(home: Path, environ: dict) -> Finding:
    """No token on a command line, where `ps` shows it to everyone; the token file private."""
    exposed = token_command_lines(home)
    if exposed:
        pids = ", ".join(str(pid) for pid, _ in exposed)
        return Finding(
            "token",
            WARN,
            f"A running lmd (pid {pids}) got its token on the command line, where every user "
            "sees it in `ps`; restart it with --token-file FILE or LMD_TOKEN, and pick a new "
            "token.",
        )
    path = Path(environ.get("LMD_TOKEN_FILE") or home / "token")
    try:
        mode = path.stat().st_mode & 0o777
    except OSError:
        if environ.get("LMD_TOKEN"):
            return Finding("token", OK, "The token comes from LMD_TOKEN.")
        return Finding(
            "token", OK, f"There is no token yet; `lmd serve` creates {path} on first start."
        )
    if mode & 0o077:
        return Finding(
            "token",
            WARN,
            f"The token file {path} is readable by other users (mode {mode:o}); run "
            f"`chmod 600 {path}`.",
        )
    return Finding("token", OK, f"The token is in {path}, readable by you only.")


def check_daemon(environ: dict) -> Finding:
    url = daemon_url(environ.get("LMD_URL"))
    status, data, error = _http_json(url + "/healthz", environ.get("LMD_TOKEN") or "", 3.0)
    if status == 200 and isinstance(data, dict):
        return Finding(
            "daemon",
            OK,
            f"A daemon (version {data.get('version')}) answers at {url} with modes "
            f"{', '.join(data.get('modes') or [])}.",
        )
    return Finding(
        "daemon",
        WARN,
        f"No daemon answers at {url} ({error or status}); start it with `lmd serve`.",
    )


def check_commands(settings: Any, environ: dict) -> Finding:
    """Which backend lmd's own commands ask (lmd score, sql, selectit, elo): the one lmd
    serve would use, through a running daemon where it serves the embedded model."""
    try:
        with command_backend(
            settings, say=lambda line: None, environ=environ, daemon=environ.get("LMD_URL")
        ) as backend:  # nothing starts: an embedded model would start on a first request
            pass
    except LmdError as e:
        return Finding("commands", FAIL, e.message)
    return Finding("commands", OK, f"lmd score, sql, selectit and elo ask {backend.describe()}.")


def check_plugins(pm: Any) -> Finding:
    wanted = wanted_plugins()
    loaded = {name for name, _ in pm.list_name_plugin()}
    broken = []
    for ep in entry_points(group="lmd"):
        if ep.name in loaded or (wanted is not None and ep.name not in wanted):
            continue
        try:
            importlib.import_module(ep.value)
        except Exception as e:
            broken.append(f"{ep.name} ({type(e).__name__}: {e})")
    if broken:
        return Finding(
            "plugins",
            FAIL,
            f"These plugins failed to load: {'; '.join(broken)}. Reinstall or remove them.",
        )
    return Finding("plugins", OK, f"Plugins loaded: {', '.join(sorted(loaded))}.")


def run_checks(home: Path, offline: bool = False, environ: dict | None = None) -> list[Finding]:
    """Every check, in the order a person would fix them."""
    env = dict(os.environ if environ is None else environ)
    pm = get_plugin_manager()
    findings = [check_package_names(), check_plugins(pm)]
    registry = collect(pm)
    db, stored = check_database(home / "lmd.db")
    findings.append(db)
    settings = Settings(registry.specs, stored, env)
    findings.append(check_settings(settings))
    settings_ok = findings[-1].status == OK
    if not settings_ok:
        findings.append(
            Finding("backend", WARN, "Backend not checked: fix the invalid settings first.")
        )
    elif choose_backend(settings, env).embedded:
        findings.append(check_embedded(settings))  # on this machine: offline is fine
    elif offline:
        findings.append(Finding("backend", WARN, "Backend not checked (--offline)."))
    else:
        findings.extend(check_backend(settings))
    model = settings["openai_model"] if settings_ok else "gpt-4.1-mini"
    findings.append(check_tokenizer(model))
    findings.append(check_sandbox(settings))
    findings.append(check_policy(env))
    findings.append(check_private_files(home))
    findings.append(check_token(home, env))
    if not offline:
        findings.append(check_daemon(env))
        running = findings[-1].status == OK
        capabilities = check_capabilities(env) if running else None
        if capabilities is not None:
            findings.append(capabilities)
        engine = check_engine(env) if running else None
        if engine is not None:
            findings.append(engine)
        if settings_ok:
            findings.append(check_commands(settings, env))
    return findings


def report(findings: list[Finding], as_json: bool) -> str:
    if as_json:
        return json.dumps([asdict(f) for f in findings], indent=2)
    marks = {OK: "ok  ", WARN: "warn", FAIL: "FAIL"}
    return "\n".join(f"[{marks[f.status]}] {f.check}: {f.message}" for f in findings)
