"""The recurrent mixers' one-call steps: Mamba's ``cpu_mamba_step.mamba_token`` and Mamba2's, Gated
DeltaNet's, linear and Infini-attention's ``cpu_steps.mamba2_token`` / ``gdn_token`` /
``linear_token`` / ``infini_token`` (input projections, the fused step and out_proj in one C++
call, the projections made by the one-row products' ``layer_row``) give the mixers' own calls bit
for bit (logits and every state tensor), equal the full forward, take int8 and int4 projections,
and decline (None, nothing written) what they do not compute."""

from __future__ import annotations

import pytest
import torch

import zoo
from tests.components.step_helpers import both_ways, decode_each
from tests.conftest import SMALL_MAMBA2, TINY_VOCAB, tiny_spec
from zoo.components import blocks, cpu_mamba_step, cpu_steps
from zoo.components import row_product as rows
from zoo.components.gated_deltanet import GatedDeltaNet
from zoo.components.infini_attention import InfiniAttention
from zoo.components.linear_attention import LinearAttention
from zoo.components.mamba import MambaMixer
from zoo.components.mamba2 import Mamba2Mixer
from zoo.model.cache import KVCache
from zoo.model.generation import decode_step, prefill
from zoo.quant import int8_rows
from zoo.specs.model import ModelSpec

LINEAR = {"kind": "linear", "n_heads": 4, "head_dim": 16}
INFINI = {"kind": "infini", "n_heads": 4, "head_dim": 16, "segment": 3}  # the 9 test tokens span three segments
GDN = {"kind": "gated_deltanet", "n_k_heads": 2, "n_v_heads": 4, "head_k_dim": 8, "head_v_dim": 8, "chunk_size": 4}
# mixer -> (its class, the module and name of its one-call step)
MIXERS = {
    "mamba": (MambaMixer, cpu_mamba_step, "mamba_token"),
    "mamba2": (Mamba2Mixer, cpu_steps, "mamba2_token"),
    "gated_deltanet": (GatedDeltaNet, cpu_steps, "gdn_token"),
    "linear": (LinearAttention, cpu_steps, "linear_token"),
    "infini": (InfiniAttention, cpu_steps, "infini_token"),
}


@pytest.fixture(autouse=True)
def _row_kernel(monkeypatch: pytest.MonkeyPatch) -> None:
    """The row kernel on in every dtype (as a run where the probe measured it faster), for tiny weights too."""
    monkeypatch.setattr(rows, "FORCED", True)
    monkeypatch.setattr(rows, "MIN_WEIGHT_BYTES", 0)
    monkeypatch.setattr(int8_rows, "MIN_WEIGHT_BYTES", 0)


def _spec(mixer: str) -> ModelSpec:
    if mixer == "mamba":
        return tiny_spec("mamba-130m")
    if mixer == "mamba2":
        return zoo.spec("mamba2-130m").override(SMALL_MAMBA2)
    if mixer in ("linear", "infini"):  # gpt2's learned positions: q and k unrotated
        return tiny_spec("gpt2").override({"attention": LINEAR if mixer == "linear" else INFINI, "ffn.hidden": 64})
    return tiny_spec("qwen3-0.6b").override({"attention": GDN, "positional": {"kind": "none"}, "ffn.hidden": 64})


def _model(mixer: str, dtype: torch.dtype) -> torch.nn.Module:
    """The tiny model with ``mixer``, in ``dtype``, its projections fused as ``zoo bench`` runs
    them (linear and Infini-attention's one calls take q, k and v as one product)."""
    model = zoo.build(_spec(mixer), seed=0).to(dtype).eval()
    zoo.fuse_projections(model)
    return model


def _both_ways(model: torch.nn.Module, mixer: str, monkeypatch: pytest.MonkeyPatch):  # type: ignore[no-untyped-def]
    """Logits (1, 4, V) of four tokens decoded after a prefill of five through the one-call
    steps and, from a copy of the same cache, through the mixers' own calls; both caches; and
    how many one-call steps computed their token."""
    cls, module, name = MIXERS[mixer]
    original, taken = getattr(module, name), []

    def counted(*args: object) -> torch.Tensor | None:
        out = original(*args)
        taken.append(out is not None)
        return out

    monkeypatch.setattr(module, name, counted)
    ids = torch.randint(0, TINY_VOCAB, (1, 9), generator=torch.Generator().manual_seed(7))
    fused, per_module, cache, twin = both_ways(model, ids, monkeypatch, [(cls, "_token_step")])
    with torch.no_grad():
        full = model(ids)  # (1, 9, V)
    return fused, per_module, (cache, twin), sum(taken), full


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("mixer", MIXERS)
def test_one_call_mixer_steps_give_the_mixers_own_calls_bit_for_bit(monkeypatch, mixer, dtype):
    """Every layer's every step taken, the same logits and state tensors as in_proj, the fused
    step and out_proj called one by one, and the full forward's logits (1e-5 in float32)."""
    model = _model(mixer, dtype)
    fused, per_module, (cache, twin), taken, full = _both_ways(model, mixer, monkeypatch)
    assert taken == 4 * model.spec.n_layers
    assert torch.equal(fused, per_module)
    for ours, theirs in zip(cache.layers, twin.layers, strict=True):
        assert all(torch.equal(ours[name], theirs[name]) for name in ours)
    tolerance = {"atol": 1e-5, "rtol": 0} if dtype == torch.float32 else {"atol": 0.1, "rtol": 0.05}
    torch.testing.assert_close(fused.float(), full[:, 5:].float(), **tolerance)


@pytest.mark.parametrize("mixer", MIXERS)
def test_quantized_projections_take_the_calls(monkeypatch, mixer):
    """An int8 model's projections go in as int8 rows with their scales (``Int8Linear.step_tensors``;
    Mamba's quantized x_proj inside its fused step, ``kernel_rows``), an int4 one's as int4
    panels, the same bits as its layers' own products."""
    for kind in ("int8", "int4"):
        model = _model(mixer, torch.bfloat16)
        zoo.quant.quantize(model, kind)
        fused, per_module, _, taken, _ = _both_ways(model, mixer, monkeypatch)
        assert taken > 0, kind
        assert torch.equal(fused, per_module), kind


@pytest.mark.parametrize("mixer", MIXERS)
def test_a_pre_norm_blocks_mixer_step_takes_its_norm_and_add(monkeypatch, mixer):
    """Every recurrent mixer's step takes its pre-norm block's norm (RMS or layer norms, as the
    tiny specs have them) before and its residual after in the one call
    (``residual_token``), the same logits and states, bit for bit, as the block calling the norm
    and adding itself."""
    model = _model(mixer, torch.bfloat16)
    _, module, name = MIXERS[mixer]
    original, normed = getattr(module, name), []

    def step(*args: object) -> torch.Tensor | None:
        out = original(*args)
        normed.append(out is not None and args[-1] is not None)  # the norm: each step's last argument
        return out

    monkeypatch.setattr(module, name, step)
    ids = torch.randint(0, TINY_VOCAB, (1, 9), generator=torch.Generator().manual_seed(9))
    fused, unfused, cache, twin = both_ways(model, ids, monkeypatch, [(blocks, "token_norm")])
    assert sum(normed) == 4 * model.spec.n_layers
    assert torch.equal(fused, unfused)
    for ours, theirs in zip(cache.layers, twin.layers, strict=True):
        assert all(torch.equal(ours[name], theirs[name]) for name in ours)


def _mamba_layer():  # type: ignore[no-untyped-def]
    """A tiny Mamba mixer and its state after one prefilled token."""
    model = zoo.build(_spec("mamba"), seed=0).eval()
    with torch.no_grad():
        cache = KVCache(model, 1, 4)
        prefill(model, torch.tensor([[3]]), cache)
    mixer = next(m for m in model.modules() if isinstance(m, MambaMixer))
    return mixer, cache.layers[0]


def test_the_mamba_call_declines_what_it_does_not_compute_and_writes_nothing():
    """Two rows, an in_proj of other rows, an out_proj of another width or dtype, int8 rows with a
    scale short: None, and the window and state as they were; gradients on: None."""
    mixer, state = _mamba_layer()
    before = {name: t.clone() for name, t in state.items()}
    x = torch.randn(1, 1, 64, generator=torch.Generator().manual_seed(8))
    w_in, w_out = mixer.in_proj.weight, mixer.out_proj.weight
    dt = mixer.dt_proj.weight, mixer.dt_proj.bias
    params = mixer.A_log, mixer.D

    def call(x: torch.Tensor, in_proj: tuple[object, ...], out_proj: tuple[object, ...]) -> torch.Tensor | None:
        return cpu_mamba_step.mamba_token(
            x, in_proj, mixer.conv1d, (mixer.x_proj.weight, None), dt, params, state, None, out_proj
        )  # type: ignore[arg-type]

    declined = [
        (x.expand(2, 1, 64), (w_in, None, None), (w_out, None, None)),
        (x, (w_in[:-2], None, None), (w_out, None, None)),
        (x, (w_in, None, None), (w_out[:, :-1], None, None)),
        (x, (w_in, None, None), (w_out.bfloat16(), None, None)),
        (x, (w_in.to(torch.int8), torch.ones(w_in.shape[0] - 1), None), (w_out, None, None)),
    ]
    with torch.no_grad():
        for args in declined:
            assert call(*args) is None  # type: ignore[arg-type]
        assert all(torch.equal(state[name], before[name]) for name in state)
        assert call(x, (w_in, None, None), (w_out, None, None)) is not None  # the same call, fitting
        assert not torch.equal(state["ssm"], before["ssm"])
    assert call(x, (w_in, None, None), (w_out, None, None)) is None  # gradients on


def test_the_state_space_calls_decline_projections_of_other_rows():
    """Mamba2's and Gated DeltaNet's calls check their projections' rows against the state's
    heads before writing: a row short is None, the state as it was."""
    for mixer_kind in ("mamba2", "gated_deltanet"):
        model = zoo.build(_spec(mixer_kind), seed=0).eval()
        with torch.no_grad():
            cache = KVCache(model, 1, 4)
            prefill(model, torch.tensor([[3]]), cache)
            mixer = next(m for m in model.modules() if isinstance(m, (Mamba2Mixer, GatedDeltaNet)))
            state = cache.layers[0]
            before = {name: t.clone() for name, t in state.items()}
            x = torch.randn(1, 1, 64)
            out = (mixer.out_proj.weight, None, None)
            if isinstance(mixer, Mamba2Mixer):
                params = (mixer.dt_bias, mixer.A_log, mixer.D, mixer.norm.weight)
                short = (mixer.in_proj.weight[:-1], None, None)
                got = cpu_steps.mamba2_token(
                    x, short, mixer.conv1d, params, state, mixer.n_groups, 1e-5, (0.0, 1e9), out
                )
            else:
                params = (mixer.dt_bias, mixer.A_log, mixer.norm.weight)
                short = ((mixer.in_proj_qkvz.weight, None, None), (mixer.in_proj_ba.weight[:-1], None, None))
                got = cpu_steps.gdn_token(x, short, mixer.conv1d, params, state, mixer.n_k_heads, 1e-6, out)
            assert got is None, mixer_kind
            assert all(torch.equal(state[name], before[name]) for name in state), mixer_kind


def test_the_linear_attention_call_declines_what_it_does_not_compute_and_writes_nothing(monkeypatch):
    """q|k|v rows short of 3 H D, an output layer of another width, a state of other heads or in
    half precision: None, the state as it was; the same call fitting writes it. Separate q, k and
    v layers (projections not fused) and a rotated layer (RoPE turns q and k between the product
    and the step) run their own calls, a rotated step equal to its full forward."""
    model = _model("linear", torch.float32)
    with torch.no_grad():
        cache = KVCache(model, 1, 4)
        prefill(model, torch.tensor([[3]]), cache)
    mixer = next(m for m in model.modules() if isinstance(m, LinearAttention))
    kv, z = cache.layers[0]["kv"], cache.layers[0]["k_sum"]
    before = kv.clone(), z.clone()
    x = torch.randn(1, 1, 64)
    qkv, out = (mixer.qkv_proj.weight, None, mixer.qkv_proj.bias), (mixer.o_proj.weight, None, None)
    declined = [
        ((qkv[0][:-1], None, None), kv, z, out),
        (qkv, kv, z, (mixer.o_proj.weight[:, :-1], None, None)),
        (qkv, kv[:, :2], z[:, :2], out),
        (qkv, kv.half(), z, out),
    ]
    with torch.no_grad():
        for args in declined:
            assert cpu_steps.linear_token(x, *args) is None  # type: ignore[arg-type]
        assert torch.equal(kv, before[0]) and torch.equal(z, before[1])
        assert cpu_steps.linear_token(x, qkv, kv, z, out) is not None  # type: ignore[arg-type]
        assert not torch.equal(kv, before[0])
    separate = zoo.build(_spec("linear"), seed=0).eval()  # q, k and v not fused
    layer = next(m for m in separate.modules() if isinstance(m, LinearAttention))
    assert layer._token_step(x, None, [kv, z]) is None
    rotated = zoo.build(_spec("linear").override({"positional": {"kind": "rope"}}), seed=0).eval()
    zoo.fuse_projections(rotated)
    calls, call = [], cpu_steps.linear_token
    monkeypatch.setattr(cpu_steps, "linear_token", lambda *args: calls.append(args) or call(*args))
    with torch.no_grad():
        cache = KVCache(rotated, 1, 8)
        prefill(rotated, torch.tensor([[1, 2, 3]]), cache)
        step, full = decode_step(rotated, torch.tensor([[4]]), cache), rotated(torch.tensor([[1, 2, 3, 4]]))
    assert calls == []
    torch.testing.assert_close(step, full[:, -1], atol=1e-5, rtol=0)


def test_the_infini_attention_call_declines_what_it_does_not_compute_and_writes_nothing():
    """A ring of other heads or in another dtype, a slot past the valid-key mask, a memory in half
    precision, q|k|v rows short: None, the ring and memory as they were; fitting, it writes them."""
    model = _model("infini", torch.float32)
    with torch.no_grad():
        cache = KVCache(model, 1, 6)
        prefill(model, torch.tensor([[3, 4]]), cache)
    mixer = next(m for m in model.modules() if isinstance(m, InfiniAttention))
    tensors = cache.layers[0]
    before = {name: t.clone() for name, t in tensors.items()}
    x = torch.randn(1, 1, 64)
    qkv, out = (mixer.qkv_proj.weight, None, mixer.qkv_proj.bias), (mixer.o_proj.weight, None, None)
    segment, time = (mixer.segment, mixer.delta), torch.tensor([2])  # the third token's slot

    def call(state: dict[str, torch.Tensor], valid: torch.Tensor | None = None, rows: object = qkv) -> object:
        return cpu_steps.infini_token(x, rows, state, mixer.gate, valid, time, segment, out)  # type: ignore[arg-type]

    with torch.no_grad():  # with gradients on, every call declines
        declined = [
            call({**tensors, "k": tensors["k"][:, :2].contiguous()}),
            call({**tensors, "v": tensors["v"].half()}),
            call({**tensors, "mem": tensors["mem"].half()}),
            call(tensors, valid=torch.ones(1, 2, dtype=torch.bool)),  # slot 2 past the mask's 2 slots
            call(tensors, rows=(qkv[0][:-1], None, None)),
        ]
        assert declined == [None] * len(declined)
        assert all(torch.equal(tensors[name], before[name]) for name in tensors)
        assert call(tensors) is not None
        assert not torch.equal(tensors["k"], before["k"])


def test_an_int8_mambas_fused_step_continues_its_full_forward(monkeypatch):
    """Mamba's fused step reads an int8 x_proj's rows with their scales (``kernel_rows``), where
    it took only float rows: an int8 model's decode steps equal its full forward (float32; in_proj
    and out_proj by torch's exact weight-only kernel, not the row kernel's int8 activations)."""
    monkeypatch.setattr(int8_rows, "MIN_WEIGHT_BYTES", 1 << 40)
    fused, step = [], cpu_mamba_step.mamba_step
    monkeypatch.setattr(cpu_mamba_step, "mamba_step", lambda *args: fused.append(args[2][1] is not None) or step(*args))
    model = zoo.build(_spec("mamba"), seed=0).eval()
    zoo.quant.quantize(model, "int8")
    with torch.no_grad():
        cache = KVCache(model, 1, 12)
        ids = torch.randint(0, TINY_VOCAB, (1, 9), generator=torch.Generator().manual_seed(7))
        prefill(model, ids[:, :5], cache)
        steps, full = decode_each(model, cache, ids[:, 5:]), model(ids)  # (1, 4, V), (1, 9, V)
    assert fused == [True] * 4 * model.spec.n_layers  # every step fused, x_proj's int8 rows and scales inside
    torch.testing.assert_close(steps, full[:, 5:], atol=1e-5, rtol=0)


def test_an_int4_mambas_fused_step_reads_its_x_proj_as_its_layer_does(monkeypatch):
    """An int4 x_proj inside Mamba's fused step is the layer's own one-row product
    (``int4_q8``, through ``projection_row``): the fused steps equal the C++ scan's steps, which
    call the layer (float32, 1e-5)."""
    from zoo.quant.linear import Int4Linear

    model = zoo.build(_spec("mamba"), seed=0).eval()
    zoo.quant.quantize(model, "int4")
    ids = torch.randint(0, TINY_VOCAB, (1, 9), generator=torch.Generator().manual_seed(7))
    fused, scanned = [], []
    with torch.no_grad():
        for out, rows in ((fused, Int4Linear.kernel_rows), (scanned, lambda self: None)):
            with monkeypatch.context() as patch:
                patch.setattr(Int4Linear, "kernel_rows", rows)
                cache = KVCache(model, 1, 12)
                prefill(model, ids[:, :5], cache)
                out.append(decode_each(model, cache, ids[:, 5:]))  # (1, 4, V)
    torch.testing.assert_close(fused[0], scanned[0], atol=1e-5, rtol=0)
