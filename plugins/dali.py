"""`dali`: free chat. The karma-chosen history plus the instruction, no system decorators."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import TYPE_CHECKING

# Only the hook marker at module level: `lmd --help` imports every plugin to list commands,
# and a Mode made here would cost it the modes module for nothing.
from daemon.api import hookimpl

if TYPE_CHECKING:
    from daemon.api import Context


async def respond(ctx: Context) -> AsyncIterator[str]:
    # Always streamed from the backend, joined by the core for a whole reply: a request
    # cancelled at llm_timeout_secs then stops at the server too (llama-cpp-python goes on
    # generating for a closed non-streamed request, and answers one request at a time).
    limit = ctx.settings["reply_max_tokens"]
    extra = {"max_tokens": limit} if limit else {}
    async for chunk in ctx.llm.stream(ctx.messages(), **extra):
        yield chunk


@hookimpl
def register_modes(register):
    from daemon.api import Mode

    register(
        Mode(
            "dali",
            respond,
            description="Free chat: history and your words, nothing else.",
            aliases=("dolly", "dally"),  # how speech engines hear it
        )
    )
