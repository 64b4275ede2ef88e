"""Tiny causal LMs and tokenizers built in memory (no downloads), for SelectIT's local backend.

Two tokenizers, as real models have them: a byte-level BPE (GPT-2 style, " 3" is one
token "Ġ3") and a SentencePiece-like one (Llama-2/Mistral style: Metaspace "▁" and digits split
off, so " 3" is ["▁", "3"]).
"""

from __future__ import annotations

import random

WORDS = (
    "the answer is rate how well response follows instruction on a scale from very poor to "
    "excellent with single digit judge data quality task done write add two numbers say hello "
    "please explain why sky blue poem about cats list three fruits translate into french"
).split()


def corpus(digits: str = "0123456789", n: int = 300, seed: int = 0) -> list[str]:
    """Sentences resembling rating prompts, so BPE learns "The answer is:" and the digits."""
    rng = random.Random(seed)
    out = []
    for i in range(n):
        words = " ".join(rng.choice(WORDS) for _ in range(rng.randint(3, 12)))
        d = digits[i % len(digits)]
        out.append(f"Instruction: {words.capitalize()}.\nResponse: {words} {d}\nThe answer is: {d}")
    return out


def byte_level_tokenizer():
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=700,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        special_tokens=["<|endoftext|>"],
        show_progress=False,
    )
    tok.train_from_iterator(corpus(), trainer)
    return PreTrainedTokenizerFast(
        tokenizer_object=tok, eos_token="<|endoftext|>", bos_token="<|endoftext|>"
    )


# Llama-3's pre-tokenizer pattern: digits are split off in groups of up to three, without the
# space before them, so " 3" becomes "Ġ" and "3".
LLAMA3_PATTERN = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
    r"|\s*[\r\n]+|\s+(?!\S)|\s+"
)


def llama3_like_tokenizer():
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(LLAMA3_PATTERN), behavior="isolated"),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=700,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        special_tokens=["<|begin_of_text|>"],
        show_progress=False,
    )
    tok.train_from_iterator(corpus(), trainer)
    return PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<|begin_of_text|>",
                                   eos_token="<|begin_of_text|>")  # fmt: skip


def sentencepiece_like_tokenizer(digits: str = "0123456789"):
    """Metaspace "▁" with individually split digits; a BOS is added like Llama-2's."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Metaspace(replacement="\u2581", prepend_scheme="first"),
            pre_tokenizers.Digits(individual_digits=True),
        ]
    )
    tok.decoder = decoders.Metaspace(replacement="\u2581", prepend_scheme="first")
    trainer = trainers.BpeTrainer(
        vocab_size=300, special_tokens=["<unk>", "<s>", "</s>"], show_progress=False
    )
    tok.train_from_iterator(corpus(digits), trainer)
    tok.post_processor = processors.TemplateProcessing(
        single="<s> $A", special_tokens=[("<s>", tok.token_to_id("<s>"))]
    )
    return PreTrainedTokenizerFast(
        tokenizer_object=tok, unk_token="<unk>", bos_token="<s>", eos_token="</s>"
    )


def llama(vocab_size: int, seed: int = 0, hidden: int = 32, layers: int = 2):
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    config = LlamaConfig(
        vocab_size=vocab_size,
        hidden_size=hidden,
        intermediate_size=hidden * 2,
        num_hidden_layers=layers,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=4096,
    )
    return LlamaForCausalLM(config).eval()


def gpt2(vocab_size: int, seed: int = 0):
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(seed)
    config = GPT2Config(vocab_size=vocab_size, n_positions=1024, n_embd=32, n_layer=2, n_head=4)
    return GPT2LMHeadModel(config).eval()
