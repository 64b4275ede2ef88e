"""`cobol`: spoken coding through git — focus, rewrite, compile, compile and fix, undo, diff.

Every change is a unified diff from the model, checked with `git apply --check`, applied with
`git apply`, recorded, and reversible with `undo`. Replies are short sentences a listener can
follow; the full diffs and build output go into the JSON reply.
"""

from __future__ import annotations

import re
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

from daemon.errors import LmdError
from daemon.modes import Context

from . import build, focus, patches, prompts
from .focus import Focus
from .repo import chosen_directory, dirty_files, find_root, git, inside, unmerged_paths

YES = {
    "yes",
    "y",
    "yeah",
    "yep",
    "sure",
    "ok",
    "okay",
    "go",
    "go ahead",
    "do it",
    "run it",
    "approve",
    "approved",
    "yes please",
    "please do",
    "apply it",
    "confirm",
}
NO = {"no", "n", "nope", "cancel", "stop", "don't", "do not", "no thanks", "abort", "skip"}
APPROVAL_CHOICES = ("never", "unsafe", "always")
HELP = (
    "Say: focus on a file and lines or a function; rewrite function F so that X; compile; "
    "compile and fix; undo; or show the diff."
)

_COMPILE = re.compile(
    r"^(?:please\s+)?(?:compile|build|make|test|run\s+(?:the\s+)?(?:build|tests?|compiler))"
    r"(?:\s+(?:it|this|the\s+project|the\s+code|now|again|please))*$"
)
_FIX = re.compile(
    r"^(?:please\s+)?(?:(?:compile|build|test)\s+(?:and|&|then)\s+fix(?:\s+it)?"
    r"|fix\s+the\s+(?:build|tests?)|make\s+(?:it|the\s+build|the\s+tests?)\s+pass)"
    r"(?:\s+(?:now|again|please))*$"
)
_UNDO = re.compile(r"^(?:please\s+)?(?:undo|revert|roll\s*back)\b")
_DIFF = re.compile(
    r"^(?:please\s+)?(?:(?:show|read|give|tell)\s+(?:me\s+)?(?:the\s+)?(?:diff|changes)"
    r"|diff|what\s+(?:did\s+you\s+change|changed|has\s+changed))\b"
)
_STATUS = re.compile(r"^(?:focus|what\s+is\s+(?:the\s+)?focus|where\s+am\s+i)$")
_EDIT_TARGET = re.compile(
    r"^(?:please\s+)?(?:rewrite|change|edit|modify|update|fix|refactor)\s+(?:the\s+)?"
    r"(?:(?:function|method|class)\s+)?([A-Za-z_]\w*)\b",
    re.IGNORECASE,
)


def normalise(text: str) -> str:
    return re.sub(r"\s+", " ", text.strip().strip(".!?,;").lower())


def yes_or_no(text: str) -> bool | None:
    words = normalise(text)
    if words in YES:
        return True
    if words in NO:
        return False
    return None


def classify(text: str) -> str:
    """One of focus, status, fix, compile, undo, diff, help, edit."""
    words = normalise(text)
    if _STATUS.match(words):
        return "status"
    if words.startswith("focus"):
        return "focus"
    if _FIX.match(words):
        return "fix"
    if _COMPILE.match(words):
        return "compile"
    if _UNDO.match(words):
        return "undo"
    if _DIFF.match(words):
        return "diff"
    if words in ("help", "what can you do", "what can i say"):
        return "help"
    return "edit"


def plural(n: int, word: str) -> str:
    return f"{n} {word}{'' if n == 1 else 's'}"


@dataclass
class Job:
    """One cobol request: its context and the repository root it works in."""

    ctx: Context
    repo: str

    @property
    def model(self) -> str:
        return self.ctx.settings["openai_model"]

    @property
    def max_tokens(self) -> int:
        return self.ctx.settings["max_tokens"]

    @property
    def focus(self) -> Focus | None:
        """The session's focus in this repository (a focus elsewhere does not count here)."""
        if self.ctx.state.get("focus_repo") != self.repo:
            return None
        return Focus.from_state(self.ctx.state.get("focus"))

    @focus.setter
    def focus(self, value: Focus | None) -> None:
        self.ctx.state["focus"] = value.to_state() if value else None
        self.ctx.state["focus_repo"] = self.repo
        self.ctx.extra["focus"] = value.to_state() if value else None

    def lines(self, rel: str) -> list[str]:
        path, problem = inside(self.repo, rel)
        if problem:
            raise LmdError(problem)
        return focus.read_lines(path, rel)


def approval_level(ctx: Context) -> str:
    """marat's approval setting (when the marat plugin is absent: unsafe, its default)."""
    try:
        level = str(ctx.settings.get("marat_approval", "unsafe") or "unsafe").lower()
    except LmdError:
        level = "unsafe"
    return level if level in APPROVAL_CHOICES else "unsafe"


# -- the mode -------------------------------------------------------------------------------
async def respond(ctx: Context) -> AsyncIterator[str]:
    text = ctx.text.strip()
    pending = ctx.pending or _remembered_pending(ctx, text)
    ctx.state.pop("pending", None)
    if pending:
        answer = yes_or_no(text)
        if answer is None:
            yield _declined(pending) + " "
        else:
            async for chunk in _resume(ctx, pending, answer):
                yield chunk
            return
    intent = classify(text)
    if intent == "help":
        yield HELP
        return
    job = Job(ctx, await find_root(chosen_directory(ctx.settings["cobol_repo"], ctx.session.cwd)))
    ctx.extra["repo"] = job.repo
    if intent == "status":
        current = job.focus
        yield (
            f"The focus is {current.describe()}." if current else "Nothing is in focus yet. " + HELP
        )
    elif intent == "focus":
        chosen = await focus_from_words(job, focus.parse_request(text), strict=True)
        yield f"Focused on {chosen.describe()}."
    elif intent == "edit":
        async for chunk in edit(job, text):
            yield chunk
    elif intent in ("compile", "fix"):
        async for chunk in compile_request(job, fix=intent == "fix"):
            yield chunk
    elif intent == "undo":
        yield await undo(job)
    elif intent == "diff":
        yield show_diff(job)


def _remembered_pending(ctx: Context, text: str) -> dict | None:
    """A question asked earlier, when answered with the directive ("cobol yes")."""
    saved = ctx.state.get("pending")
    if not saved or yes_or_no(text) is None:
        return None
    if time.time() - saved.get("created_at", 0) > ctx.settings["end_session_after_idle_secs"]:
        return None
    return saved


def _ask(ctx: Context, question: str, pending: dict) -> str:
    ctx.set_pending(pending)
    ctx.state["pending"] = ctx.session.pending
    ctx.reply_kind = "decorative"
    return question


def _declined(pending: dict) -> str:
    if pending.get("action") == "apply":
        return "I left the code as it was."
    return f"I did not run {pending.get('command', 'the build')}."


async def _resume(ctx: Context, pending: dict, yes: bool) -> AsyncIterator[str]:
    if not yes:
        yield "All right. " + _declined(pending)
        return
    job = Job(ctx, await find_root(pending["repo"]))
    ctx.extra["repo"] = job.repo
    if pending["action"] == "apply":
        patch = patches.parse(pending["patch"])
        yield await apply_and_record(job, patch)
    elif pending["action"] == "compile":
        yield await compile_once(job, pending["command"], pending.get("why"))
    elif pending["action"] == "fix":
        yield await compile_and_fix(job, pending["command"], pending.get("why"))


# -- focus ----------------------------------------------------------------------------------
async def resolve_file(job: Job, name: str, strict: bool) -> str | None:
    """The repository-relative path for a spoken file name, or None when not strict."""
    path, problem = inside(job.repo, name)
    if problem:
        if strict:
            raise LmdError(problem)
        return None
    if path.is_file():
        return str(path.relative_to(Path(job.repo).resolve()))
    cwd = job.ctx.session.cwd
    if cwd and not Path(name).is_absolute():
        near, problem = inside(job.repo, str(Path(cwd) / name))
        if near is not None and near.is_file():
            return str(near.relative_to(Path(job.repo).resolve()))
    # A spoken "parse.py" means src/parse.py when only one file has that name.
    code, out = await git(job.repo, "ls-files", "-co", "--exclude-standard")
    matches = (
        [p for p in out.splitlines() if p == name or p.endswith("/" + name)] if code == 0 else []
    )
    if len(matches) == 1:
        return matches[0]
    if not strict:
        return None
    if len(matches) > 1:
        raise LmdError(
            f"Several files are called {name} ({', '.join(matches[:4])}); say which one."
        )
    raise LmdError(f"There is no file {name} in the repository {job.repo}; check the name.")


async def focus_from_words(
    job: Job, req: focus.FocusRequest, strict: bool, guess: str | None = None
) -> Focus | None:
    """Set the focus from what was asked: a file, a range, a function (`guess` is a name that
    may or may not be one); None when nothing was asked and `strict` is off."""
    current = job.focus
    rel = await resolve_file(job, req.file, strict) if req.file else None
    if rel is None:
        if req.symbol is None and req.start is None:
            if strict:
                raise LmdError(
                    "Say which file to focus on, for example: focus on src/parse.py lines 10 to 40."
                )
            if guess is None or current is None:
                return None
        if current is None:
            raise LmdError(
                "Nothing is in focus yet; name the file too, for example: "
                "focus on src/parse.py lines 10 to 40."
            )
        rel = current.file
    lines = job.lines(rel)
    if not lines:
        raise LmdError(f"{rel} is empty; there is nothing to focus on yet.")
    if req.symbol:
        found = focus.symbol_range(lines, req.symbol)
        if found is None:
            raise LmdError(f"I found no function or class called {req.symbol} in {rel}.")
        chosen = Focus(rel, found[0], found[1], req.symbol, found[2])
    elif req.start is not None:
        start, end = sorted((req.start, req.end or req.start))
        if start < 1:
            raise LmdError("Lines are counted from 1; say a range like lines 1 to 20.")
        if end > len(lines):
            raise LmdError(
                f"{rel} has only {plural(len(lines), 'line')}, so line {end} is past its end; "
                f"pick a range within 1 to {len(lines)}."
            )
        named = focus.symbol_for_range(lines, start, end)
        chosen = Focus(rel, start, end, *(named or (None, None)))
    elif guess and (found := focus.symbol_range(lines, guess)):
        chosen = Focus(rel, found[0], found[1], guess, found[2])
    elif req.file:
        chosen = Focus(rel, 1, len(lines))
    else:
        return None
    focus.check_size(chosen, lines, job.max_tokens, job.model)
    job.focus = chosen
    return chosen


# -- edits ----------------------------------------------------------------------------------
async def edit(job: Job, text: str) -> AsyncIterator[str]:
    """Ask the model for a diff that does what `text` says to the focused code; apply it."""
    req = focus.parse_request(text)
    # "rewrite parse_header so that ..." may name a function without saying "function".
    target = _EDIT_TARGET.match(text.strip()) if req.symbol is None else None
    guess = target.group(1) if target else None
    if req.file and job.focus is not None and not (req.symbol or req.start or guess):
        req.file = None  # a file mentioned in passing does not move the focus
    await focus_from_words(job, req, strict=False, guess=guess)
    current = job.focus
    if current is None:
        raise LmdError(
            "Nothing is in focus; first say, for example: focus on src/parse.py lines 10 to 40."
        )
    lines = job.lines(current.file)
    code = focus.render(current, lines, job.max_tokens, job.model)
    messages = [
        {"role": "system", "content": prompts.text("edit")},
        {"role": "user", "content": prompts.edit_request(code, text.strip())},
    ]
    patch = await ask_for_patch(job, messages)
    if approval_level(job.ctx) == "always":
        summary = describe_patch(job, patch, before=True)
        job.ctx.extra["diff"] = patch.text
        yield _ask(
            job.ctx,
            f"{summary} Shall I apply it? Say yes or no.",
            {"action": "apply", "repo": job.repo, "patch": patch.text},
        )
        return
    yield await apply_and_record(job, patch)


async def ask_for_patch(job: Job, messages: list[dict]) -> patches.Patch:
    """The model's diff, checked; one retry with git's complaint; a sentence when it fails."""
    problem = ""
    for attempt in (1, 2):
        reply = await job.ctx.llm.chat(messages)
        diff = patches.extract_diff(reply)
        if diff is None:
            problem = "The answer contained no unified diff."
        else:
            patch = patches.parse(diff)
            problem = await patches.check(job.repo, patch) or ""
            if not problem:
                return patch
        if attempt == 1:
            feedback = prompts.retry_feedback(problem)
            job.ctx.add_prompt("assistant", reply, "decorative")
            job.ctx.add_prompt("user", feedback, "decorative")
            messages = [
                *messages,
                {"role": "assistant", "content": reply},
                {"role": "user", "content": feedback},
            ]
    first = problem.strip().splitlines()[0] if problem.strip() else "no reason given"
    raise LmdError(
        f"The model's change did not apply, even after I showed it the error, so I changed "
        f"nothing ({first}). Try rephrasing the request or focusing on a smaller range.",
        status=422,
        detail={"git": problem},
    )


async def apply_and_record(job: Job, patch: patches.Patch) -> str:
    """Apply a checked patch, record it for undo, and say what changed."""
    conflicts = await unmerged_paths(job.repo)
    if conflicts:
        raise LmdError(
            f"The repository has unresolved merge conflicts in {', '.join(conflicts[:3])}; "
            "resolve them first, then ask again.",
            status=409,
        )
    own = [
        patches.from_row(r) for r in patches.applied(job.ctx.store, job.ctx.session.name, job.repo)
    ]
    kept = [
        path
        for path in await dirty_files(job.repo, patch.paths)
        if await patches.hand_edited(job.repo, path, [p for p in own if path in p.paths])
    ]
    problem = await patches.apply(job.repo, patch)
    if problem:
        first = problem.splitlines()[0]
        raise LmdError(
            f"The change no longer applies to the files as they are now, so nothing was touched "
            f"({first}).",
            status=409,
            detail={"git": problem},
        )
    summary = describe_patch(job, patch)
    patch_id = patches.record(job.ctx.store, job.ctx.session.name, job.repo, patch, summary)
    _follow_focus(job, patch, +1)
    job.ctx.extra["diff"] = patch.text
    job.ctx.extra.setdefault("applied", []).append(
        {"id": patch_id, "files": patch.paths, "added": patch.added, "removed": patch.removed}
    )
    job.ctx.reply_kind = "contextual"
    note = ""
    if kept:
        note = f" Your uncommitted changes to {', '.join(kept)} were kept; the edit sits on top."
    return summary + note


def describe_patch(job: Job, patch: patches.Patch, before: bool = False) -> str:
    """'Changed parse_header in src/parse.py: 3 lines added, 1 removed.'"""
    described = [_describe_file(job, f, before) for f in patch.files]
    if len(described) == 1:
        head, counts = described[0]
        text = f"{head}: {counts}" if counts else head
    else:
        shown = [f"{head} ({counts})" if counts else head for head, counts in described]
        text = ", ".join(shown[:-1]) + " and " + shown[-1]
    if before:
        return f"The model proposes: {text}."
    return text[0].upper() + text[1:] + "."


def _describe_file(job: Job, f: patches.FileChange, before: bool) -> tuple[str, str | None]:
    """(what happened to the file, the line counts) in words."""
    if f.created:
        return f"created {f.path} with {plural(f.added, 'line')}", None
    if f.deleted:
        return f"deleted {f.path}", None
    where = _changed_symbol(job, f, before)
    head = f"changed {where} in {f.path}" if where else f"changed {f.path}"
    return head, f"{plural(f.added, 'line')} added, {f.removed} removed"


def _changed_symbol(job: Job, f: patches.FileChange, before: bool) -> str | None:
    path, problem = inside(job.repo, f.path)
    if problem or not path.is_file():
        return None
    try:
        lines = path.read_text("utf-8").splitlines()
    except (OSError, UnicodeDecodeError):
        return None
    line = f.first_new_line
    if not before and f.first_added is not None:
        for i, text in enumerate(lines, 1):
            if text == f.first_added:
                line = i
                break
    found = focus.enclosing_symbol(lines, line) if line else None
    return found[0] if found else None


def _follow_focus(job: Job, patch: patches.Patch, direction: int) -> None:
    """Keep the focus on the same code after its file changed."""
    current = job.focus
    if current is None:
        return
    change = next((f for f in patch.files if f.path == current.file), None)
    if change is None:
        return
    try:
        lines = job.lines(current.file)
    except LmdError:
        job.focus = None  # the file is gone
        return
    if current.symbol and (found := focus.symbol_range(lines, current.symbol)):
        current.start, current.end, current.kind = found
    else:
        delta = (change.added - change.removed) * direction
        current.end = max(current.start, min(len(lines), current.end + delta))
        current.start = min(current.start, max(1, len(lines)))
    job.focus = current


# -- build ----------------------------------------------------------------------------------
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


async def compile_request(job: Job, fix: bool) -> AsyncIterator[str]:
    command, why = build_command(job)
    if approval_level(job.ctx) != "never":
        chosen = f" (chosen from {why})" if why else ""
        if fix:
            rounds = job.ctx.settings["max_thought_loops"]
            question = (
                f"Shall I run {command}{chosen} in {job.repo} and apply the model's fixes, "
                f"up to {plural(rounds, 'round')}? Say yes or no."
            )
        else:
            question = f"Shall I run {command}{chosen} in {job.repo}? Say yes or no."
        pending = {"action": "fix" if fix else "compile", "repo": job.repo, "command": command}
        yield _ask(job.ctx, question, {**pending, "why": why})
        return
    if fix:
        yield await compile_and_fix(job, command, why)
    else:
        yield await compile_once(job, command, why)


async def run_build(job: Job, command: str):
    from daemon.runner import run_command

    s = job.ctx.settings
    result = await run_command(
        command, job.repo, s["cobol_build_timeout_secs"], s["max_bash_output_len_for_response"]
    )
    job.ctx.extra.setdefault("builds", []).append(
        {
            "command": command,
            "exit_code": result.exit_code,
            "timed_out": result.timed_out,
            "duration": round(result.duration, 3),
            "output": result.output,
        }
    )
    return result


def _chosen(command: str, why: str | None) -> str:
    return f"No build command is set, so I used {command} ({why}). " if why else ""


def _outcome(job: Job, result) -> str:
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


async def compile_once(job: Job, command: str, why: str | None) -> str:
    result = await run_build(job, command)
    job.ctx.extra["build"] = job.ctx.extra["builds"][-1]
    job.ctx.reply_kind = "contextual"
    return _chosen(command, why) + _outcome(job, result)


async def compile_and_fix(job: Job, command: str, why: str | None) -> str:
    """Build; while it fails, show the model the errors and the code, apply its diff, rebuild."""
    limit = job.ctx.settings["max_thought_loops"]
    said = [_chosen(command, why).strip()]
    result = await run_build(job, command)
    if result.exit_code == 0:
        return " ".join([*said, "Build passed already; nothing to fix."]).strip()
    said.append(_outcome(job, result))
    changes: list[str] = []
    rounds = 0
    stopped = ""
    while result.exit_code != 0 and not result.timed_out and rounds < limit:
        target = _fix_target(job, result.output)
        if target is None:
            stopped = (
                "I could not tell which code to fix; focus on it and say compile and fix again."
            )
            break
        rounds += 1
        lines = job.lines(target.file)
        code = focus.render(target, lines, job.max_tokens, job.model)
        messages = [
            {"role": "system", "content": prompts.text("edit")},
            {"role": "user", "content": prompts.fix_request(command, result.output, code, changes)},
        ]
        try:
            patch = await ask_for_patch(job, messages)
            summary = await apply_and_record(job, patch)
        except LmdError as e:
            if e.status >= 500 or e.kind == "backend":
                raise
            stopped = f"In round {rounds} {e.message[0].lower()}{e.message[1:]}"
            break
        changes.append(summary.rstrip("."))
        said.append(f"Round {rounds}: {summary}")
        result = await run_build(job, command)
    job.ctx.extra["build"] = job.ctx.extra["builds"][-1]
    job.ctx.extra["rounds"] = rounds
    job.ctx.extra["passed"] = result.exit_code == 0
    job.ctx.reply_kind = "contextual"
    if stopped:
        said.append(stopped)
    if result.exit_code == 0:
        said.append(f"The build passes now, after {plural(rounds, 'round')}.")
    else:
        state = _outcome(job, result) if rounds else ""
        said.append(f"After {plural(rounds, 'round')} the build still fails. {state}".strip())
        if changes:
            said.append("The changes stay applied; say undo to revert them one at a time.")
    return " ".join(s for s in said if s)


def _fix_target(job: Job, output: str) -> Focus | None:
    """The focus, else the code around the first error that points into the repository."""
    if job.focus is not None:
        return job.focus
    where = build.error_location(output, job.repo)
    if where is None:
        return None
    rel, line = where
    try:
        lines = job.lines(rel)
    except LmdError:
        return None
    line = min(max(1, line), len(lines))
    named = focus.enclosing_symbol(lines, line)
    if named and (found := focus.symbol_range(lines, named[0])):
        return Focus(rel, found[0], found[1], named[0], found[2])
    return Focus(rel, max(1, line - 10), min(len(lines), line + 10))


# -- undo and diff --------------------------------------------------------------------------
async def undo(job: Job) -> str:
    """Reverse exactly the last change of this session still in place."""
    rows = patches.applied(job.ctx.store, job.ctx.session.name, job.repo)
    if not rows:
        return "There is no change of mine to undo in this session."
    row = rows[-1]
    patch = patches.from_row(row)
    conflicts = await unmerged_paths(job.repo)
    if conflicts:
        raise LmdError(
            f"The repository has unresolved merge conflicts in {', '.join(conflicts[:3])}; "
            "resolve them first, then ask again.",
            status=409,
        )
    problem = await patches.apply(job.repo, patch, reverse=True)
    if problem:
        raise LmdError(
            f"I cannot undo the last change to {', '.join(patch.paths)}: those lines were "
            "changed since, so reversing it would not apply cleanly; nothing was touched.",
            status=409,
            detail={"git": problem},
        )
    patches.mark_reverted(job.ctx.store, row["id"])
    _follow_focus(job, patch, -1)
    job.ctx.extra["reverted"] = {"id": row["id"], "files": patch.paths, "diff": patch.text}
    summary = row["summary"] or f"the change to {', '.join(patch.paths)}."
    return "Undone: " + summary[0].lower() + summary[1:]


def show_diff(job: Job) -> str:
    """The changes this session made that are still in place: a summary, then the diffs."""
    rows = patches.applied(job.ctx.store, job.ctx.session.name, job.repo)
    if not rows:
        job.ctx.extra["diff"] = ""
        return "I have not changed anything in this session."
    totals: dict[str, list[int]] = {}
    for row in rows:
        for f in patches.from_row(row).files:
            counts = totals.setdefault(f.path, [0, 0])
            counts[0] += f.added
            counts[1] += f.removed
    files = [f"{p} ({a} added, {r} removed)" for p, (a, r) in totals.items()]
    listed = files[0] if len(files) == 1 else ", ".join(files[:-1]) + " and " + files[-1]
    diff = "".join(row["patch"] for row in rows)
    job.ctx.extra["diff"] = diff
    job.ctx.extra["changes"] = [
        {"id": r["id"], "summary": r["summary"], "files": r["files"]} for r in rows
    ]
    return (
        f"This session made {plural(len(rows), 'change')} still in place, touching {listed}."
        f"\n\n{diff}"
    )
