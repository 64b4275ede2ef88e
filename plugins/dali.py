"""`dali`: free chat. The karma-chosen history plus the instruction, no system decorators."""

from __future__ import annotations

from collections.abc import AsyncIterator

from daemon.api import Context, Mode, hookimpl


async def respond(ctx: Context) -> AsyncIterator[str]:
    messages = ctx.messages()
    if ctx.streaming:
        async for chunk in ctx.llm.stream(messages):
            yield chunk
    else:
        yield await ctx.llm.chat(messages)


@hookimpl
def register_modes(register):
    register(
        Mode(
            "dali",
            respond,
            description="Free chat: history and your words, nothing else.",
            aliases=("dolly", "dally"),  # how speech engines hear it
        )
    )
