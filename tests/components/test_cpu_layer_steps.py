"""zoo/components/cpu_layer_steps_source.py: an eager decode step's whole attention
(``cpu_attention.attention_token``) and feed-forward (``cpu_token_ops.mlp_token``) for one token as
one C++ call each give what the modules' own calls give, bit for bit (the logits and the caches
they write), equal the full forward, and decline (None, nothing written) what they do not compute."""

from __future__ import annotations

import pytest
import torch

import zoo
import zoo.components.ffn as ffn
from tests.components.step_helpers import both_ways, decode_each, twin_cache
from tests.conftest import tiny_spec
from zoo.components import blocks, cpu_attention, cpu_layer_steps_source, cpu_token_ops
from zoo.components import row_product as rows
from zoo.components.attention import Attention
from zoo.components.cross_attention import CrossAttention
from zoo.components.norms import LayerNorm, RMSNorm
from zoo.model.cache import KVCache
from zoo.model.generation import prefill
from zoo.quant import int4_cpu, int8_rows


@pytest.fixture(autouse=True)
def _row_kernel(monkeypatch: pytest.MonkeyPatch) -> None:
    """The row kernel on in every dtype (as a run where the probe measured it faster), for tiny weights too."""
    monkeypatch.setattr(rows, "FORCED", True)
    monkeypatch.setattr(rows, "MIN_WEIGHT_BYTES", 0)


def _counted(monkeypatch: pytest.MonkeyPatch) -> dict[str, int]:
    """How many calls each one-call step computed (a None: declined)."""
    taken = {"attention": 0, "ffn": 0, "cross": 0}
    attention_step, ffn_step = cpu_attention.attention_token, cpu_token_ops.mlp_token
    cross_step = cpu_attention.cross_attention_token

    def attention(*args: object) -> torch.Tensor | None:
        out = attention_step(*args)  # type: ignore[arg-type]
        taken["attention"] += out is not None
        return out

    def feed_forward(*args: object) -> torch.Tensor | None:
        out = ffn_step(*args)  # type: ignore[arg-type]
        taken["ffn"] += out is not None
        return out

    def cross(*args: object) -> torch.Tensor | None:
        out = cross_step(*args)  # type: ignore[arg-type]
        taken["cross"] += out is not None
        return out

    monkeypatch.setattr(cpu_attention, "attention_token", attention)
    monkeypatch.setattr(cpu_attention, "cross_attention_token", cross)
    monkeypatch.setattr(cpu_token_ops, "mlp_token", feed_forward)
    return taken


def _both_ways(model: torch.nn.Module, ids: torch.Tensor, monkeypatch: pytest.MonkeyPatch):  # type: ignore[no-untyped-def]
    """``step_helpers.both_ways`` with the attention's and feed-forwards' one-call steps declined."""
    return both_ways(model, ids, monkeypatch, [(Attention, "_token_step"), (ffn, "_token_step")])


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize(
    ("arch", "ffn_steps"),
    [("gpt2", True), ("qwen3-0.6b", True), ("llama-3.2-1b", True), ("gemma-3-1b", False)],
)
def test_one_call_steps_give_the_modules_own_calls_bit_for_bit(monkeypatch, arch, ffn_steps, dtype):
    """gpt2 (biases, learned positions, GELU's tanh form), qwen3 (q/k RMS norms, RoPE, grouped K/V,
    SwiGLU), llama (RoPE, grouped K/V), gemma-3 (its sliding layers and GeGLU declined, its global
    layers and (1 + w) norms taken): logits and caches as the per-module calls give them."""
    model = zoo.build(tiny_spec(arch), seed=0).to(dtype).eval()
    zoo.fuse_projections(model)
    ids = torch.randint(0, 97, (1, 9), generator=torch.Generator().manual_seed(2))
    taken = _counted(monkeypatch)
    fused, per_module, cache, twin = _both_ways(model, ids, monkeypatch)
    with torch.no_grad():
        full = model(ids)  # (1, 9, V)
    assert taken["attention"] > 0 and (taken["ffn"] > 0) == ffn_steps
    assert torch.equal(fused, per_module)
    for ours, theirs in zip(cache.layers, twin.layers, strict=True):
        assert all(torch.equal(ours[name], theirs[name]) for name in ours)
    tolerance = {"atol": 1e-5, "rtol": 0} if dtype == torch.float32 else {"atol": 0.1, "rtol": 0.05}
    torch.testing.assert_close(fused.float(), full[:, 5:].float(), **tolerance)


def _t5_prefilled(dtype: torch.dtype, seed: int):  # type: ignore[no-untyped-def]
    """A tiny t5-small (projections fused), four decoder tokens to step, its cache after the
    encoder pass over six tokens and the start token, and a copy of that cache."""
    model = zoo.build(tiny_spec("t5-small"), seed=0).to(dtype).eval()
    zoo.fuse_projections(model)
    ids = torch.randint(0, 97, (1, 6), generator=torch.Generator().manual_seed(seed))
    with torch.no_grad():
        memory = model.encode(ids)
        cache = KVCache(model, 1, 8, memory_len=6)
        prefill(model, torch.zeros(1, 1, dtype=torch.long), cache, memory=memory)
    return model, ids[:, :4], cache, twin_cache(cache)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_an_encoder_decoders_steps_take_the_calls_with_a_position_bias_and_relu(monkeypatch, dtype):
    """t5-small's decoder: self-attention with its relative position bias as an additive mask,
    cross-attention over the memory written at prefill and a ReLU MLP in one call each, as
    their modules' own calls give them."""
    model, steps, cache, twin = _t5_prefilled(dtype, seed=3)
    taken = _counted(monkeypatch)
    with torch.no_grad():
        fused = decode_each(model, cache, steps)
        with monkeypatch.context() as off:
            off.setattr(Attention, "_token_step", lambda *args: None)
            off.setattr(ffn, "_token_step", lambda *args: None)
            off.setattr(CrossAttention, "_token_step", lambda *args: None)
            per_module = decode_each(model, twin, steps)
    assert taken["attention"] > 0 and taken["ffn"] > 0 and taken["cross"] > 0
    assert torch.equal(fused, per_module)


def _normed(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The kind of each one-call step that came with its block's norm (a pre-norm branch's residual
    step: ``x + step(norm(x))``) and computed it."""
    seen: list[str] = []
    calls = {"attention_token": cpu_attention, "cross_attention_token": cpu_attention, "mlp_token": cpu_token_ops}
    for name, owner in calls.items():

        def step(*args: object, _name: str = name, _call=getattr(owner, name)) -> torch.Tensor | None:
            out = _call(*args)
            if out is not None and args[-1] is not None:  # the norm: the last argument of each
                seen.append(_name)
            return out

        monkeypatch.setattr(owner, name, step)
    return seen


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("arch", ["gpt2", "qwen3-0.6b"])
def test_a_pre_norm_blocks_branches_run_with_their_norm_and_add_in_one_call(monkeypatch, arch, dtype):
    """gpt2 (layer norms with biases) and qwen3 (RMS norms): each decode token's attention and
    feed-forward branches are one call with the block's norm before and its residual after,
    the same logits and caches, bit for bit, as the block calling the norm and adding itself."""
    model = zoo.build(tiny_spec(arch), seed=0).to(dtype).eval()
    zoo.fuse_projections(model)
    ids = torch.randint(0, 97, (1, 9), generator=torch.Generator().manual_seed(7))
    seen = _normed(monkeypatch)
    fused, unfused, cache, twin = both_ways(model, ids, monkeypatch, [(blocks, "token_norm")])
    layers = len(model.layers) * 4  # 4 decode steps
    assert seen.count("attention_token") == layers and seen.count("mlp_token") == layers
    assert torch.equal(fused, unfused)
    for ours, theirs in zip(cache.layers, twin.layers, strict=True):
        assert all(torch.equal(ours[name], theirs[name]) for name in ours)


def test_an_encoder_decoders_branches_run_with_their_norm_and_add_in_one_call(monkeypatch):
    """t5-small's decoder: self-attention, cross-attention and feed-forward each one call with
    its RMS norm and residual, the bits of the block's own norms and adds."""
    model, steps, cache, twin = _t5_prefilled(torch.bfloat16, seed=8)
    seen = _normed(
        monkeypatch
    )  # from here: the start token's steps (its cross-attention writing the memory's K/V) not seen
    with torch.no_grad():
        fused = decode_each(model, cache, steps)
        with monkeypatch.context() as off:
            off.setattr(blocks, "token_norm", lambda norm: None)
            unfused = decode_each(model, twin, steps)
    assert sorted(set(seen)) == ["attention_token", "cross_attention_token", "mlp_token"]
    assert len(seen) == 3 * 4 * len(model.layers)
    assert torch.equal(fused, unfused)


def test_a_norm_the_step_does_not_take_leaves_the_block_its_own_calls():
    """A norm the C++ does not take (a weight in another dtype) or that is not a ``Norm``: the
    step declines or is not offered it, and the block's own calls give the output."""
    norms = [RMSNorm(64, 1e-6), LayerNorm(64, 1e-5, bias=True)]
    norms[0].weight.data = norms[0].weight.data.bfloat16()
    g = torch.Generator().manual_seed(9)
    x, up, down = torch.randn(1, 1, 64, generator=g), torch.randn(96, 64, generator=g), torch.randn(64, 96, generator=g)
    with torch.no_grad():
        assert cpu_token_ops.mlp_token(x, (up, None, None), (down, None, None), 0, norms[0].token_norm()) is None
        fused = cpu_token_ops.mlp_token(x, (up, None, None), (down, None, None), 0, norms[1].token_norm())
        inner = cpu_token_ops.gelu(rows.row_product(up, norms[1](x), None), False)
        assert fused is not None and torch.equal(fused, x + rows.row_product(down, inner, None))
        wide = torch.randn(96, 96, generator=g)  # an output wider than x: no residual to add
        assert cpu_token_ops.mlp_token(x, (up, None, None), (wide, None, None), 0, norms[1].token_norm()) is None
    assert blocks.token_norm(torch.nn.Identity()) is None


def _layer(d: int = 64, heads: int = 4, kv_heads: int = 2, dim: int = 16, slots: int = 10):
    g = torch.Generator().manual_seed(4)
    x = torch.randn(1, 1, d, generator=g)
    qkv = torch.randn((heads + 2 * kv_heads) * dim, d, generator=g)
    o = torch.randn(d, heads * dim, generator=g)
    caches = torch.randn(1, kv_heads, slots, dim, generator=g), torch.randn(1, kv_heads, slots, dim, generator=g)
    return x, qkv, o, caches


def test_the_attention_call_declines_what_it_does_not_compute_and_writes_nothing():
    """Two sequences, a weight in another dtype, a slot past the cache, odd rotary tables, a
    mask of other keys: None, and the caches as they were; gradients on: None."""
    x, qkv, o, (k_cache, v_cache) = _layer()
    before = k_cache.clone(), v_cache.clone()

    def step(**changes: object) -> cpu_attention.TokenStep:
        fields = {"qkv": (qkv, None, None), "norms": None, "k_cache": k_cache, "v_cache": v_cache}
        fields |= {"filled": 4, "rotation": None, "o": (o, None, None)}
        return cpu_attention.TokenStep(**(fields | changes))  # type: ignore[arg-type]

    options = {"scale": 0.25}
    declined = [
        (x.expand(2, 1, 64), step(), options),
        (x, step(o=(o.bfloat16(), None, None)), options),
        (x, step(filled=11), options),
        (x, step(rotation=(torch.ones(1, 1, 1, 3), torch.ones(1, 1, 1, 3))), options),
        (x, step(), {"scale": 0.25, "attn_mask": torch.ones(1, 1, 1, 5, dtype=torch.bool)}),
        (x, step(qkv=(qkv[:-1], None, None)), options),
        (x, step(qkv=(qkv.to(torch.int8), torch.ones(128), None)), options),  # int8 rows of x's width: fits
        (x, step(o=(o.to(torch.int8), torch.ones(63), None)), options),  # a scale short
        (x, step(), {"scale": 0.25, "is_causal": True}),
    ]
    with torch.no_grad():
        for index, args in enumerate(declined):
            out = cpu_attention.attention_token(*args)  # type: ignore[arg-type]
            assert (out is not None) == (index == 6), index
        k_cache.copy_(before[0]), v_cache.copy_(before[1])
        assert cpu_attention.attention_token(x, step(), options) is not None  # the same call, fitting
    assert cpu_attention.attention_token(x, step(), options) is None  # gradients on
    with torch.no_grad():
        written = k_cache[:, :, 3].clone()
        k_cache[:, :, 3], v_cache[:, :, 3] = before[0][:, :, 3], before[1][:, :, 3]
        assert torch.equal(k_cache, before[0]) and torch.equal(v_cache, before[1])  # only the fitting call wrote
        assert not torch.equal(written, before[0][:, :, 3])


def test_the_feed_forward_call_declines_what_it_does_not_compute():
    """Two rows, a down weight that does not fit the inner width, weights in another dtype, an
    unknown activation: None; the fitting call equals the products and activation one by one."""
    g = torch.Generator().manual_seed(5)
    x, up, down = torch.randn(1, 1, 64, generator=g), torch.randn(96, 64, generator=g), torch.randn(64, 96, generator=g)
    bias = torch.randn(96, generator=g)
    with torch.no_grad():
        assert cpu_token_ops.mlp_token(x.expand(1, 2, 64), (up, None, bias), (down, None, None), 0) is None
        assert cpu_token_ops.mlp_token(x, (up, None, bias), (down[:, :95], None, None), 0) is None
        assert cpu_token_ops.mlp_token(x, (up.bfloat16(), None, None), (down, None, None), 0) is None
        assert cpu_token_ops.mlp_token(x, (up, None, bias), (down, None, None), 7) is None
        half = down[:, :48].contiguous()  # a gated step's down product takes half the inner width
        assert cpu_token_ops.mlp_token(x, (up, None, bias), (half, None, None), cpu_token_ops.SILU_AND_MUL) is not None
        tanh_form = cpu_token_ops.MLP_ACTIVATIONS["gelu_tanh"]
        out = cpu_token_ops.mlp_token(x, (up, None, bias), (down, None, None), tanh_form)
        inner = cpu_token_ops.gelu(rows.row_product(up, x, bias), True)
        assert out is not None and torch.equal(out, rows.row_product(down, inner, None))


@pytest.mark.parametrize("arch", ["gpt2", "qwen3-0.6b"])
def test_int8_and_int4_layers_take_the_calls(monkeypatch, arch):
    """A quantized model's projections go into the one-call steps as int8 rows with their scales
    (``Int8Linear.step_tensors``) or int4 panels with their scales and offsets
    (``Int4Linear.step_tensors``: its one-row ``int4_q8`` through the dispatcher), the same bits
    as its layers' own products."""
    monkeypatch.setattr(int8_rows, "MIN_WEIGHT_BYTES", 0)
    for kind in ("int8", "int4"):
        spec = tiny_spec(arch).override({"ffn.hidden": 64})  # int4's groups of 32 divide every input width
        model = zoo.build(spec, seed=0).to(torch.bfloat16).eval()
        zoo.quant.quantize(model, kind)
        zoo.fuse_projections(model)
        ids = torch.randint(0, 97, (1, 9), generator=torch.Generator().manual_seed(6))
        taken = _counted(monkeypatch)
        fused, per_module, _, _ = _both_ways(model, ids, monkeypatch)
        assert taken["attention"] > 0 and taken["ffn"] > 0, kind
        assert torch.equal(fused, per_module), kind


def test_the_int4_op_the_steps_call_is_the_int4_layers_own():
    """The layer steps call int4 panels' one-row product by name (``INT4_ROWS_OP``), with the
    layers' grain: the name is ``zoo.quant.int4_cpu``'s op."""
    assert int4_cpu.EXTENSION.op_name("int4_q8") == cpu_layer_steps_source.INT4_ROWS_OP
    assert int4_cpu.PANEL_GRAIN == cpu_layer_steps_source.INT4_GRAIN
