"""marat's approval policy: whether a command waits for a yes, and if not, in which sandbox it
runs, from the `marat_approval` and `sandbox_level` settings and the user's rules (the core's
`rules.decide`, whose `Decision` this reads)."""

from __future__ import annotations

from dataclasses import dataclass

from daemon.api import rules, sandbox

from . import safety


@dataclass(frozen=True)
class RunPlan:
    """Whether a command waits for a yes, and if not how it runs."""

    ask: bool
    level: str = sandbox.NONE  # the sandbox level it runs in, or none
    approval: str = "read-only"  # the audit's word for why it ran at once
    why: str = ""  # said after the question
    rule_id: int | None = None  # the rule that let it run
    writable: str | None = None  # workspace-write: the only writable place (the rule's dir)


def plan_command(
    approval: str,
    level: str,
    command: str,
    escalate: bool = False,
    ruled: rules.Decision | None = None,
) -> RunPlan:
    """The approval policy on top of the sandbox and the user's rules (a forbid rule was
    applied before: it refuses whatever the policy).

    never: everything runs at once, unsandboxed (the user's explicit choice). always: every
    command asks. unsafe: a command the classifier calls read-only runs at once in the
    read-only sandbox; anything else asks, and so does every command when no sandbox can be
    had, and the next command after the sandbox stopped one. sandbox_level off: the user's
    explicit choice to run classifier-read-only commands unsandboxed (the old behaviour).
    Under unsafe, an ask rule asks and an allow rule runs the command at once at the rule's
    sandbox level (outside it only when the rule says none)."""
    if approval == "never":
        return RunPlan(False, sandbox.NONE, "never")
    if approval == "always":
        return RunPlan(True)
    if escalate:
        return RunPlan(
            True, why="The sandbox stopped the last command; this one would run outside it."
        )
    if ruled is not None and ruled.decision == "ask":
        return RunPlan(True)
    if ruled is not None and ruled.decision == "allow":
        wanted = ruled.sandbox_level or sandbox.WORKSPACE_WRITE
        if wanted == sandbox.NONE:
            return RunPlan(False, sandbox.NONE, "rule", rule_id=ruled.rule_id)
        plan = RunPlan(False, wanted, "rule", rule_id=ruled.rule_id, writable=ruled.directory)
        return _if_sandboxed(plan, f"Rule {ruled.rule_id}")
    if not safety.is_read_only(command):
        return RunPlan(True)
    if level == sandbox.OFF:
        return RunPlan(False, sandbox.NONE, "read-only")
    return _if_sandboxed(RunPlan(False, sandbox.READ_ONLY, "read-only"), "I")


def _if_sandboxed(plan: RunPlan, who: str) -> RunPlan:
    """`plan` (a command run at once in a sandbox) where a sandbox can be had; else a question
    saying that `who` ("I", "Rule 3") would have run it so, and how to get a sandbox."""
    found = sandbox.detect()
    if found.available:
        return plan
    why = (
        f"{who} would run it at once in a sandbox, but there is none here: {found.reason} "
        f"To get one, {found.remedy}."
    )
    return RunPlan(True, why=why)
