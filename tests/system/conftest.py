"""Whole-daemon tests: load, crashes, schemathesis over every route, secrets across features."""

from __future__ import annotations

import collections
import time

from hypothesis import HealthCheck, given, settings

HOST = {"Host": "127.0.0.1:8420"}


def fuzz(
    op,
    seen: collections.Counter,
    excluded: list | None = None,
    only: list | None = None,
    headers: dict | None = None,
    examples: int = 20,
) -> None:
    """Up to `examples` schemathesis cases of one operation: all checks but `excluded`, or
    `only` those given; each must answer within 5 s."""

    @given(op.as_strategy())
    @settings(
        max_examples=examples,
        deadline=None,
        suppress_health_check=list(HealthCheck),
        database=None,
        derandomize=True,
    )
    def run(case):
        before = time.monotonic()
        kwargs = {"checks": only} if only else {"excluded_checks": excluded or []}
        r = case.call_and_validate(headers=headers or HOST, **kwargs)
        assert time.monotonic() - before < 5, f"{op.method} {op.path} hung"
        seen[(op.method.upper(), op.path, r.status_code)] += 1

    run()
