"""The embedded model's server process: llama-cpp-python's OpenAI-compatible server, with the
logits of only the positions that are read.

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
(`echo` with `logprobs`) gets every row computed, from a cleared cache. No lmd import here:
this runs in a bare interpreter.
"""

import ctypes
import os
import signal
import sys


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


def main() -> None:
    try:
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (AttributeError, OSError):
        pass  # not Linux: the daemon stops the server on its way out
    config, daemon = sys.argv[2], int(sys.argv[3])
    if os.getppid() != daemon:
        sys.exit(0)  # the daemon died before the watch was set
    _last_rows_only()
    import runpy

    sys.argv = ["llama_cpp.server", "--config_file", config]
    runpy.run_module("llama_cpp.server", run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main()
