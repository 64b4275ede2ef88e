"""The embedded server computes only the logits rows it reads, tests a grammar on the token
drawn first and starts a prompt from the kept state that began the same way
(daemon/backends/llama_server.py); its logprobs are those of llama-cpp-python's own server
computing every row, and its greedy answers under a JSON schema or a forced tool call are that
server's, token for token.

Both servers run the bundled model with 8-token batches, so a prompt spans several batches and
a later prompt reuses part of an earlier one, as in the daemon's conversations.
"""

from __future__ import annotations

import json
import subprocess
import sys
import urllib.request
from dataclasses import dataclass

import pytest

from daemon.backends import embedded
from daemon.backends.embedded import EmbeddedServer, bundled_model_path, engine_missing
from tests.real_model import PLAIN_LLAMA_SERVER

pytestmark = pytest.mark.skipif(
    engine_missing() is not None or bundled_model_path() is None,
    reason="needs the embedded extra (make test installs it)",
)


@dataclass
class SmallBatches(EmbeddedServer):
    def config(self) -> dict:
        conf = super().config()
        conf["models"][0]["n_batch"] = 8
        return conf


def post(server: EmbeddedServer, path: str, body: dict) -> dict:
    req = urllib.request.Request(
        server.url + path,
        json.dumps({"temperature": 0, **body}).encode(),
        {"Authorization": f"Bearer {server.key}", "Content-Type": "application/json"},
    )
    with urllib.request.urlopen(req, timeout=120) as r:
        return json.loads(r.read())


STORY = "Anna has three red apples and two green pears. She gives one apple to Ben, who"
OTHER = "The lighthouse keeper climbs the stairs every evening and lights the lamp, and"
# in this order: fresh, prefix reused, the exact prompt again, echo of a prefix, fresh again,
# another text, then the story again (from the state kept after the second request)
ASKED = [
    ("/completions", {"prompt": STORY, "max_tokens": 2, "logprobs": 3}),
    ("/completions", {"prompt": STORY + " thanks her and", "max_tokens": 2, "logprobs": 3}),
    ("/completions", {"prompt": STORY + " thanks her and", "max_tokens": 2, "logprobs": 3}),
    ("/completions", {"prompt": STORY[:33], "max_tokens": 2, "logprobs": 2, "echo": True}),
    ("/completions", {"prompt": STORY, "max_tokens": 2, "logprobs": 3}),
    ("/completions", {"prompt": OTHER, "max_tokens": 2, "logprobs": 3}),
    ("/completions", {"prompt": STORY + " thanks her and smiles", "max_tokens": 3, "logprobs": 3}),
]


VERDICT = {
    "type": "object",
    "properties": {"score": {"enum": [0, 0.5, 1]}, "why": {"type": "string"}},
    "required": ["score", "why"],
}
WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
    },
}
# under a grammar; the model's first choice is refused at some tokens and taken at others
CONSTRAINED = [
    {"messages": [{"role": "user", "content": "Is 2+2=5? Answer as JSON."}],
     "response_format": {"type": "json_object", "schema": VERDICT}, "max_tokens": 24},
    {"messages": [{"role": "user", "content": "Weather in Paris?"}], "tools": [WEATHER],
     "tool_choice": {"type": "function", "function": {"name": "get_weather"}}, "max_tokens": 16},
]  # fmt: skip


def message_of(reply: dict) -> tuple:
    m = reply["choices"][0]["message"]
    calls = [(c["function"]["name"], c["function"]["arguments"]) for c in m.get("tool_calls") or []]
    return m.get("content"), calls, reply["usage"]["completion_tokens"]


def logprobs_of(reply: dict) -> list:
    """Every position's token, its logprob and the top tokens' (the chat API's logprobs are
    the same numbers in another shape)."""
    lp = reply["choices"][0]["logprobs"]
    return [lp["tokens"], lp["token_logprobs"], lp["top_logprobs"]]


def close(a, b) -> bool:
    if isinstance(a, float) and isinstance(b, float):
        return abs(a - b) < 1e-3
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(close(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(close(x, y) for x, y in zip(a, b, strict=True))
    return a == b


def test_logprobs_are_those_of_the_server_computing_every_row(monkeypatch):
    path = bundled_model_path()
    ours = SmallBatches(path, n_ctx=256, n_threads=1)
    ours.spawn()
    monkeypatch.setattr(embedded, "_server_program", lambda: PLAIN_LLAMA_SERVER)
    plain = SmallBatches(path, n_ctx=256, n_threads=1)
    plain.spawn()
    try:
        ours.wait_ready(60)
        plain.wait_ready(60)
        for where, body in ASKED:
            got, want = post(ours, where, body), post(plain, where, body)
            assert got["choices"][0].get("text") == want["choices"][0].get("text"), body
            assert close(logprobs_of(got), logprobs_of(want)), (body, got, want)
            if body.get("echo"):  # the prompt's own rows came too (the first has none)
                tokens, numbers, _ = logprobs_of(got)
                assert len(tokens) >= 5 and numbers[0] is None and None not in numbers[1:]
        for body in CONSTRAINED:
            got, want = (
                post(ours, "/chat/completions", body),
                post(plain, "/chat/completions", body),
            )
            assert message_of(got) == message_of(want), body
            content, calls, _ = message_of(got)
            json.loads(content if content is not None else calls[0][1])  # held to the grammar
    finally:
        ours.stop()
        plain.stop()


def test_the_server_program_patches_this_llama_cpp_python():
    """A llama-cpp-python whose internals moved keeps its own (slower, correct) behaviour; this
    one, the version `make` installs, is patched."""
    program = embedded._server_program().decode()
    check = (
        "import llama_cpp.llama as l; before = l.Llama.eval\n"
        + program.replace('if __name__ == "__main__":', "if False:")
        + "\nsampled, generate = l.Llama.sample, l.Llama.generate"
        + "\n_last_rows_only(); _grammar_checked_last(); _prompt_states_kept()"
        + "\n_logprobs_sorted_by_numpy()"
        + "\nassert l.Llama.eval is not before and l.Llama.sample is not sampled"
        + "\nassert l.Llama.generate is not generate and l.sorted is not sorted"
        + "\nprint('patched')"
    )
    ran = subprocess.run([sys.executable, "-c", check], capture_output=True, text=True)
    assert ran.stdout.strip() == "patched", ran.stderr


KEPT_STATES = """
import json, sys
import llama_cpp.llama as l
from llama_cpp import llama_cpp as C

_last_rows_only(); _grammar_checked_last(); _prompt_states_kept()
# one thread, as the tier's servers: llama.cpp's threads spin while they wait for each other,
# and on a busy machine this program burnt 9 CPU-seconds instead of one
m = l.Llama(
    sys.argv[1], n_ctx=256, n_batch=8, logits_all=True, verbose=False,
    n_threads=1, n_threads_batch=1,
)
story, other = sys.argv[2], sys.argv[3]
read = []
for prompt in (story, other, story + " thanks her and smiles", other + " then", "Zebra"):
    C.llama_perf_context_reset(m._ctx.ctx)
    m.create_completion(prompt, max_tokens=2, temperature=0)
    read.append([C.llama_perf_context(m._ctx.ctx).n_p_eval, len(m.tokenize(prompt.encode()))])
print(json.dumps(read))
"""


def test_a_prompt_starts_from_the_kept_state_that_began_the_same_way():
    """How many prompt tokens the model read for each request (llama.cpp's own counter): a
    prompt that begins like an earlier one, not the last, reads only what is new."""
    program = embedded._server_program().decode().replace('if __name__ == "__main__":', "if 0:")
    ran = subprocess.run(
        [sys.executable, "-c", program + KEPT_STATES, str(bundled_model_path()), STORY, OTHER],
        capture_output=True,
        text=True,
    )
    assert ran.returncode == 0, ran.stderr
    (story, n_story), (other, n_other), (again, n_again), (then, n_then), (z, n_z) = json.loads(
        ran.stdout
    )
    assert (story, other, z) == (n_story, n_other, n_z)  # nothing in common: all read
    # the story's state (its prompt and the two tokens generated) was kept across the other
    # text: only the new words are read, and the other text's beginning likewise
    assert again <= n_again - n_story + 1 and then <= n_then - n_other + 1, ran.stdout


SORTED_PAIRS = """
import builtins
import numpy as np
import llama_cpp.llama as l

_logprobs_sorted_by_numpy()
rng = np.random.default_rng(7)
for trial in range(3):
    row = rng.normal(size=49152).astype(np.float32)
    row[rng.integers(0, 49152, 500)] = row[7]  # ties: broken by the token id
    row[rng.integers(0, 49152, 300)] = -np.inf  # tokens a grammar refused
    for values in (row, row.tolist()):  # the reply's rows, and the stream's lists
        want = builtins.sorted(builtins.zip(values, range(len(values))), reverse=True)
        got = l.sorted(l.zip(values, range(len(values))), reverse=True)
        assert got == [(float(v), i) for v, i in want], trial
pairs = [(1.0, 2), (3.0, 1)]
assert l.sorted(l.zip([1, 2], [3, 4])) == builtins.sorted(zip([1, 2], [3, 4]))  # other zips
assert l.sorted(pairs, reverse=True) == [(3.0, 1), (1.0, 2)]
print("same")
"""


def test_the_vocabulary_is_sorted_by_numpy_into_the_same_pairs():
    """The (logprob, token) pairs llama-cpp-python sorts to pick a position's top tokens come
    out of numpy's sort exactly as out of Python's (ties and refused tokens included)."""
    program = embedded._server_program().decode().replace('if __name__ == "__main__":', "if 0:")
    ran = subprocess.run(
        [sys.executable, "-c", program + SORTED_PAIRS], capture_output=True, text=True
    )
    assert ran.stdout.strip() == "same", ran.stderr
