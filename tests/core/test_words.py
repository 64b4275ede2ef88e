"""Counts said with the right noun form (issue 14: "I stopped after 1 model turns")."""

import time

import httpx
import openai
import pytest

from daemon.backends.llm import LLM
from daemon.core.words import plural


@pytest.mark.parametrize(
    "count,noun,said",
    [
        (1, "model turn", "1 model turn"),
        (2, "model turn", "2 model turns"),
        (0, "battle", "0 battles"),
        (1, "battle", "1 battle"),
        (1.0, "second", "1 second"),
        (0.5, "second", "0.5 seconds"),
        (3, "match", "3 matches"),
        (2, "reply", "2 replies"),
        (2, "day", "2 days"),
    ],
)
def test_plural(count, noun, said):
    assert plural(count, noun) == said


def test_a_one_second_timeout_is_said_in_the_singular():
    llm = LLM("http://127.0.0.1:9/v1", "sk-test", 1.0, 0, "m")
    request = httpx.Request("POST", "http://127.0.0.1:9/v1/chat/completions")
    error = llm.explain(openai.APITimeoutError(request=request), time.monotonic() - 1.0)
    assert error.message.startswith("The language model did not answer: I waited 1 second ")
