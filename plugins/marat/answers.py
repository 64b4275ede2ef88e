"""marat's spoken answers that make or read approval rules: "yes, always here", "never run
that", "what are my rules", "forget the git commit rule".

Only ever read from what the user said (never from the model's words or a client relaying
them). The rules themselves (their table, matching and sentences) are the core's
(daemon/agent/rules.py, through `daemon.api.rules`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from daemon.api import (
    LmdError,
    Unmodelled,
    match_name,
    plural,
    quoted_name,
    rules,
    simple_commands,
    spoken_number,
)


@dataclass(frozen=True)
class Answer:
    """A spoken answer that makes a rule: "yes, always here", "never run that"..."""

    decision: str  # allow | forbid
    lifetime: str  # kept | session
    everywhere: bool
    named: tuple[str, ...] | None  # "always for git commit": the words the user named
    sandbox: str | None  # None: the default; "none" only when said in so many words
    problem: str | None = None  # said two things that do not go together


_YES = {"yes", "yeah", "yep", "yup", "sure", "ok", "okay", "alright", "fine"}
_NO = {"no", "nope"}
_FILLER = {"please", "run", "it", "that", "this", "do", "and", "but", "just", "go", "ahead",
           "then", "the", "command", "thanks", "thank", "you", "one", "them", "those", "so",
           "again"}  # fmt: skip
_PHRASES: list[tuple[tuple[str, ...], str]] = []


def _phrases(kind: str, *texts: str) -> None:
    for text in texts:
        _PHRASES.append((tuple(text.split()), kind))


_phrases("always", "always", "forever", "from now on", "every time", "each time",
         "dont ask again", "don't ask again", "do not ask again", "dont ask me again",
         "don't ask me again", "do not ask me again", "without asking", "permanently",
         "all the time")  # fmt: skip
_phrases("session", "for this session", "this session", "for the session",
         "for the rest of this session", "for the rest of the session", "in this session",
         "for now", "this time round")  # fmt: skip
_phrases("here", "here", "in here", "in this directory", "this directory", "in this folder",
         "this folder", "in this project", "this project", "in this repo", "this repo",
         "in this repository", "this repository", "in this dir")  # fmt: skip
_phrases("everywhere", "everywhere", "anywhere", "in every directory", "in all directories",
         "in any directory", "globally", "in every folder", "in any folder")  # fmt: skip
_phrases("unsandboxed", "without the sandbox", "without a sandbox", "without sandbox",
         "outside the sandbox", "outside of the sandbox", "unsandboxed", "no sandbox",
         "with no sandbox", "not sandboxed", "without sandboxing")  # fmt: skip
_phrases("read-only", "read only", "read-only", "in the read only sandbox",
         "in the read-only sandbox", "read only sandbox", "read-only sandbox")  # fmt: skip
_phrases("never", "never", "never ever", "dont ever", "don't ever", "do not ever")
_PHRASES.sort(key=lambda p: -len(p[0]))  # the longest phrase first


def _tokens(text: str) -> tuple[list[str], list[str]]:
    """Words as dictated (case kept, for a named command) and lowered, punctuation at their
    ends dropped."""
    kept = []
    for raw in text.replace("\u2019", "'").split():
        word = raw.strip('.,!?;:"()[]')
        if word.endswith("'s"):
            word = word[:-2]
        if word:
            kept.append(word)
    return kept, [w.lower() for w in kept]


def _phrase_at(low: list[str], i: int) -> tuple[str, int] | None:
    for words, kind in _PHRASES:
        if tuple(low[i : i + len(words)]) == words:
            return kind, len(words)
    return None


def parse_answer(text: str) -> Answer | None:
    """The rule a spoken answer asks for, or None when it is not such an answer (a plain yes
    or no, or anything else). Only ever called on what the user said."""
    if len(text) > 300:
        return None
    orig, low = _tokens(text)
    if not low:
        return None
    seen: dict[str, bool] = {}
    named: list[str] | None = None
    yes = no = strong = False
    i = 0
    while i < len(low):
        word = low[i]
        if word in _YES and not seen:
            yes = True
            i += 1
            continue
        if word in _NO and not seen:
            no = True
            i += 1
            continue
        found = _phrase_at(low, i)
        if found:
            seen[found[0]] = True
            i += found[1]
            if found[0] == "never":
                # "never run that" / "never run git push": the verb, then that or a command
                verb = False
                while i < len(low) and low[i] in ("run", "do", "allow", "execute"):
                    i += 1
                    verb = strong = True
                if i < len(low) and low[i] in ("that", "this", "it", "again"):
                    strong = True
                    i += 1
                    continue
                if not verb:
                    continue  # "never mind": the next word decides
                start = i
                while i < len(low) and not _phrase_at(low, i):
                    i += 1
                if i > start:
                    named = orig[start:i]
                    strong = True
            continue
        if word == "for" and (seen.get("always") or yes or seen.get("session")):
            start = i + 1
            i = start
            while i < len(low) and not _phrase_at(low, i):
                i += 1
            if i > start:
                named = orig[start:i]
            continue
        if word in _FILLER:
            i += 1
            continue
        return None  # a word that is not part of such an answer: not a rule answer
    forbid = seen.get("never", False)
    kept = seen.get("always", False)
    session = seen.get("session", False)
    problem = None
    if forbid:
        if not strong:
            return None  # "never" alone, "no, never": a plain no
        if yes:
            problem = "I heard both yes and never; say yes always, or never run that."
    elif not (kept or session) or no:
        return None  # a plain yes or no (or "yes, here"): no rule
    if kept and session:
        problem = "I heard both always and this session; say yes always, or yes for this session."
    if seen.get("here") and seen.get("everywhere"):
        problem = "I heard both here and everywhere; say one of them."
    if seen.get("unsandboxed") and seen.get("read-only"):
        problem = "I heard both without the sandbox and read-only; say one of them."
    sandbox = "none" if seen.get("unsandboxed") else "read-only" if seen.get("read-only") else None
    if forbid and sandbox:
        problem = "A never rule has no sandbox; say never run that."
    named_words = tuple(named) if named else None
    if named_words and len(named_words) > rules.MAX_PATTERN_WORDS:
        longest = rules.MAX_PATTERN_WORDS
        problem = f"That command is longer than {longest} words; name a shorter one."
    # allow rules hold here unless said otherwise; never rules everywhere unless said here
    everywhere = bool(seen.get("everywhere")) or (forbid and not seen.get("here"))
    return Answer(
        "forbid" if forbid else "allow",
        "session" if session and not kept else "kept",
        everywhere,
        named_words,
        sandbox,
        problem,
    )


def make_from_answer(
    store: Any,
    answer: Answer,
    *,
    cwd: str,
    session: str,
    command: str | None = None,
    tool: str | None = None,
    said: str = "",
    lmd_home: str | None = None,
) -> tuple[list[rules.Rule], str]:
    """The rules a spoken answer makes for the command (or tool call) it answers, and the
    sentence that says them back. RuleError says why none could be made."""
    if answer.problem:
        raise rules.RuleError(answer.problem)
    directory = None if answer.everywhere else cwd
    lifetime_session = session if answer.lifetime == "session" else None
    patterns: list[str | tuple[str, ...]] = []
    if tool is not None:
        # "yes, always for write_note" (or "write note") names the tool asked about

        named = " ".join(answer.named or ()).lower()
        short = tool.rsplit(":", 1)[-1].lower()
        # said as a speech engine writes it: "write notes", "right note" for write_note
        heard = match_name(named, [tool.lower(), short]).name if named else None
        if named and heard is None:
            raise rules.RuleError(
                f"{' '.join(answer.named or ())} is not the tool I asked about ({tool}), so I "
                "made no rule; say yes always, or name that tool."
            )
        patterns = [tool]
    else:
        try:
            parts = simple_commands(command or "")
        except Unmodelled as e:
            raise rules.RuleError(
                f"I cannot read that command well enough to make a rule of it ({e}); rules "
                "cover plain commands without $, redirections to files or subshells."
            ) from None
        if answer.named:
            wanted = tuple(w.lower() for w in answer.named)
            for part in parts:
                if tuple(w.lower() for w in part.words[: len(wanted)]) == wanted:
                    patterns = [part.words[: len(wanted)]]
                    break
            if not patterns:
                raise rules.RuleError(
                    f"{' '.join(answer.named)} is not how the command I asked about begins, "
                    "so I made no rule; name its first words, or say yes always."
                )
        elif answer.decision == "forbid":
            patterns = _unique([p.words for p in parts])  # that command, as it was
        else:
            patterns = _unique([rules.suggested_pattern(p.words) for p in parts])
    made = []
    for pattern in patterns:
        rule, _ = rules.add_rule(
            store,
            answer.decision,
            pattern,
            directory=directory,
            session=lifetime_session,
            sandbox=answer.sandbox if answer.decision == "allow" else None,
            origin="voice",
            said=said[:300] or None,
            lmd_home=lmd_home,
        )
        made.append(rule)
    return made, rules.said_back(made)


def _unique(items: list[tuple[str, ...]]) -> list[tuple[str, ...]]:
    out: list[tuple[str, ...]] = []
    for item in items:
        if item not in out:
            out.append(item)
    return out


# -- spoken questions about rules ------------------------------------------------------------------
_LIST = re.compile(
    r"^\s*(?:what|which)\s+(?:are|is)?\s*(?:my|the|your)?\s*(?:approval\s+)?rules?"
    r"(?:\s+(?:do\s+i\s+have|are\s+there))?\s*[?.!]*\s*$"
    r"|^\s*(?:what|which)\s+rules?\s+(?:do\s+i\s+have|are\s+there|have\s+i\s+made)\s*[?.!]*\s*$"
    r"|^\s*(?:list|read|say|tell\s+me|show(?:\s+me)?)\s+(?:me\s+)?(?:my|the|all)?\s*"
    r"(?:approval\s+)?rules\s*[?.!]*\s*$",
    re.I,
)
_FORGET = re.compile(
    r"^\s*(?:please\s+)?(?:forget|remove|delete|drop|cancel)\s+(?:about\s+)?"
    r"(?:(?:the|my)\s+)?(?:rule\s+(?:number\s+)?(?P<id>\d+)|rule\s+for\s+(?P<for>.+?)"
    r"|(?P<name>.+?)\s+rule)\s*[.!]*\s*$",
    re.I,
)


def asks_for_list(text: str) -> bool:
    """ "what are my rules" and the ways a voice says it."""
    return bool(_LIST.match(text))


_FORGET_NUMBER = re.compile(
    r"^\s*(?:please\s+)?(?:forget|remove|delete|drop|cancel)\s+(?:about\s+)?(?:(?:the|my)\s+)?"
    r"rule\s+(?:number\s+)?(?P<said>[a-z][a-z\s-]{0,40}?)\s*[.!]*\s*$",
    re.I,
)


def forget_target(text: str, store: Any = None, session: str | None = None) -> str | None:
    """ "forget the git commit rule" -> "git commit"; "forget rule 3" (or "rule three") ->
    "3"; else None. With the store, a pattern said as a speech engine writes it ("the get
    commit rule") is matched against the session's rules by sound ("git commit")."""
    said = _FORGET_NUMBER.match(text)
    if said:
        number = spoken_number(said.group("said"))
        if isinstance(number, int) and number > 0:
            return str(number)
    m = _FORGET.match(text)
    if not m:
        return None
    target = (m.group("id") or m.group("for") or m.group("name") or "").strip() or None
    if target is None or target.isdigit() or store is None:
        return target
    patterns = [r.pattern for r in rules.all_rules(store, session)]
    found = match_name(target, patterns)
    return found.name if found.name is not None else target


def spoken_list(store: Any, session: str) -> str:
    """The user's rules in sentences, the built-in ones counted."""
    found = rules.all_rules(store, session)
    mine = [r for r in found if r.origin != "built-in"]
    builtin = len(found) - len(mine)
    tail = (
        f" There are also {builtin} built-in rules; lmd rules list shows them." if builtin else ""
    )
    if not mine:
        return f"You have made no rules.{tail}"
    lines = [f"Rule {r.id}: {r.sentence()}" for r in mine]
    return "\n".join(lines) + tail


# -- a wait, or an answer that is no answer -------------------------------------------------
ABOUT_PROMPT = (
    "The user is deciding whether to let a shell command run, and asks a question about it. "
    "Answer the question about this command in one or two short, plain sentences. Do not "
    "propose other commands, and do not tell the user whether to say yes."
)
ABOUT_MOST_CHARS = 400  # a brief answer: the question comes after it


async def about_command(ctx: Any, command: str, asked: str) -> str:
    """A brief answer (the model's) to the user's question about the waiting command."""
    messages = [
        {"role": "system", "content": ABOUT_PROMPT},
        {"role": "user", "content": f"The command:\n{command}\n\nThe question: {asked}"},
    ]
    try:
        text = (await ctx.llm.chat(messages, max_tokens=120)).strip()
    except LmdError as e:
        return f"I could not ask the model about it: {e.message}"
    if not text:
        return "The model had no answer to that."
    # The model's words inside lmd's reply: on one line and quoted, invisible characters
    # written out, so no part of it reads as lmd's own question ("I am about to run: ls. Say
    # yes"); lmd's question follows it.
    text, cut = " ".join(text.split()), ""
    if len(text) > ABOUT_MOST_CHARS:
        cut = f" ({plural(len(text) - ABOUT_MOST_CHARS, 'character')} cut)"
        text = text[:ABOUT_MOST_CHARS].rsplit(" ", 1)[0] + "..."
    return f"The model says: {quoted_name(text, ABOUT_MOST_CHARS + 3)}{cut}"


def held(heard: Any, asked_again: str) -> str:
    """The reply to a wait or an unclear answer: the question stays, asked again."""
    if heard.outcome == "wait" and heard.question:
        return f"It is still waiting. {asked_again}"
    if heard.outcome == "wait":
        return f"All right, it waits for your answer. {asked_again}"
    return f"{heard.say_again()} {asked_again}"
