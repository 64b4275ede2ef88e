"""Which protocol a mode uses to get an action from the model: the one place that decides.

- `tools`: the backend's native tool calls (OpenAI, vLLM, llama.cpp, Ollama with tool-capable
  models): the model calls a function; its arguments are JSON the server parsed.
- `schema`: the answer held to a JSON schema (`response_format`): for servers that constrain
  output but do not call tools on their own (llama-cpp-python).
- `text`: a text format parsed by lmd (Thought / Action / a bash block): every server.

`auto` takes the first the backend showed it can do (daemon/backends/capabilities.py); the
`action_protocol` setting forces one.
"""

from __future__ import annotations

from typing import Any

PROTOCOLS = ("auto", "tools", "schema", "text")


def action_protocol(caps: Any, forced: str = "auto") -> str:
    """tools, schema or text for a backend with capabilities `caps`."""
    if forced in ("tools", "schema", "text"):
        return forced
    if caps.tools:
        return "tools"
    if caps.json_schema:
        return "schema"
    return "text"
