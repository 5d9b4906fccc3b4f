"""--eval-text on a checkpoint: perplexity through the checkpoint's own tokenizer.json equals
transformers' loss on the same weights, before and after quantization of zoo's copy."""

from __future__ import annotations

import math
import shutil

import pytest
import torch

import zoo

WORDS = "the a cat dog sat on mat and ran far away quickly slowly under over".split()
TEXT = " ".join(WORDS[(i * 7) % len(WORDS)] for i in range(60))


def _with_tokenizer(folder, tmp_path):
    tokenizers = pytest.importorskip("tokenizers")
    target = tmp_path / "ckpt"
    shutil.copytree(folder, target)
    vocab = {word: 3 + i for i, word in enumerate(WORDS)} | {"[UNK]": 0}
    tokenizer = tokenizers.Tokenizer(tokenizers.models.WordLevel(vocab, unk_token="[UNK]"))
    tokenizer.pre_tokenizer = tokenizers.pre_tokenizers.Whitespace()
    tokenizer.save(str(target / "tokenizer.json"))
    return target, tokenizer.encode(TEXT).ids


def test_perplexity_matches_transformers_and_survives_int8(hf_checkpoints, tmp_path):
    model, folder = hf_checkpoints["llama"]
    checkpoint, ids = _with_tokenizer(folder, tmp_path)
    text = tmp_path / "eval.txt"
    text.write_text(TEXT)
    with torch.no_grad():
        expected = math.exp(float(model(torch.tensor([ids]), labels=torch.tensor([ids])).loss))
    run = {
        "weights": str(checkpoint),
        "eval_text": str(text),
        "device": "cpu",
        "dtype": "float32",
        "prompt_len": 8,
        "gen_len": 3,
        "repeats": 1,
        "threads": 1,
    }
    plain = zoo.bench(None, **run)
    assert plain.eval_perplexity == pytest.approx(expected, rel=1e-4)
    quantized = zoo.bench(None, weights_dtype="int8", **run)
    assert quantized.eval_perplexity_reference == pytest.approx(expected, rel=1e-4)
    assert quantized.eval_perplexity == pytest.approx(expected, rel=0.02)
    assert quantized.fidelity_kl < 1e-3
