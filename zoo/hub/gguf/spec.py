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
from typing import TYPE_CHECKING, Any

from zoo.errors import CheckpointError, allowed
from zoo.hub.config import spec_from_hf_config
from zoo.hub.gguf.reader import GGUFCheckpoint

if TYPE_CHECKING:  # annotations only: the hub reads specs, the spec never imports the hub
    from zoo.specs.model import ModelSpec


def _f32(value: float) -> float:
    """A float32 metadata value as the decimal it was written from (1e-6, not 9.99999997e-7)."""
    return float(f"{float(value):.7g}")


def _base(g: GGUFCheckpoint) -> dict[str, Any]:
    """The keys every llama-like architecture shares."""
    d, heads = int(g.need("embedding_length")), int(g.need("attention.head_count"))
    kv = g.arch_key("attention.head_count_kv", heads)
    if isinstance(kv, list):  # per-layer counts: zoo takes one count for every layer
        if len(set(kv)) != 1:
            raise CheckpointError(f"{g.path}: {g.architecture}.attention.head_count_kv: per-layer counts {kv} are not supported")
        kv = kv[0]
    config: dict[str, Any] = {
        "hidden_size": d, "num_hidden_layers": int(g.need("block_count")), "num_attention_heads": heads,
        "num_key_value_heads": int(kv), "head_dim": int(g.arch_key("attention.key_length", d // heads)),
        "vocab_size": g.shape("token_embd.weight")[0], "max_position_embeddings": int(g.need("context_length")),
        "rms_norm_eps": _f32(g.arch_key("attention.layer_norm_rms_epsilon", 1e-6)),
        "tie_word_embeddings": "output.weight" not in g.tensors,
    }
    if g.arch_key("feed_forward_length") is not None:
        config["intermediate_size"] = int(g.arch_key("feed_forward_length"))
    value = g.arch_key("attention.value_length")
    if value is not None and int(value) != config["head_dim"]:
        raise CheckpointError(f"{g.path}: {g.architecture}.attention.value_length: {value} differs from key_length "
                              f"{config['head_dim']}; zoo's attention uses one head size")
    config["rope_parameters"] = _rope(g, float(g.arch_key("rope.freq_base", 10000.0)))
    return config


def _rope(g: GGUFCheckpoint, theta: float) -> dict[str, Any]:
    kind = g.arch_key("rope.scaling.type", "none")
    params: dict[str, Any] = {"rope_type": "default", "rope_theta": theta}
    if kind == "none":
        return params
    factor = float(g.need("rope.scaling.factor"))
    if kind == "linear":
        return {**params, "rope_type": "linear", "factor": factor}
    if kind == "yarn":
        params.update(rope_type="yarn", factor=factor,
                      original_max_position_embeddings=int(g.need("rope.scaling.original_context_length")))
        for key, name in (("yarn_beta_fast", "beta_fast"), ("yarn_beta_slow", "beta_slow")):
            if g.arch_key(f"rope.scaling.{key}") is not None:
                params[name] = float(g.arch_key(f"rope.scaling.{key}"))
        return params
    raise CheckpointError(f"{g.path}: {g.architecture}.rope.scaling.type: {kind!r} is not supported; "
                          "allowed: none, linear, yarn")


def _llama3_rope(g: GGUFCheckpoint, config: dict[str, Any]) -> None:
    """llama.cpp stores Llama 3's RoPE scaling as a ``rope_freqs`` tensor of per-frequency
    divisors (not as metadata); recover factor, high_freq_factor and the original length
    with low_freq_factor 1 (the formula only sees their ratios) and check they reproduce it."""
    from zoo.components.rope import RopeScaling, rope_frequencies

    divisors = g.tensor("rope_freqs.weight").double()  # (head_dim/2,)
    theta, dim = config["rope_parameters"]["rope_theta"], config["head_dim"]
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
    scaling = {"rope_type": "llama3", "factor": factor, "low_freq_factor": 1.0, "high_freq_factor": float(f"{high:.6g}"),
               "original_max_position_embeddings": max(int(round(orig)), 1)}
    options = RopeScaling.model_validate({"type": "llama3", **{k: v for k, v in scaling.items() if k != "rope_type"}})
    scaled, _ = rope_frequencies(dim, theta, options)
    if not ((plain / scaled).double() - divisors).abs().max() < 1e-3 * factor:
        raise CheckpointError(f"{g.path}: tensor 'rope_freqs.weight': per-frequency RoPE factors that are not "
                              "Llama 3's scaling; zoo cannot reproduce them")
    config["rope_parameters"].update(scaling)


def _llama(g: GGUFCheckpoint) -> dict[str, Any]:
    """llama covers Llama, Mistral (llama.cpp converts it to llama) and Mixtral (experts)."""
    config = {**_base(g), "model_type": "llama"}
    if "rope_freqs.weight" in g.tensors:
        _llama3_rope(g, config)
    if g.arch_key("attention.sliding_window") is not None:
        config.update(model_type="mistral", sliding_window=int(g.arch_key("attention.sliding_window")))
    if g.arch_key("expert_count"):
        config.update(model_type="mixtral", num_local_experts=int(g.arch_key("expert_count")),
                      num_experts_per_tok=int(g.need("expert_used_count")))
    return config


def _qwen3moe(g: GGUFCheckpoint) -> dict[str, Any]:
    config = {**_base(g), "model_type": "qwen3_moe", "num_experts": int(g.need("expert_count")),
              "num_experts_per_tok": int(g.need("expert_used_count")),
              "moe_intermediate_size": int(g.need("expert_feed_forward_length")),
              "norm_topk_prob": bool(g.arch_key("expert_weights_norm", True))}
    config.setdefault("intermediate_size", config["moe_intermediate_size"])
    return config


def _gemma3(g: GGUFCheckpoint) -> dict[str, Any]:
    """llama.cpp's Gemma 3: local layers use RoPE base 10000, every 6th layer is global,
    and the 27B model (62 layers) scales queries by d_model / heads instead of head_dim."""
    config = {**_base(g), "model_type": "gemma3_text", "hidden_activation": "gelu_pytorch_tanh"}
    n_layers = config["num_hidden_layers"]
    pattern = g.arch_key("attention.sliding_window_pattern", 6)
    if isinstance(pattern, list):  # one flag per layer: true = sliding window
        types = ["sliding_attention" if flag else "full_attention" for flag in pattern]
    else:
        types = ["full_attention" if (i + 1) % int(pattern) == 0 else "sliding_attention" for i in range(n_layers)]
    scalar = config["hidden_size"] // config["num_attention_heads"] if n_layers == 62 else config["head_dim"]
    config.update(layer_types=types, sliding_window=int(g.need("attention.sliding_window")),
                  rope_local_base_freq=float(g.arch_key("rope.freq_base_swa", 10000.0)), query_pre_attn_scalar=scalar)
    for key in ("final_logit_softcapping", "attn_logit_softcapping"):
        if g.arch_key(key) is not None:
            config[key] = g.arch_key(key)  # refused by the config mapping, naming the key
    return config


def _gpt_oss(g: GGUFCheckpoint) -> dict[str, Any]:
    """gpt-oss alternates windowed (even) and full (odd) layers, as llama.cpp hard-codes."""
    config = {**_base(g), "model_type": "gpt_oss", "num_local_experts": int(g.need("expert_count")),
              "num_experts_per_tok": int(g.need("expert_used_count")),
              "intermediate_size": int(g.need("expert_feed_forward_length")), "attention_bias": True,
              "sliding_window": int(g.need("attention.sliding_window"))}
    config["layer_types"] = ["sliding_attention" if i % 2 == 0 else "full_attention"
                             for i in range(config["num_hidden_layers"])]
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
        raise CheckpointError(f"{g.path}: general.architecture: {arch!r} is not supported; allowed: {allowed(ARCHITECTURES)}")
    return ARCHITECTURES[arch](g)


def spec_from_gguf(g: GGUFCheckpoint, name: str | None = None) -> tuple[ModelSpec, dict[str, Any]]:
    """The ModelSpec of a GGUF file and the Hugging Face config it stands for."""
    config = hf_config_from_gguf(g)
    spec = spec_from_hf_config(config, name=name or str(g.metadata.get("general.name") or g.path.stem))
    return spec.model_copy(update={"source": str(g.path)}), config
