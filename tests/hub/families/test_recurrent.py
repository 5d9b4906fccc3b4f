"""qwen3_next and mamba2 checkpoints: logits and greedy tokens against transformers' torch
path, save_pretrained read back by transformers, and the real configs giving the presets."""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

import pytest
import torch

import zoo
from tests.hub.test_loading import zoo_greedy
from zoo.analysis.counts import state_bytes
from zoo.errors import CheckpointError
from zoo.hub.config import spec_from_hf_config

VOCAB, PROMPT_LEN, NEW_TOKENS = 128, 12, 24
COMMON = dict(vocab_size=VOCAB, hidden_size=64, bos_token_id=None, eos_token_id=None, pad_token_id=None)
CONFIGS: dict[str, tuple[str, dict[str, Any]]] = {
    # 4 layers: three Gated DeltaNet, one gated attention; layer 1 a dense MLP, the others MoE
    "qwen3_next": (
        "Qwen3NextConfig",
        {
            **COMMON,
            "num_hidden_layers": 4,
            "num_attention_heads": 4,
            "num_key_value_heads": 2,
            "head_dim": 16,
            "max_position_embeddings": 128,
            "linear_num_key_heads": 2,
            "linear_num_value_heads": 4,
            "linear_key_head_dim": 8,
            "linear_value_head_dim": 8,
            "num_experts": 4,
            "num_experts_per_tok": 2,
            "moe_intermediate_size": 16,
            "shared_expert_intermediate_size": 24,
            "intermediate_size": 48,
            "mlp_only_layers": [1],
        },
    ),
    # 2 layers, 4 heads of 16 in 2 B/C groups, chunks of 16 so 70 tokens span several
    "mamba2": (
        "Mamba2Config",
        {
            **COMMON,
            "num_hidden_layers": 2,
            "num_heads": 8,
            "head_dim": 16,
            "expand": 2,
            "n_groups": 2,
            "state_size": 8,
            "chunk_size": 16,
            "tie_word_embeddings": True,
        },
    ),
}
QWEN3_NEXT_80B = {  # https://huggingface.co/Qwen/Qwen3-Next-80B-A3B-Instruct/blob/main/config.json
    "architectures": ["Qwen3NextForCausalLM"],
    "attention_bias": False,
    "attention_dropout": 0.0,
    "bos_token_id": 151643,
    "decoder_sparse_step": 1,
    "eos_token_id": 151645,
    "full_attention_interval": 4,
    "head_dim": 256,
    "hidden_act": "silu",
    "hidden_size": 2048,
    "initializer_range": 0.02,
    "intermediate_size": 5120,
    "linear_conv_kernel_dim": 4,
    "linear_key_head_dim": 128,
    "linear_num_key_heads": 16,
    "linear_num_value_heads": 32,
    "linear_value_head_dim": 128,
    "max_position_embeddings": 262144,
    "mlp_only_layers": [],
    "model_type": "qwen3_next",
    "moe_intermediate_size": 512,
    "norm_topk_prob": True,
    "num_attention_heads": 16,
    "num_experts": 512,
    "num_experts_per_tok": 10,
    "num_hidden_layers": 48,
    "num_key_value_heads": 2,
    "output_router_logits": False,
    "partial_rotary_factor": 0.25,
    "rms_norm_eps": 1e-06,
    "rope_scaling": None,
    "rope_theta": 10000000,
    "router_aux_loss_coef": 0.001,
    "shared_expert_intermediate_size": 512,
    "tie_word_embeddings": False,
    "torch_dtype": "bfloat16",
    "transformers_version": "4.57.0.dev0",
    "use_cache": True,
    "use_sliding_window": False,
    "vocab_size": 151936,
}


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[Any, Path]]:
    transformers = pytest.importorskip("transformers")
    transformers.logging.set_verbosity_error()
    saved = {}
    for family, (cls_name, kwargs) in CONFIGS.items():
        torch.manual_seed(0)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            model = transformers.AutoModelForCausalLM.from_config(
                getattr(transformers, cls_name)(**kwargs), dtype=torch.float32
            ).eval()
        with torch.no_grad():
            for param in model.parameters():
                param.add_(torch.randn_like(param) * 0.05)
        folder = tmp_path_factory.mktemp(family)
        model.save_pretrained(folder)
        saved[family] = (model, folder)
    return saved


@pytest.mark.parametrize("family", CONFIGS)
def test_logits_and_greedy_decoding_match_transformers(family: str, checkpoints) -> None:  # type: ignore[no-untyped-def]
    hf_model, folder = checkpoints[family]
    model = zoo.from_pretrained(folder, dtype="float32", progress=False)
    assert model.hf_model_type == family
    ids = torch.randint(0, VOCAB, (2, 70), generator=torch.Generator().manual_seed(0))  # past one 64-token chunk
    with torch.no_grad():
        assert (model(ids) - hf_model(ids).logits).abs().max().item() < 1e-4
    prompt = torch.randint(0, VOCAB, (2, PROMPT_LEN), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        reference = hf_model.generate(
            prompt,
            attention_mask=torch.ones_like(prompt),
            max_new_tokens=NEW_TOKENS,
            min_new_tokens=NEW_TOKENS,
            do_sample=False,
            pad_token_id=0,
        )[:, PROMPT_LEN:]
    assert torch.equal(zoo_greedy(model, prompt, NEW_TOKENS), reference)


@pytest.mark.parametrize("family", CONFIGS)
def test_round_trip_through_transformers(family: str, checkpoints, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    transformers = pytest.importorskip("transformers")
    _, folder = checkpoints[family]
    model = zoo.from_pretrained(folder, progress=False)
    zoo.save_pretrained(model, tmp_path)
    reloaded = transformers.AutoModelForCausalLM.from_pretrained(tmp_path).eval()
    ids = torch.randint(0, VOCAB, (2, 20), generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        assert (reloaded(ids).logits - model(ids)).abs().max().item() < 1e-4
    again = zoo.from_pretrained(tmp_path, progress=False)  # and zoo reads its own checkpoint
    with torch.no_grad():
        assert torch.equal(again(ids), model(ids))


def test_real_qwen3_next_config_gives_the_preset_and_its_count() -> None:
    spec = spec_from_hf_config(QWEN3_NEXT_80B)
    preset = zoo.spec("qwen3-next-80b-a3b")
    for i in range(preset.n_layers):
        for family in ("norm", "positional", "attention", "ffn", "block"):
            assert getattr(spec.layer(i), family).to_dict() == getattr(preset.layer(i), family).to_dict(), (i, family)
    assert zoo.count_params(spec).total == 79_674_391_296


@pytest.mark.parametrize(
    ("update", "message"),
    [
        ({"layer_types": ["linear_attention", "sliding_attention"]}, "layer_types"),
        ({"hidden_act": "gelu"}, "hidden_act"),
        ({"linear_num_value_heads": 33}, "n_v_heads"),
        ({"some_new_field": 1}, "some_new_field"),
    ],
)
def test_unsupported_qwen3_next_fields_are_named(update: dict[str, Any], message: str) -> None:
    with pytest.raises(CheckpointError, match=message):
        spec_from_hf_config({**QWEN3_NEXT_80B, **update})


MAMBA2_130M = {  # AntonV/mamba2-130m-hf, transformers' conversion of state-spaces/mamba2-130m
    "architectures": ["Mamba2ForCausalLM"],
    "model_type": "mamba2",
    "hidden_size": 768,
    "num_hidden_layers": 24,
    "vocab_size": 50288,
    "num_heads": 24,
    "head_dim": 64,
    "expand": 2,
    "n_groups": 1,
    "state_size": 128,
    "conv_kernel": 4,
    "chunk_size": 256,
    "use_bias": False,
    "use_conv_bias": True,
    "layer_norm_epsilon": 1e-05,
    "hidden_act": "silu",
    "residual_in_fp32": True,
    "rescale_prenorm_residual": False,
    "time_step_rank": 48,
    "time_step_min": 0.001,
    "time_step_max": 0.1,
    "time_step_floor": 0.0001,
    "time_step_limit": [0.0, float("inf")],
    "tie_word_embeddings": True,
    "initializer_range": 0.1,
    "bos_token_id": 0,
    "eos_token_id": 0,
    "pad_token_id": 0,
}


def test_mamba2_130m_config_gives_the_preset_its_count_and_state_bytes() -> None:
    spec = spec_from_hf_config(MAMBA2_130M)
    preset = zoo.spec("mamba2-130m")
    for family in ("norm", "positional", "attention", "ffn", "block"):
        assert getattr(spec.layer(0), family).to_dict() == getattr(preset.layer(0), family).to_dict(), family
    assert zoo.count_params(preset).total == zoo.count_params(spec).total == 128_989_632
    # per layer: conv window (1536 + 2 * 128, 4) and SSM state (24, 64, 128), float32
    assert state_bytes(preset, dtype="float32") == 24 * (1792 * 4 + 24 * 64 * 128) * 4 == 19_562_496


def test_mamba2_heads_must_fill_the_inner_width() -> None:
    with pytest.raises(CheckpointError, match="num_heads"):
        spec_from_hf_config({**MAMBA2_130M, "num_heads": 20})
