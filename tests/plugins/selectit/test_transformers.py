"""SelectIT's local backend for real on CPU: tiny random models and tokenizers built here."""

from __future__ import annotations

from typing import Any

import pytest

from daemon.core.errors import LmdError
from plugins.selectit.engine import prompts_for
from plugins.selectit.prompts import TooLong, build_prompt, fit, load_templates
from plugins.selectit.scoring import final_score
from plugins.selectit.transformers_backend import TransformersRater, rating_token_ids

from .conftest import alpaca, read_jsonl, run_cli, write_jsonl
from .tiny_models import (
    byte_level_tokenizer,
    gpt2,
    llama,
    llama3_like_tokenizer,
    sentencepiece_like_tokenizer,
)

torch: Any = None  # set by local_extra: importing torch at collection cost every xdist worker 5 s


@pytest.fixture(scope="module", autouse=True)
def local_extra() -> None:
    """torch and transformers, or a skip saying how to get them."""
    global torch
    torch = pytest.importorskip(
        "torch", reason="the transformers backend needs pip install lmd[local]"
    )
    pytest.importorskip(
        "transformers", reason="the transformers backend needs pip install lmd[local]"
    )


@pytest.fixture(autouse=True)
def offline(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("TRANSFORMERS_OFFLINE", "1")
    torch.set_num_threads(1)


@pytest.fixture(scope="module")
def sp_tok():
    return sentencepiece_like_tokenizer()


@pytest.fixture(scope="module")
def bpe_tok():
    return byte_level_tokenizer()


def direct(model, tokenizer, text: str) -> list[float]:
    """The five renormalised rating probabilities computed by hand from unpadded logits."""
    ids, bridge = rating_token_ids(tokenizer)
    input_ids = torch.tensor([tokenizer.encode(text) + bridge])
    with torch.no_grad():
        logits = model(input_ids=input_ids).logits[0, -1]
    probs = torch.softmax(logits.double(), -1)[ids]
    return (probs / probs.sum()).tolist()


def test_rating_ids_survive_sentencepiece_digit_splitting(sp_tok):
    ids, bridge = rating_token_ids(sp_tok)
    assert sp_tok.convert_ids_to_tokens(ids) == ["1", "2", "3", "4", "5"]
    assert sp_tok.convert_ids_to_tokens(bridge) == ["\u2581"]
    assert len(set(ids)) == 5
    # The widely copied encode("1")[0] gives the same "▁" for every rating here.
    naive = {sp_tok.encode(d, add_special_tokens=False)[0] for d in "12345"}
    assert naive == set(bridge)


def test_rating_ids_byte_level(bpe_tok):
    ids, bridge = rating_token_ids(bpe_tok)
    assert bpe_tok.convert_ids_to_tokens(ids) == ["Ġ1", "Ġ2", "Ġ3", "Ġ4", "Ġ5"]
    assert bridge == []


def test_rating_ids_when_digits_split_from_the_space():
    tok = llama3_like_tokenizer()
    ids, bridge = rating_token_ids(tok)
    assert tok.convert_ids_to_tokens(ids) == ["1", "2", "3", "4", "5"]
    assert tok.convert_ids_to_tokens(bridge) == ["Ġ"]
    model = llama(len(tok))
    prompt = build_prompt("Rate it.", "Say hi.", "Hi.")
    (rating,) = TransformersRater(model, tok).rate_prompts([prompt])
    assert list(rating.probs) == pytest.approx(direct(model, tok, prompt.text), abs=1e-5)


def test_rating_missing_from_the_vocabulary_is_refused():
    tok = sentencepiece_like_tokenizer(digits="0124")  # never saw a "3" or a "5"
    with pytest.raises(LmdError, match="no token for the rating '3'"):
        rating_token_ids(tok)


@pytest.mark.parametrize("kind", ["llama-sentencepiece", "gpt2-bytelevel"])
def test_batched_scores_equal_a_direct_computation(kind, sp_tok, bpe_tok):
    tok, model = (
        (sp_tok, llama(len(sp_tok))) if kind.startswith("llama") else (bpe_tok, gpt2(len(bpe_tok)))
    )
    templates = load_templates()[:3]
    samples = [
        ("Say hello.", "Hello!"),
        (
            "Write a poem about cats with many words in it please.",
            "Cats sit, cats nap, cats purr all day long.",
        ),
        ("Add two numbers.", "4"),
    ]
    prompts = [build_prompt(t, i, o) for i, o in samples for t in templates]
    rater = TransformersRater(model, tok, batch_size=2, max_length=2048)
    assert rater.last_only == {"logits_to_keep": 1}  # no batch x length x vocab logits
    ratings = rater.rate_prompts(prompts, group=3)
    assert rater.forward_passes == 2 and rater.padded_tokens > 0  # left padding really happened
    for prompt, rating in zip(prompts, ratings, strict=True):
        assert list(rating.probs) == pytest.approx(direct(model, tok, prompt.text), abs=1e-5)
    # unsorted batches give the same numbers
    unsorted = TransformersRater(model, tok, batch_size=1, sort_by_length=False).rate_prompts(
        prompts, group=3
    )
    for a, b in zip(ratings, unsorted, strict=True):
        assert a.probs == pytest.approx(b.probs, abs=1e-5)


def test_a_stopped_rater_quits_between_batches(sp_tok):
    import asyncio
    import threading

    rater = TransformersRater(llama(len(sp_tok)), sp_tok, batch_size=1)
    stop = threading.Event()
    stop.set()
    with pytest.raises(asyncio.CancelledError):
        rater.rate_prompts([build_prompt("Rate.", "a", "b")] * 3, stop=stop)
    assert rater.forward_passes == 0
    assert len(rater.rate_prompts([build_prompt("Rate.", "a", "b")] * 3)) == 3


def test_long_samples_are_shortened_in_the_middle_keeping_labels_and_cue(sp_tok):
    model = llama(len(sp_tok))
    rater = TransformersRater(model, sp_tok, batch_size=4, max_length=64)
    long = build_prompt("Rate it.", "Explain why the sky is blue. " * 20, "Because. " * 30)
    short = build_prompt("Rate it.", "Hi", "Hello")
    fitted = fit(long, 64, rater.tokens)
    ids = rater.encode(fitted)
    assert len(ids) <= 64 and fitted.removed > 100
    fed = sp_tok.decode(ids, skip_special_tokens=True)
    assert fed.startswith("Rate it.\nInstruction: Explain why")
    assert "..." in fed and "\nResponse: Because." in fed  # "[", "]": unknown to this vocab
    assert fed.rstrip("\u2581 ").endswith("The answer is:")
    assert fit(short, 64, rater.tokens) is short  # fits: untouched
    assert rater.encode(short) == sp_tok.encode(short.text) + rater.bridge
    with pytest.raises(TooLong, match="more than max_length 5"):
        fit(long, 5, rater.tokens)
    with pytest.raises(LmdError, match="more than max_length 64"):
        rater.encode(long)  # never cut blindly from the end


def test_a_long_instruction_is_fed_with_its_response_and_cue(home, tmp_path, monkeypatch):
    """Issue 14 on the local backend: what the model is fed keeps Response: and the cue
    (a Llama-3-style tokenizer, as the spec's default model has)."""
    tok = llama3_like_tokenizer()
    model_dir = tmp_path / "tiny-llama3"
    llama(len(tok), seed=1).save_pretrained(model_dir)
    tok.save_pretrained(model_dir)
    fed: list[list[int]] = []
    forward = TransformersRater.forward
    monkeypatch.setattr(
        TransformersRater, "forward", lambda self, batch: fed.extend(batch) or forward(self, batch)
    )
    data = write_jsonl(
        tmp_path / "a.jsonl", [{"id": 1, "instruction": "word " * 300, "output": "ok"}]
    )
    out = tmp_path / "s.jsonl"
    r = run_cli(home, data, "-o", out, "--backend", "transformers", "--model", model_dir,
                "--max-length", 64, "--details", "--device", "cpu")  # fmt: skip
    assert r.exit_code == 0, r.stderr
    (ids,) = fed
    assert len(ids) <= 64
    text = tok.decode(ids, skip_special_tokens=True)
    assert text.startswith(load_templates()[0]) and "Instruction: word" in text
    assert " [...] " in text
    assert "\nResponse: ok\nThe answer is:" in text
    (row,) = read_jsonl(out)
    assert row["truncated"] is True and row["removed_tokens"][0] > 800  # "word": 3 tokens here
    assert "1 sample shortened in the middle to fit max_length 64" in r.stderr


def test_cli_and_route_with_a_saved_tiny_model(home, backend, tmp_path, sp_tok, make_client):
    model = llama(len(sp_tok), seed=3)
    model_dir = tmp_path / "tiny-llama"
    model.save_pretrained(model_dir)
    sp_tok.save_pretrained(model_dir)
    records = [*alpaca(5), {"instruction": "no output"}]
    data = write_jsonl(tmp_path / "a.jsonl", records)
    out = tmp_path / "s.jsonl"
    r = run_cli(
        home, data, "-o", out, "--backend", "transformers", "--model", model_dir,
        "--k", 2, "--batch-size", 2, "--alpha", 0.3, "--device", "cpu",
    )  # fmt: skip
    assert r.exit_code == 0, r.stderr
    rows = read_jsonl(out)
    assert rows[-1] == {"id": 6, "score": 3.0}
    templates = load_templates()[:2]
    from plugins.selectit.datasets import to_sample

    for row, record in zip(rows[:5], records[:5], strict=True):
        sample = to_sample(record, row["id"])
        scores = [
            sum(r * p for r, p in zip(range(1, 6), direct(model, sp_tok, p.text), strict=True))
            for p in prompts_for(sample, templates)
        ]
        assert row["score"] == pytest.approx(final_score(scores, 0.3), abs=1e-5)
    # the daemon route with the same settings gives the CLI's numbers
    client = make_client(
        selectit_backend="transformers", selectit_model=str(model_dir), selectit_k=2,
        selectit_alpha=0.3, selectit_batch_size=3,
    )  # fmt: skip
    resp = client.post("/selectit", json=records)
    assert resp.status_code == 200, resp.text
    got = resp.json()["results"]
    assert [g["id"] for g in got] == [row["id"] for row in rows]
    assert [g["score"] for g in got] == pytest.approx([row["score"] for row in rows], abs=1e-5)
    assert not backend.requests  # nothing went to the openai backend
    # prompts whose template alone is longer than max_length are skipped and counted
    r = run_cli(
        home, data, "-o", tmp_path / "cut.jsonl", "--backend", "transformers", "--model",
        model_dir, "--k", 2, "--max-length", 30,
    )  # fmt: skip
    assert r.exit_code == 0, r.stderr
    assert "5 samples could not fit max_length 30 even shortened, skipped and scored 3.0" in (
        r.stderr
    )
    cut = read_jsonl(tmp_path / "cut.jsonl")
    assert [row["score"] for row in cut] == [3.0] * 6
    assert all("more than max_length 30" in row["skipped"] for row in cut[:5])


def test_model_load_failure_is_one_clear_sentence(home, tmp_path):
    data = write_jsonl(tmp_path / "a.jsonl", alpaca(1))
    missing = tmp_path / "no-such-model"
    r = run_cli(home, data, "--backend", "transformers", "--model", missing)
    assert r.exit_code == 1
    assert f"I could not load the model '{missing}'" in r.stderr
    assert r.stderr.count("\n") == 1
    # no model given: the SelectIT spec's default, which cannot be loaded offline
    r = run_cli(home, data, "--backend", "transformers")
    assert r.exit_code == 1 and r.stderr.count("\n") == 1
    assert r.stderr == (
        "I could not load the model 'meta-llama/Llama-3.1-8B' (no such directory, and not in "
        "the Hugging Face cache); give a local model directory with --model, or download it "
        "first (huggingface-cli download meta-llama/Llama-3.1-8B).\n"
    )


def test_fallback_model_only_when_asked(home, backend, tmp_path, bpe_tok):
    model_dir = tmp_path / "tiny-gpt2"
    gpt2(len(bpe_tok)).save_pretrained(model_dir)
    bpe_tok.save_pretrained(model_dir)
    data = write_jsonl(tmp_path / "a.jsonl", alpaca(2))
    out = tmp_path / "s.jsonl"
    args = ["-o", out, "--backend", "transformers", "--model", tmp_path / "missing"]
    r = run_cli(home, data, *args, "--fallback-model", model_dir)
    assert r.exit_code == 0, r.stderr
    assert "warning: I could not load the model" in r.stderr and "Using the fallback" in r.stderr
    assert [row["id"] for row in read_jsonl(out)] == [1, 2]
    assert all(1 <= row["score"] <= 5 for row in read_jsonl(out))


def test_the_collector_is_off_only_while_a_model_loads(tmp_path, bpe_tok, monkeypatch):
    """load_model pauses Python's cyclic collector (the imports and the load make millions of
    objects) and leaves it as it found it, on success and on failure."""
    import gc

    import transformers

    from plugins.selectit.transformers_backend import load_model

    model_dir = tmp_path / "tiny-gpt2"
    gpt2(len(bpe_tok)).save_pretrained(model_dir)
    bpe_tok.save_pretrained(model_dir)
    during = []
    real = transformers.AutoModelForCausalLM.from_pretrained

    def load(*args, **kwargs):
        during.append(gc.isenabled())
        return real(*args, **kwargs)

    monkeypatch.setattr(transformers.AutoModelForCausalLM, "from_pretrained", load)
    assert gc.isenabled()
    model, tokenizer = load_model(str(model_dir), "cpu")
    assert during == [False] and gc.isenabled() and model.config.n_positions == 1024
    with pytest.raises(LmdError, match="I could not load the model"):
        load_model(str(tmp_path / "missing"), "cpu")
    assert gc.isenabled()
    gc.disable()  # a caller that turned it off keeps it off
    try:
        load_model(str(model_dir), "cpu")
        assert not gc.isenabled()
    finally:
        gc.enable()
