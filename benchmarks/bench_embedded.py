"""The embedded engine, measured: llama.cpp's llama-server (lmd's embedded engine) side by
side with llama-cpp-python's server (the other llama.cpp server lmd is kept true against), on
the same GGUF file with the same threads, requests alternated so a change of machine speed
hits both. Prints numbers and ratios measured in this run; asserts nothing.

(a) ready: spawn to the first answer;
(b) a dali turn, streamed (128 tokens at most, greedy): time to first token, tokens/s;
(c) a verdict held to a JSON schema (the arena judge's, 64 tokens at most);
(d) a tool call offered a dozen MCP-like tools, forced in the engine's own way;
(e) logprobs as SelectIT (completions, top 20, one token) and LM_SCORE (chat, top 20) ask;
(f) two conversations taking turns (each a 300-token instruction and a growing history);
(g) four dali sessions at once (64 tokens each) against one alone;
(h) through lmd, on the embedded engine: a dali turn's time to first token against the
    engine's own; four concurrent dali sessions against one; a 100-row LM_SCORE batch and a
    50-sample SelectIT run against the engine's best throughput measured directly.

Run: .venv/bin/python benchmarks/bench_embedded.py [--quick] [--threads N]
                                                   [--python-launcher FILE] [--only a,b,...]

--python-launcher runs llama-cpp-python's server through another program (the text of
daemon/backends/llama_server.py at a commit that patched llama-cpp-python, for the
measurement that chose the engine: see docs/performance.md).
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import statistics
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.bench_core import ms  # noqa: E402

ARGS = argparse.Namespace(quick=False, threads=2, python_launcher=None, only=None)


# -- requests -------------------------------------------------------------------------------


def connect(server) -> http.client.HTTPConnection:
    return http.client.HTTPConnection("127.0.0.1", server.port, timeout=600)


def post(server, path: str, body: dict) -> tuple[float, dict]:
    """(seconds, answer) of one request to /v1 `path`."""
    conn = connect(server)
    headers = {"Authorization": f"Bearer {server.key}", "Content-Type": "application/json"}
    t = time.perf_counter()
    conn.request("POST", "/v1" + path, json.dumps({"temperature": 0, **body}), headers)
    answer = conn.getresponse()
    data = json.loads(answer.read())
    took = time.perf_counter() - t
    conn.close()
    if answer.status != 200:
        raise RuntimeError(f"HTTP {answer.status}: {str(data)[:300]}")
    return took, data


def stream(server, messages: list[dict], max_tokens: int) -> tuple[float, float, int]:
    """(time to first token, whole time, tokens) of a streamed chat answer."""
    conn = connect(server)
    headers = {"Authorization": f"Bearer {server.key}", "Content-Type": "application/json"}
    body = {"messages": messages, "max_tokens": max_tokens, "temperature": 0, "stream": True}
    t = time.perf_counter()
    conn.request("POST", "/v1/chat/completions", json.dumps(body), headers)
    answer = conn.getresponse()
    first, pieces = None, 0
    for raw in answer:
        line = raw.strip()
        if not line.startswith(b"data:") or line == b"data: [DONE]":
            continue
        chunk = json.loads(line[5:])
        delta = (chunk.get("choices") or [{}])[0].get("delta") or {}
        if delta.get("content"):
            pieces += 1
            if first is None:
                first = time.perf_counter() - t
    took = time.perf_counter() - t
    conn.close()
    return first or took, took, pieces


def median(values: list[float]) -> float:
    return statistics.median(values)


def row(title: str, ours: str, other: str, ratio: float | None = None) -> None:
    shown = f"  ({ratio:.2f}x)" if ratio else ""
    print(f"{title:<58} llama-server {ours:>16} | llama-cpp-python {other:>16}{shown}")


# -- the engines ------------------------------------------------------------------------------


def engines(n_ctx: int = 2048):
    """(llama-server, llama-cpp-python's server), both started."""
    from daemon.backends.embedded import EmbeddedServer, bundled_model_path
    from tests.real_model import PLAIN_PROGRAM, PythonServer

    path = bundled_model_path()
    program = Path(ARGS.python_launcher).read_bytes() if ARGS.python_launcher else PLAIN_PROGRAM
    ours = EmbeddedServer(path, n_ctx=n_ctx, n_threads=ARGS.threads, slots=4, tcp=True).start()
    other = PythonServer(path, n_ctx=n_ctx, n_threads=ARGS.threads, program=program).start()
    return ours, other


def bench_ready(runs: int) -> None:
    from daemon.backends.embedded import EmbeddedServer, bundled_model_path
    from tests.real_model import PLAIN_PROGRAM, PythonServer

    path = bundled_model_path()
    program = Path(ARGS.python_launcher).read_bytes() if ARGS.python_launcher else PLAIN_PROGRAM
    times: dict[str, list[float]] = {"ours": [], "other": []}
    for _ in range(runs):
        for name in ("ours", "other"):
            if name == "ours":
                server = EmbeddedServer(path, n_ctx=2048, n_threads=ARGS.threads, slots=4,
                                        tcp=True)  # fmt: skip
            else:
                server = PythonServer(path, n_ctx=2048, n_threads=ARGS.threads, program=program)
            t = time.perf_counter()
            server.start()
            times[name].append(time.perf_counter() - t)
            server.stop()
    o, p = median(times["ours"]), median(times["other"])
    row(f"(a) ready, spawn to first answer (median of {runs})", ms(o), ms(p), p / o)


def alternate(runs: int, ours, other, once) -> dict[str, list]:
    got: dict[str, list] = {"ours": [], "other": []}
    for i in range(runs):
        for name, server in (("ours", ours), ("other", other)):
            got[name].append(once(server, i))
    return got


DALI = "Tell me about lighthouses and the people who kept them, in a few paragraphs."


def bench_dali(ours, other, runs: int) -> None:
    def once(server, i):
        return stream(server, [{"role": "user", "content": f"{DALI} ({i})"}], 128)

    got = alternate(runs, ours, other, once)
    ttft = {k: median([g[0] for g in v]) for k, v in got.items()}
    rate = {k: median([g[2] / max(g[1] - g[0], 1e-6) for g in v]) for k, v in got.items()}
    row(f"(b) a dali turn: time to first token (median of {runs})",
        ms(ttft["ours"]), ms(ttft["other"]), ttft["other"] / ttft["ours"])  # fmt: skip
    row("    and tokens/s after it", f"{rate['ours']:.0f} tok/s", f"{rate['other']:.0f} tok/s",
        rate["ours"] / rate["other"])  # fmt: skip


def bench_schema(ours, other, runs: int) -> None:
    from daemon.backends.llm import with_schema_room
    from plugins.elo.judge import VERDICT_SCHEMA

    def once(server, i):
        question = f"Question {i}: what is {i} + {i}? Answer 1: {2 * i}. Answer 2: {2 * i + 1}."
        body = {
            "messages": [{"role": "user", "content": question + " Which answer is better?"}],
            "max_tokens": 64,
        }
        if server is ours:  # as lmd's client asks each (llama.cpp: room for the structure)
            fmt = {"type": "json_schema", "json_schema": {"name": "v", "schema": VERDICT_SCHEMA}}
            body = with_schema_room({**body, "response_format": fmt})
        else:
            body["response_format"] = {"type": "json_object", "schema": VERDICT_SCHEMA}
        took, data = post(server, "/chat/completions", body)
        text = data["choices"][0]["message"]["content"] or ""
        try:
            ok = isinstance(json.loads(text), dict)
        except ValueError:
            ok = False
        return took, data["usage"]["completion_tokens"], ok

    got = alternate(runs, ours, other, once)
    t = {k: median([g[0] for g in v]) for k, v in got.items()}
    n = {k: median([g[1] for g in v]) for k, v in got.items()}
    per = {k: median([g[0] / max(g[1], 1) for g in v]) for k, v in got.items()}
    ok = {k: sum(g[2] for g in v) for k, v in got.items()}
    row(f"(c) a verdict held to a JSON schema (median of {runs})",
        f"{ms(t['ours'])}, {n['ours']:.0f} tok", f"{ms(t['other'])}, {n['other']:.0f} tok",
        t["other"] / t["ours"])  # fmt: skip
    row("    time a token", ms(per["ours"]), ms(per["other"]), per["other"] / per["ours"])
    print(f"    valid JSON: llama-server {ok['ours']}/{runs}, "
          f"llama-cpp-python {ok['other']}/{runs}")  # fmt: skip


def mcp_tools(count: int = 12) -> list[dict]:
    """MCP-like tools: a name, a description and an object schema of a few properties."""
    tools = []
    for i in range(count):
        props = {
            "path": {"type": "string", "description": "A file or folder."},
            "limit": {"type": "integer", "minimum": 1, "maximum": 100},
            "recursive": {"type": "boolean"},
        }
        tools.append({"type": "function", "function": {
            "name": f"files_{i}", "description": f"Tool {i}: list or read files.",
            "parameters": {"type": "object", "properties": props, "required": ["path"]},
        }})  # fmt: skip
    return tools


def bench_tools(ours, other, runs: int) -> None:
    """A marat step offering a dozen MCP tools, as lmd asks each engine: neither calls tools
    on its own for SmolLM2, both hold answers to a schema, so marat's schema protocol (the
    tools' names as actions); and each engine's forced tool call, for what comes back."""
    from daemon.backends.llm import with_schema_room
    from plugins.marat.protocols import step_schema

    class Tool:  # what step_schema reads of an MCP tool
        def __init__(self, name: str) -> None:
            self.exposed = name

    schema = step_schema([Tool(t["function"]["name"]) for t in mcp_tools()])

    def step(server, i):
        body = {"messages": [{"role": "system", "content": "Answer with one step as JSON."},
                             {"role": "user", "content": f"List the files in /tmp/{i}."}],
                "max_tokens": 256}  # fmt: skip
        if server is ours:
            fmt = {"type": "json_schema", "json_schema": {"name": "step", "schema": schema}}
            body = with_schema_room({**body, "response_format": fmt})
        else:
            body["response_format"] = {"type": "json_object", "schema": schema}
        took, data = post(server, "/chat/completions", body)
        return took, data["usage"]["completion_tokens"]

    # llama-cpp-python's grammar path crashes on this schema (SIGSEGV, issue 36): it is tried
    # on a server of its own, which the rest of the run does not need
    from daemon.backends.embedded import bundled_model_path
    from tests.real_model import PythonServer

    program = Path(ARGS.python_launcher).read_bytes() if ARGS.python_launcher else None
    spare = PythonServer(bundled_model_path(), n_threads=ARGS.threads,
                         **({"program": program} if program else {})).start()  # fmt: skip
    try:
        step(spare, 0)
        crashed = ""
    except OSError:
        spare.proc.wait(30)
        crashed = f"crashed (exit code {spare.proc.returncode})"
    finally:
        spare.stop()
    times = [step(ours, i) for i in range(runs)]
    t = median([g[0] for g in times])
    per = median([g[0] / max(g[1], 1) for g in times])
    if crashed:
        row(f"(d) a marat step offering 12 MCP tools, schema (median of {runs})",
            f"{ms(t)}, {ms(per)} a token", crashed)  # fmt: skip
    else:
        other_times = [step(other, i) for i in range(runs)]
        o = median([g[0] for g in other_times])
        row(f"(d) a marat step offering 12 MCP tools, schema (median of {runs})",
            ms(t), ms(o), o / t)  # fmt: skip

    def forced(server, i):
        # each engine's way of forcing a call: llama-cpp-python honours a function named in
        # tool_choice, llama-server honours "required" where the model's template has tools
        choice = "required" if server is ours else {"type": "function",
                                                    "function": {"name": "files_3"}}  # fmt: skip
        took, data = post(server, "/chat/completions", {
            "messages": [{"role": "user", "content": f"List the files in /tmp/{i}."}],
            "tools": mcp_tools(), "tool_choice": choice, "max_tokens": 96,
        })  # fmt: skip
        return took, bool(data["choices"][0]["message"].get("tool_calls"))

    got = alternate(max(2, runs // 2), ours, other, forced)
    calls = {k: sum(g[1] for g in v) for k, v in got.items()}
    print(f"    a forced tool call comes back: llama-server {calls['ours']}/{len(got['ours'])} "
          f"(SmolLM2's template has no tools: it answers in text), llama-cpp-python "
          f"{calls['other']}/{len(got['other'])}")  # fmt: skip


def bench_logprobs(ours, other, runs: int) -> None:
    def selectit(server, i):
        return post(server, "/completions", {
            "prompt": f"Rate this instruction from 1 to 5: write a poem about {i} cats.\nRating:",
            "max_tokens": 1, "logprobs": 20,
        })[0]  # fmt: skip

    def lm_score(server, i):
        return post(server, "/chat/completions", {
            "messages": [{"role": "user", "content": f"Is {i} even? Answer yes or no."}],
            "max_tokens": 1, "logprobs": True, "top_logprobs": 20,
        })[0]  # fmt: skip

    for title, once in (("(e) logprobs as SelectIT (completions, top 20)", selectit),
                        ("    logprobs as LM_SCORE (chat, top 20)", lm_score)):  # fmt: skip
        got = alternate(runs, ours, other, once)
        o, p = median(got["ours"]), median(got["other"])
        row(f"{title} (median of {runs})", ms(o), ms(p), p / o)


def bench_interleaved(ours, other, runs: int) -> None:
    rules = {
        "a": "You are a careful shell assistant. " + "Answer in one short line. " * 50,
        "b": "You are a friendly poet who rhymes. " + "Keep every answer gentle. " * 50,
    }
    times: dict[str, list[float]] = {"ours": [], "other": []}
    for name, server in (("ours", ours), ("other", other)):
        histories: dict[str, list[dict]] = {"a": [], "b": []}
        for i in range(runs + 1):
            for who in ("a", "b"):
                histories[who].append({"role": "user", "content": f"Question {i} for {who}."})
                took, data = post(server, "/chat/completions", {
                    "messages": [{"role": "system", "content": rules[who]}, *histories[who]],
                    "max_tokens": 8,
                })  # fmt: skip
                reply = data["choices"][0]["message"]["content"] or ""
                histories[who].append({"role": "assistant", "content": reply})
                if i:  # the first of each: both read the whole instruction
                    times[name].append(took)
    o, p = median(times["ours"]), median(times["other"])
    row(f"(f) two conversations taking turns ({len(times['ours'])} turns)", ms(o), ms(p), p / o)


def at_once(server, count: int, tokens: int) -> tuple[float, list[float]]:
    """(wall time, each answer's time) of `count` streamed dali turns sent together."""
    took: list[float] = [0.0] * count

    def one(i: int) -> None:
        took[i] = stream(server, [{"role": "user", "content": f"{DALI} (session {i})"}],
                         tokens)[1]  # fmt: skip

    threads = [threading.Thread(target=one, args=(i,)) for i in range(count)]
    t = time.perf_counter()
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    return time.perf_counter() - t, took


def bench_concurrent(ours, other, runs: int) -> None:
    got: dict[str, list] = {"ours": [], "other": []}
    for _ in range(runs):
        for name, server in (("ours", ours), ("other", other)):
            one = at_once(server, 1, 64)[0]
            four, each = at_once(server, 4, 64)
            got[name].append((one, four, each))
    for name in ("ours", "other"):
        one = median([g[0] for g in got[name]])
        four = median([g[1] for g in got[name]])
        each = [x for g in got[name] for x in g[2]]
        label = "llama-server" if name == "ours" else "llama-cpp-python"
        print(f"(g) four dali sessions at once, {label}: one alone {ms(one)}, four {ms(four)} "
              f"({four / one:.2f}x one; each {min(each):.1f}-{max(each):.1f} s)")  # fmt: skip


SECTIONS = {
    "b": bench_dali,
    "c": bench_schema,
    "d": bench_tools,
    "e": bench_logprobs,
    "f": bench_interleaved,
    "g": bench_concurrent,
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--python-launcher")
    parser.add_argument("--only", help="sections to run, like a,b,h")
    parser.parse_args(namespace=ARGS)
    # both engines' OpenMP threads sleep while they wait (the embedded engine's default):
    # spinning threads cost either of them several times their time on a busy machine
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    runs = 3 if ARGS.quick else 7
    only = set(ARGS.only.split(",")) if ARGS.only else set("abcdefgh")
    from daemon.backends.embedded import bundled_model_path

    served = bundled_model_path()
    print(f"engines: llama-server (4 slots) and llama-cpp-python's server, "
          f"{served.name if served else 'no model'}, {ARGS.threads} threads each")  # fmt: skip
    if "a" in only:
        bench_ready(3 if ARGS.quick else 5)
    if only & set(SECTIONS):
        ours, other = engines()
        try:
            for key, fn in SECTIONS.items():
                if key in only:
                    fn(ours, other, runs if key != "g" else max(2, runs // 3))
        finally:
            ours.stop()
            other.stop()
    if "h" in only:
        from benchmarks.bench_embedded_lmd import bench_through_lmd

        bench_through_lmd(ARGS)


if __name__ == "__main__":
    main()
