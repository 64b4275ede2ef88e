"""One cobol request: the repository it works in, its focus, and questions to the user."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from daemon.api import Context, LmdError, relays_model

from . import focus
from .focus import Focus
from .intents import plural
from .repo import git, inside

APPROVAL_CHOICES = ("never", "unsafe", "always")


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


def supersede_focus(ctx: Context) -> None:
    """What said the earlier focus (instructive while it was the focus) becomes decorative:
    a superseded focus is not worth keeping in the context."""
    stale = ctx.store.ids_of_kind(ctx.session.name, "instructive", ctx.mode)
    ctx.set_karma([i for i in stale if i != ctx.user_prompt_id], "decorative")


def approval_level(ctx: Context) -> str:
    """marat's approval setting (when the marat plugin is absent: unsafe, its default); for an
    agent (lmd mcp serve) always: its edits and builds wait for its user's yes."""
    if relays_model():
        return "always"
    try:
        level = str(ctx.settings.get("marat_approval", "unsafe") or "unsafe").lower()
    except LmdError:
        level = "unsafe"
    return level if level in APPROVAL_CHOICES else "unsafe"


def ask(ctx: Context, question: str, pending: dict) -> str:
    ctx.set_pending(pending)
    ctx.state["pending"] = ctx.session.pending
    ctx.reply_kind = "decorative"
    return question


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
    if not matches and code == 0:
        # said rather than typed: "the core file", "daemon core pie" (focus.spoken_file)
        found, heard, matches = focus.spoken_file(name, out.splitlines())
        if found is not None:
            if heard:
                job.ctx.extra["heard_as"] = heard
            return found
    if not strict:
        return None
    if len(matches) > 1:
        listed = matches[:4]
        shown = ", ".join(listed[:-1]) + " and " + listed[-1]
        if len(matches) > 4:
            shown += f" (and {len(matches) - 4} more)"
        raise LmdError(
            f"{plural(len(matches), 'file')} fit {name}: {shown}; which one? Say it with "
            "its folder."
        )
    raise LmdError(f"There is no file {name} in the repository {job.repo}; check the name.")


async def find_definition(job: Job, name: str, strict: bool) -> str | None:
    """The one file defining `name`; None when none does (or several do and not strict)."""
    code, out = await git(job.repo, "grep", "-l", "-I", "-w", "--untracked", "-e", name)
    files = out.splitlines()[:50] if code == 0 else []
    defining = []
    for rel in files:
        try:
            if focus.symbol_range(job.lines(rel), name):
                defining.append(rel)
        except LmdError:
            continue
    if len(defining) > 1 and strict:
        raise LmdError(
            f"{name} is defined in several files ({', '.join(defining[:4])}); name the file too."
        )
    return defining[0] if len(defining) == 1 else None


async def focus_from_words(
    job: Job, req: focus.FocusRequest, strict: bool, guess: str | None = None
) -> Focus | None:
    """Set the focus from what was asked: a file, a range, a function (`guess` is a name that
    may or may not be one); None when nothing was asked and `strict` is off."""
    current = job.focus
    rel = await resolve_file(job, req.file, strict) if req.file else None
    name = req.symbol or guess
    if rel is None and name and req.start is None:
        here = focus.symbol_range(job.lines(current.file), name) if current else None
        if here is None:  # "function parse_header" alone: look for it in the whole repository
            rel = await find_definition(job, name, strict=req.symbol is not None)
            if rel is None and current is None and req.symbol:
                raise LmdError(
                    f"I found no function or class called {name} in the repository; "
                    "name the file too."
                )
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
    if chosen != current:
        supersede_focus(job.ctx)
    job.focus = chosen
    return chosen
