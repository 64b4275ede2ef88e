"""What a rule-run command wrote, for marat: the question about what its rule does not cover
(named, place by place), the user's yes or no to exactly those places, and "undo that".

The core stages such a command's writes and applies what the rule allows
(daemon/execution/writes.py); marat keeps the last one's stage per session, so "undo that"
can put its writes back, and asks about the held places when there are few enough to name.
"""

from __future__ import annotations

import re

from daemon.api import CommandResult, Context, quoted_name, staged_writes

MAX_NAMED = 8  # more held places than a listener can weigh: none is offered, all are dropped
_UNDO = re.compile(
    r"^\s*(?:please\s+)?(?:undo|revert)(?:\s+(?:that|it|this|the last command|what you did|"
    r"what you just did))?(?:\s+please)?\s*[.!]*\s*$",
    re.I,
)


def is_undo(text: str) -> bool:
    """'undo that', 'undo', 'revert it', 'undo the last command' (and nothing longer: 'undo the
    last git commit' is a task for the model)."""
    return bool(_UNDO.match(text))


def kept(ctx: Context) -> dict | None:
    """The last command's kept stage in this session, when that command was the last one."""
    return ctx.state.get("staged")


def remember(ctx: Context, result: CommandResult, rule_id: int | None) -> None:
    """After any command: keep a rule-run command's stage (for undo and a yes), and let go of
    the one before (an undo undoes the last command only)."""
    old = ctx.state.pop("staged", None)
    if old:
        staged_writes.discard(old["dir"])
    settled = result.staged
    if settled is not None and settled.dir is not None:
        ctx.state["staged"] = {"dir": settled.dir, "command": result.command, "rule": rule_id}


def held_question(ctx: Context, result: CommandResult, rule_id: int | None) -> tuple[str, list]:
    """(the question about the held places, the places) when the command wrote what its rule
    does not cover, few enough to name; ("", []) when there is nothing to ask. Many places
    are dropped at once and said so."""
    settled = result.staged
    if settled is None or settled.dir is None or not settled.held:
        return "", []
    roots = settled.held_roots()
    rule = f"your rule {rule_id}" if rule_id else "its rule"
    if len(roots) > MAX_NAMED:
        named = ", ".join(quoted_name(p) for p in list(roots)[:3])
        staged_writes.drop_held(settled.dir, list(roots))
        return (
            f"The last command also wrote in {len(roots)} places that {rule} does not cover "
            f"({named} and more); I kept none of them. If they are needed, ask me to run it "
            "again and say yes to it.",
            [],
        )
    # A place's name is the command's (the model's) choice: quoted inside lmd's sentence, so
    # no name speaks for lmd (".notes. It only reads; say yes").
    places = [
        f"{quoted_name(place)} ({staged_writes.reason(why, place)})"
        for place, (why, _) in roots.items()
    ]
    question = (
        f"The last command ran under {rule}, and also wrote what the rule does not cover: "
        f"{'; '.join(places)}. I kept those apart. Say yes to apply exactly those, or no to "
        "drop them."
    )
    return question, list(roots)


def subject(places: list[str]) -> str:
    """What a yes to the held places is bound to: the places, exactly."""
    return "apply: " + ", ".join(places)


def answer(ctx: Context, pending: dict, yes: bool) -> str:
    """The user's yes (apply exactly the places asked about) or no (drop them)."""
    stage = pending["staged"]
    places = list(stage["places"])
    named = ", ".join(quoted_name(p) for p in places)
    if not yes:
        staged_writes.drop_held(stage["dir"], places)
        return f"All right, I dropped what it wrote in {named}."
    done = staged_writes.apply_held(stage["dir"], places)
    ctx.extra["staged_applied"] = [c.path for c in done.applied]
    said = f"I applied what it wrote in {named}."
    if done.failed:
        said += f" Not all of it: {'; '.join(done.failed[:3])}."
    return said


def undo(ctx: Context) -> str:
    """Put back what the last rule-run command wrote."""
    stage = ctx.state.pop("staged", None)
    if stage is None:
        return "There is nothing of mine to undo in this session."
    restored, left = staged_writes.undo_stage(stage["dir"])
    staged_writes.discard(stage["dir"])
    ctx.extra["undone"] = {"command": stage["command"], "restored": restored, "left": left}
    if not restored and not left:
        return f"{stage['command']} changed nothing I kept, so there is nothing to undo."
    said = f"I put back what {stage['command']} wrote: {_count(len(restored))}."
    if left:
        said += f" I left {len(left)} as they are now: {'; '.join(left[:3])}."
    return said


def _count(n: int) -> str:
    return f"{n} path" if n == 1 else f"{n} paths"
