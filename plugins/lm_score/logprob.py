"""The logprob method: the expected score from the score token's distribution.

A distribution is read only where the reply is a rating: the reply's text must hold a score
by the text method's own reading (plugins.lm_score.parse, with its guards: no rubric echo
such as "- 10 = strongly yes", no range such as "6-8", no negated number such as "Not 7",
nothing out of 0-10 such as "11" or "-3"), and the distribution is the one at the token where
that score stands (`rated_position`). Anything else is no score: never a digit picked out of
words that are not a rating.

Token strings are normalised (NFKC, so full-width digits count; surrounding spaces and `*`
dropped): " 7", "7" and "７" are all 7. A "10" token counts as 10. Tokenizers that split
digits (Qwen, Llama 3) write 10 as "1" then "0", so the mass of "1" is ambiguous:
- when the model's own first token is "1", the next position's alternatives say how likely
  "0" follows; that share of P("1") goes to 10, the rest stays at 1;
- otherwise, if no "10" token appears among the alternatives (a digit-splitting tokenizer),
  P("1") goes to 10 when the other score mass averages 5 or more, else it stays at 1
  (a model leaning yes that considers "1" is starting "10"). The reply reports this split.
"""

from __future__ import annotations

import math
import unicodedata
from dataclasses import dataclass, field

from .parse import find_score

# One generated token: (token, logprob, [(alternative, logprob), ...]).
TokenLogprobs = tuple[str, float, list[tuple[str, float]]]


def score_value(token: str) -> int | None:
    """The score a token stands for (0-10), or None."""
    text = unicodedata.normalize("NFKC", token).strip().strip("*").strip()
    if not text.isascii() or not text.isdigit() or len(text) > 2:
        return None
    value = int(text)
    return value if 0 <= value <= 10 and text == str(value) else None


@dataclass
class LogprobScore:
    expected: float
    distribution: dict[int, float]
    mass: float  # probability the visible alternatives gave to score tokens
    one_split: str = "none"  # how an ambiguous "1" was read: none, next_token, leaning
    notes: list[str] = field(default_factory=list)

    @property
    def score(self) -> int:
        return int(self.expected + 0.5)


def _alternatives(position: TokenLogprobs) -> dict[str, float]:
    token, logprob, alts = position
    probs = {t: math.exp(lp) for t, lp in alts}
    probs.setdefault(token, math.exp(logprob))
    return probs


def rated_position(tokens: list[TokenLogprobs]) -> int | None:
    """The index of the token where the reply's score stands, when the reply is a rating by
    the text method's reading; None when it is not (or its number shares a token with other
    text, or is written in more than one digit other than 10: no distribution over scores
    is there to read)."""
    pieces = [unicodedata.normalize("NFKC", t[0]) for t in tokens]
    found = find_score("".join(pieces))
    if found is None or found[1] < 0:
        return None
    _, start, end = found
    written = "".join(pieces)[start:end].split(".")[0]
    if len(written) > 1 and written != "10":
        return None
    at = 0
    for i, piece in enumerate(pieces):
        if at + len(piece) > start:
            value = score_value(tokens[i][0])
            shown = None if value is None else str(value)
            # the token is the number, or the "1" of a 10 written as "1" then "0"
            return i if shown is not None and written.startswith(shown) else None
        at += len(piece)
    return None


def expected_score(tokens: list[TokenLogprobs], at: int | None = None) -> LogprobScore | None:
    """The expected score from the distribution at token `at` (default: the first score
    token), or None when there is no score token there."""
    index = at
    if index is None:
        index = next((i for i, t in enumerate(tokens) if score_value(t[0]) is not None), None)
    if index is None or score_value(tokens[index][0]) is None:
        return None
    mass: dict[int, float] = {}
    for token, p in _alternatives(tokens[index]).items():
        value = score_value(token)
        if value is not None:
            mass[value] = mass.get(value, 0.0) + p
    total = sum(mass.values())
    split = "none"
    ones = mass.get(1, 0.0)
    if ones > 0:
        if score_value(tokens[index][0]) == 1 and index + 1 < len(tokens):
            follow = _alternatives(tokens[index + 1])
            zero = sum(p for t, p in follow.items() if score_value(t) == 0)
            mass[1] = ones * (1 - zero)
            mass[10] = mass.get(10, 0.0) + ones * zero
            split = "next_token"
        elif not any(t.strip() == "10" for t in _alternatives(tokens[index])):
            rest = {v: p for v, p in mass.items() if v != 1}
            rest_total = sum(rest.values())
            if rest_total and sum(v * p for v, p in rest.items()) / rest_total >= 5:
                del mass[1]
                mass[10] = mass.get(10, 0.0) + ones
                split = "leaning"
    dist = {v: p / total for v, p in sorted(mass.items()) if p > 0}
    expected = sum(v * p for v, p in dist.items())
    return LogprobScore(expected=expected, distribution=dist, mass=total, one_split=split)
