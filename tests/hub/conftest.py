"""Tiny random transformers models of every supported family, saved once per test session."""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

import pytest
import torch

VOCAB = 128
COMMON = dict(
    hidden_size=64,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    vocab_size=VOCAB,
    head_dim=16,
    bos_token_id=None,
    eos_token_id=None,
    pad_token_id=None,
    max_position_embeddings=128,
)
MAMBA = dict(
    hidden_size=64,
    num_hidden_layers=2,
    vocab_size=VOCAB,
    state_size=8,
    conv_kernel=4,
    expand=2,
    bos_token_id=None,
    eos_token_id=None,
    pad_token_id=None,
)

# windows of 8 so that 20-token prompts and 32 decode steps cross them
CONFIGS: dict[str, tuple[str, dict[str, Any]]] = {
    "gpt2": (
        "GPT2Config",
        dict(n_embd=64, n_layer=2, n_head=4, vocab_size=VOCAB, n_positions=128, bos_token_id=None, eos_token_id=None),
    ),
    "llama": (
        "LlamaConfig",
        {
            **COMMON,
            "intermediate_size": 96,
            "tie_word_embeddings": True,
            "rope_parameters": {
                "rope_type": "llama3",
                "rope_theta": 500000.0,
                "factor": 32.0,
                "low_freq_factor": 1.0,
                "high_freq_factor": 4.0,
                "original_max_position_embeddings": 16,
            },
        },
    ),
    "mistral": ("MistralConfig", {**COMMON, "intermediate_size": 96, "sliding_window": 8}),
    "mixtral": ("MixtralConfig", {**COMMON, "intermediate_size": 48, "num_local_experts": 4, "num_experts_per_tok": 2}),
    "qwen3": ("Qwen3Config", {**COMMON, "intermediate_size": 96, "tie_word_embeddings": True}),
    "qwen3_moe": (
        "Qwen3MoeConfig",
        {
            **COMMON,
            "intermediate_size": 96,
            "moe_intermediate_size": 32,
            "num_experts": 4,
            "num_experts_per_tok": 2,
            "norm_topk_prob": True,
        },
    ),
    "gpt_oss": (
        "GptOssConfig",
        {
            **COMMON,
            "intermediate_size": 32,
            "num_local_experts": 4,
            "num_experts_per_tok": 2,
            "sliding_window": 8,
            "rope_parameters": {
                "rope_type": "yarn",
                "rope_theta": 150000.0,
                "factor": 32.0,
                "beta_fast": 32.0,
                "beta_slow": 1.0,
                "original_max_position_embeddings": 16,
                "truncate": False,
            },
        },
    ),
    "gemma3_text": (
        "Gemma3TextConfig",
        {
            **COMMON,
            "num_key_value_heads": 1,
            "intermediate_size": 96,
            "sliding_window": 8,
            "layer_types": ["sliding_attention", "full_attention"],
        },
    ),
    "mamba": ("MambaConfig", MAMBA),
    "falcon_mamba": ("FalconMambaConfig", {**MAMBA, "mixer_rms_eps": 1e-6}),
}
FAMILIES = list(CONFIGS)


def make_hf_model(family: str, seed: int = 0):  # type: ignore[no-untyped-def]
    """A random transformers model; weights perturbed so norms and biases are not trivial."""
    transformers = pytest.importorskip("transformers")
    transformers.logging.set_verbosity_error()
    cls_name, kwargs = CONFIGS[family]
    config = getattr(transformers, cls_name)(**kwargs)
    torch.manual_seed(seed)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = transformers.AutoModelForCausalLM.from_config(config, dtype=torch.float32).eval()
    with torch.no_grad():
        for param in model.parameters():
            param.add_(torch.randn_like(param) * 0.05)
    return model


@pytest.fixture(scope="session")
def hf_checkpoints(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[Any, Path]]:
    """family -> (transformers model, folder it was saved to); built lazily, once."""
    return _LazyCheckpoints(tmp_path_factory)


class _LazyCheckpoints(dict):  # type: ignore[type-arg]
    def __init__(self, factory: pytest.TempPathFactory) -> None:
        super().__init__()
        self.factory = factory

    def __missing__(self, family: str) -> tuple[Any, Path]:
        model = make_hf_model(family)
        folder = self.factory.mktemp(family)
        model.save_pretrained(folder)
        self[family] = (model, folder)
        return self[family]
