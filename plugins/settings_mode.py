"""The settings mode, directive `knob`: read and change settings by voice.

    knob list                                  every setting and its value
    knob show max tokens                       one setting (also: get, what is)
    knob set max tokens to four thousand       change one (spoken numbers become numbers)
    knob reset max tokens                      back to its default

Why "knob": the seed asks a directive to be short (one syllable), unambiguous with accents
(the k is silent everywhere, so it is always /nob/; speech engines that write "nob" are
covered by an alias), mnemonic (settings are the knobs of the daemon) and obscure (nobody
starts a sentence with it). The mode never calls the model.
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING

# `lmd --help` imports every plugin to list commands, and this one has none: the public names
# its mode uses are looked up on `api` when it answers (daemon.api resolves a name on first use).
from daemon import api
from daemon.api import LmdError, hookimpl

if TYPE_CHECKING:
    from daemon.api import Context, Settings


def _token_presented() -> bool:
    return api.token_presented()


DIRECTIVE = "knob"
ALIASES = ("nob", "knobs")

HELP = (
    f"Say {DIRECTIVE} list, {DIRECTIVE} show max tokens, "
    f"{DIRECTIVE} set max tokens to four thousand, or {DIRECTIVE} reset max tokens."
)


def spoken_number(text: str) -> float | int | None:
    """'four thousand' -> 4000, 'zero point five' -> 0.5, '4,000' -> 4000; None if not a
    number (daemon.api.spoken_number)."""
    return api.spoken_number(text)


def setting_name(spoken: str, settings: Settings) -> tuple[str, str]:
    """(setting name, a sentence saying how it was heard when not exactly): 'Max Tokens' ->
    max_tokens; 'max token' -> max_tokens, "I took max token to mean max tokens."; an
    unknown or ambiguous name gets one sentence."""
    found = api.match_name(spoken, settings.specs)
    if found.name is not None:
        return found.name, found.said_back(spoken, _said(found.name))
    if found.candidates:
        which = " or ".join(_said(n) for n in found.candidates[:3])
        raise LmdError(f"Did you mean {which}? Say the setting's name again.", status=404)
    raise LmdError(
        f"There is no setting called {spoken.strip()}. Say {DIRECTIVE} list to hear them.",
        status=404,
    )


_LINK = ("to", "is", "=", "as", "at", "equals", "equal")


def _split_name_value(words: list[str], settings: Settings) -> tuple[str, str, str]:
    """'max tokens to four thousand' -> (max_tokens, 'four thousand', ''): the longest leading
    words that name a setting, then the value (after an optional 'to', 'is', '='); else the
    words before a 'to' as a spoken name ('maximum tokens to 4k': with how it was heard)."""
    for n in range(len(words) - 1, 0, -1):
        name = "_".join(words[:n]).lower().strip(".,:")
        if name in settings.specs:
            rest = words[n:]
            if rest and rest[0].lower() in _LINK:
                rest = rest[1:]
            if rest:
                return name, " ".join(rest), ""
    for link in ("to", "=", "equals"):
        lowered = [w.lower() for w in words]
        if link in lowered[1:-1]:
            at = lowered.index(link, 1)
            name, heard = setting_name(" ".join(words[:at]), settings)
            return name, " ".join(words[at + 1 :]), heard
    raise LmdError(f"I did not catch a setting name and a value. {HELP}")


class Unreadable(Exception):
    """A spoken value that is not one for the setting: asked about, never guessed."""


def typed_value(raw: str, spec) -> object:
    """Spoken numbers (and their units: "two minutes" for a seconds setting) become numbers
    for number settings, a choice heard by sound becomes that choice; other types parse the
    words. Unreadable when a number setting hears no number, or the wrong unit."""
    value: object = raw.strip().rstrip(".!")
    if spec.type in ("int", "float"):
        number, unit = api.spoken_quantity(str(value))
        if number is None:
            raise Unreadable(f"I could not read {str(value)!r} as a number for {_said(spec.name)}")
        number, why = api.in_unit(number, unit, spec.name)
        if number is None:
            raise Unreadable(why)
        value = number
    elif spec.type == "choice":
        found = api.match_name(str(value), spec.choices)
        if found.name is not None:
            value = found.name
    return spec.parse(value)


def show(value: object, spec) -> str:
    if spec.type == "json":
        import json

        return json.dumps(value, ensure_ascii=False)
    if spec.type == "bool":
        return "true" if value else "false"
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


def _said(name: str) -> str:
    return name.replace("_", " ")


async def respond(ctx: Context) -> AsyncIterator[str]:
    # Talk about settings does not belong in any model's context.
    ctx.reply_kind = "none"
    ctx.set_karma([ctx.user_prompt_id], "none")
    yield handle(ctx)


_WHEN_I_SAY = re.compile(
    r"^(?:from\s+now\s+on\s*,?\s*)?(?:when(?:ever)?|if)\s+i\s+say\s+(?P<alias>.+?)\s*,?\s+"
    r"i\s+mean\s+(?P<mode>[^\s,.!?]+)[\s,.!?]*$",
    re.I,
)
_MEANS = re.compile(r"^(?P<alias>[^,]+?)\s+means\s+(?P<mode>[^\s,.!?]+)[\s,.!?]*$", re.I)
_FORGET = re.compile(
    r"^(?:forget|remove|delete|drop)\s+(?:the\s+)?(?:alias|word|directive\s+alias)\s+"
    r"(?P<alias>.+?)[\s,.!?]*$",
    re.I,
)
_LIST_ALIASES = re.compile(
    r"^(?:(?:list|show|say|read)\s+(?:the\s+|my\s+)?|what\s+are\s+(?:the\s+|my\s+)?)?"
    r"(?:directive\s+)?aliases[\s?.!]*$",
    re.I,
)


def handle(ctx: Context) -> str:
    if ctx.pending and ctx.pending.get("kind") == "value":
        return _answer_value(ctx, ctx.pending)
    text = ctx.text.strip()
    for pattern, act in ((_WHEN_I_SAY, _teach), (_MEANS, _teach), (_FORGET, _forget)):
        m = pattern.match(text)
        if m:
            return act(ctx, m)
    if _LIST_ALIASES.match(text):
        return _aliases(ctx)
    words = text.rstrip(".!?").split()
    if not words:
        return HELP
    verb, rest = words[0].lower().strip(",:"), words[1:]
    if verb in ("what", "whats", "what's") and rest[:1] == ["is"]:
        verb, rest = "show", rest[1:]
    store, settings = ctx.store, ctx.settings
    if verb in ("list", "all", "settings"):
        rows = settings.describe()
        ctx.extra["settings"] = {r["name"]: r["value"] for r in rows}
        return "\n".join(f"{_said(r['name'])} is {show(r['value'], settings.spec(r['name']))}"
                         for r in rows)  # fmt: skip
    if verb in ("show", "get", "read", "say", "tell") and rest:
        name, heard = setting_name(" ".join(rest), settings)
        spec = settings.spec(name)
        value = settings[name]
        ctx.extra["setting"] = {"name": name, "value": value}
        default = "" if value == spec.default else f" (the default is {show(spec.default, spec)})"
        return _with(heard, f"{_said(name)} is {show(value, spec)}{default}.")
    if verb in ("set", "change", "make", "put") and rest:
        name, raw, heard = _split_name_value(rest, settings)
        spec = settings.spec(name)
        api.refuse_if_protected(spec, _token_presented())
        return _with(heard, _set(ctx, name, raw))
    if verb in ("reset", "default", "restore") and rest:
        name, heard = setting_name(" ".join(rest), settings)
        spec = settings.spec(name)
        api.refuse_if_protected(spec, _token_presented())
        store.reset_setting(name, spec.dump(spec.default))
        ctx.extra["setting"] = {"name": name, "value": spec.default}
        return _with(
            heard,
            f"{_said(name)} is back to its default, {show(spec.default, spec)}."
            + _env_note(name, ctx),
        )
    return HELP


def _with(heard: str, said: str) -> str:
    return f"{heard} {said}" if heard else said


def _set(ctx: Context, name: str, raw: str) -> str:
    """Set one setting from spoken words; a value lmd cannot read, or one out of the
    setting's range, is a question (the next utterance answers it), never a guess."""
    spec = ctx.settings.spec(name)
    try:
        value = typed_value(raw, spec)
        api.check_setting(ctx.daemon.registry, name, value)
    except Unreadable as e:
        return _ask_value(ctx, name, f"{e}.")
    except api.SettingError as e:
        if spec.type in ("int", "float"):
            return _ask_value(ctx, name, e.message.replace(name, _said(name), 1))
        raise api.SettingError(e.message.replace(name, _said(name), 1)) from None
    ctx.store.set_setting(name, spec.dump(value))
    ctx.extra["setting"] = {"name": name, "value": value}
    return f"{_said(name)} is now {show(value, spec)}.{_env_note(name, ctx)}"


def _ask_value(ctx: Context, name: str, why: str) -> str:
    spec = ctx.settings.spec(name)
    ctx.set_pending({"kind": "value", "name": name})
    ctx.extra["setting"] = {"name": name, "value": ctx.settings[name], "asked": True}
    return (
        f"{why} What should {_said(name)} be? Say {spec.allowed()}, or no to leave it at "
        f"{show(ctx.settings[name], spec)}."
    )


_VALUE_LEAD = re.compile(r"^(?:(?:set\s+|make\s+)?(?:it|that)\s+)?(?:to|at|is|be)?\s*", re.I)


def _answer_value(ctx: Context, pending: dict) -> str:
    """The answer to "What should max tokens be?": a value, or no."""
    name = pending["name"]
    spec = ctx.settings.spec(name)
    heard = api.hear_answer(ctx.text)
    if heard is not None and heard.outcome == "no":
        return f"All right, {_said(name)} stays {show(ctx.settings[name], spec)}."
    api.refuse_if_protected(spec, _token_presented())
    return _set(ctx, name, _VALUE_LEAD.sub("", ctx.text.strip(), count=1))


def _mode_named(ctx: Context, word: str) -> str | None:
    parsed = api.parse_directive(word, ctx.daemon.directive_table(ctx.settings))
    return parsed.mode if parsed.mode and not parsed.rest else None


def _teach(ctx: Context, m: re.Match) -> str:
    """ "when I say morat I mean marat": a spoken form of a directive, kept in
    directive_aliases."""
    alias = " ".join(m.group("alias").strip(" ,.!?\"'").split()).lower()
    mode = _mode_named(ctx, m.group("mode"))
    if mode is None:
        modes = ", ".join(sorted(ctx.daemon.modes))
        return f"There is no mode called {m.group('mode')}; the modes are {modes}."
    table = ctx.daemon.directive_table(ctx.settings)
    problem, note = api.alias_problem(alias, mode, table)
    if problem:
        return problem
    spec = ctx.settings.spec("directive_aliases")
    api.refuse_if_protected(spec, _token_presented())
    aliases = {k: list(v) for k, v in ctx.settings["directive_aliases"].items()}
    aliases.setdefault(mode, []).append(alias)
    api.check_setting(ctx.daemon.registry, "directive_aliases", aliases)
    ctx.store.set_setting("directive_aliases", spec.dump(spec.parse(aliases)))
    ctx.extra["directive_aliases"] = aliases
    said = f"From now on, {alias} at the start of what you say means {mode}."
    return f"{said} {note}" if note else said


def _forget(ctx: Context, m: re.Match) -> str:
    alias = " ".join(m.group("alias").strip(" ,.!?\"'").split()).lower()
    spec = ctx.settings.spec("directive_aliases")
    aliases = {k: list(v) for k, v in ctx.settings["directive_aliases"].items()}
    owner = next((mode for mode, said in aliases.items() if alias in said), None)
    if owner is None:
        return f"You taught me no alias {alias}; say {DIRECTIVE} aliases to hear them."
    api.refuse_if_protected(spec, _token_presented())
    aliases[owner] = [a for a in aliases[owner] if a != alias]
    if not aliases[owner]:
        del aliases[owner]
    ctx.store.set_setting("directive_aliases", spec.dump(aliases))
    ctx.extra["directive_aliases"] = aliases
    return f"{alias} no longer means {owner}."


def _aliases(ctx: Context) -> str:
    taught = ctx.settings["directive_aliases"]
    parts = [f"{', '.join(said)} for {mode}" for mode, said in sorted(taught.items()) if said]
    built_in = [
        f"{', '.join(mode.aliases)} for {mode.name}"
        for mode in sorted(ctx.daemon.modes.values(), key=lambda m: m.name)
        if mode.aliases
    ]
    mine = f"You taught me {'; '.join(parts)}." if parts else "You taught me no aliases."
    return f"{mine} Built in: {'; '.join(built_in)}." if built_in else mine


def _env_note(name: str, ctx: Context) -> str:
    fresh = ctx.daemon.settings()
    if fresh.source(name) == "env":
        return f" But the environment variable {api.env_name(name)} overrides it while it is set."
    return ""


@hookimpl
def register_modes(register):
    from daemon.api import Mode

    register(
        Mode(
            DIRECTIVE,
            respond,
            description="Read and change settings by voice: list, show, set, reset.",
            aliases=ALIASES,
        )
    )
