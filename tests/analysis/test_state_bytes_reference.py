"""State bytes against transformers' own caches: a tiny Mamba, Mamba2 and Qwen3-Next built
from the same config by both, transformers' cache allocated by a forward with
``use_cache=True`` and its tensors' nbytes summed (conv windows in the model's dtype,
recurrent states in float32), in float32 and bfloat16."""

from __future__ import annotations

import pytest
import torch
import transformers

from zoo.analysis.counts import cache_bytes, state_bytes
from zoo.hub.config import spec_from_hf_config

MAMBA = {
    "model_type": "mamba",
    "vocab_size": 64,
    "hidden_size": 32,
    "state_size": 8,
    "num_hidden_layers": 2,
    "conv_kernel": 4,
    "expand": 2,
    "architectures": ["MambaForCausalLM"],
}
MAMBA2 = {
    "model_type": "mamba2",
    "vocab_size": 64,
    "hidden_size": 32,
    "state_size": 8,
    "num_hidden_layers": 2,
    "conv_kernel": 4,
    "expand": 2,
    "num_heads": 4,
    "head_dim": 16,
    "n_groups": 1,
    "chunk_size": 8,
    "architectures": ["Mamba2ForCausalLM"],
}
QWEN3_NEXT = {
    "model_type": "qwen3_next",
    "vocab_size": 64,
    "hidden_size": 32,
    "num_hidden_layers": 4,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 8,
    "intermediate_size": 64,
    "moe_intermediate_size": 16,
    "shared_expert_intermediate_size": 16,
    "num_experts": 4,
    "num_experts_per_tok": 2,
    "linear_num_key_heads": 2,
    "linear_num_value_heads": 4,
    "linear_key_head_dim": 8,
    "linear_value_head_dim": 8,
    "linear_conv_kernel_dim": 4,
    "full_attention_interval": 4,
    "max_position_embeddings": 128,
    "architectures": ["Qwen3NextForCausalLM"],
}
CLASSES = {
    "mamba": ("MambaConfig", "MambaForCausalLM"),
    "mamba2": ("Mamba2Config", "Mamba2ForCausalLM"),
    "qwen3_next": ("Qwen3NextConfig", "Qwen3NextForCausalLM"),
}


def transformers_state_bytes(config: dict, dtype: torch.dtype) -> int:
    """Sum of nbytes of transformers' conv and recurrent state tensors after one forward."""
    config_class, model_class = (getattr(transformers, name) for name in CLASSES[config["model_type"]])
    fields = {k: v for k, v in config.items() if k not in ("model_type", "architectures")}
    model = model_class(config_class(**fields)).to(dtype).eval()
    with torch.no_grad():
        out = model(torch.tensor([[1, 2, 3]]), use_cache=True)
    cache = getattr(out, "cache", None) or out.past_key_values
    total = 0
    for layer in cache.layers:
        for name in ("conv_states", "recurrent_states"):
            total += sum(t.nbytes for t in (getattr(layer, name, None) or {}).values() if t is not None)
    return total


@pytest.mark.parametrize("config", [MAMBA, MAMBA2, QWEN3_NEXT], ids=lambda c: c["model_type"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
def test_state_bytes_equal_what_transformers_allocates(config, dtype):
    spec = spec_from_hf_config(config)
    assert state_bytes(spec, 1, dtype) == transformers_state_bytes(config, dtype)


def test_states_in_the_cache_dtype_when_the_spec_says_so():
    spec = spec_from_hf_config(MAMBA2).model_copy(update={"state_dtype": "cache"})
    # hand count: 2 layers x (conv (64 + 2 x 8 channels) x 4 taps + ssm 4 heads x 16 x 8), 2 bytes each
    assert cache_bytes(spec, 1, 1, 0, torch.bfloat16).sequence == 2 * (80 * 4 + 4 * 16 * 8) * 2
