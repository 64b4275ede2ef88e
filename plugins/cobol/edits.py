"""Edits as diffs: ask the model, check, apply, record, describe; undo and show them."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator

from daemon.api import (
    LmdError,
    action_protocol,
    dictation_hint,
    hooks_path,
    project_memory,
    verbatim,
    why_protected,
)

from . import focus, patches, prompts, structured
from .intents import EDIT_TARGET, plural
from .job import Job, approval_level, ask, focus_from_words, supersede_focus
from .repo import dirty_files, inside, unmerged_paths


async def edit(job: Job, text: str) -> AsyncIterator[str]:
    """Ask the model for a diff that does what `text` says to the focused code; apply it."""
    req = focus.parse_request(text)
    # "rewrite parse_header so that ..." may name a function without saying "function".
    target = EDIT_TARGET.match(text.strip()) if req.symbol is None else None
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
    system = prompts.text("edit")
    hint = ""
    if job.ctx.settings["dictation_hints"]:
        hint = await asyncio.to_thread(dictation_hint, text, job.repo, job.ctx.store)
    if hint:  # what the dictated words probably mean here, beside them (they stay as said)
        system += "\n\n" + hint
        job.ctx.extra["dictation_hint"] = hint
    messages = [
        {"role": "system", "content": system},
        {"role": "user", "content": prompts.edit_request(code, text.strip())},
    ]
    await refuse_conflicts(job)  # before asking the model, not only before applying
    patch = await ask_for_patch(job, messages)
    planted = planting(job.repo, patch)
    if planted:
        # an edit that would run later on its own is never applied without a yes, whatever
        # the approval setting: the question names every path git would touch and shows the
        # whole diff, verbatim
        job.ctx.extra["diff"] = patch.text
        yield ask(job.ctx, planting_question(job, patch, planted), apply_pending(job, patch))
        return
    if approval_level(job.ctx) == "always":
        summary = describe_patch(job, patch, before=True)
        job.ctx.extra["diff"] = patch.text
        yield ask(job.ctx, f"{summary} Shall I apply it? Say yes or no.", apply_pending(job, patch))
        return
    yield await apply_and_record(job, patch)


def apply_pending(job: Job, patch: patches.Patch) -> dict:
    """The question's continuation: this patch's exact text, applied on a yes."""
    return {"action": "apply", "repo": job.repo, "patch": patch.text, "files": patch.paths}


def planting_question(job: Job, patch: patches.Patch, planted: str, before: str = "") -> str:
    """'The model's change touches Makefile: ..., so it needs your yes. The model proposes:
    ... The diff: ... Shall I apply it?'"""
    lead = f"{before}the model's" if before else "The model's"
    return (
        f"{lead} change {planted}, so it needs your yes. "
        f"{describe_patch(job, patch, before=True)} The diff:\n"
        f"{verbatim(patches.readable(patch.text).rstrip())}\nShall I apply it? Say yes or no."
    )


def planting(repo: str, patch: patches.Patch) -> str | None:
    """Why a patch would plant something that runs later, in words (None for an ordinary edit),
    judged on every path git reads in it (rename and copy sources, deletions and binary
    sections included): a hook, a build, task or test file, Python bytecode, an executable
    bit, a symbolic link, or content that cannot be shown (binary)."""
    hooks = hooks_path(repo)
    reasons: dict[str, None] = {}
    for f in patch.files:
        for path in f.paths:
            why = why_protected(path, hooks)
            if why:  # "Makefile is a file that ..." -> "touches Makefile, a file that ..."
                why = why.removeprefix(f"{path} is ")
                reasons[f"touches {path}, {why}"] = None
            elif _bytecode(path):
                reasons[f"writes {path}, bytecode that Python runs instead of the source"] = None
        if f.new_mode == "120000":
            reasons[f"makes {f.path} a symbolic link"] = None
        elif f.new_mode == "100755" and f.old_mode != "100755" and not f.deleted:
            reasons[f"makes {f.path} an executable file"] = None
        if f.binary and not f.deleted:
            reasons[f"writes {f.path} as binary data, which I cannot show you"] = None
    return "; it ".join(reasons) or None


def _bytecode(path: str) -> bool:
    parts = path.split("/")
    return "__pycache__" in parts[:-1] or parts[-1].endswith((".pyc", ".pyo"))


async def refuse_conflicts(job: Job) -> None:
    """Editing during a conflicted merge would mix our change into it: refuse with a sentence."""
    conflicts = await unmerged_paths(job.repo)
    if conflicts:
        raise LmdError(
            f"The repository has unresolved merge conflicts in {', '.join(conflicts[:3])}; "
            "resolve them first, then ask again.",
            status=409,
        )


def _working_dir(job: Job) -> str:
    """Where project memory is read down to: the session's directory when it is inside the
    repository, else the repository's root."""
    cwd = job.ctx.session.cwd
    if cwd and inside(job.repo, cwd)[1] is None:
        return cwd
    return job.repo


def with_memory(messages: list[dict], memory: str) -> list[dict]:
    """The messages with the project's instructions after the system message."""
    if messages and messages[0]["role"] == "system":
        first = {**messages[0], "content": messages[0]["content"] + "\n\n" + memory}
        return [first, *messages[1:]]
    return [{"role": "system", "content": memory}, *messages]


async def ask_for_patch(job: Job, messages: list[dict]) -> patches.Patch:
    """The model's diff, checked; one retry with git's complaint; a sentence when it fails.
    Where the backend keeps tool calls or JSON schemas better than a diff in text, the model
    gives line edits (plugins/cobol/structured.py) and lmd writes the diff."""
    caps = await job.ctx.llm.capabilities()
    protocol = action_protocol(caps, job.ctx.settings["action_protocol"])
    job.ctx.extra["protocol"] = protocol
    memory = project_memory(_working_dir(job), job.ctx.settings)
    job.ctx.extra["project_memory"] = memory.files
    if memory.text:
        messages = with_memory(messages, memory.text)
    problem = ""
    refused = None
    refusal: LmdError | None = None
    most = job.ctx.settings["reply_max_tokens"]
    for attempt in (1, 2):
        problem = ""
        if protocol in ("tools", "schema"):
            reply, diff = "", None
            try:
                edits, reply = await structured.ask_edits(
                    job.ctx.llm, messages, protocol, memory.text, most
                )
                diff = structured.edits_to_diff(job.repo, edits)
            except LmdError as e:
                if e.status >= 500 or e.kind == "backend":
                    raise
                problem = e.message
        else:
            reply = await job.ctx.llm.chat(messages, **({"max_tokens": most} if most else {}))
            diff = patches.extract_diff(reply)
        refused = refusal = None
        if diff is None:
            problem = problem or "The answer contained no unified diff."
        else:
            try:
                patch = await patches.read(job.repo, diff)  # what git reads in it, not lmd
            except patches.Unreadable as e:
                problem = e.message  # git's complaint: the model may do better with it
            except LmdError as e:
                if e.status >= 500:
                    raise
                problem, refusal = e.message, e  # what lmd refuses, whatever the retry
            else:
                refused = patches.bad_path(job.repo, patch)
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
    if refused:
        raise LmdError(
            f"The model's change touches {refused[0]}, {refused[1]}, so I refused it and "
            "changed nothing.",
            status=422,
            detail={"git": problem},
        )
    if refusal is not None:
        raise LmdError(
            f"I refused the model's change and changed nothing: {refusal.message}.",
            status=422,
            detail={"git": problem, **(refusal.detail or {})},
        )
    raise LmdError(
        "The model's change did not apply even after I showed it git's error, so I changed "
        "nothing; try rephrasing the request or focusing on a smaller range.",
        status=422,
        detail={"git": problem},
    )


async def apply_and_record(job: Job, patch: patches.Patch) -> str:
    """Apply a checked patch, record it for undo, and say what changed."""
    await refuse_conflicts(job)
    edited = [
        f.path
        for f in patch.files
        if not (f.binary or f.created or f.deleted or f.renamed or f.copied)
    ]
    kept = []
    rows = patches.applied(job.ctx.store, job.ctx.session.name, job.repo)
    for path in await dirty_files(job.repo, edited):
        # our own earlier patches of that file (git reads only those), to tell them from yours
        own = [await patches.from_row(job.repo, r) for r in rows if path in json.loads(r["files"])]
        if await patches.hand_edited(job.repo, path, own):
            kept.append(path)
    before = patches.snapshot(job.repo, patch) if patches.needs_own_undo(patch) else None
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
    undo_text = None
    if before is not None:
        undo_text = await patches.effect_diff(patches.snapshot(job.repo, patch), before)
    patch_id = patches.record(
        job.ctx.store, job.ctx.session.name, job.repo, patch, summary, undo_text
    )
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
    """'Changed parse_header in src/parse.py: 3 lines added, 1 removed.': every file git reads
    in the patch is named."""
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


_KINDS = {"100755": "an executable file", "120000": "a symbolic link"}


def _describe_file(job: Job, f: patches.FileChange, before: bool) -> tuple[str, str | None]:
    """(what happened to the file, the line counts) in words."""
    kind = _KINDS.get(f.new_mode or "")
    if f.created:
        what = "a binary file" if f.binary else kind
        head = f"created {f.path}" + (f", {what}," if what else "")
        return head + ("" if f.binary else f" with {plural(f.added, 'line')}"), None
    if f.deleted:
        return f"deleted {f.path}" + (", a binary file" if f.binary else ""), None
    if f.renamed or f.copied:
        head = f"{'renamed' if f.renamed else 'copied'} {f.old_path} to {f.path}"
    else:
        where = None if f.binary else _changed_symbol(job, f, before)
        head = f"changed {where} in {f.path}" if where else f"changed {f.path}"
        if not (f.added or f.removed or f.binary) and f.new_mode:
            head = ""  # a mode change alone
    if f.new_mode and f.old_mode and f.new_mode != f.old_mode:
        made = f"made {f.path} " + (
            "executable" if f.new_mode == "100755" else "no longer executable"
        )
        head = f"{head} and {made}" if head else made
    if f.binary:
        return f"{head} (binary)", None
    if f.added or f.removed:
        return head, f"{plural(f.added, 'line')} added, {f.removed} removed"
    return head, None


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
    """Keep the focus on the same code after its file changed (or was renamed)."""
    current = job.focus
    if current is None:
        return
    change = next((f for f in patch.files if current.file in f.paths), None)
    if change is None:
        return
    if change.renamed:
        before, after = (change.old_path, change.path)[::direction]
        if current.file == before:
            current.file = after
    elif change.copied and current.file == change.old_path:
        return  # a copy leaves its source as it was
    try:
        lines = job.lines(current.file)
    except LmdError:
        supersede_focus(job.ctx)
        job.focus = None  # the file is gone
        return
    if current.symbol and (found := focus.symbol_range(lines, current.symbol)):
        current.start, current.end, current.kind = found
    else:
        delta = (change.added - change.removed) * direction
        current.end = max(current.start, min(len(lines), current.end + delta))
        current.start = min(current.start, max(1, len(lines)))
    job.focus = current


# -- undo and diff --------------------------------------------------------------------------
async def undo(job: Job) -> str:
    """Reverse exactly the last change of this session still in place."""
    rows = patches.applied(job.ctx.store, job.ctx.session.name, job.repo)
    if not rows:
        return "There is no change of mine to undo in this session."
    row = rows[-1]
    patch = await patches.from_row(job.repo, row)
    await refuse_conflicts(job)
    if row.get("undo"):  # a patch git cannot reverse: apply the diff of its effect, backwards
        back = await patches.read(job.repo, row["undo"], strip=1, compare=False)
        problem = await patches.apply(job.repo, back)
    else:
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


async def show_diff(job: Job) -> str:
    """The changes this session made that are still in place: a summary, then the diffs."""
    rows = patches.applied(job.ctx.store, job.ctx.session.name, job.repo)
    if not rows:
        job.ctx.extra["diff"] = ""
        return "I have not changed anything in this session."
    totals: dict[str, list[int]] = {}
    binary: set[str] = set()
    for row in rows:
        for f in (await patches.from_row(job.repo, row)).files:
            counts = totals.setdefault(f.path, [0, 0])
            counts[0] += f.added
            counts[1] += f.removed
            if f.binary:
                binary.add(f.path)
    files = [
        f"{p} (binary)" if p in binary and not a + r else f"{p} ({a} added, {r} removed)"
        for p, (a, r) in totals.items()
    ]
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
