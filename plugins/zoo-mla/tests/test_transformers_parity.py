"""Logits of zoo's MLA model equal transformers' DeepseekV2/V3 on the same tiny random weights."""

from __future__ import annotations

import pytest
import torch
from conftest import TINY_VOCAB, tiny_deepseek

import zoo

transformers = pytest.importorskip("transformers")

YARN_KEYS = ("factor", "original_max_position_embeddings", "beta_fast", "beta_slow", "mscale", "mscale_all_dim")


def _hf_config(spec: zoo.ModelSpec, v3: bool):  # type: ignore[no-untyped-def]
    att, ffn, rope = spec.attention, spec.ffn, spec.positional
    common = dict(
        vocab_size=spec.vocab_size,
        hidden_size=spec.d_model,
        num_hidden_layers=spec.n_layers,
        intermediate_size=spec.layers["0"]["ffn"]["hidden"],
        moe_intermediate_size=ffn.hidden,
        num_attention_heads=att.n_heads,
        num_key_value_heads=att.n_heads,
        q_lora_rank=att.q_lora_rank,
        kv_lora_rank=att.kv_lora_rank,
        qk_nope_head_dim=att.qk_nope_head_dim,
        qk_rope_head_dim=att.qk_rope_head_dim,
        v_head_dim=att.v_head_dim,
        n_routed_experts=ffn.n_experts,
        num_experts_per_tok=ffn.top_k,
        n_shared_experts=ffn.n_shared_experts,
        first_k_dense_replace=1,
        routed_scaling_factor=ffn.routed_scaling_factor,
        norm_topk_prob=ffn.norm_topk_prob,
        n_group=ffn.n_group,
        topk_group=ffn.topk_group,
        max_position_embeddings=spec.max_seq_len,
        rms_norm_eps=1e-6,
        tie_word_embeddings=False,
        rope_parameters={"rope_type": "yarn", "rope_theta": rope.theta, **{k: rope.scaling[k] for k in YARN_KEYS}},
    )
    if v3:
        return transformers.DeepseekV3Config(**common, rope_interleave=True)
    return transformers.DeepseekV2Config(**common, topk_method=ffn.topk_method)


def _copy_weights(hf: torch.nn.Module, model: torch.nn.Module) -> None:
    """Copy transformers' weights into the zoo model, by name."""
    src = dict(hf.state_dict())
    dst = model.state_dict()
    out = {
        "embed.weight": src["model.embed_tokens.weight"],
        "lm_head.weight": src["lm_head.weight"],
        "final_norm.weight": src["model.norm.weight"],
    }
    for i in range(len(model.layers)):
        hp, zp = f"model.layers.{i}.", f"layers.{i}."
        out[zp + "attn_norm.weight"] = src[hp + "input_layernorm.weight"]
        out[zp + "ffn_norm.weight"] = src[hp + "post_attention_layernorm.weight"]
        for name in dst:
            if name.startswith(zp + "attention."):
                out[name] = src[hp + "self_attn." + name.removeprefix(zp + "attention.")]
        if hp + "mlp.gate.weight" in src:  # MoE layer
            gate_up = src[hp + "mlp.experts.gate_up_proj"]  # (E, 2F, d)
            out[zp + "ffn.w_gate"], out[zp + "ffn.w_up"] = gate_up.chunk(2, dim=1)
            out[zp + "ffn.w_down"] = src[hp + "mlp.experts.down_proj"]
            out[zp + "ffn.router.weight"] = src[hp + "mlp.gate.weight"]
            for proj in ("gate_proj", "up_proj", "down_proj"):
                out[zp + f"ffn.shared.{proj}.weight"] = src[hp + f"mlp.shared_experts.{proj}.weight"]
            if hp + "mlp.gate.e_score_correction_bias" in src:
                out[zp + "ffn.e_score_correction_bias"] = src[hp + "mlp.gate.e_score_correction_bias"]
        else:
            for proj in ("gate_proj", "up_proj", "down_proj"):
                out[zp + f"ffn.{proj}.weight"] = src[hp + f"mlp.{proj}.weight"]
    missing = set(dst) - set(out)
    assert not missing, f"not copied: {sorted(missing)}"
    model.load_state_dict(out, strict=True)


@pytest.mark.parametrize("name", ["deepseek-v2-lite", "deepseek-v3"])
def test_logits_equal_transformers(name):
    v3 = name == "deepseek-v3"
    spec = tiny_deepseek(name)
    torch.manual_seed(0)
    hf_cls = transformers.DeepseekV3ForCausalLM if v3 else transformers.DeepseekV2ForCausalLM
    hf = hf_cls(_hf_config(spec, v3)).eval()
    with torch.no_grad():  # random norms, biases and correction bias, so nothing is trivially 1 or 0
        for param in hf.parameters():
            if param.dim() == 1:
                param.normal_(1.0, 0.1)
        for module in hf.modules():
            bias = getattr(module, "e_score_correction_bias", None)
            if bias is not None:
                bias.normal_(0.0, 0.05)
    model = zoo.build(spec, init=False).eval()
    _copy_weights(hf, model)
    ids = torch.randint(0, TINY_VOCAB, (2, 11))
    with torch.no_grad():
        expected = hf(ids).logits
        got = model(ids)
    torch.testing.assert_close(got, expected, atol=2e-5, rtol=2e-5)
