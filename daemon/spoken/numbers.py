"""Numbers and units as people say them and speech engines write them: "four thousand five
hundred", "forty three hundred", "4,500", "four k", "zero point five", "nineteen eighty
four", "eight oh eight oh", "two minutes", "the third".

A number lmd cannot read is None, never a guess ("about four thousand", "lots", "twenty
twenty twenty"): the caller asks.
"""

from __future__ import annotations

import re

UNITS = {
    "zero": 0, "oh": 0, "nought": 0, "one": 1, "two": 2, "three": 3, "four": 4, "five": 5,
    "six": 6, "seven": 7, "eight": 8, "nine": 9, "ten": 10, "eleven": 11, "twelve": 12,
    "thirteen": 13, "fourteen": 14, "fifteen": 15, "sixteen": 16, "seventeen": 17,
    "eighteen": 18, "nineteen": 19,
}  # fmt: skip
TENS = {
    "twenty": 20, "thirty": 30, "forty": 40, "fourty": 40, "fifty": 50, "sixty": 60,
    "seventy": 70, "eighty": 80, "ninety": 90,
}  # fmt: skip
SCALES = {"thousand": 1000, "k": 1000, "grand": 1000, "million": 1_000_000,
          "billion": 1_000_000_000}  # fmt: skip
ORDINALS = {
    "first": 1, "second": 2, "third": 3, "fourth": 4, "fifth": 5, "sixth": 6, "seventh": 7,
    "eighth": 8, "ninth": 9, "tenth": 10, "eleventh": 11, "twelfth": 12, "thirteenth": 13,
    "fourteenth": 14, "fifteenth": 15, "sixteenth": 16, "seventeenth": 17, "eighteenth": 18,
    "nineteenth": 19, "twentieth": 20, "thirtieth": 30, "fortieth": 40, "fiftieth": 50,
    "sixtieth": 60, "seventieth": 70, "eightieth": 80, "ninetieth": 90, "hundredth": 100,
    "last": -1,
}  # fmt: skip
# Words around a number that change nothing ("please", "about" does: it is no number).
_AROUND = {"please", "thanks", "thank", "you", "um", "uh", "er", "erm", "the", "exactly", "just",
           "number", "to", "of", "okay", "ok", "so", "like"}  # fmt: skip
_DIGITS = re.compile(r"[+-]?(\d+(\.\d*)?|\.\d+)(e[+-]?\d+)?")
_GROUPED = re.compile(r"[+-]?\d{1,3}([,\u202f\u00a0']\d{3})+(\.\d+)?")
_SUFFIXED = re.compile(r"(\d+(?:\.\d+)?)(k|m)")
_ORDINAL_DIGITS = re.compile(r"(\d+)(st|nd|rd|th)")

# Units of time a setting counted in seconds accepts, in seconds.
TIME_UNITS = {
    "ms": 0.001, "millisecond": 0.001, "milliseconds": 0.001, "s": 1, "sec": 1, "secs": 1,
    "second": 1, "seconds": 1, "min": 60, "mins": 60, "minute": 60, "minutes": 60, "h": 3600,
    "hr": 3600, "hrs": 3600, "hour": 3600, "hours": 3600,
}  # fmt: skip
COUNT_UNITS = {
    "tokens": "tokens", "token": "tokens", "characters": "characters", "character":
    "characters", "chars": "characters", "lines": "lines", "line": "lines", "turns": "turns",
    "turn": "turns", "loops": "turns", "prompts": "prompts", "tools": "tools", "times": "times",
}  # fmt: skip


def _words(text: str) -> list[str]:
    text = text.strip().lower().replace("\u2019", "'")
    text = re.sub(r"(?<=\d),(?=\d{3}\b)", "", text)  # 4,500 -> 4500
    text = re.sub(r"[^\w.+'\s-]", " ", text).replace("-", " ")
    return [w.strip(".") if not _DIGITS.fullmatch(w) else w for w in text.split() if w.strip(".")]


def spoken_number(text: str, ordinals: bool = False) -> int | float | None:
    """The number said, or None when it cannot be read for sure. `ordinals`: "third",
    "twenty first", "3rd" count too (a line, an item of a list)."""
    flat = text.strip().lower()
    if _GROUPED.fullmatch(flat):
        flat = re.sub(r"[,\u202f\u00a0']", "", flat)
    if _DIGITS.fullmatch(flat.replace(" ", "")) and " " not in flat.strip():
        value = float(flat)
        return int(value) if value.is_integer() and "." not in flat and "e" not in flat else value
    words = [w for w in _words(text) if w not in _AROUND]
    if not words:
        return None
    sign = 1
    if words[0] in ("minus", "negative"):
        sign, words = -1, words[1:]
    elif words[0] in ("plus", "positive"):
        words = words[1:]
    if not words:
        return None
    read = _read(words, ordinals)
    return None if read is None else sign * read


def _read(words: list[str], ordinals: bool) -> int | float | None:
    if len(words) == 1:
        m = _SUFFIXED.fullmatch(words[0])
        if m:  # "4k", "1.5k", "2m" (million)
            value = float(m.group(1)) * (1000 if m.group(2) == "k" else 1_000_000)
            return int(value) if value.is_integer() else value
        m = _ORDINAL_DIGITS.fullmatch(words[0])
        if m:
            return int(m.group(1)) if ordinals else None
    half = 0.0
    if words[-3:] == ["and", "a", "half"]:
        words, half = words[:-3], 0.5
    elif words[-2:] == ["a", "half"] and len(words) > 2:  # "one a half" is no number
        return None
    elif words == ["half"] or words == ["a", "half"]:
        return 0.5
    if "point" in words:
        at = words.index("point")
        whole = _whole(words[:at], ordinals=False) if words[:at] else 0
        digits = [_digit(w) for w in words[at + 1 :]]
        if whole is None or not digits or any(d is None for d in digits):
            return None
        return float(f"{whole}." + "".join(d for d in digits if d is not None))
    whole = _whole(words, ordinals)
    if whole is None:
        return None
    return whole + half if half else whole


def _digit(word: str) -> str | None:
    if word.isdigit():
        return word
    value = UNITS.get(word)
    return str(value) if value is not None and value < 10 else None


def _whole(words: list[str], ordinals: bool) -> int | None:
    """A whole number of words and digits; pairs ("nineteen eighty four") and digit strings
    ("eight oh eight oh") too; None for anything else."""
    if not words:
        return None
    last = words[-1]
    if ordinals and last in ORDINALS:
        if len(words) == 1:
            return ORDINALS[last]
        if ORDINALS[last] < 10 and ORDINALS[last] > 0 and words[-2] in TENS:
            head = _whole(words[:-2], False) if len(words) > 2 else 0
            return None if head is None else head + TENS[words[-2]] + ORDINALS[last]
        return None
    if len(words) > 1 and all(w in UNITS and UNITS[w] < 10 for w in words):
        return int("".join(str(UNITS[w]) for w in words))  # "one two three", "eight oh eight oh"
    smalls = _smalls(words)
    if smalls is not None:
        return smalls
    total: int | float = 0
    current: int | float = 0  # a float only as in "1.5 million", before its scale word
    seen, open_small = False, False
    for w in words:
        if w == "and" and seen:
            continue
        if w in ("a", "an") and not seen:
            current, seen = 1, True
        elif w.isdigit():
            if open_small:
                return None  # "4 5" is no number
            current, seen, open_small = current + int(w), True, True
        elif re.fullmatch(r"\d+\.\d+", w):
            if open_small:
                return None
            # "1.5 million": the scale word must follow
            current, seen, open_small = current + float(w), True, True
        elif w in UNITS:
            if open_small and (current % 10 != 0 or current % 100 == 0 or UNITS[w] >= 10):
                return None  # "five five", "twenty twelve"
            current, seen, open_small = current + UNITS[w], True, True
        elif w in TENS:
            if open_small and current % 100 != 0:
                return None  # "twenty thirty"
            current, seen, open_small = current + TENS[w], True, True
        elif w == "hundred":
            if current >= 100:
                return None  # "two hundred hundred"
            current, seen, open_small = (current or 1) * 100, True, False
        elif w in SCALES:
            total, current, seen, open_small = total + (current or 1) * SCALES[w], 0, True, False
        else:
            return None
    if not seen:
        return None
    value = total + current
    if isinstance(value, float):
        return int(value) if value.is_integer() else None
    return value


def _smalls(words: list[str]) -> int | None:
    """A year-like pair said in two parts: "nineteen eighty four" (1984), "twenty twenty"
    (2020), "nineteen oh five" (1905); None when the words are not exactly such a pair."""
    if any(w in SCALES or w in ("hundred", "and", "a", "an") or w.isdigit() for w in words):
        return None
    parts: list[int] = []
    i = 0
    while i < len(words):
        w = words[i]
        if w in TENS:
            value = TENS[w]
            if i + 1 < len(words) and words[i + 1] in UNITS and 0 < UNITS[words[i + 1]] < 10:
                value += UNITS[words[i + 1]]
                i += 1
        elif w == "oh" and i + 1 < len(words) and words[i + 1] in UNITS:
            value = UNITS[words[i + 1]]
            if not 0 < value < 10:
                return None
            i += 1
        elif w in UNITS and UNITS[w] >= 10:
            value = UNITS[w]
        else:
            return None
        parts.append(value)
        i += 1
    if len(parts) != 2 or not 10 <= parts[0] <= 99:
        return None
    return parts[0] * 100 + parts[1]


def spoken_quantity(text: str) -> tuple[int | float | None, str | None]:
    """(number, its unit word as said or None): "two minutes" -> (2, "minutes"), "four k
    tokens" -> (4000, "tokens")."""
    words = _words(text)
    words = [w for w in words if w not in _AROUND]
    unit = None
    if words and (words[-1] in TIME_UNITS or words[-1] in COUNT_UNITS) and len(words) > 1:
        unit, words = words[-1], words[:-1]
    return spoken_number(" ".join(words)), unit


def in_unit(value: int | float, unit: str | None, setting: str) -> tuple[int | float | None, str]:
    """A spoken quantity as the value of `setting` (seconds for a *_secs setting), or (None,
    why) when its unit is not the setting's."""
    seconds = setting.endswith(("_secs", "_seconds", "_timeout"))
    if unit is None:
        return value, ""
    if unit in TIME_UNITS:
        if not seconds:
            return None, f"{setting.replace('_', ' ')} is not a time; say a number without {unit}"
        scaled = value * TIME_UNITS[unit]
        return (int(scaled) if float(scaled).is_integer() else scaled), ""
    if seconds:
        return None, f"{setting.replace('_', ' ')} is in seconds, not {unit}"
    counted = COUNT_UNITS[unit]
    name = setting.replace("_", " ")
    if counted.rstrip("s") not in name and not (counted == "characters" and "len" in name):
        return None, f"{name} does not count {counted}"
    return value, ""
