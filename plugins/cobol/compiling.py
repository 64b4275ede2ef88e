"""compile and compile-and-fix: run the build through the core runner; while it fails, show
the model the errors and the code, apply its diff, and build again.

Under `unsafe` approval with `sandbox_level = workspace-write` the build runs at once inside
the sandbox, able to write only the repository (not its .git) and with no network; otherwise
it asks, and a build the user approved runs outside the sandbox.
"""

from __future__ import annotations

import difflib
import hashlib
import os
import stat
from collections.abc import AsyncIterator
from typing import Any

from daemon.api import LmdError, daemon_secrets, protected_in, run_command, sandbox

from . import build, focus, prompts
from .edits import apply_and_record, apply_pending, ask_for_patch, planting, planting_question
from .focus import Focus
from .intents import plural
from .job import Job, approval_level, ask


def build_command(job: Job) -> tuple[str, str | None]:
    """(command, why it was chosen or None when set by the user)."""
    command = job.ctx.settings["cobol_build_command"].strip()
    if command:
        return command, None
    found = build.detect(job.repo)
    if found is None:
        raise LmdError(
            "I could not tell how to build this repository; set cobol_build_command, for "
            "example: lmd settings set cobol_build_command 'make test'."
        )
    return found


def build_sandbox(job: Job) -> tuple[Any, str]:
    """(the workspace-write policy when the build may run at once in the sandbox, else None;
    and why it may not, in words, when that is worth saying)."""
    s = job.ctx.settings
    if s.get("sandbox_level", sandbox.READ_ONLY) != sandbox.WORKSPACE_WRITE:
        return None, ""
    if job.ctx.state.get("build_escalate"):
        return None, "the sandbox stopped the last build, so this one would run outside it"
    found = sandbox.detect()
    if not found.available:
        return None, f"there is no sandbox here: {found.reason} To get one, {found.remedy}"
    try:
        home = str(job.ctx.daemon.home)
        return sandbox.policy_from_settings(s, sandbox.WORKSPACE_WRITE, job.repo, home), ""
    except ValueError as e:
        return None, f"I cannot let a sandbox write there: {e}"


async def compile_request(job: Job, fix: bool) -> AsyncIterator[str]:
    command, why = build_command(job)
    level = approval_level(job.ctx)
    policy, why_not = build_sandbox(job) if level == "unsafe" else (None, "")
    if level != "never" and policy is None:
        job.ctx.state.pop("build_escalate", None)
        chosen = f" (chosen from {why})" if why else ""
        if fix:
            rounds = job.ctx.settings["max_thought_loops"]
            question = (
                f"Shall I run {command}{chosen} in {job.repo} and apply the model's fixes, "
                f"up to {plural(rounds, 'round')}? Say yes or no."
            )
        else:
            question = f"Shall I run {command}{chosen} in {job.repo}? Say yes or no."
        if why_not:
            question += f" (It cannot run in the sandbox at once: {why_not}.)"
        pending = {"action": "fix" if fix else "compile", "repo": job.repo, "command": command}
        # the yes covers the build as it is now: its command and the files it runs (their
        # text too, to show what changed should they change before the yes)
        pending["inputs"] = build_inputs(job.repo)
        pending["snapshot"] = build_snapshot(job.repo)
        yield ask(job.ctx, question, {**pending, "why": why})
        return
    if fix:
        yield await compile_and_fix(job, command, why, policy)
    else:
        yield await compile_once(job, command, why, policy)


async def run_build(job: Job, command: str, policy: Any = None):
    """Run the build (in the sandbox when `policy` is given)."""
    s = job.ctx.settings
    result = await run_command(
        command,
        job.repo,
        s["cobol_build_timeout_secs"],
        s["max_bash_output_len_for_response"],
        sandbox=policy,
        secrets=daemon_secrets(job.ctx.daemon),
        passthrough=s.get("command_env_passthrough", []),
    )
    if result.removed:  # the runner removed what the build planted (the sandbox's writes)
        job.ctx.extra["removed_planted"] = [os.path.relpath(p, job.repo) for p in result.removed]
    if result.exit_code == 0:
        result.blocked = None  # a passing build was not stopped, whatever it printed
    if result.blocked:
        job.ctx.state["build_escalate"] = True  # the next build asks, and runs outside
    job.ctx.extra.setdefault("builds", []).append(
        {
            "command": command,
            "exit_code": result.exit_code,
            "timed_out": result.timed_out,
            "duration": round(result.duration, 3),
            "output": result.output,
            "sandbox": result.sandbox,
            "sandbox_blocked": bool(result.blocked),
        }
    )
    return result


def _chosen(command: str, why: str | None) -> str:
    return f"No build command is set, so I used {command} ({why}). " if why else ""


def _outcome(job: Job, result) -> str:
    if result.blocked:
        return (
            f"The sandbox stopped the build {result.command}: {result.blocked}. Say compile "
            "again and I will ask before running it outside the sandbox."
        )
    if result.timed_out:
        return (
            f"The build {result.command} did not finish within "
            f"{job.ctx.settings['cobol_build_timeout_secs']} seconds and was stopped; raise "
            "cobol_build_timeout_secs if it needs longer."
        )
    if result.exit_code == 0:
        return f"Build passed in {result.duration:.1f} seconds."
    error = build.first_error(result.output)
    end = "" if error.endswith((".", "!", "?", "…")) else "."
    return f"Build failed (exit code {result.exit_code}): {error}{end}"


async def compile_once(job: Job, command: str, why: str | None, policy: Any = None) -> str:
    result = await run_build(job, command, policy)
    job.ctx.extra["build"] = job.ctx.extra["builds"][-1]
    job.ctx.reply_kind = "contextual"
    return _chosen(command, why) + _outcome(job, result)


async def compile_and_fix(job: Job, command: str, why: str | None, policy: Any = None) -> str:
    """Build; while it fails, show the model the errors and the code, apply its diff, rebuild.
    A build the sandbox stopped is not the code's fault: no round is spent on it."""
    limit = job.ctx.settings["max_thought_loops"]
    said = [_chosen(command, why).strip()]
    result = await run_build(job, command, policy)
    if result.exit_code == 0:
        return " ".join([*said, "Build passed already; nothing to fix."]).strip()
    said.append(_outcome(job, result))
    changes: list[str] = []
    rounds = 0
    stopped = ""
    while result.exit_code != 0 and not result.timed_out and not result.blocked and rounds < limit:
        targets = _fix_targets(job, result.output)
        if not targets:
            stopped = (
                "I could not tell which code to fix; focus on it and say compile and fix again."
            )
            break
        rounds += 1
        code = _render(job, targets)
        messages = [
            {"role": "system", "content": prompts.text("edit")},
            {"role": "user", "content": prompts.fix_request(command, result.output, code, changes)},
        ]
        try:
            patch = await ask_for_patch(job, messages)
            planted = planting(job.repo, patch)
            if planted:
                # the yes to this build did not cover a change to what builds run (a
                # rewritten Makefile would run in the next round, unasked): stop and ask
                job.ctx.extra["diff"] = patch.text
                question = planting_question(job, patch, planted, f"In round {rounds}, ")
                said.append(ask(job.ctx, question, apply_pending(job, patch)))
                return " ".join(x for x in said if x)
            summary = await apply_and_record(job, patch)
        except LmdError as e:
            if e.status >= 500 or e.kind == "backend":
                raise
            stopped = f"In round {rounds} {e.message[0].lower()}{e.message[1:]}"
            break
        changes.append(summary.rstrip("."))
        said.append(f"Round {rounds}: {summary}")
        result = await run_build(job, command, policy)
    job.ctx.extra["build"] = job.ctx.extra["builds"][-1]
    job.ctx.extra["rounds"] = rounds
    job.ctx.extra["passed"] = result.exit_code == 0
    job.ctx.reply_kind = "contextual"
    if stopped:
        said.append(stopped)
    if result.exit_code == 0:
        said.append(f"The build passes now, after {plural(rounds, 'round')}.")
    elif result.blocked:
        if rounds:  # the first build's outcome was said already
            said.append(_outcome(job, result))
        if changes:
            said.append("The changes stay applied; say undo to revert them one at a time.")
    else:
        state = _outcome(job, result) if rounds else ""
        said.append(f"After {plural(rounds, 'round')} the build still fails. {state}".strip())
        if changes:
            said.append("The changes stay applied; say undo to revert them one at a time.")
    return " ".join(s for s in said if s)


def _fix_targets(job: Job, output: str) -> list[Focus]:
    """The focus, else the code around the first errors that point into the repository."""
    if job.focus is not None:
        return [job.focus]
    places = build.error_locations(output, job.repo)
    share = job.max_tokens // max(1, len(places))
    targets = []
    for rel, line in places:
        try:
            lines = job.lines(rel)
        except LmdError:
            continue
        line = min(max(1, line), len(lines))
        target = Focus(rel, max(1, line - 10), min(len(lines), line + 10))
        named = focus.enclosing_symbol(lines, line)
        if named and (found := focus.symbol_range(lines, named[0])):
            whole = Focus(rel, found[0], found[1], named[0], found[2])
            try:
                focus.check_size(whole, lines, share, job.model)
                target = whole  # the whole function when it fits its share of the budget
            except LmdError:
                pass
        targets.append(target)
    return targets


def _render(job: Job, targets: list[Focus]) -> str:
    share = job.max_tokens // len(targets)
    return "\n\n".join(focus.render(t, job.lines(t.file), share, job.model) for t in targets)


def build_inputs(repo: str) -> dict[str, str]:
    """{path: sha256} of the files a build runs (Makefile, package.json, conftest.py, ...;
    daemon/execution/protected.py): a yes to a build is a yes to these as they are now."""
    found = {}
    for path in protected_in(repo):
        if os.path.isfile(path):
            with open(path, "rb") as f:
                found[os.path.relpath(path, repo)] = hashlib.sha256(f.read()).hexdigest()
    return found


# Build files kept with a question to show a change of: each one up to 32 KiB, all of them up
# to 256 KiB (the rest are named only).
SNAPSHOT_BYTES, SNAPSHOT_TOTAL = 32 * 1024, 256 * 1024


def _text(path: str) -> str | None:
    """A build file's text when it is small UTF-8 text in a regular file, not a symbolic link
    (a link could name a secret outside the repository) nor a named pipe (opening one waits
    for a writer: a Makefile swapped for a pipe before the yes once hung the answer), else
    None."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
        with os.fdopen(fd, "rb") as f:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                return None
            data = f.read(SNAPSHOT_BYTES + 1)
        return None if len(data) > SNAPSHOT_BYTES else data.decode("utf-8")
    except (OSError, UnicodeDecodeError):
        return None


def build_snapshot(repo: str) -> dict[str, str]:
    """{path: text} of the build files small enough to show a change of."""
    found, size = {}, 0
    for path in protected_in(repo):
        if os.path.isfile(path) and (text := _text(path)) is not None:
            size += len(text)
            if size > SNAPSHOT_TOTAL:
                break
            found[os.path.relpath(path, repo)] = text
    return found


def what_changed(repo: str, asked: dict, snapshot: dict[str, str], changed: list[str]) -> str:
    """A unified diff of the build files changed since the question (`asked`: their hashes
    then, `snapshot`: their text then); a file too large or not text is left out (it is
    named all the same)."""
    parts: list[str] = []
    for rel in changed:
        path = os.path.join(repo, rel)
        before = snapshot.get(rel, None if rel in asked else "")  # "" : it is new
        now = _text(path) if os.path.lexists(path) else ""  # "" : it is gone
        if before is None or now is None:
            continue
        parts += difflib.unified_diff(
            before.splitlines(keepends=True), now.splitlines(keepends=True), f"a/{rel}", f"b/{rel}"
        )
    return "".join(parts)


def changed_inputs(repo: str, asked: dict[str, str]) -> list[str]:
    """The build files that changed, appeared or went since the question was asked."""
    now = build_inputs(repo)
    return sorted(p for p in set(asked) | set(now) if asked.get(p) != now.get(p))
