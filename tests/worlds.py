"""The two worlds the live tests run in: root's, and an ordinary Unix user's (the second user
tests/daemons.py second_user makes), and giving a tree to that user."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from tests.daemons import second_user


def second_user_or_skip() -> str:
    """The second Unix user's name; where none can be had the test is skipped, saying why."""
    user, missing = second_user()
    if user is None:
        pytest.skip(missing)
    return user


def world_user(world: str) -> str | None:
    """Who the "root" or the "user" world runs as: None (this process, which must be root) or
    the second user. A world this machine cannot give is skipped, saying why."""
    if world == "user":
        return second_user_or_skip()
    if os.geteuid() != 0:
        pytest.skip("the tests run as an ordinary user: the other world covers it")
    return None


def give_to(user: str | None, *paths: Path) -> None:
    """`paths` and everything in them owned by `user` and its group (None: left as they are)."""
    if user is None:
        return
    for path in paths:
        subprocess.run(["chown", "-R", f"{user}:{user}", str(path)], check=True)
