"""The audit of executed commands: every command marat runs is one row of `marat_commands`."""

from __future__ import annotations

import json
import re
import shlex
import time
from pathlib import Path
from typing import Any

import click
from starlette.responses import JSONResponse

from daemon.api import LmdError, open_daemon_state, plural, spoken_command

COLUMNS = (
    "id",
    "session",
    "cwd",
    "command",
    "exit_code",
    "duration",
    "timed_out",
    "truncated",
    "output",
    "approval",
    "answer",
    "prompt_id",
    "created_at",
    "sandbox",
    "sandbox_blocked",
    "rule_id",
)

# How a command came to run.
APPROVALS = {
    "read-only": "ran at once: clearly read-only",
    "never": "ran at once: marat_approval is never",
    "user": "the user approved it",
    "rule": "ran at once: the user's rule allowed it (rule_id)",
    "forbidden": "not run: the user's rule forbids it (rule_id)",
}

# How it ran: in the sandbox at a level, or outside it.
SANDBOX_VALUES = ("read-only", "workspace-write", "none")


def record(
    store: Any,
    session: str,
    result: Any,
    approval: str,
    answer: str | None = None,
    prompt_id: int | None = None,
    rule_id: int | None = None,
) -> int:
    """Store one executed command (a `daemon.execution.runner.CommandResult`)."""
    with store.lock:
        cur = store.db.execute(
            "INSERT INTO marat_commands (session, cwd, command, exit_code, duration, timed_out,"
            " truncated, output, approval, answer, prompt_id, created_at, sandbox,"
            " sandbox_blocked, rule_id) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            [
                session,
                result.cwd,
                result.command,
                result.exit_code,
                round(result.duration, 4),
                int(result.timed_out),
                int(result.truncated),
                result.output,
                approval,
                answer,
                prompt_id,
                time.time(),
                getattr(result, "sandbox", "none"),
                int(bool(getattr(result, "blocked", None))),
                rule_id,
            ],
        )
        return cur.lastrowid


def record_refusal(
    store: Any, session: str, cwd: str, command: str, rule_id: int | None, prompt_id: int
) -> int:
    """Store a command a forbid rule kept from running (no exit code, no output)."""
    with store.lock:
        cur = store.db.execute(
            "INSERT INTO marat_commands (session, cwd, command, exit_code, duration, output,"
            " approval, prompt_id, created_at, sandbox, rule_id)"
            " VALUES (?, ?, ?, NULL, 0, '', 'forbidden', ?, ?, 'none', ?)",
            [session, cwd, command, prompt_id, time.time(), rule_id],
        )
        return cur.lastrowid


def rows(store: Any, session: str | None = None, limit: int = 20) -> list[dict]:
    """Newest `limit` executed commands (of one session or all), oldest first."""
    where, args = ("WHERE c.session = ?", [session]) if session else ("", [])
    # the rule by its id: rule ids are never reused and a removed rule keeps its row, so the
    # pattern named here is the rule that let the command run (or refused it)
    found = store.db.execute_returning_dicts(
        "SELECT c.*, r.kind AS _kind, r.words AS _words, r.tool AS _tool FROM marat_commands c"
        f" LEFT JOIN rules r ON r.id = c.rule_id {where} ORDER BY c.id DESC LIMIT ?",
        [*args, limit],
    )
    for r in found:
        r["timed_out"], r["truncated"] = bool(r["timed_out"]), bool(r["truncated"])
        r["sandbox_blocked"] = bool(r["sandbox_blocked"])
        kind, words, tool = r.pop("_kind"), r.pop("_words"), r.pop("_tool")
        if kind is not None:
            r["rule_pattern"] = tool if kind == "tool" else shlex.join(json.loads(words or "[]"))
    return list(reversed(found))


_WHAT_RAN = re.compile(
    r"^\s*(?:(?:so|and|ok|okay|hey|marat)[\s,]+)*(?:"
    r"(?:what|which)\s+(?:commands?\s+)?(?:did|have)\s+you\s+(?:just\s+)?(?:run|ran|execute[d]?)"
    r"(?:\s+(?:just\s+now|now|last|here|so\s+far))?"
    r"|(?:what|which)\s+(?:was|were)\s+(?:the\s+|your\s+)?last\s+commands?"
    r"|what\s+(?:just\s+)?ran"
    r"|(?:tell|show)\s+me\s+what\s+you\s+(?:just\s+)?(?:run|ran|executed)"
    r")\s*[?.!]*\s*$",
    re.I,
)


def asks_what_ran(text: str) -> bool:
    """ "what did you run?" and the ways a voice says it."""
    return bool(_WHAT_RAN.match(text))


_HOW = {
    "read-only": "it looked read-only",
    "never": "marat_approval is never",
    "user": "you said yes",
}


def what_ran(store: Any, session: str, count: int = 3) -> str:
    """The last commands of this session from the audit, in sentences for the ear: what ran
    (a long command said by its length and what it runs), where, how it ended, in which
    sandbox and why it ran."""
    found = rows(store, session, count)
    if not found:
        return (
            "I have run no command in this session; lmd history --commands lists every session's."
        )
    said = []
    for r in found:
        what = spoken_command(r["command"])
        if r["approval"] == "forbidden":
            rule = f"rule {r['rule_id']}" if r.get("rule_id") is not None else "a rule"
            said.append(f"I refused {what}: {rule} forbids it")
            continue
        ended = "it timed out" if r["timed_out"] else f"it exited {r['exit_code']}"
        level = r["sandbox"]
        where = "outside the sandbox" if level == "none" else f"in the {level} sandbox"
        if r["sandbox_blocked"]:
            where += ", which stopped it"
        if r["approval"] == "rule":
            named = f" ({r['rule_pattern']})" if r.get("rule_pattern") else ""
            why = f"rule {r['rule_id']}{named} allowed it"
        else:
            why = _HOW.get(r["approval"], r["approval"])
        said.append(f"{what} in {r['cwd']}, {_ago(r['created_at'])}: {ended}, {where}; {why}")
    head = (
        "The last command I ran here: "
        if len(said) == 1
        else f"The last {plural(len(said), 'command')} I ran here, newest last: "
    )
    return head + ". ".join(said) + "."


def _ago(when: float) -> str:
    secs = max(0, int(time.time() - when))
    if secs < 10:
        return "just now"
    for size, unit in ((86400, "day"), (3600, "hour"), (60, "minute")):
        if secs >= size:
            return f"{plural(secs // size, unit)} ago"
    return f"{plural(secs, 'second')} ago"


def format_row(r: dict) -> str:
    stamp = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(r["created_at"]))
    status = "timed out" if r["timed_out"] else f"exit {r['exit_code']}"
    how = r["approval"] + (f" ({r['answer']!r})" if r["answer"] else "")
    if r.get("rule_id") is not None:
        named = f": {r['rule_pattern']}" if r.get("rule_pattern") else ""
        how = f"{r['approval']} (rule {r['rule_id']}{named})"
    ran = "unsandboxed" if r["sandbox"] == "none" else f"sandbox {r['sandbox']}"
    if r["approval"] == "forbidden":
        status, ran = "refused", "not run"
    if r["sandbox_blocked"]:
        ran += ", stopped by it"
    return (
        f"{r['id']:>5} {stamp} {r['session']:<10} {status:<9} {r['duration']:>7.2f}s "
        f"{how:<18} {ran:<24} {r['cwd']}$ {r['command']}"
    )


@click.command("commands")
@click.option("--session", "-s", help="Only this session.")
@click.option("--limit", "-n", default=20, show_default=True, type=click.IntRange(1, 100000))
@click.option("--json", "as_json", is_flag=True)
@click.option("--home", type=click.Path(file_okay=False, path_type=Path), envvar="LMD_HOME")
def commands_command(session: str | None, limit: int, as_json: bool, home: Path | None) -> None:
    """Commands marat ran: where, exit code, duration, how each was approved and sandboxed."""
    _, store, _ = open_daemon_state(home)
    found = rows(store, session, limit)
    if as_json:
        click.echo(json.dumps(found, indent=2, ensure_ascii=False))
    elif not found:
        click.echo("No commands have been run yet.")
    else:
        for r in found:
            click.echo(format_row(r))


async def commands_route(request: Any) -> Any:
    """GET /marat/commands?session=NAME&limit=N: the audit as JSON."""
    store = request.app.state.daemon.store
    try:
        limit = int(request.query_params.get("limit", "20"))
    except ValueError:
        raise LmdError("limit must be a whole number.") from None
    session = request.query_params.get("session")
    return JSONResponse({"commands": rows(store, session, max(1, min(limit, 10000)))})


commands_route.openapi = {
    "get": {
        "summary": "The audit of commands marat ran, newest last.",
        "parameters": [
            {"name": "session", "in": "query", "schema": {"type": "string"}},
            {"name": "limit", "in": "query", "schema": {"type": "integer"}},
        ],
        "responses": {
            "200": {
                "description": "The commands.",
                "content": {
                    "application/json": {
                        "schema": {
                            "type": "object",
                            "properties": {
                                "commands": {"type": "array", "items": {"type": "object"}}
                            },
                            "required": ["commands"],
                        }
                    }
                },
            },
            "400": {
                "description": "limit is not a whole number.",
                "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}},
            },
        },
    }
}
