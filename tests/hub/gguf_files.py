"""Test-side GGUF writer: a tiny transformers model -> a GGUF file laid out as llama.cpp's
``convert_hf_to_gguf.py`` lays it out (names, metadata keys, llama's q/k row permutation,
Gemma 3's ``norm + 1``, gpt-oss's de-interleaved experts), written with ``gguf.GGUFWriter``.

It is written independently of zoo's reader so that the parity tests check zoo against
llama.cpp's conventions, not against itself.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

gguf = pytest.importorskip("gguf")

RENAMES = [
    (r"model\.embed_tokens\.weight", "token_embd.weight"),
    (r"model\.norm\.weight", "output_norm.weight"),
    (r"lm_head\.weight", "output.weight"),
    (r"model\.layers\.(\d+)\.input_layernorm\.weight", r"blk.\1.attn_norm.weight"),
    (r"model\.layers\.(\d+)\.post_attention_layernorm\.weight", r"blk.\1.ffn_norm.weight"),
    (r"model\.layers\.(\d+)\.pre_feedforward_layernorm\.weight", r"blk.\1.ffn_norm.weight"),
    (r"model\.layers\.(\d+)\.post_feedforward_layernorm\.weight", r"blk.\1.post_ffw_norm.weight"),
    (r"model\.layers\.(\d+)\.self_attn\.(q|k|v)_proj\.(weight|bias)", r"blk.\1.attn_\2.\3"),
    (r"model\.layers\.(\d+)\.self_attn\.o_proj\.(weight|bias)", r"blk.\1.attn_output.\2"),
    (r"model\.layers\.(\d+)\.self_attn\.(q|k)_norm\.weight", r"blk.\1.attn_\2_norm.weight"),
    (r"model\.layers\.(\d+)\.self_attn\.sinks", r"blk.\1.attn_sinks.weight"),
    (r"model\.layers\.(\d+)\.mlp\.(gate|up|down)_proj\.weight", r"blk.\1.ffn_\2.weight"),
    (r"model\.layers\.(\d+)\.mlp\.gate\.weight", r"blk.\1.ffn_gate_inp.weight"),
    (r"model\.layers\.(\d+)\.mlp\.router\.(weight|bias)", r"blk.\1.ffn_gate_inp.\2"),
]
# Gemma 3 and gpt-oss name transformers' post_attention_layernorm post_attention_norm
POST_ATTENTION = (r"model\.layers\.(\d+)\.post_attention_layernorm\.weight", r"blk.\1.post_attention_norm.weight")
ARCH = {
    "llama": "llama",
    "mistral": "llama",
    "qwen2": "qwen2",
    "qwen3": "qwen3",
    "qwen3_moe": "qwen3moe",
    "gemma3_text": "gemma3",
    "gpt_oss": "gpt-oss",
}


def llama_permute(w: torch.Tensor, n_head: int) -> torch.Tensor:
    """convert_hf_to_gguf.py's LlamaModel.permute: rotate-half rows -> interleaved pairs."""
    return w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def _experts(state: dict[str, torch.Tensor], model_type: str) -> dict[str, torch.Tensor]:
    """Stacked expert tensors (E, out, in) and their biases, named as llama.cpp names them."""
    out = {}
    for name in list(state):
        m = re.fullmatch(r"model\.layers\.(\d+)\.mlp\.experts\.gate_up_proj", name)
        if not m:
            continue
        i, p = m.group(1), f"model.layers.{m.group(1)}.mlp.experts"
        gate_up, down = state.pop(name), state.pop(f"{p}.down_proj")
        if model_type == "gpt_oss":  # (E, d, 2F), gate even columns, up odd
            gate, up = gate_up[:, :, 0::2].transpose(1, 2), gate_up[:, :, 1::2].transpose(1, 2)
            down = down.transpose(1, 2)  # (E, F, d) -> (E, d, F)
            bias = state.pop(f"{p}.gate_up_proj_bias")
            out[f"blk.{i}.ffn_gate_exps.bias"], out[f"blk.{i}.ffn_up_exps.bias"] = bias[:, 0::2], bias[:, 1::2]
            out[f"blk.{i}.ffn_down_exps.bias"] = state.pop(f"{p}.down_proj_bias")
        else:  # transformers 5: (E, 2F, d) = [gate; up]
            gate, up = gate_up.chunk(2, dim=1)
        out[f"blk.{i}.ffn_gate_exps.weight"], out[f"blk.{i}.ffn_up_exps.weight"] = gate, up
        out[f"blk.{i}.ffn_down_exps.weight"] = down
    return out


def gguf_tensors(model: Any) -> dict[str, torch.Tensor]:
    """GGUF name -> float32 tensor in llama.cpp's layout (PyTorch shape order)."""
    config = model.config
    state = {k: v.detach().float().clone() for k, v in model.state_dict().items()}
    if getattr(config, "tie_word_embeddings", False):
        state.pop("lm_head.weight", None)
    out = _experts(state, config.model_type)
    renames = ([POST_ATTENTION] if config.model_type in ("gemma3_text", "gpt_oss") else []) + RENAMES
    for name, value in state.items():
        target = next(re.sub(p, t, name) for p, t in renames if re.fullmatch(p, name))
        if config.model_type in ("llama", "mistral") and re.search(r"attn_q\.", target):
            value = llama_permute(value, config.num_attention_heads)
        if config.model_type in ("llama", "mistral") and re.search(r"attn_k\.", target):
            value = llama_permute(value, config.num_key_value_heads)
        if config.model_type == "gemma3_text" and name.endswith("norm.weight"):
            value = value + 1  # Gemma3RMSNorm's (1 + w), folded in by the converter
        out[target] = value
    factors = llama3_rope_factors(config) if config.model_type == "llama" else None
    if factors is not None:
        out["rope_freqs.weight"] = factors
    return out


def llama3_rope_factors(config: Any) -> torch.Tensor | None:
    """The rope_freqs tensor convert_hf_to_gguf.py writes for Llama 3's RoPE scaling."""
    rope = dict(config.rope_parameters or {})
    if rope.get("rope_type") != "llama3":
        return None
    dim = config.head_dim
    freqs = 1.0 / (rope["rope_theta"] ** (torch.arange(0, dim, 2, dtype=torch.float32) / dim))
    factor, low, high = rope["factor"], rope["low_freq_factor"], rope["high_freq_factor"]
    old = rope["original_max_position_embeddings"]
    factors = []
    for freq in freqs.tolist():
        wavelen = 2 * math.pi / freq
        if wavelen < old / high:
            factors.append(1.0)
        elif wavelen > old / low:
            factors.append(factor)
        else:
            smooth = (old / wavelen - low) / (high - low)
            factors.append(1 / ((1 - smooth) / factor + smooth))
    return torch.tensor(factors, dtype=torch.float32)


def _metadata(w: Any, config: Any) -> None:
    mt = config.model_type
    w.add_block_count(config.num_hidden_layers)
    w.add_context_length(config.max_position_embeddings)
    w.add_embedding_length(config.hidden_size)
    w.add_head_count(config.num_attention_heads)
    w.add_head_count_kv(config.num_key_value_heads)
    w.add_key_length(config.head_dim)
    w.add_value_length(config.head_dim)
    w.add_layer_norm_rms_eps(config.rms_norm_eps)
    rope = dict(config.rope_parameters or {})
    if mt == "gemma3_text":
        rope = rope.get("full_attention", rope)
        w.add_rope_freq_base_swa(config.rope_parameters["sliding_attention"]["rope_theta"])
    w.add_rope_freq_base(rope["rope_theta"])
    if rope.get("rope_type") == "yarn":
        w.add_rope_scaling_type(gguf.RopeScalingType.YARN)
        w.add_rope_scaling_factor(rope["factor"])
        w.add_rope_scaling_orig_ctx_len(rope["original_max_position_embeddings"])
    if mt in ("qwen3_moe", "gpt_oss"):
        w.add_expert_count(getattr(config, "num_experts", None) or config.num_local_experts)
        w.add_expert_used_count(config.num_experts_per_tok)
        w.add_expert_feed_forward_length(
            config.moe_intermediate_size if mt == "qwen3_moe" else config.intermediate_size
        )
    if mt != "gpt_oss":
        w.add_feed_forward_length(config.intermediate_size)
    if mt in ("gemma3_text", "gpt_oss", "mistral") and config.sliding_window:
        w.add_sliding_window(config.sliding_window)


def write_gguf(
    path: Path,
    model: Any,
    tensors: dict[str, torch.Tensor] | None = None,
    encode: Callable[[str, torch.Tensor], tuple[np.ndarray, Any]] | None = None,
    vocab: Callable[[Any], None] | None = None,
) -> Path:
    """Write ``model`` (or these GGUF-layout ``tensors``) as a GGUF; ``encode`` may turn a
    tensor into (raw quantized bytes, GGMLQuantizationType)."""
    config = model.config
    w = gguf.GGUFWriter(str(path), ARCH[config.model_type])
    w.add_name(f"tiny-{config.model_type}")
    _metadata(w, config)
    if vocab is not None:
        vocab(w)
    for name, value in (tensors if tensors is not None else gguf_tensors(model)).items():
        if encode is not None:
            raw, qtype = encode(name, value)
            w.add_tensor(name, raw, raw_dtype=qtype)
        else:
            w.add_tensor(name, value.numpy().astype(np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path
