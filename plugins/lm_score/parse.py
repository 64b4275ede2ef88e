"""Reading a 0-10 score out of whatever the model said.

Thinking is stripped first (`<think>...</think>`, or everything up to a lone `</think>` when
the template opened the block). Then what cannot be an answer is taken out: lines echoing the
prompt's rubric ("- 10 = strongly yes, definitely true"), ranges ("7-9", "0 to 15", "between
3 and 5") and negated numbers ("not a 7", "isn't 5"). Small real models say such things (a
real SmolLM2 said "No, 7-9 is definitely not a score to provide."); none of it is a score.

In what remains, in order: the whole reply is a number ("7", "**7**", "7.", "07"); a
"score: N" phrase (the last one wins, as models conclude with it); "N/10" or "N out of 10"; a
number opening the reply ("8. The email ..."); the only number in the reply. Anything else,
and any number outside 0-10, is no score: the caller retries, then reports the raw reply.
Nothing is ever made up.
"""

from __future__ import annotations

import json
import re
import unicodedata

_THINK_BLOCK = re.compile(r"<think>.*?</think>", re.S | re.I)
_NUMBER = r"(\d{1,3}(?:\.\d+)?)(?![eE][-+]?\d)"  # "1e-05" is not a 1
_DECORATION = " \t\r\n*_`\"'.:;!()[]"
_SCORE_PHRASE = re.compile(r"score\s*(?:is|of|=|:)?\s*[:=]?\s*[*_`\s]*" + _NUMBER, re.I)
_OUT_OF_TEN = re.compile(_NUMBER + r"\s*(?:/|out\s+of)\s*10\b", re.I)
_LEADING = re.compile(r"^[*_`\s]*" + _NUMBER + r"(?![\d/])")
_ANY = re.compile(r"(?<![\d.-])(?<!\d[eE])(?<!\d[eE][-+])" + _NUMBER + r"(?![\d])")

# What is never an answer. A rubric line: "- 10 = strongly yes", "7-9 = probably yes", "0-2:
# strongly no". A range: "7-9", "7 – 9", "0 to 15", "from 3 to 5", "between 3 and 5".
_RUBRIC_LINE = re.compile(
    r"^[ \t]*[-*•]?[ \t]*\d+(?:[ \t]*[-–][ \t]*\d+)?[ \t]*[=:][ \t]*"
    r"(?:strongly|probably|uncertain|definitely|likely)\b.*$",
    re.I | re.M,
)
_RANGE = re.compile(
    r"\b(?:between\s+)?\d+(?:\.\d+)?\s*(?:-|–|—|to|through|and)\s*\d+(?:\.\d+)?\b"
    r"(?!\s*(?:/|out\s+of)\s*10\b)",
    re.I,
)
# "not a 7", "isn't 5"; but "No, the score is 7" answers the question and "not sure, score: 6"
# gives a score: a clause break or the word "score" ends what a negation reaches.
_NEGATED = re.compile(
    r"\b(?:not|never|isn't|isnt|wasn't|can't|cannot|won't)\b"
    r"(?:(?!score)[^\d.!?\n:,;]){0,16}?(?<![\d.])\d+(?:\.\d+)?",
    re.I,
)
_GONE = "#"  # what a number that cannot be the answer becomes (one for each character)


def _gone(match: re.Match) -> str:
    return _GONE * len(match.group())


def strip_thinking(text: str) -> str:
    """The reply without its thinking."""
    return _mask_thinking(text).strip()


def _mask_thinking(text: str) -> str:
    """The reply with its thinking blanked out, each character a space: what is left stands
    where it stood (the logprob method finds the score's token by its place)."""
    text = _THINK_BLOCK.sub(lambda m: " " * len(m.group()), text)
    low = text.lower()
    if "</think>" in low:  # the template opened <think> for us; the answer follows the close
        end = low.rindex("</think>") + len("</think>")
        return " " * end + text[end:]
    if "<think>" in low:  # thinking never finished: there is no answer
        start = low.index("<think>")
        return text[:start] + " " * (len(text) - start)
    return text


def without_non_answers(text: str) -> str:
    """The text with rubric echoes, ranges and negated numbers masked out (same length)."""
    text = _RUBRIC_LINE.sub(_gone, text)
    # "0 and 10" in "between 0 and 10" is a range, but "7 and 10/10" keeps its "10/10"
    text = _RANGE.sub(_gone, text)
    return _NEGATED.sub(_gone, text)


def _is_json(text: str) -> bool:
    """Whether `text` is one JSON value (a reply that merely starts with a brace is words)."""
    try:
        json.loads(text)
    except ValueError:
        return False
    return True


_JSON_SCORE = re.compile(r'"score"\s*:\s*' + _NUMBER)


def _from_json(text: str) -> tuple[int, int, int] | None:
    try:
        data = json.loads(text)
    except ValueError:
        return None
    value = data.get("score") if isinstance(data, dict) else None
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    score = _as_score(str(value))
    where = _JSON_SCORE.search(text)
    if score is None:
        return None
    return (score, where.start(1), where.end(1)) if where else (score, -1, -1)


def _as_score(raw: str) -> int | None:
    value = float(raw)
    if not 0 <= value <= 10:
        return None
    return int(value + 0.5)  # 7.5 -> 8: half up, like the avg aggregation


def parse_score(reply: str) -> int | None:
    """The score 0-10 in a reply, or None when there is none (or it is out of range)."""
    found = find_score(unicodedata.normalize("NFKC", reply or ""))
    return None if found is None else found[0]


def find_score(text: str) -> tuple[int, int, int] | None:
    """(the score 0-10, where its number starts and ends in `text`) for an NFKC-normal reply,
    or None when there is none: parse_score's reading, with the place of what it read (-1,
    -1 for a JSON value whose number cannot be placed)."""
    masked = _mask_thinking(text)
    bare = masked.strip(_DECORATION)
    if not bare:
        return None
    if re.fullmatch(_NUMBER, bare):
        start = masked.index(bare)
        return _placed(bare, start, start + len(bare))
    body = masked.strip()
    if body.startswith("{") and _is_json(body):  # constrained by a JSON schema: {"score": 7}
        found = _from_json(body)
        if found is None or found[1] < 0:
            return found
        offset = masked.index(body)
        return found[0], found[1] + offset, found[2] + offset
    masked = without_non_answers(masked)
    for pattern in (_SCORE_PHRASE, _OUT_OF_TEN):
        found = list(pattern.finditer(masked))
        if found:
            match = found[-1] if pattern is _SCORE_PHRASE else found[0]
            return _placed(match.group(1), match.start(1), match.end(1))
    lead = _LEADING.match(masked)
    if lead:
        return _placed(lead.group(1), lead.start(1), lead.end(1))
    numbers: dict[str, re.Match] = {}
    for m in _ANY.finditer(masked):
        numbers.setdefault(m.group(1), m)  # the first time it is said
    if len(numbers) == 1:
        (m,) = numbers.values()
        return _placed(m.group(1), m.start(1), m.end(1))
    return None


def _placed(raw: str, start: int, end: int) -> tuple[int, int, int] | None:
    score = _as_score(raw)
    return None if score is None else (score, start, end)
