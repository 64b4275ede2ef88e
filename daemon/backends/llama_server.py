"""The embedded model's server process: llama-cpp-python's OpenAI-compatible server, with the
logits of only the positions that are read, a grammar checked on the token drawn first, and the
model's state after recent requests kept for the prompts that begin the same way.

    python lmd_llama_server.py --config_file CONFIG_FILE DAEMON_PID

The daemon runs a copy of this file kept beside the server's configuration (so it works when
lmd is a zip application too). The process asks the kernel to kill it when the daemon dies
(even by SIGKILL), then serves.

Why the patch: logprobs (SelectIT, LM_SCORE's logprob method) need llama-cpp-python's
`logits_all`, which makes the model compute and copy the logits of every prompt position
(reading a prompt took 1.15x as long: benchmarks/bench_embedded.py), although a generated
token's logprobs come only from the position before it, which the last row of each decoded
batch holds (the prompt's last position is always decoded afresh, and each generated token
alone). So each batch keeps only its last row. A request that reads the prompt's own logprobs
(`echo` with `logprobs`) gets every row computed, from a cleared cache.

Why the second: under a grammar (a JSON schema, a tool call) llama-cpp-python puts the grammar
first in its sampler chain, so every generated token has the grammar test all 49,152 tokens of
the vocabulary: 11 ms a token, twenty times the sampling without it. Instead the token is drawn
without the grammar and tested alone; only when the grammar refuses it are all tokens tested
and the token drawn again from those it allows, as llama.cpp's own `common_sampler` does. The
tokens allowed and the odds among them are the same (greedy picks the same token; a random
draw that lands on a refused token is redrawn among the allowed ones in proportion).

Why the third: llama-cpp-python reuses the part of a prompt that the *previous* request began
with, and reads the rest afresh (about 10 ms a token on one core for the bundled model). Turns
of different sessions and modes interleave (marat's long instructions, then a dali chat, then
marat again), so a prompt's beginning was often read a moment ago, just not last. After each
request the model's state for that one sequence (its attention cache: some 23 kB a token for
the bundled model) is kept, up to STATES_KEPT_BYTES, least recently used first out; a request
whose prompt shares a longer beginning with a kept state than with the current one starts
from that state. The tokens are the same tokens at the same positions, so what is kept is what
reading them again would give (the prompt's last token is always read afresh, as before).

Why the fourth: for each position whose logprobs a reply carries, llama-cpp-python sorts the
whole vocabulary in Python (`sorted(zip(row, range(len(row))), reverse=True)`: 49,152 pairs,
about 0.1 s a position) to take the top few. That call now gets the same pairs in the same
order from numpy's sort (a few milliseconds): descending by logprob, ties by token id.

No lmd import here: this runs in a bare interpreter.
"""

import ctypes
import os
import signal
import sys
from collections import OrderedDict

STATES_KEPT_BYTES = 256 << 20
MIN_GAIN = 8  # tokens: below this, restoring a state costs about what it saves


def _last_rows_only() -> None:
    """Teach llama_cpp.Llama to compute the logits rows that are read, and no others."""
    import numpy as np
    from llama_cpp import llama

    Llama = llama.Llama
    # The replacement below uses what this version's own eval uses; a version whose eval
    # works otherwise keeps its own behaviour (slower, and right).
    used = {"_batch", "_ctx", "decode", "get_logits", "input_ids", "kv_cache_seq_rm"}
    used |= {"n_batch", "n_tokens", "scores", "set_batch", "_n_vocab", "_requires_eval"}
    if not used <= set(Llama.eval.__code__.co_names) or not hasattr(Llama, "_create_completion"):
        return
    full_eval, full_completion = Llama.eval, Llama._create_completion

    def eval(self, tokens):  # noqa: A001 - the method's own name
        if not self._logits_all or getattr(self, "_lmd_every_row", False):
            return full_eval(self, tokens)
        self._ctx.kv_cache_seq_rm(-1, self.n_tokens, -1)
        for i in range(0, len(tokens), self.n_batch):
            batch = tokens[i : i + self.n_batch]
            n_past, n_tokens = self.n_tokens, len(batch)
            self._batch.set_batch(batch=batch, n_past=n_past, logits_all=False)
            self._ctx.decode(self._batch)
            self.input_ids[n_past : n_past + n_tokens] = batch
            last = np.ctypeslib.as_array(self._ctx.get_logits(), shape=(self._n_vocab,))
            self.scores[n_past + n_tokens - 1, :] = last
            self.n_tokens += n_tokens
            self._requires_eval = False

    def _create_completion(self, *args, **kwargs):
        every = bool(kwargs.get("echo")) and kwargs.get("logprobs") is not None
        if every:
            self.n_tokens = 0  # rows kept from earlier prompts are not all there: read afresh
        self._lmd_every_row = every
        try:
            yield from full_completion(self, *args, **kwargs)
        finally:
            self._lmd_every_row = False

    Llama.eval = eval
    Llama._create_completion = _create_completion


def _grammar_checked_last() -> None:
    """Teach llama_cpp.Llama to test a drawn token against the grammar before the vocabulary."""
    import numpy as np
    from llama_cpp import _internals, llama
    from llama_cpp import llama_cpp as C

    Llama = llama.Llama
    needed = ("llama_get_logits_ith", "llama_sampler_apply", "llama_sampler_accept")
    if not all(hasattr(C, name) for name in needed) or not hasattr(Llama, "_init_sampler"):
        return  # another version: its own chain (slower, and right)
    full_init, full_sample = Llama._init_sampler, Llama.sample
    row = np.dtype([("id", np.int32), ("logit", np.float32), ("p", np.float32)])
    if row.itemsize != ctypes.sizeof(C.llama_token_data):
        return

    def _init_sampler(self, *args, grammar=None, **kwargs):
        if grammar is None or kwargs.get("logits_processor") is not None:
            return full_init(self, *args, grammar=grammar, **kwargs)  # as it was
        chain = full_init(self, *args, **kwargs)  # the same chain, without the grammar
        checker = _internals.LlamaSampler()
        checker.add_grammar(self._model, grammar)
        chain._lmd_grammar = checker
        return chain

    def draw(self, sampler, logits, grammar=None) -> int:
        """One pass of the chain over every token (the grammar first, when given)."""
        rows = getattr(self, "_lmd_rows", None)
        if rows is None or len(rows) != len(logits):
            rows = self._lmd_rows = np.zeros(len(logits), dtype=row)
            self._lmd_ids = np.arange(len(logits), dtype=np.int32)
        rows["id"] = self._lmd_ids  # the samplers sort the rows in place: lay them out again
        rows["logit"] = logits
        rows["p"] = 0.0
        data = rows.ctypes.data_as(C.llama_token_data_p)
        cur = C.llama_token_data_array(data, len(rows), -1, False)
        if grammar is not None:
            C.llama_sampler_apply(grammar, ctypes.byref(cur))
        C.llama_sampler_apply(sampler, ctypes.byref(cur))
        if not 0 <= cur.selected < cur.size:  # never read outside the rows (llama.cpp asserts)
            raise RuntimeError("the sampler chose no token")
        return int(cur.data[cur.selected].id)

    def sample(self, *args, idx=None, **kwargs):
        if self._sampler is None:  # a sample outside generate: a chain for this one token
            self._sampler = self._init_sampler(*args, **kwargs)
            try:
                return sample(self, *args, idx=idx, **kwargs)
            finally:
                self._sampler = None
        chain = self._sampler
        checker = getattr(chain, "_lmd_grammar", None)
        if checker is None:
            return full_sample(self, *args, idx=idx, **kwargs)
        ridx = idx - self.n_tokens if idx is not None else -1
        pointer = C.llama_get_logits_ith(self._ctx.ctx, ridx)
        logits = np.ctypeslib.as_array(pointer, shape=(self._n_vocab,))
        token = draw(self, chain.sampler, logits)
        one = (C.llama_token_data * 1)(C.llama_token_data(token, float(logits[token]), 0.0))
        alone = C.llama_token_data_array(one, 1, -1, False)
        C.llama_sampler_apply(checker.sampler, ctypes.byref(alone))
        if one[0].logit == float("-inf"):  # refused: draw among what the grammar allows
            token = draw(self, chain.sampler, logits, checker.sampler)
        C.llama_sampler_accept(checker.sampler, token)
        C.llama_sampler_accept(chain.sampler, token)
        return token

    Llama._init_sampler = _init_sampler
    Llama.sample = sample


def _prompt_states_kept() -> None:
    """Teach llama_cpp.Llama to keep recent sequence states and start from the best one."""
    import numpy as np
    from llama_cpp import llama
    from llama_cpp import llama_cpp as C

    Llama = llama.Llama
    needed = ("llama_state_seq_get_size", "llama_state_seq_get_data", "llama_state_seq_set_data")
    if not all(hasattr(C, name) for name in needed) or not hasattr(Llama, "generate"):
        return
    if not hasattr(Llama, "_create_completion"):
        return
    full_generate, full_completion = Llama.generate, Llama._create_completion

    def common(kept: np.ndarray, tokens: np.ndarray) -> int:
        n = min(len(kept), len(tokens))
        differ = np.flatnonzero(kept[:n] != tokens[:n])
        return int(differ[0]) if len(differ) else n

    def restore(self, tokens) -> None:
        states = getattr(self, "_lmd_states", None)
        if not states or getattr(self, "_lmd_every_row", False):
            return
        wanted = np.asarray(tokens, dtype=np.intc)
        now = common(self.input_ids[: self.n_tokens], wanted) if self.n_tokens else 0
        best, best_n = None, now + MIN_GAIN
        for key, (kept, _) in states.items():
            n = common(kept, wanted)
            if n > best_n:
                best, best_n = key, n
        if best is None:
            return
        kept, data = states[best]
        states.move_to_end(best)
        self._ctx.kv_cache_seq_rm(-1, 0, -1)
        if C.llama_state_seq_set_data(self._ctx.ctx, data, len(data), 0) != len(data):
            self._ctx.kv_cache_seq_rm(-1, 0, -1)  # a state that does not fit: read afresh
            self.n_tokens = 0
            return
        self.input_ids[: len(kept)] = kept
        self.n_tokens = len(kept)
        self._requires_eval = True  # the last row's logits are not in the state: re-read one

    def keep(self) -> None:
        n = self.n_tokens
        if n < MIN_GAIN:
            return
        states = getattr(self, "_lmd_states", None)
        if states is None:
            states = self._lmd_states = OrderedDict()
        tokens = self.input_ids[:n].astype(np.intc)
        for key, (kept, _) in list(states.items()):
            if len(kept) <= n and common(kept, tokens) == len(kept):
                del states[key]  # a beginning of this one: this one serves all it served
        size = C.llama_state_seq_get_size(self._ctx.ctx, 0)
        if not 0 < size <= STATES_KEPT_BYTES:
            return
        data = (ctypes.c_uint8 * size)()
        got = C.llama_state_seq_get_data(self._ctx.ctx, data, size, 0)
        if got != size:
            return
        states[tokens.tobytes()] = (tokens, data)
        while sum(len(d) for _, d in states.values()) > STATES_KEPT_BYTES:
            states.popitem(last=False)

    def generate(self, tokens, *args, **kwargs):
        if kwargs.get("reset", True):
            restore(self, tokens)
        return full_generate(self, tokens, *args, **kwargs)

    def _create_completion(self, *args, **kwargs):
        try:
            yield from full_completion(self, *args, **kwargs)
        finally:
            keep(self)

    Llama.generate = generate
    Llama._create_completion = _create_completion


def _logprobs_sorted_by_numpy() -> None:
    """Teach llama_cpp.llama to sort a vocabulary row's (logprob, token) pairs with numpy."""
    import builtins

    import numpy as np
    from llama_cpp import llama

    if "zip" in vars(llama) or "sorted" in vars(llama):
        return  # another version that names its own: left as it is

    class Pairs:
        """zip(row, range(len(row))) over a vocabulary row, which sorted() below recognises."""

        __slots__ = ("values",)

        def __init__(self, values) -> None:
            self.values = values

        def __iter__(self):
            return builtins.zip(self.values, range(len(self.values)), strict=True)

    def zip_(*iterables, strict=False):
        if len(iterables) == 2 and isinstance(iterables[1], range):
            values, indices = iterables
            if (
                (type(values) is list or (type(values) is np.ndarray and values.ndim == 1))
                and len(values) >= 1024
                and indices == range(len(values))
            ):
                return Pairs(values)
        return builtins.zip(*iterables, strict=strict)

    def sorted_(iterable, /, *, key=None, reverse=False):
        if type(iterable) is Pairs and key is None and reverse:
            values = np.asarray(iterable.values)
            # ascending by value, then by token id; reversed: what sorting the pairs gives
            order = np.lexsort((np.arange(len(values)), values))[::-1]
            return list(builtins.zip(values[order].tolist(), order.tolist(), strict=True))
        return builtins.sorted(iterable, key=key, reverse=reverse)

    llama.zip = zip_
    llama.sorted = sorted_


def main() -> None:
    try:
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (AttributeError, OSError):
        pass  # not Linux: the daemon stops the server on its way out
    config, daemon = sys.argv[2], int(sys.argv[3])
    if os.getppid() != daemon:
        sys.exit(0)  # the daemon died before the watch was set
    _last_rows_only()
    _grammar_checked_last()
    _prompt_states_kept()
    _logprobs_sorted_by_numpy()
    import runpy

    sys.argv = ["llama_cpp.server", "--config_file", config]
    runpy.run_module("llama_cpp.server", run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main()
