"""The capability probe: what a backend shows it can do, cached per endpoint and model,
overridable by a setting; against the stand-in's profiles and against the real model."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from daemon.backends.capabilities import CapabilityCache, check_overrides
from daemon.backends.llm import LLM
from tests.daemons import LiveDaemon, configure, lmd_in_process, run_probe


def test_a_text_only_server_shows_no_tools_and_no_schema(backend):
    caps = run_probe(backend.url)
    assert (caps.tools, caps.tool_choice, caps.json_schema, caps.tokenize) == (False,) * 4
    assert (caps.logprobs, caps.top_logprobs, caps.n, caps.prefill) == (True, 20, True, True)
    assert caps.source == "probe" and caps.response_format("x", {}) is None
    assert "tools: answered without a tool call" in caps.notes
    assert backend.requests == [] and backend.probes  # probes are not scripted traffic
    sent = {r.headers["X-Lmd-Probe"] for r in backend.probes}
    assert sent == {"tools", "tool_choice", "tool_required", "json_schema", "logprobs", "n",
                    "prefill", "tokenize", "props", "v1/models"}  # fmt: skip
    # nothing a probe sends is retried or long, and every answer is greedy (the same answer
    # on every probe of the same server)
    chat = [r.body for r in backend.probes if isinstance(r.body, dict) and "messages" in r.body]
    assert all(b["max_tokens"] <= 96 for b in chat)
    assert all(b.get("temperature") == 0 for b in chat)
    # the schema probe leaves room for the whitespace a grammar allows
    schema = [b for b in chat if "response_format" in b]
    assert schema and all(b["max_tokens"] >= 64 for b in schema)


def test_a_full_server_is_seen_whole(backend):
    backend.capabilities.update(
        tools=True, tool_choice=True, json_schema=True, schema_format="json_object",
        tokenize=True, top_logprobs=5, n=False, prefill=False,
    )  # fmt: skip
    caps = run_probe(backend.url)
    assert (caps.tools, caps.tool_choice, caps.json_schema) == (True, True, True)
    assert caps.schema_format == "json_object" and caps.tokenize_path == "/extras/tokenize"
    assert (caps.top_logprobs, caps.n, caps.prefill) == (5, False, False)
    assert caps.response_format("verdict", {"type": "object"}) == {
        "type": "json_object",
        "schema": {"type": "object"},
    }
    # top_logprobs=20 was refused with a 400, then 5 asked for: the probe steps down
    tops = [r.body.get("top_logprobs") for r in backend.probes if r.body.get("logprobs")]
    assert tops == [20, 5]


def test_openai_shaped_schema_is_asked_first(backend):
    backend.capabilities.update(json_schema=True, schema_format="json_schema")
    caps = run_probe(backend.url)
    assert caps.json_schema and caps.schema_format == "json_schema"
    fmt = caps.response_format("score", {"type": "integer"})
    assert fmt["type"] == "json_schema" and fmt["json_schema"]["schema"] == {"type": "integer"}


def test_a_probe_that_times_out_falls_back_to_text_and_is_not_kept(backend):
    backend.latency = 1.0

    async def go():
        llm = LLM(backend.url, "sk-x", 30, 0, "fake-model")
        cache = CapabilityCache(timeout=0.2)
        try:
            first = await cache.get(llm)
            again = await cache.get(llm)  # within retry_after: no new probe
            return first, again, cache.cached(llm.url, llm.model)
        finally:
            await llm.close()

    first, again, kept = asyncio.run(go())
    assert first.source == "assumed" and not first.tools and not first.json_schema
    assert "the probe failed" in first.notes[0]
    assert again.source == "assumed" and kept is None
    # one timed-out request (after the quick GET /props and /v1/models), then nothing until
    # retry_after
    assert len([p for p in backend.probes if p.method == "POST"]) == 1


def test_the_daemon_probes_once_and_keeps_it_across_restarts(home, backend):
    backend.forget_probes()  # the home starts with none kept (tests/daemons.py probed_on)
    d = LiveDaemon(home, {"LMD_TOKENIZER": "estimate"})
    try:
        first = json.loads(_get(d.url + "/backend"))
        second = json.loads(_get(d.url + "/backend"))
        assert first == second and first["model"] == "fake-model"
        assert first["capabilities"]["n"] is True and first["source"] == "probe"
        count = len(backend.probes)
        assert count >= 10
    finally:
        d.stop()
    d = LiveDaemon(home, {"LMD_TOKENIZER": "estimate"})
    try:
        assert json.loads(_get(d.url + "/backend")) == first
        assert len(backend.probes) == count  # from the database, no new probe
        fresh = json.loads(_post(d.url + "/backend/probe"))
        assert len(backend.probes) == 2 * count and fresh["probed_at"] > first["probed_at"]
        # another model is another backend: probed on its own
        _put(d.url + "/settings/openai_model", "other-model", home)  # the user's, by token
        assert json.loads(_get(d.url + "/backend"))["model"] == "other-model"
        assert len(backend.probes) == 3 * count
        # the CLI shows the same
        shown = lmd_in_process("backend", "--url", d.url).stdout
        assert "model     other-model" in shown and "  tools        no" in shown
    finally:
        d.stop()


def test_the_setting_overrides_what_was_probed(home, backend):
    configure(home, backend_capabilities={"tools": True, "top_logprobs": 3})
    d = LiveDaemon(home, {"LMD_TOKENIZER": "estimate"})
    try:
        data = json.loads(_get(d.url + "/backend"))
    finally:
        d.stop()
    assert data["source"] == "setting"
    assert data["capabilities"]["tools"] is True and data["capabilities"]["top_logprobs"] == 3
    assert data["capabilities"]["n"] is True  # the rest is still the probe's


@pytest.mark.parametrize(
    ("value", "said"),
    [
        ([], "must be a JSON object"),
        ({"telepathy": True}, "does not know telepathy"),
        ({"tools": "yes"}, "tools must be true or false"),
        ({"top_logprobs": -1}, "at least 0"),
    ],
)
def test_bad_overrides_are_one_sentence(value, said, home):
    assert said in check_overrides(value)
    r = lmd_in_process("settings", "set", "backend_capabilities", json.dumps(value),
                       "--home", str(home))  # fmt: skip
    assert r.returncode == 1 and said in r.stderr


def test_the_cli_says_when_no_daemon_runs():
    r = lmd_in_process("backend", "--url", "http://127.0.0.1:9")
    assert r.returncode == 1 and "lmd serve" in r.stderr


def test_the_embedded_engine_shows_what_llama_server_does(real_model):
    """llama.cpp's llama-server: schemas in OpenAI's json_schema shape, logprobs with 20
    alternatives, n, prefill (its answer repeats the assistant's text, then goes on), a
    tokenize endpoint, and what it says of itself: its slots and each slot's window. No tool
    calls for a model whose chat template has no tools (SmolLM2's), in any tool_choice form.
    (Protocol facts of the server, not the model's quality.) Probed twice: the same."""
    caps = run_probe(real_model.url, real_model.alias, real_model.key, timeout=60)
    again = run_probe(real_model.url, real_model.alias, real_model.key, timeout=60)
    assert (caps.tools, caps.tool_choice, caps.tool_required) == (False, False, False)
    assert caps.json_schema and caps.schema_format == "json_schema"
    assert caps.logprobs and caps.top_logprobs == 20
    assert caps.tokenize and caps.tokenize_path == "/tokenize"
    assert caps.n and caps.prefill and caps.prefill_echo
    assert caps.slots == real_model.n_slots and caps.max_n == real_model.n_slots
    assert caps.context_window == real_model.n_ctx
    features = ("tools", "tool_choice", "tool_required", "json_schema", "logprobs",
                "top_logprobs", "n", "tokenize", "prefill", "prefill_echo", "slots")  # fmt: skip
    assert [getattr(caps, f) for f in features] == [getattr(again, f) for f in features]


def test_the_other_server_shows_what_llama_cpp_python_does(python_server):
    """llama-cpp-python 0.3.36's server, the other llama.cpp server: forced tool calls by
    name and schemas in its own json_object shape, logprobs with 20 alternatives and a tokenize
    endpoint; no tool calls on its own, no n, no prefill, no slots said."""
    s = python_server
    caps = run_probe(s.url, s.alias, s.key, timeout=60)
    assert caps.tool_choice and not caps.tools
    assert caps.json_schema and caps.schema_format == "json_object"
    assert caps.logprobs and caps.top_logprobs == 20
    assert caps.tokenize and caps.tokenize_path == "/extras/tokenize"
    assert not caps.n and not caps.prefill
    assert caps.slots == 0 and caps.context_window == 0


def _get(url: str) -> bytes:
    import urllib.request

    with urllib.request.urlopen(url, timeout=60) as r:
        return r.read()


def _post(url: str) -> bytes:
    import urllib.request

    with urllib.request.urlopen(urllib.request.Request(url, b"", method="POST"), timeout=60) as r:
        return r.read()


def _put(url: str, value: str, home: Path) -> bytes:
    import urllib.request

    token = (home / "token").read_text().strip()
    headers = {"Authorization": f"Bearer {token}"}
    req = urllib.request.Request(url, value.encode(), headers, method="PUT")
    with urllib.request.urlopen(req, timeout=60) as r:
        return r.read()


def test_batch_concurrency_is_the_setting_else_the_server_s_slots(backend, real_model):
    """How many requests a batch job keeps in flight: the batch_concurrency setting when set,
    else the slots the server says it has (llama-server: --parallel), else 8."""
    from daemon.backends.concurrency import DEFAULT_CONCURRENCY, batch_concurrency

    async def width(url, key, model, override=0):
        llm = LLM(url, key, 60, 0, model)
        llm.batch_concurrency = override
        try:
            return await batch_concurrency(llm)
        finally:
            await llm.close()

    assert asyncio.run(width(backend.url, "k", "fake-model")) == DEFAULT_CONCURRENCY  # says none
    assert asyncio.run(width(backend.url, "k", "fake-model", override=3)) == 3
    found = asyncio.run(width(real_model.url, real_model.key, real_model.alias))
    assert found == real_model.n_slots == 2


def test_a_new_server_at_a_known_address_is_probed_afresh(backend):
    """Another server now answers at an address the process probed (a port reused, as the
    stand-in's are): what was learnt of the old one is forgotten."""

    async def go():
        llm = LLM(backend.url, "sk-x", 30, 0, "fake-model")
        cache = CapabilityCache()
        try:
            cache.keep(backend.url, "fake-model", await cache.get(llm))
            kept = cache.cached(backend.url, "fake-model")
            cache.forget(backend.url)
            return kept, cache.cached(backend.url, "fake-model")
        finally:
            await llm.close()

    kept, after = asyncio.run(go())
    assert kept is not None and kept.source == "probe" and after is None
