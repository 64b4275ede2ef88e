"""Fill a model's answers in a Q&A collection: only the unanswered questions, concurrently."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass, field

from daemon.api import batch_concurrency

from .backends import Endpoint, run_all
from .files import QA


@dataclass
class AnswerRun:
    asked: int = 0
    answered: int = 0
    failures: list[tuple[str, str]] = field(default_factory=list)  # (question, why)


def merge(base: QA, other: QA) -> QA:
    """`other`'s questions appended to `base`, and its answers filled where `base` has none."""
    for q in other.questions:
        if q not in base.questions:
            base.questions.append(q)
    for m in other.models:
        base.add_model(m)
        for q, a in other.answers.get(m, {}).items():
            if a.strip() and not base.answer(m, q).strip():
                base.answers[m][q] = a
    return base


def answer_questions(
    qa: QA,
    endpoint: Endpoint,
    concurrency: int = 0,
    save: Callable[[QA], None] | None = None,
    system: str = "",
) -> AnswerRun:
    """Ask `endpoint` every question its column lacks; `save(qa)` runs now and then and at
    the end, so an interrupted run keeps what it got and the next run resumes."""
    return asyncio.run(_answer(qa, endpoint, concurrency, save, system))


async def _answer(
    qa: QA, endpoint: Endpoint, concurrency: int, save: Callable[[QA], None] | None, system: str
) -> AnswerRun:
    qa.add_model(endpoint.name)
    todo = [q for q in qa.questions if not qa.answer(endpoint.name, q).strip()]
    run = AnswerRun(asked=len(todo))
    llm = endpoint.client()
    if not concurrency:  # as many as the backend serves
        concurrency = await batch_concurrency(llm)

    def job(question: str):
        messages = [{"role": "user", "content": question}]
        if system:
            messages.insert(0, {"role": "system", "content": system})
        return lambda: llm.chat(messages)

    def done(i: int, text: str) -> None:
        if text.strip():
            qa.answers[endpoint.name][todo[i]] = text.strip()
            run.answered += 1
        else:
            run.failures.append((todo[i], "the model sent an empty answer"))

    def failed(i: int, e: Exception) -> None:
        run.failures.append((todo[i], getattr(e, "message", str(e))))

    try:
        await run_all(
            [job(q) for q in todo],
            concurrency,
            done,
            failed,
            f"answers from {endpoint.name}",
            checkpoint=(lambda: save(qa)) if save else None,
        )
    finally:
        await llm.close()
        if save:
            save(qa)
    return run
