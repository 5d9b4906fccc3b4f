"""A transformers checkpoint on disk, used the way users use one: `zoo generate --weights`
and `zoo bench --weights` load it through zoo.hub (no stubs)."""

from __future__ import annotations

import json

import pytest
import torch
from tokenizers import Tokenizer, models, pre_tokenizers

from tests.hub.conftest import VOCAB, make_hf_model
from zoo.cli import main

WORDS = [f"w{i}" for i in range(VOCAB)]


@pytest.fixture(scope="module")
def qwen3_checkpoint(tmp_path_factory):
    folder = tmp_path_factory.mktemp("qwen3-ckpt")
    model = make_hf_model("qwen3")
    model.save_pretrained(folder)
    tokenizer = Tokenizer(models.WordLevel({w: i for i, w in enumerate(WORDS)}, unk_token="w0"))
    tokenizer.pre_tokenizer = pre_tokenizers.Whitespace()
    tokenizer.save(str(folder / "tokenizer.json"))
    return model, folder


def test_zoo_generate_matches_transformers_greedy(qwen3_checkpoint, capsys):
    hf_model, folder = qwen3_checkpoint
    prompt = [5, 9, 2, 77]
    with torch.no_grad():
        expected = hf_model.generate(torch.tensor([prompt]), max_new_tokens=8, do_sample=False)[0, len(prompt) :]
    assert (
        main(
            [
                "generate",
                "--weights",
                str(folder),
                " ".join(WORDS[t] for t in prompt),
                "--max-new-tokens",
                "8",
                "--device",
                "cpu",
            ]
        )
        == 0
    )
    out = capsys.readouterr().out.strip()
    assert out.split() == [WORDS[t] for t in prompt + expected.tolist()]


def test_zoo_bench_with_weights(qwen3_checkpoint, capsys):
    _, folder = qwen3_checkpoint
    argv = [
        "bench",
        "--weights",
        str(folder),
        "--json",
        "--no-save",
        "--device",
        "cpu",
        "--prompt-len",
        "8",
        "--gen-len",
        "4",
        "--repeats",
        "1",
    ]
    assert main(argv) == 0
    out = json.loads(capsys.readouterr().out)
    config = json.loads((folder / "config.json").read_text())
    assert out["params_total"] == sum(p.numel() for p in qwen3_checkpoint[0].parameters())
    assert out["kv_bytes"] == config["num_hidden_layers"] * 2 * 2 * 16 * 12 * 4  # 2 KV heads of 16, 12 slots, fp32
