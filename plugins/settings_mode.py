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

# The settings and modes modules (and json) are imported where they are used: `lmd --help`
# imports every plugin to list commands, and this one has none.
from daemon.api import LmdError, hookimpl

if TYPE_CHECKING:
    from daemon.api import Context, Settings


def _token_presented() -> bool:
    # Imported when needed: the guard brings hmac and logging, which `lmd --help` does not need.
    from daemon.api import token_presented

    return token_presented()


DIRECTIVE = "knob"
ALIASES = ("nob", "knobs")

UNITS = {
    "zero": 0, "oh": 0, "one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6,
    "seven": 7, "eight": 8, "nine": 9, "ten": 10, "eleven": 11, "twelve": 12, "thirteen": 13,
    "fourteen": 14, "fifteen": 15, "sixteen": 16, "seventeen": 17, "eighteen": 18,
    "nineteen": 19,
}  # fmt: skip
TENS = {
    "twenty": 20, "thirty": 30, "forty": 40, "fifty": 50, "sixty": 60, "seventy": 70,
    "eighty": 80, "ninety": 90,
}  # fmt: skip
SCALES = {"thousand": 1000, "million": 1_000_000, "billion": 1_000_000_000}

HELP = (
    f"Say {DIRECTIVE} list, {DIRECTIVE} show max tokens, "
    f"{DIRECTIVE} set max tokens to four thousand, or {DIRECTIVE} reset max tokens."
)


def spoken_number(text: str) -> float | int | None:
    """'four thousand' -> 4000, 'zero point five' -> 0.5, '4,000' -> 4000; None if not a
    number."""
    words = re.sub(r"[,\s]+", " ", text.strip().lower().replace("-", " ")).split()
    if not words:
        return None
    compact = "".join(words)
    if re.fullmatch(r"[+-]?(\d+(\.\d*)?|\.\d+)(e[+-]?\d+)?", compact):
        value = float(compact)
        return int(value) if value.is_integer() and "." not in compact else value
    sign = 1
    if words[0] in ("minus", "negative"):
        sign, words = -1, words[1:]
    if "point" in words:
        at = words.index("point")
        whole_words, frac_words = words[:at], words[at + 1 :]
        whole = _whole(whole_words) if whole_words else 0
        digits = [UNITS.get(w) if w in UNITS and UNITS[w] < 10 else None for w in frac_words]
        if whole is None or not digits or None in digits:
            return None
        return sign * float(f"{whole}." + "".join(str(d) for d in digits))
    whole = _whole(words)
    return None if whole is None else sign * whole


def _whole(words: list[str]) -> int | None:
    total, current, seen = 0, 0, False
    for w in words:
        if w == "and":
            continue
        if w in ("a", "an") and not seen:
            current, seen = 1, True
        elif w.isdigit():
            current, seen = current + int(w), True
        elif w in UNITS:
            current, seen = current + UNITS[w], True
        elif w in TENS:
            current, seen = current + TENS[w], True
        elif w == "hundred":
            current, seen = (current or 1) * 100, True
        elif w in SCALES:
            total, current, seen = total + (current or 1) * SCALES[w], 0, True
        else:
            return None
    return total + current if seen else None


def setting_name(spoken: str, settings: Settings) -> str:
    """'Max Tokens' -> max_tokens; an unknown name gets one sentence with the nearest ones."""
    name = re.sub(r"[\s\-]+", "_", spoken.strip().strip(".?!,:;\"'").lower())
    if name in settings.specs:
        return name
    import difflib  # here: the module is imported whenever `lmd --help` lists commands

    near = difflib.get_close_matches(name, list(settings.specs), n=1, cutoff=0.6)
    hint = f" Did you mean {' or '.join(n.replace('_', ' ') for n in near)}?" if near else ""
    raise LmdError(
        f"There is no setting called {spoken.strip()}.{hint} Say {DIRECTIVE} list to hear them.",
        status=404,
    )


def _split_name_value(words: list[str], settings: Settings) -> tuple[str, str]:
    """'max tokens to four thousand' -> (max_tokens, 'four thousand'): the longest leading
    words that name a setting, then the value (after an optional 'to', 'is', '=')."""
    for n in range(len(words) - 1, 0, -1):
        name = "_".join(words[:n]).lower().strip(".,:")
        if name in settings.specs:
            rest = words[n:]
            if rest and rest[0].lower() in ("to", "is", "=", "as", "at", "equals"):
                rest = rest[1:]
            if rest:
                return name, " ".join(rest)
    if " to " in " ".join(words):
        spoken, _, _value = " ".join(words).partition(" to ")
        setting_name(spoken, settings)  # raises the clear sentence about the name
    raise LmdError(f"I did not catch a setting name and a value. {HELP}")


def typed_value(raw: str, spec) -> object:
    """Spoken numbers become numbers for number settings; other types parse the words."""
    value: object = raw.strip().rstrip(".!")
    if spec.type in ("int", "float"):
        number = spoken_number(str(value))
        if number is not None:
            value = number
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


def handle(ctx: Context) -> str:
    from daemon.api import SettingError, refuse_if_protected

    words = ctx.text.strip().rstrip(".!?").split()
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
        name = setting_name(" ".join(rest), settings)
        spec = settings.spec(name)
        value = settings[name]
        ctx.extra["setting"] = {"name": name, "value": value}
        default = "" if value == spec.default else f" (the default is {show(spec.default, spec)})"
        return f"{_said(name)} is {show(value, spec)}{default}."
    if verb in ("set", "change", "make", "put") and rest:
        name, raw = _split_name_value(rest, settings)
        spec = settings.spec(name)
        refuse_if_protected(spec, _token_presented())
        from daemon.api import check_setting  # here: `lmd --help` must not import asyncio

        try:
            value = typed_value(raw, spec)
            check_setting(ctx.daemon.registry, name, value)
        except SettingError as e:
            raise SettingError(e.message.replace(name, _said(name), 1)) from None
        store.set_setting(name, spec.dump(value))
        ctx.extra["setting"] = {"name": name, "value": value}
        return f"{_said(name)} is now {show(value, spec)}.{_env_note(name, ctx)}"
    if verb in ("reset", "default", "restore") and rest:
        name = setting_name(" ".join(rest), settings)
        spec = settings.spec(name)
        refuse_if_protected(spec, _token_presented())
        store.reset_setting(name, spec.dump(spec.default))
        ctx.extra["setting"] = {"name": name, "value": spec.default}
        return f"{_said(name)} is back to its default, {show(spec.default, spec)}." + _env_note(
            name, ctx
        )
    return HELP


def _env_note(name: str, ctx: Context) -> str:
    from daemon.api import env_name

    fresh = ctx.daemon.settings()
    if fresh.source(name) == "env":
        return f" But the environment variable {env_name(name)} overrides it while it is set."
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
