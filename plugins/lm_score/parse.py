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
_GONE = "#"  # what a number that cannot be the answer becomes


def strip_thinking(text: str) -> str:
    """The reply without its thinking."""
    text = _THINK_BLOCK.sub("", text)
    low = text.lower()
    if "</think>" in low:  # the template opened <think> for us; the answer follows the close
        text = text[low.rindex("</think>") + len("</think>") :]
    elif "<think>" in low:  # thinking never finished: there is no answer
        text = text[: low.index("<think>")]
    return text.strip()


def without_non_answers(text: str) -> str:
    """The text with rubric echoes, ranges and negated numbers taken out."""
    text = _RUBRIC_LINE.sub(_GONE, text)
    # "0 and 10" in "between 0 and 10" is a range, but "7 and 10/10" keeps its "10/10"
    text = _RANGE.sub(_GONE, text)
    return _NEGATED.sub(_GONE, text)


def _is_json(text: str) -> bool:
    """Whether `text` is one JSON value (a reply that merely starts with a brace is words)."""
    import json

    try:
        json.loads(text)
    except ValueError:
        return False
    return True


def _from_json(text: str) -> int | None:
    import json

    try:
        data = json.loads(text)
    except ValueError:
        return None
    value = data.get("score") if isinstance(data, dict) else None
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return _as_score(str(value))


def _as_score(raw: str) -> int | None:
    value = float(raw)
    if not 0 <= value <= 10:
        return None
    return int(value + 0.5)  # 7.5 -> 8: half up, like the avg aggregation


def parse_score(reply: str) -> int | None:
    """The score 0-10 in a reply, or None when there is none (or it is out of range)."""
    text = strip_thinking(unicodedata.normalize("NFKC", reply or ""))
    if not text:
        return None
    bare = text.strip(_DECORATION)
    if re.fullmatch(_NUMBER, bare):
        return _as_score(bare)
    if text.startswith("{") and _is_json(text):  # constrained by a JSON schema: {"score": 7}
        return _from_json(text)
    text = without_non_answers(text)
    for pattern in (_SCORE_PHRASE, _OUT_OF_TEN):
        found = pattern.findall(text)
        if found:
            return _as_score(found[-1] if pattern is _SCORE_PHRASE else found[0])
    lead = _LEADING.match(text)
    if lead:
        return _as_score(lead.group(1))
    numbers = set(_ANY.findall(text))
    if len(numbers) == 1:
        return _as_score(numbers.pop())
    return None
