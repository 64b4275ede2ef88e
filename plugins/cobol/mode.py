"""`cobol`: spoken coding through git — focus, rewrite, compile, compile and fix, undo, diff.

Every change is a unified diff from the model, checked with `git apply --check`, applied with
`git apply`, recorded, and reversible with `undo`. Replies are short sentences a listener can
follow; the full diffs and build output go into the JSON reply.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator

from daemon.api import (
    NOTHING_WAITING,
    Context,
    approval_allowed,
    hear_answer,
    is_bare_answer,
    not_heard_reply,
    relays_model,
    verbatim,
)

from . import focus, patches
from .compiling import (
    build_inputs,
    build_snapshot,
    changed_inputs,
    compile_and_fix,
    compile_once,
    compile_request,
    what_changed,
)
from .edits import apply_and_record, edit, show_diff, undo
from .intents import HELP, classify, yes_or_no
from .job import Job, ask, focus_from_words, supersede_focus
from .repo import chosen_directory, find_root


async def respond(ctx: Context) -> AsyncIterator[str]:
    text = ctx.text.strip()
    pending = ctx.pending or _remembered_pending(ctx, text)
    ctx.state.pop("pending", None)
    if pending:
        answer = yes_or_no(text)
        if answer is True and not approval_allowed(pending):
            # a client relaying a model's words (lmd mcp serve) cannot say the user's yes, and
            # a client that did not hear this question cannot answer it (it hears it now)
            ctx.keep_pending(pending)
            ctx.state["pending"] = ctx.session.pending
            if not relays_model():
                yield not_heard_reply(pending)
                return
            yield (
                "This change waits for the user's own yes: the user says it to lmd itself "
                f"(lmd say --session {ctx.session.name} yes). A client's model cannot approve it."
            )
            return
        heard = hear_answer(text) if answer is None else None
        if heard is not None:
            # a wait, or an answer that is no clear yes or no: the question stays
            ask(ctx, "", {k: v for k, v in pending.items() if k not in ("mode", "created_at")})
            said = "All right, it waits." if heard.outcome == "wait" else heard.say_again()
            yield f"{said} {_still_asked(pending)}"
            return
        if answer is None:
            yield _declined(pending) + " "
        else:
            async for chunk in _resume(ctx, pending, answer):
                yield chunk
            return
    if is_bare_answer(text):
        yield NOTHING_WAITING  # a yes or a no to nothing is no edit for the model
        return
    intent = classify(text)
    if intent == "help":
        yield HELP
        return
    chosen = chosen_directory(ctx.settings["cobol_repo"], ctx.session.cwd)
    job = Job(ctx, await find_root(chosen))
    ctx.extra["repo"] = job.repo
    if ctx.cwd_given or ctx.settings["cobol_repo"].strip():
        _remember(ctx, job.repo)
    elif job.repo not in ctx.state.get("repos", []):
        # the directory is where the session was left (marat's last cd: the model's choice),
        # not one the user gave: work there only after a yes to exactly that repository
        yield ask(
            ctx,
            f"This session's directory is now {chosen}, where it was last left, not a "
            f"directory you gave me. Shall I work in the repository {job.repo}? Say yes or "
            "no. (To choose one yourself, send your directory: lmd say --cwd DIR, or set "
            "cobol_repo.)",
            {"action": "repo", "repo": job.repo, "text": text},
        )
        return
    async for chunk in _handle(job, intent, text):
        yield chunk


async def _handle(job: Job, intent: str, text: str) -> AsyncIterator[str]:
    """One request in a repository the user gave or said yes to."""
    ctx = job.ctx
    ctx.extra["focus"] = job.focus.to_state() if job.focus else None
    if intent == "status":
        current = job.focus
        yield (
            f"The focus is {current.describe()}." if current else "Nothing is in focus yet. " + HELP
        )
    elif intent == "focus":
        chosen = await focus_from_words(job, focus.parse_request(text), strict=True)
        # The current focus is crucial to the session (instructive) until another replaces it.
        supersede_focus(ctx)
        ctx.set_karma([ctx.user_prompt_id], "instructive")
        ctx.reply_kind = "instructive"
        heard = ctx.extra.get("heard_as")
        yield (
            f"{heard} Focused on {chosen.describe()}."
            if heard
            else f"Focused on {chosen.describe()}."
        )
    elif intent == "edit":
        async for chunk in edit(job, text):
            yield chunk
    elif intent in ("compile", "fix"):
        async for chunk in compile_request(job, fix=intent == "fix"):
            yield chunk
    elif intent == "undo":
        yield await undo(job)
    elif intent == "diff":
        yield await show_diff(job)


REMEMBERED_REPOS = 20  # repositories a session keeps as given or approved


def _remember(ctx: Context, repo: str) -> None:
    """A repository the user gave (X-Cwd, --cwd, cobol_repo) or said yes to: later requests
    of this session may work there without naming it again."""
    repos = [r for r in ctx.state.get("repos", []) if r != repo]
    ctx.state["repos"] = [*repos, repo][-REMEMBERED_REPOS:]


def _remembered_pending(ctx: Context, text: str) -> dict | None:
    """A question asked earlier, when answered with the directive ("cobol yes")."""
    saved = ctx.state.get("pending")
    if not saved or yes_or_no(text) is None:
        return None
    if time.time() - saved.get("created_at", 0) > ctx.settings["end_session_after_idle_secs"]:
        return None
    return saved


def _still_asked(pending: dict) -> str:
    if pending.get("action") == "apply":
        return "The change is still waiting: say yes to apply it, or no."
    return f"{pending.get('command', 'The build')} is still waiting: say yes to run it, or no."


def _declined(pending: dict) -> str:
    if pending.get("action") == "apply":
        return "I left the code as it was."
    if pending.get("action") == "repo":
        return f"I did not work in {pending.get('repo')}."
    return f"I did not run {pending.get('command', 'the build')}."


async def _resume(ctx: Context, pending: dict, yes: bool) -> AsyncIterator[str]:
    if not yes:
        yield "All right. " + _declined(pending)
        return
    job = Job(ctx, await find_root(pending["repo"]))
    ctx.extra["repo"] = job.repo
    if pending["action"] == "repo":
        _remember(ctx, job.repo)  # the user's yes to exactly this repository
        async for chunk in _handle(job, classify(pending["text"]), pending["text"]):
            yield chunk
    elif pending["action"] == "apply":
        patch = await patches.read(job.repo, pending["patch"])
        yield await apply_and_record(job, patch)
    elif pending["action"] in ("compile", "fix"):
        asked = pending.get("inputs") or {}
        changed = changed_inputs(job.repo, asked)
        if changed:
            # the build's files changed after the question: the yes was not for these
            shown = ", ".join(changed[:5])
            diff = what_changed(job.repo, asked, pending.get("snapshot") or {}, changed)
            seen = f" What changed:\n{verbatim(diff.rstrip())}\n" if diff else " "
            yield ask(
                ctx,
                f"Since I asked, the build's files changed ({shown}); {pending['command']} "
                f"would run them as they are now.{seen}Shall I run it? Say yes or no.",
                {
                    **pending,
                    "inputs": build_inputs(job.repo),
                    "snapshot": build_snapshot(job.repo),
                },
            )
        elif pending["action"] == "compile":
            yield await compile_once(job, pending["command"], pending.get("why"))
        else:
            yield await compile_and_fix(job, pending["command"], pending.get("why"))
