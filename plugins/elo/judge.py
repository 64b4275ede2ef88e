"""An LLM as the judge of a battle: the prompt, the call, and reading the scores back.

In the spec's shape:

    from plugins.elo.judge import GPT4_PROMPT, gpt_4_completion
    response = gpt_4_completion(GPT4_PROMPT, question=q, model1_answer=a, model2_answer=b)
    winner, justification, valid = verdict(response)
"""

from __future__ import annotations

import asyncio
import json
import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from daemon.api import batch_concurrency, open_daemon_state

from .backends import Endpoint, lmd_backend, resolve, run_all
from .language import language_of

MIRROR = {
    "model_a": "model_b",
    "model_b": "model_a",
    "tie": "tie",
    "tie (bothbad)": "tie (bothbad)",
}

GPT4_PROMPT = """You are a fair judge of two AI assistants' answers to the same question.

Question:
{question}

Model 1's Answer:
{model1_answer}

Model 2's Answer:
{model2_answer}

Judge which answer is more helpful, correct, relevant and clear. The order of the answers
must not influence you. Give each model a score:
- 1 to the better answer and 0 to the worse one;
- 0.5 to both if they are equally good;
- 0 to both if both fail to answer (for example, they only repeat the question).

Reply in exactly this format:
Score of Model 1: <score>
Score of Model 2: <score>
Brief Explanation: <one or two sentences>
"""

_SCORE = r"score\s+of\s+model\s*{n}\s*[*_]*\s*[:=]\s*[*_]*\s*([0-9]+(?:\.[0-9]+)?|\.[0-9]+)"
# the whole number, not its start: "1e-05", "1/2" or "1.0.0" is no score rather than 1
_SCORE += r"(?![0-9]|\.[0-9]|[eE][-+]?[0-9]|\s*/)"
SCORE_1 = re.compile(_SCORE.format(n="1"), re.IGNORECASE)
SCORE_2 = re.compile(_SCORE.format(n="2"), re.IGNORECASE)
EXPLANATION = re.compile(r"brief\s+explanation\s*[*_]*\s*:?\s*[*_]*\s*", re.IGNORECASE)
# Where the server can hold the answer to a JSON schema, the verdict comes as an object with
# the seed's three parts; the scores come first, so an explanation cut at max_tokens still
# leaves them readable (they are read by name, not by parsing the whole object). Only the
# seed's four score pairs are on offer (VERDICTS): each score free, llama-server's greedy
# SmolLM2 wrote 1 and 0.5, which names no winner.


def _verdict(one: float, two: float) -> dict:
    return {
        "type": "object",
        "properties": {
            "score_of_model_1": {"const": one},
            "score_of_model_2": {"const": two},
            "brief_explanation": {"type": "string"},
        },
        "required": ["score_of_model_1", "score_of_model_2", "brief_explanation"],
        "additionalProperties": False,
    }


VERDICT_SCHEMA = {"anyOf": [_verdict(1, 0), _verdict(0, 1), _verdict(0.5, 0.5), _verdict(0, 0)]}
_JSON_SCORE = r'"score_of_model_{n}"\s*:\s*(0\.5|0|1)(?![0-9.])'
JSON_SCORE_1 = re.compile(_JSON_SCORE.format(n="1"))
JSON_SCORE_2 = re.compile(_JSON_SCORE.format(n="2"))
JSON_EXPLANATION = re.compile(r'"brief_explanation"\s*:\s*"((?:[^"\\]|\\.)*)')
VERDICTS = {
    (1.0, 0.0): "model_a",
    (0.0, 1.0): "model_b",
    (0.5, 0.5): "tie",
    (0.0, 0.0): "tie (bothbad)",
}


def parse_scores(response: str) -> tuple[float, float] | None:
    """(score of model 1, score of model 2), or None when either is missing: from the seed's
    "Score of Model 1: N" lines, or from a verdict held to VERDICT_SCHEMA."""
    text = response or ""
    if text.lstrip().startswith("{"):
        one, two = JSON_SCORE_1.findall(text), JSON_SCORE_2.findall(text)
        return (float(one[0]), float(two[0])) if one and two else None
    one, two = SCORE_1.findall(text), SCORE_2.findall(text)
    if not one or not two:
        return None
    return float(one[-1]), float(two[-1])


def justification(response: str) -> str:
    """The text after 'Brief Explanation:', else the response without its score lines."""
    text = response or ""
    if text.lstrip().startswith("{"):
        said = JSON_EXPLANATION.search(text)
        if said is None:
            return ""

        try:
            return json.loads(f'"{said.group(1)}"').strip()
        except ValueError:
            return said.group(1).strip()
    found = EXPLANATION.search(text)
    if found:
        return text[found.end() :].strip()
    return "\n".join(
        line for line in text.splitlines() if not re.search(r"score\s+of\s+model", line, re.I)
    ).strip()


def verdict(response: str) -> tuple[str | None, str, bool]:
    """(winner or None, justification, is_valid): (1,0) model_a, (0,1) model_b,
    (0.5,0.5) tie, (0,0) tie (bothbad); anything else is invalid."""
    scores = parse_scores(response)
    winner = VERDICTS.get(scores) if scores else None
    return winner, justification(response), winner is not None


def gpt_4_completion(
    prompt: str,
    question: str,
    model1_answer: str,
    model2_answer: str,
    judge: Endpoint | None = None,
) -> str:
    """The judge's raw response to one battle (any OpenAI-compatible model can judge); by
    default the judge elo_judge_model names, asked as `lmd elo judge` asks it."""

    async def call(endpoint: Endpoint) -> str:
        llm = endpoint.client()
        try:
            return await llm.chat(
                judge_messages(prompt, question, model1_answer, model2_answer), temperature=0
            )
        finally:
            await llm.close()

    if judge is not None:
        return asyncio.run(call(judge))

    _, store, settings = open_daemon_state(None)
    store.close()
    with lmd_backend(settings) as backend:
        return asyncio.run(call(resolve(settings["elo_judge_model"], settings, None, backend)))


async def verdict_request(llm: Any) -> dict:
    """What to add to each judge call: the verdict held to VERDICT_SCHEMA where the server can
    (the prompt stays the seed's; its text format is the fallback everywhere else)."""
    caps = await llm.capabilities()
    fmt = caps.response_format("verdict", VERDICT_SCHEMA)
    return {"response_format": fmt, "max_tokens": 256} if fmt else {}


def judge_messages(prompt: str, question: str, answer_1: str, answer_2: str) -> list[dict]:
    text = prompt.format(question=question, model1_answer=answer_1, model2_answer=answer_2)
    return [{"role": "user", "content": text}]


@dataclass
class JudgeRun:
    judged: int = 0
    invalid: int = 0
    failures: list[tuple[int, str]] = field(default_factory=list)  # (row index, why)


# Both orders: each battle is judged with A shown first and with B shown first. The first
# order keeps the spec's columns (gpt_4_response, gpt_4_justification); the second adds these,
# and winner_ab / winner_ba hold each order's verdict in the battle's own orientation.
ORDER_COLUMNS = ["winner_ab", "winner_ba", "gpt_4_response_ba", "gpt_4_justification_ba"]


def fill_verdict(
    row: dict, response: str, judge_name: str, swapped: bool = False, both: bool = False
) -> dict:
    """The full columns of a judged battle; `swapped` means answer B was shown first.

    With `both`, the response is one of the battle's two orders and `winner` becomes the
    combined verdict once both are in (see `combine_orders`)."""
    winner, why, valid = verdict(response)
    if swapped and winner in ("model_a", "model_b"):
        winner = MIRROR[winner]
    row.update(
        judge=judge_name,
        turn=row.get("turn") or "1",
        language=row.get("language") or language_of(row.get("question") or ""),
        tstamp=f"{time.time():.3f}",
    )
    if not both:
        row.update(
            gpt_4_response=response,
            gpt_4_justification=why,
            is_valid="true" if valid else "false",
            winner=winner or "",
        )
        return row
    if swapped:
        row.update(gpt_4_response_ba=response, gpt_4_justification_ba=why)
    else:
        row.update(gpt_4_response=response, gpt_4_justification=why)
    combine_orders(row)
    return row


def combined_verdict(ab: str | None, ba: str | None) -> str | None:
    """The verdict of a battle judged in both orders, as arena-hard-auto scores it: two
    verdicts that agree stand; any disagreement is a tie (a win in one order and a loss in
    the other cancel out, as arena-hard-auto's two games do); an order without a usable
    verdict is left out, as arena-hard-auto drops an unparsable game."""
    if ab is None or ba is None:
        return ab or ba
    if ab == ba:
        return ab
    return "tie"


def combine_orders(row: dict) -> dict:
    """Fill winner_ab, winner_ba, winner and is_valid from the two orders' responses; a row
    with an order still missing has no winner yet (is_valid false until it is judged)."""
    first, second = row.get("gpt_4_response") or "", row.get("gpt_4_response_ba") or ""
    ab = verdict(first)[0] if first.strip() else None
    ba = verdict(second)[0] if second.strip() else None
    if ba in ("model_a", "model_b"):
        ba = MIRROR[ba]  # the swapped order showed B first: its "Model 1" is model_b
    row["winner_ab"], row["winner_ba"] = ab or "", ba or ""
    winner = combined_verdict(ab, ba) if first.strip() and second.strip() else None
    row["winner"] = winner or ""
    row["is_valid"] = "true" if winner else "false"
    return row


def pending_orders(row: dict, both: bool) -> list[bool]:
    """The orders (swapped or not) still to judge for this row."""
    out = []
    if not (row.get("gpt_4_response") or "").strip():
        out.append(False)
    if both and not (row.get("gpt_4_response_ba") or "").strip():
        out.append(True)
    return out


def judge_rows(
    rows: list[dict],
    endpoint: Endpoint,
    todo: list[int],
    concurrency: int = 8,
    save: Callable[[], None] | None = None,
    prompt: str = GPT4_PROMPT,
    swapped: bool = False,
    swapped_todo: list[int] | None = None,
) -> JudgeRun:
    """Judge rows[i] for i in todo in place (answer_a shown as Model 1 unless `swapped`).

    With `swapped_todo` the battles are judged in both orders, all calls in flight
    together: rows in `todo` with A first, rows in `swapped_todo` with B first, and each
    row's `winner` is the two orders' combined verdict (`combine_orders`)."""
    if swapped_todo is not None:
        jobs = [(i, False) for i in todo] + [(i, True) for i in swapped_todo]
    else:
        jobs = [(i, swapped) for i in todo]
    both = swapped_todo is not None
    return asyncio.run(_judge(rows, endpoint, jobs, concurrency, save, prompt, both))


async def _judge(
    rows: list[dict],
    endpoint: Endpoint,
    jobs: list[tuple[int, bool]],
    concurrency: int,
    save: Callable[[], None] | None,
    prompt: str,
    both: bool,
) -> JudgeRun:
    run = JudgeRun()
    todo = [i for i, _ in jobs]
    # Detect the questions' languages now, off the event loop (the detector loads its model
    # once), so filling each verdict costs nothing while answers stream in.
    questions = {rows[i].get("question") or "" for i in todo if not rows[i].get("language")}
    await asyncio.to_thread(lambda: [language_of(q) for q in questions])
    llm = endpoint.client()
    ask = await verdict_request(llm)
    if not concurrency:  # as many as the backend serves
        concurrency = await batch_concurrency(llm)

    def job(row: dict, swapped: bool):
        first, second = row["answer_a"], row["answer_b"]
        if swapped:
            first, second = second, first
        messages = judge_messages(prompt, row["question"], first, second)
        return lambda: llm.chat(messages, temperature=0, **ask)

    def done(k: int, response: str) -> None:
        i, swapped = jobs[k]
        fill_verdict(rows[i], response, endpoint.name, swapped, both)
        run.judged += 1
        run.invalid += verdict(response)[0] is None

    def failed(k: int, e: Exception) -> None:
        run.failures.append((jobs[k][0], getattr(e, "message", str(e))))

    try:
        await run_all(
            [job(rows[i], swapped) for i, swapped in jobs],
            concurrency,
            done,
            failed,
            f"judging with {endpoint.name}",
            checkpoint=save,
        )
    finally:
        await llm.close()
        if save:
            save()
    return run


# -- ablation: does the verdict survive swapping the answers? --------------------------------
def order_pairs(rows: list[dict]) -> tuple[list[dict], list[dict]]:
    """Rows judged in both orders as (first-order, second-order) verdicts for `consistency`."""
    first, second = [], []
    for r in rows:
        ab, ba = r.get("winner_ab") or "", r.get("winner_ba") or ""
        judge = r.get("judge") or "?"
        first.append({"judge": judge, "winner": ab, "is_valid": "true" if ab else "false"})
        second.append({"judge": judge, "winner": ba, "is_valid": "true" if ba else "false"})
    return first, second


def consistency(original: list[dict], swapped: list[dict]) -> dict[str, Any]:
    """Per judge: battles compared, share of agreeing verdicts, share won by position 1.

    `swapped[i]` is `original[i]` judged with the answers swapped, its winner already mapped
    back to the original orientation. Only pairs where both verdicts are valid count.
    """
    per: dict[str, dict[str, float]] = {}
    for o, s in zip(original, swapped, strict=True):
        if o.get("is_valid") != "true" or s.get("is_valid") != "true":
            continue
        stats = per.setdefault(
            o.get("judge") or "?", {"battles": 0, "agree": 0, "decisive": 0, "first": 0}
        )
        stats["battles"] += 1
        stats["agree"] += o["winner"] == s["winner"]
        # position 1 held answer A in the original order and answer B in the swapped one
        for winner, first in ((o["winner"], "model_a"), (s["winner"], "model_b")):
            if winner in ("model_a", "model_b"):
                stats["decisive"] += 1
                stats["first"] += winner == first
    return {
        judge: {
            "battles": int(st["battles"]),
            "agreement": st["agree"] / st["battles"] if st["battles"] else None,
            "first_position_wins": st["first"] / st["decisive"] if st["decisive"] else None,
            "decisive_verdicts": int(st["decisive"]),
        }
        for judge, st in per.items()
    }
