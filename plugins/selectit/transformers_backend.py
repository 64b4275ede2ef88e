"""Rating probabilities from a local causal LM (the spec's pipeline), via torch + transformers.

Prompts are sorted by length into batches (less padding), left-padded, and run in one forward
pass per batch; the full-vocabulary softmax at the last position gives the five ratings.
torch and transformers are imported only here, inside functions (`pip install lmd[local]`).
"""

from __future__ import annotations

import asyncio
import gc
import inspect
import sys
import threading
from collections.abc import AsyncIterator, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from daemon.api import LmdError

from .prompts import ANSWER_CUE, Prompt
from .scoring import RATINGS, Rating, renormalise


def rating_token_ids(tokenizer: Any) -> tuple[list[int], list[int]]:
    """The token ids the model emits for "1".."5" right after "The answer is:".

    Encoding "The answer is: 3" and removing the encoding of "The answer is:" leaves what the
    model must generate. GPT-2-style byte-level BPE gives one token ("Ġ3"). SentencePiece
    vocabularies that split digits give two, ["▁", "3"] (Llama-3's pre-tokenizer: ["Ġ", "3"]):
    the shared space token is a bridge, appended to every prompt, and the digit after it is
    the rating token. (The common `encode("1")[0]` returns that "▁" for all five ratings.)
    Returns (the five ids, the bridge ids).
    """
    base = tokenizer.encode(ANSWER_CUE, add_special_tokens=False)
    ids, bridges = [], set()
    unk = getattr(tokenizer, "unk_token_id", None)
    for r in RATINGS:
        digit = str(r)
        full = tokenizer.encode(f"{ANSWER_CUE} {digit}", add_special_tokens=False)
        rest = full[len(base) :] if full[: len(base)] == base else []
        if not rest or (unk is not None and rest[-1] == unk):
            raise LmdError(
                f"The model's tokenizer has no token for the rating {digit!r}; SelectIT needs "
                "a vocabulary with the digits 1 to 5."
            )
        if tokenizer.decode([rest[-1]]).strip() != digit:
            raise LmdError(
                f"The model's tokenizer spells the rating {digit!r} with several tokens "
                f"({tokenizer.convert_ids_to_tokens(rest)}); SelectIT needs one token per rating."
            )
        ids.append(rest[-1])
        bridges.add(tuple(rest[:-1]))
    if len(bridges) != 1:
        raise LmdError(
            "The model's tokenizer puts different tokens before the ratings 1 to 5; SelectIT "
            "cannot read their probabilities from one position."
        )
    if len(set(ids)) != len(RATINGS):
        raise LmdError(
            "The model's tokenizer maps two ratings to the same token; SelectIT cannot tell "
            "them apart with this model."
        )
    return ids, list(bridges.pop())


def pick_device(name: str) -> str:
    import torch  # the local extra, optional: only where a local model runs

    if name in ("", "auto"):
        return "cuda" if torch.cuda.is_available() else "cpu"
    return name


@contextmanager
def collector_paused() -> Iterator[None]:
    """Python's cyclic garbage collector off for a while. Importing torch and transformers and
    loading a model make millions of objects and few cycles: the collector's passes over them
    took a fifth of that (1.5 of 8 CPU-seconds here), in every SelectIT process and Ray worker.
    Reference counting still frees what is dropped; the collector runs again afterwards."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


def load_model(path: str, device: str = "auto") -> tuple[Any, Any]:
    """(model, tokenizer) from a local directory or a downloaded Hub id; clear error if not."""
    if not path:
        raise LmdError(
            "The transformers backend needs a model: pass --model with a local model directory."
        )
    with collector_paused():
        return _load_model(path, device)


def _load_model(path: str, device: str) -> tuple[Any, Any]:
    try:
        from transformers import AutoModelForCausalLM, AutoTokenizer
    except ImportError:
        raise LmdError(
            "The transformers backend needs torch and transformers: pip install 'lmd[local]'."
        ) from None
    # Never from the network: a Hub id loads from the local cache or fails at once (online,
    # a missing 16 GB model would start downloading; offline, the hub client retries for a
    # minute before it gives up).
    try:
        tokenizer = AutoTokenizer.from_pretrained(path, local_files_only=True)
        model = AutoModelForCausalLM.from_pretrained(path, local_files_only=True)
    except Exception as e:
        if not Path(path).expanduser().exists():
            reason = "no such directory, and not in the Hugging Face cache"
            hint = (
                ""
                if path.startswith(("/", ".", "~"))
                else (f", or download it first (huggingface-cli download {path})")
            )
        else:
            reason = str(e).strip().splitlines()[0][:200] if str(e).strip() else type(e).__name__
            hint = ""
        raise LmdError(
            f"I could not load the model {path!r} ({reason}); give a local model directory "
            f"with --model{hint}."
        ) from None
    model.to(pick_device(device))
    model.eval()
    return model, tokenizer


def _last_logits_kwarg(model: Any) -> dict:
    """Ask for the last position's logits only, where the model can (batch x length x vocab
    logits of a 128k vocabulary would take gigabytes for one batch)."""
    params = inspect.signature(model.forward).parameters
    for name in ("logits_to_keep", "num_logits_to_keep"):
        if name in params:
            return {name: 1}
    return {}


class TransformersRater:
    """Rates prompts with a local model, `batch_size` samples (times k prompts) per pass."""

    def __init__(
        self,
        model: Any,
        tokenizer: Any,
        batch_size: int = 8,
        max_length: int = 2048,
        sort_by_length: bool = True,
    ) -> None:
        self.model = model
        self.tokenizer = tokenizer
        self.batch_size = batch_size
        self.max_length = max_length
        self.sort_by_length = sort_by_length
        self.ids, self.bridge = rating_token_ids(tokenizer)
        pad = tokenizer.pad_token_id
        if pad is None:
            pad = tokenizer.eos_token_id if tokenizer.eos_token_id is not None else 0
        self.pad_id = pad
        self.last_only = _last_logits_kwarg(model)
        self.forward_passes = 0
        self.padded_tokens = 0

    @classmethod
    def load(
        cls, path: str, device: str = "auto", fallback: str = "", **kw: Any
    ) -> TransformersRater:
        """Load `path`; only when a fallback is given explicitly, try it on failure (warned)."""
        try:
            model, tokenizer = load_model(path, device)
        except LmdError as e:
            if not fallback:
                raise
            print(
                f"selectit: warning: {e.message} Using the fallback model {fallback!r}.",
                file=sys.stderr,
            )
            model, tokenizer = load_model(fallback, device)
        return cls(model, tokenizer, **kw)

    @property
    def tokens(self) -> HFTokens:
        """How prompts are counted for max_length: this model's tokenizer (see HFTokens)."""
        return HFTokens(self.tokenizer, len(self.bridge))

    def encode(self, prompt: Prompt) -> list[int]:
        """Prompt ids, plus the bridge; the prompt was fitted to max_length already (a longer
        one is an error here, never cut from the end)."""
        ids = self.tokenizer.encode(prompt.text) + self.bridge
        if len(ids) > self.max_length:
            raise LmdError(
                f"A rating prompt is {len(ids)} tokens, more than max_length {self.max_length}; "
                "fit it first (plugins.selectit.prompts.fit)."
            )
        return ids

    def rate_prompts(
        self, prompts: Sequence[Prompt], group: int = 1, stop: threading.Event | None = None
    ) -> list[Rating]:
        """Ratings in input order; `group` prompts per sample sets the batch (batch_size*k).

        Setting `stop` (from another thread) ends the work after the current batch.
        """
        encoded = [self.encode(p) for p in prompts]
        order = list(range(len(encoded)))
        if self.sort_by_length:
            order.sort(key=lambda i: len(encoded[i]))
        size = max(1, self.batch_size * group)
        out: list[Rating | None] = [None] * len(encoded)
        for start in range(0, len(order), size):
            if stop is not None and stop.is_set():
                raise asyncio.CancelledError
            chunk = order[start : start + size]
            for i, rating in zip(chunk, self.forward([encoded[i] for i in chunk]), strict=True):
                out[i] = rating
        return out  # type: ignore[return-value]

    def forward(self, batch: list[list[int]]) -> list[Rating]:
        """One left-padded forward pass; softmax over the whole vocabulary at the last token."""
        import torch  # the local extra, optional: only where a local model runs

        width = max(len(ids) for ids in batch)
        device = next(self.model.parameters()).device
        input_ids = torch.full((len(batch), width), self.pad_id, dtype=torch.long)
        mask = torch.zeros((len(batch), width), dtype=torch.long)
        for row, ids in enumerate(batch):
            input_ids[row, width - len(ids) :] = torch.tensor(ids, dtype=torch.long)
            mask[row, width - len(ids) :] = 1
        # Positions count real tokens only, so left padding does not shift them.
        positions = (mask.cumsum(-1) - 1).clamp(min=0)
        with torch.no_grad():
            logits = self.model(
                input_ids=input_ids.to(device),
                attention_mask=mask.to(device),
                position_ids=positions.to(device),
                **self.last_only,
            ).logits[:, -1, :]
        probs = torch.softmax(logits.float(), dim=-1)[:, self.ids].cpu().tolist()
        self.forward_passes += 1
        self.padded_tokens += int(width * len(batch) - mask.sum())
        return [Rating(renormalise(row)) for row in probs]  # type: ignore[arg-type]

    async def rate_samples(
        self, prompt_lists: Sequence[Sequence[Prompt]], window: int | None = None
    ) -> AsyncIterator[tuple[int, list[Rating]]]:
        """(index, ratings) per sample, a window of samples at a time (sorted within it)."""
        window = window or self.batch_size * 16
        for start in range(0, len(prompt_lists), window):
            chunk = prompt_lists[start : start + window]
            group = max(len(p) for p in chunk)
            flat = [p for prompts in chunk for p in prompts]
            stop = threading.Event()
            try:
                ratings = await asyncio.to_thread(self.rate_prompts, flat, group, stop)
            except asyncio.CancelledError:
                stop.set()  # Ctrl-C: asyncio.run waits for the thread, so let it end soon
                raise
            pos = 0
            for offset, prompts in enumerate(chunk):
                yield start + offset, ratings[pos : pos + len(prompts)]
                pos += len(prompts)


class HFTokens:
    """Counts with the model's own tokenizer: a whole prompt as it is fed (special tokens and
    the rating bridge included), a part on its own (no special tokens)."""

    def __init__(self, tokenizer: Any, extra: int = 0) -> None:
        self.tokenizer = tokenizer
        self.extra = extra

    def count(self, text: str) -> int:
        return len(self.tokenizer.encode(text)) + self.extra

    def part(self, text: str) -> int:
        return len(self.tokenizer.encode(text, add_special_tokens=False))

    def ends(self, text: str, head: int, tail: int) -> tuple[str, str]:
        tok = self.tokenizer
        ids = tok.encode(text, add_special_tokens=False)
        first = tok.decode(ids[:head], skip_special_tokens=True)
        last = tok.decode(ids[len(ids) - tail :], skip_special_tokens=True) if tail else ""
        return first, last
