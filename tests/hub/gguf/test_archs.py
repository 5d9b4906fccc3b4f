"""GGUF files of every architecture zoo reads: logits equal transformers' on the same weights,
and zoo's from the Hugging Face folder, in float32 (F32 tensors)."""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

import pytest
import torch

import zoo
from tests.hub.conftest import COMMON, CONFIGS, VOCAB
from tests.hub.gguf_files import write_gguf

pytest.importorskip("gguf")

# llama.cpp's llama architecture has no sliding window (Mistral converts to it without one),
# Gemma 3's layer pattern is fixed at every 6th layer global and its query scale at head_dim
# (as in the published checkpoints but for the 27B one)
GGUF_CONFIGS: dict[str, tuple[str, dict[str, Any]]] = {
    "llama": CONFIGS["llama"],
    "mistral": ("MistralConfig", {**COMMON, "intermediate_size": 96, "sliding_window": None}),
    "qwen2": ("Qwen2Config", {**COMMON, "intermediate_size": 96, "tie_word_embeddings": True}),
    "qwen3": CONFIGS["qwen3"],
    "qwen3_moe": CONFIGS["qwen3_moe"],
    "gemma3_text": (
        "Gemma3TextConfig",
        {
            **COMMON,
            "num_key_value_heads": 1,
            "intermediate_size": 96,
            "sliding_window": 8,
            "num_hidden_layers": 6,
            "query_pre_attn_scalar": 16,
        },
    ),
    "gpt_oss": CONFIGS["gpt_oss"],
}


def make_model(family: str, seed: int = 0) -> Any:
    transformers = pytest.importorskip("transformers")
    transformers.logging.set_verbosity_error()
    cls_name, kwargs = GGUF_CONFIGS[family]
    config = getattr(transformers, cls_name)(**kwargs)
    torch.manual_seed(seed)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = transformers.AutoModelForCausalLM.from_config(config, dtype=torch.float32).eval()
    with torch.no_grad():
        for param in model.parameters():
            param.add_(torch.randn_like(param) * 0.05)
    return model


@pytest.mark.parametrize("family", list(GGUF_CONFIGS))
def test_gguf_logits_match_transformers_and_the_hf_folder(family: str, tmp_path: Path) -> None:
    hf_model = make_model(family)
    hf_model.save_pretrained(tmp_path / "hf")
    path = write_gguf(tmp_path / "model.gguf", hf_model)
    model = zoo.from_pretrained(path, progress=False)
    from_folder = zoo.from_pretrained(tmp_path / "hf", progress=False)
    ids = torch.randint(0, VOCAB, (2, 20), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        expected = hf_model(ids).logits
        got = model(ids)
        folder_logits = from_folder(ids)
    assert (got - expected).abs().max().item() < 1e-4
    assert (got - folder_logits).abs().max().item() < 1e-4
    assert model.spec.n_layers == hf_model.config.num_hidden_layers


def test_folder_holding_one_gguf_and_the_requested_dtype(tmp_path: Path) -> None:
    hf_model = make_model("qwen3")
    write_gguf(tmp_path / "only.gguf", hf_model)
    model = zoo.from_pretrained(tmp_path, dtype="bfloat16", progress=False)
    assert model.embed.weight.dtype == torch.bfloat16
    assert model.hf_model_type == "qwen3"


@pytest.mark.parametrize("family", ["llama", "qwen2", "gemma3_text"])
def test_a_gguf_model_saves_as_the_hf_checkpoint_it_came_from(family: str, tmp_path: Path) -> None:
    transformers = pytest.importorskip("transformers")
    hf_model = make_model(family)
    model = zoo.from_pretrained(write_gguf(tmp_path / "model.gguf", hf_model), progress=False)
    zoo.save_pretrained(model, tmp_path / "saved")
    reloaded = transformers.AutoModelForCausalLM.from_pretrained(tmp_path / "saved", dtype=torch.float32).eval()
    ids = torch.randint(0, VOCAB, (1, 12), generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        assert (reloaded(ids).logits - hf_model(ids).logits).abs().max().item() < 1e-4
