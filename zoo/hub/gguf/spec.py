"""GGUF metadata -> ModelSpec, through the Hugging Face config it was converted from.

llama.cpp's ``convert_hf_to_gguf.py`` writes a model's hyperparameters as ``{arch}.*`` keys;
each function here writes them back as the config.json transformers would read, and
``zoo.hub.config.spec_from_hf_config`` turns that into a spec. One mapping (HF config ->
spec) therefore serves both formats, and what llama.cpp hard-codes per architecture (Gemma
3's local RoPE base and layer pattern, gpt-oss's alternating windows) is written here once.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np
import torch

from zoo.components.rope import RopeScaling, rope_frequencies
from zoo.errors import CheckpointError, allowed
from zoo.hub.config import spec_from_hf_config
from zoo.hub.gguf.reader import MAX_INT, GGUFCheckpoint
from zoo.specs.model import MAX_LAYERS, ModelSpec


def _f32(value: float) -> float:
    """A float32 metadata value as the decimal it was written from (1e-6, not 9.99999997e-7)."""
    return float(f"{float(value):.7g}")


def _base(g: GGUFCheckpoint) -> dict[str, Any]:
    """The keys every llama-like architecture shares."""
    d, heads = g.integer(g.arch("embedding_length"), low=1), g.integer(g.arch("attention.head_count"), low=1)
    vocab, _ = _embedding(g, d)
    config: dict[str, Any] = {
        "hidden_size": d,
        "num_hidden_layers": _block_count(g),
        "num_attention_heads": heads,
        "num_key_value_heads": _kv_heads(g, heads),
        "head_dim": g.integer(g.arch("attention.key_length"), max(d // heads, 1), low=1),
        "vocab_size": vocab,
        "max_position_embeddings": g.integer(g.arch("context_length"), low=1),
        "rms_norm_eps": _f32(g.number(g.arch("attention.layer_norm_rms_epsilon"), 1e-6, low=0.0, high=1.0)),
        "tie_word_embeddings": not g.has_tensor("output.weight"),
    }
    if g.arch("feed_forward_length") in g.metadata:
        config["intermediate_size"] = g.integer(g.arch("feed_forward_length"), low=1)
    value = g.integer(g.arch("attention.value_length"), None, low=1)
    if value is not None and value != config["head_dim"]:
        raise CheckpointError(
            f"{g.path}: {g.architecture}.attention.value_length: {value} differs from key_length "
            f"{config['head_dim']}; zoo's attention uses one head size"
        )
    config["rope_parameters"] = _rope(g, g.number(g.arch("rope.freq_base"), 10000.0, low=1e-6))
    return config


def _embedding(g: GGUFCheckpoint, d: int) -> tuple[int, int]:
    """(vocab, width) of token_embd.weight, which must be d_model wide: sizes the file's
    tensors do not bear out are refused before anything is built from them."""
    shape = g.shape("token_embd.weight")
    if len(shape) != 2 or shape[1] != d:
        raise CheckpointError(
            f"{g.path}: {g.arch('embedding_length')}: {d}, but tensor 'token_embd.weight' has "
            f"shape {list(shape)}; allowed: [vocab, {d}]"
        )
    return shape[0], shape[1]


def _block_count(g: GGUFCheckpoint) -> int:
    """The layer count, checked against the blocks the file holds tensors for (``blk.N.*``)."""
    n = g.integer(g.arch("block_count"), low=1, high=MAX_LAYERS)
    held = {name.split(".")[1] for name in g.tensors if name.startswith("blk.") and name.count(".") >= 2}
    if held != {str(i) for i in range(n)}:
        raise CheckpointError(
            f"{g.path}: {g.arch('block_count')}: {n}, but the file holds tensors for "
            f"{len(held)} blocks; allowed: blk.0 to blk.{n - 1}, each present"
        )
    return n


def _kv_heads(g: GGUFCheckpoint, heads: int) -> int:
    """K/V heads: one count, or per-layer counts that are all equal (zoo takes one for every layer)."""
    key = g.arch("attention.head_count_kv")
    if isinstance(g.metadata.get(key), np.ndarray):
        counts = g.numbers(key, integers=True)
        if len(counts) == 0 or len(set(counts.tolist())) != 1 or not 1 <= int(counts[0]) <= MAX_INT:
            raise CheckpointError(
                f"{g.path}: {key}: per-layer counts that differ (or are out of range) are not supported"
            )
        return int(counts[0])
    return g.integer(key, heads, low=1)


def _rope(g: GGUFCheckpoint, theta: float) -> dict[str, Any]:
    kind = g.text(g.arch("rope.scaling.type"), "none")
    params: dict[str, Any] = {"rope_type": "default", "rope_theta": theta}
    if kind == "none":
        return params
    if kind not in ("linear", "yarn"):
        raise CheckpointError(
            f"{g.path}: {g.arch('rope.scaling.type')}: {kind!r} is not supported; allowed: none, linear, yarn"
        )
    factor = g.number(g.arch("rope.scaling.factor"), low=1e-6, high=1e6)
    if kind == "linear":
        return {**params, "rope_type": "linear", "factor": factor}
    params.update(
        rope_type="yarn",
        factor=factor,  # yarn, the only other kind
        original_max_position_embeddings=g.integer(g.arch("rope.scaling.original_context_length"), low=1),
    )
    for key, name in (("yarn_beta_fast", "beta_fast"), ("yarn_beta_slow", "beta_slow")):
        if g.arch(f"rope.scaling.{key}") in g.metadata:
            params[name] = g.number(g.arch(f"rope.scaling.{key}"))
    return params


def _llama3_rope(g: GGUFCheckpoint, config: dict[str, Any]) -> None:
    """llama.cpp stores Llama 3's RoPE scaling as a ``rope_freqs`` tensor of per-frequency
    divisors (not as metadata); recover factor, high_freq_factor and the original length
    with low_freq_factor 1 (the formula only sees their ratios) and check they reproduce it."""

    theta, dim = config["rope_parameters"]["rope_theta"], config["head_dim"]
    if g.shape("rope_freqs.weight") != (dim // 2,):
        raise CheckpointError(
            f"{g.path}: tensor 'rope_freqs.weight': shape {list(g.shape('rope_freqs.weight'))}; "
            f"allowed: [{dim // 2}] (head_dim / 2)"
        )
    divisors = g.tensor("rope_freqs.weight").double()  # (head_dim/2,)
    if not (torch.isfinite(divisors).all() and (divisors > 0).all()):
        raise CheckpointError(f"{g.path}: tensor 'rope_freqs.weight': holds values that are not finite and positive")
    plain, _ = rope_frequencies(dim, theta, None)
    wavelen = (2 * math.pi / plain.double()).tolist()
    factor = float(divisors.max())
    if factor <= 1.0 + 1e-6:
        return
    ones = [w for w, f in zip(wavelen, divisors.tolist()) if abs(f - 1.0) < 1e-6]
    middle = [(w, f) for w, f in zip(wavelen, divisors.tolist()) if 1.0 + 1e-6 < f < factor * (1 - 1e-6)]
    high = 4.0
    if len(middle) >= 2:  # smooth = (orig / wavelen - 1) / (high - 1) is linear in 1 / wavelen
        (w1, f1), (w2, f2) = middle[0], middle[-1]
        s1, s2 = ((1 / f - 1 / factor) / (1 - 1 / factor) for f in (f1, f2))
        slope = (s1 - s2) / (1 / w1 - 1 / w2)  # = orig / (high - 1)
        intercept = s1 - slope / w1  # = -1 / (high - 1)
        high = 1 - 1 / intercept if intercept < 0 else high
        orig = slope * (high - 1)
    elif middle:
        w1, f1 = middle[0]
        orig = w1 * (3 * (1 / f1 - 1 / factor) / (1 - 1 / factor) + 1)
    else:
        orig = high * max(ones, default=1.0) * 1.0001
    scaling = {
        "rope_type": "llama3",
        "factor": factor,
        "low_freq_factor": 1.0,
        "high_freq_factor": float(f"{high:.6g}"),
        "original_max_position_embeddings": max(int(round(orig)), 1),
    }
    options = RopeScaling.model_validate({"type": "llama3", **{k: v for k, v in scaling.items() if k != "rope_type"}})
    scaled, _ = rope_frequencies(dim, theta, options)
    if not ((plain / scaled).double() - divisors).abs().max() < 1e-3 * factor:
        raise CheckpointError(
            f"{g.path}: tensor 'rope_freqs.weight': per-frequency RoPE factors that are not "
            "Llama 3's scaling; zoo cannot reproduce them"
        )
    config["rope_parameters"].update(scaling)


def _llama(g: GGUFCheckpoint) -> dict[str, Any]:
    """llama covers Llama, Mistral (llama.cpp converts it to llama) and Mixtral (experts)."""
    config = {**_base(g), "model_type": "llama"}
    if g.has_tensor("rope_freqs.weight"):
        _llama3_rope(g, config)
    if g.arch("attention.sliding_window") in g.metadata:
        config.update(model_type="mistral", sliding_window=g.integer(g.arch("attention.sliding_window"), low=1))
    if g.integer(g.arch("expert_count"), 0):
        config.update(
            model_type="mixtral",
            num_local_experts=g.integer(g.arch("expert_count"), low=1),
            num_experts_per_tok=g.integer(g.arch("expert_used_count"), low=1),
        )
    return config


def _qwen3moe(g: GGUFCheckpoint) -> dict[str, Any]:
    config = {
        **_base(g),
        "model_type": "qwen3_moe",
        "num_experts": g.integer(g.arch("expert_count"), low=1),
        "num_experts_per_tok": g.integer(g.arch("expert_used_count"), low=1),
        "moe_intermediate_size": g.integer(g.arch("expert_feed_forward_length"), low=1),
        "norm_topk_prob": g.flag(g.arch("expert_weights_norm"), True),
    }
    config.setdefault("intermediate_size", config["moe_intermediate_size"])
    return config


def _gemma3(g: GGUFCheckpoint) -> dict[str, Any]:
    """llama.cpp's Gemma 3: local layers use RoPE base 10000, every 6th layer is global,
    and the 27B model (62 layers) scales queries by d_model / heads instead of head_dim."""
    config = {**_base(g), "model_type": "gemma3_text", "hidden_activation": "gelu_pytorch_tanh"}
    n_layers = config["num_hidden_layers"]
    key = g.arch("attention.sliding_window_pattern")
    if isinstance(g.metadata.get(key), np.ndarray):  # one flag per layer: true = sliding window
        flags = g.numbers(key, integers=True).tolist()
        if len(flags) != n_layers:
            raise CheckpointError(f"{g.path}: {key}: {len(flags):,} flags for {n_layers} layers")
        types = ["sliding_attention" if flag else "full_attention" for flag in flags]
    else:
        pattern = g.integer(key, 6, low=1)
        types = ["full_attention" if (i + 1) % pattern == 0 else "sliding_attention" for i in range(n_layers)]
    scalar = config["hidden_size"] // config["num_attention_heads"] if n_layers == 62 else config["head_dim"]
    config.update(
        layer_types=types,
        sliding_window=g.integer(g.arch("attention.sliding_window"), low=1),
        rope_local_base_freq=g.number(g.arch("rope.freq_base_swa"), 10000.0, low=1e-6),
        query_pre_attn_scalar=scalar,
    )
    for name in ("final_logit_softcapping", "attn_logit_softcapping"):
        if g.arch(name) in g.metadata:
            config[name] = g.number(g.arch(name))  # refused by the config mapping, naming the key
    return config


def _gpt_oss(g: GGUFCheckpoint) -> dict[str, Any]:
    """gpt-oss alternates windowed (even) and full (odd) layers, as llama.cpp hard-codes."""
    config = {
        **_base(g),
        "model_type": "gpt_oss",
        "num_local_experts": g.integer(g.arch("expert_count"), low=1),
        "num_experts_per_tok": g.integer(g.arch("expert_used_count"), low=1),
        "intermediate_size": g.integer(g.arch("expert_feed_forward_length"), low=1),
        "attention_bias": True,
        "sliding_window": g.integer(g.arch("attention.sliding_window"), low=1),
    }
    config["layer_types"] = [
        "sliding_attention" if i % 2 == 0 else "full_attention" for i in range(config["num_hidden_layers"])
    ]
    if config["rope_parameters"]["rope_type"] == "yarn":
        config["rope_parameters"]["truncate"] = False  # gpt-oss's YaRN keeps fractional bounds
    return config


ARCHITECTURES: dict[str, Callable[[GGUFCheckpoint], dict[str, Any]]] = {
    "llama": _llama,
    "qwen2": lambda g: {**_base(g), "model_type": "qwen2"},
    "qwen3": lambda g: {**_base(g), "model_type": "qwen3"},
    "qwen3moe": _qwen3moe,
    "gemma3": _gemma3,
    "gpt-oss": _gpt_oss,
}


def hf_config_from_gguf(g: GGUFCheckpoint) -> dict[str, Any]:
    """The config.json of the model this GGUF was converted from (as far as zoo computes it)."""
    arch = g.architecture
    if arch not in ARCHITECTURES:
        raise CheckpointError(
            f"{g.path}: general.architecture: {arch!r} is not supported; allowed: {allowed(ARCHITECTURES)}"
        )
    return ARCHITECTURES[arch](g)


def spec_from_gguf(g: GGUFCheckpoint, name: str | None = None) -> tuple[ModelSpec, dict[str, Any]]:
    """The ModelSpec of a GGUF file and the Hugging Face config it stands for."""
    config = hf_config_from_gguf(g)
    spec = spec_from_hf_config(config, name=name or g.text("general.name", "") or g.path.stem)
    return spec.model_copy(update={"source": str(g.path)}), config
