"""The fused one-token decode steps (``zoo.components.cpu_steps``, implementation ``cpu-step``)
equal the reference steps: a prefill then decode steps gives the reference model's logits to
1e-5 in float32, and the full forward's; ``--impl reference`` runs the PyTorch step."""

from __future__ import annotations

import copy

import pytest
import torch

import zoo
from zoo.components import cpu_steps
from zoo.components.kernels import implementations, preferring
from zoo.model.cache import KVCache
from zoo.model.generation import decode_step, left_pad, prefill
from zoo.specs.model import ModelSpec

VOCAB = 61
ROPE, NONE = {"kind": "rope"}, {"kind": "none"}
MIXERS = {  # case -> (family, positional, attention options)
    "mamba2": ("mamba2", NONE, {"kind": "mamba2", "n_heads": 4, "head_dim": 8, "n_groups": 2, "state_size": 8}),
    "mamba2-clamped": (
        "mamba2",
        NONE,
        {"kind": "mamba2", "n_heads": 2, "head_dim": 16, "state_size": 4, "dt_min": 0.01, "dt_max": 0.05},
    ),
    "gated_deltanet": (
        "gated_deltanet",
        NONE,
        {"kind": "gated_deltanet", "n_k_heads": 2, "n_v_heads": 4, "head_k_dim": 8, "head_v_dim": 6, "chunk_size": 4},
    ),
    "gated_deltanet-wide": (  # 45 value columns: one chunk of 32, one of 8 and five single columns
        "gated_deltanet",
        NONE,
        {"kind": "gated_deltanet", "n_k_heads": 1, "n_v_heads": 2, "head_k_dim": 12, "head_v_dim": 45},
    ),
    "linear": ("linear", ROPE, {"kind": "linear", "n_heads": 4, "head_dim": 8}),
    "linear-wide": ("linear", ROPE, {"kind": "linear", "n_heads": 2, "head_dim": 45}),
    "infini-delta": ("infini", ROPE, {"kind": "infini", "n_heads": 4, "segment": 4, "update": "delta"}),
    "infini-linear": ("infini", {"kind": "learned"}, {"kind": "infini", "n_heads": 2, "segment": 5}),
    "infini-wide": ("infini", ROPE, {"kind": "infini", "n_heads": 1, "head_dim": 46, "segment": 4, "update": "delta"}),
}


def _spec(case: str, state_dtype: str = "float32") -> ModelSpec:
    _, positional, attention = MIXERS[case]
    return ModelSpec.model_validate(
        {
            "name": f"steps-{case}",
            "vocab_size": VOCAB,
            "d_model": 32,
            "n_layers": 2,
            "max_seq_len": 32,
            "norm": {"kind": "rmsnorm"},
            "positional": positional,
            "attention": attention,
            "ffn": {"kind": "swiglu", "hidden": 24},
            "block": {"kind": "pre_norm"},
            "state_dtype": state_dtype,
        }
    )


def _built(spec: ModelSpec, impl: str) -> torch.nn.Module:
    with preferring(impl):
        return zoo.build(spec, device="cpu", dtype="float32", seed=0).eval()


def _bfloat16_pair(spec: ModelSpec) -> list[torch.nn.Module]:
    """The reference and the ``auto`` model of ``spec`` in bfloat16, same weights."""
    models = []
    for impl in ("reference", "auto"):
        with preferring(impl):
            models.append(zoo.build(spec, device="cpu", dtype="bfloat16", seed=0).eval())
    return models


def _stepped(model: torch.nn.Module, ids: torch.Tensor, split: int, mask: torch.Tensor | None = None) -> torch.Tensor:
    """Logits after a prefill of ``split`` tokens and one decode step per later token (B, T - split + 1, V)."""
    cache = KVCache(model, batch_size=ids.shape[0], max_len=ids.shape[1])
    out = [prefill(model, ids[:, :split], cache, None if mask is None else mask[:, :split])]  # (B, V)
    for t in range(split, ids.shape[1]):
        out.append(decode_step(model, ids[:, t : t + 1], cache))  # (B, V)
    return torch.stack(out, dim=1)


def _ran_step(model: torch.nn.Module, family: str) -> bool:
    """Whether the model's ``family`` mixers ran cpu-step (beside cpu-scan for prompts, under auto)."""
    used = implementations(model) or ""
    return cpu_steps.KERNEL.name in used.removeprefix(f"{family}: ").split("+")


def test_the_cpu_steps_build_with_the_dev_install():
    """A C++ compiler and ninja are there (as for cpu_scan): no silent skip of the checks below."""
    assert cpu_steps.EXTENSION.available()


@pytest.mark.parametrize("state_dtype", ["float32", "cache"])
@pytest.mark.parametrize("case", sorted(MIXERS))
def test_the_fused_step_equals_the_reference_step_and_the_full_forward(case: str, state_dtype: str):
    family = MIXERS[case][0]
    spec = _spec(case, state_dtype)
    reference, fast = _built(spec, "reference"), _built(spec, "auto")
    ids = torch.randint(0, VOCAB, (2, 19), generator=torch.Generator().manual_seed(2))  # (B, T)
    with torch.no_grad():
        full = reference(ids)  # (B, T, V)
        expected = _stepped(reference, ids, 6)
        got = _stepped(fast, ids, 6)
    assert _ran_step(fast, family)
    assert implementations(reference) == f"{family}: reference"
    torch.testing.assert_close(got, expected, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(got, full[:, 5:], atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("case", sorted(MIXERS))
def test_the_fused_step_after_a_left_padded_prefill(case: str):
    """Rows of different prompt lengths: the cache marks padding slots, every decode token is
    real, so the fused step runs and must see the padding as the reference does."""
    spec = _spec(case)
    reference, fast = _built(spec, "reference"), _built(spec, "cpu-step")
    prompts = [[5, 9, 3, 7, 1, 2, 8], [4, 6]]
    ids, mask = left_pad(prompts, pad_token_id=0)  # (B, 7)
    more = torch.randint(1, VOCAB, (2, 9), generator=torch.Generator().manual_seed(3))  # (B, 9)
    ids, mask = torch.cat([ids, more], dim=1), torch.cat([mask, torch.ones_like(more)], dim=1)
    with torch.no_grad():
        expected = _stepped(reference, ids, 7, mask)
        got = _stepped(fast, ids, 7, mask)
    assert _ran_step(fast, MIXERS[case][0])
    torch.testing.assert_close(got, expected, atol=1e-5, rtol=1e-5)


def test_a_half_precision_state_runs_the_reference_step():
    """``state_dtype: cache`` in bfloat16: the kernel updates float32 state only, so the step
    is the reference's, bit for bit."""
    spec = _spec("linear", "cache")
    models = _bfloat16_pair(spec)
    ids = torch.randint(0, VOCAB, (1, 8))  # (B, T)
    with torch.no_grad():
        expected, got = (_stepped(model, ids, 4) for model in models)
    assert torch.equal(got, expected)


def test_a_bfloat16_model_with_float32_state_runs_the_fused_step():
    """Linear attention keeps no window in the cache's dtype: with a float32 state a bfloat16
    model's step is the kernel's, inputs cast to float32 and the output back."""
    spec = _spec("linear")
    models = _bfloat16_pair(spec)
    ids = torch.randint(0, VOCAB, (2, 12), generator=torch.Generator().manual_seed(4))  # (B, T)
    with torch.no_grad():
        expected, got = (_stepped(model, ids, 4).float() for model in models)
    assert _ran_step(models[1], "linear")
    torch.testing.assert_close(got, expected, atol=2e-2, rtol=2e-2)


@pytest.mark.parametrize(("case", "step"), [("mamba2", "mamba2_step"), ("gated_deltanet", "gdn_step")])
def test_a_bfloat16_model_on_its_bfloat16_cache_runs_the_fused_step(case: str, step: str, monkeypatch):
    """The cache keeps the convolution window in the model's dtype (the recurrent state in
    float32): the kernel reads and writes that window as it is, the projection's bfloat16
    outputs stored exactly, and computes in float32 where the reference rounds to bfloat16
    between its ops, so the logits agree to bfloat16's precision."""
    calls: list[int] = []
    original = getattr(cpu_steps, step)

    def counted(*args, **kwargs):
        calls.append(1)
        return original(*args, **kwargs)

    monkeypatch.setattr(cpu_steps, step, counted)
    spec = _spec(case)
    models = _bfloat16_pair(spec)
    ids = torch.randint(0, VOCAB, (2, 12), generator=torch.Generator().manual_seed(4))  # (B, T)
    with torch.no_grad():
        expected = _stepped(models[0], ids, 4).float()
        assert not calls
        got = _stepped(models[1], ids, 4).float()
    cache = KVCache(models[1], batch_size=1, max_len=4)
    assert cache.layers[0]["conv"].dtype == torch.bfloat16 and len(calls) == 2 * (12 - 4)
    torch.testing.assert_close(got, expected, atol=3e-2, rtol=3e-2)


def test_a_bfloat16_infini_model_on_its_bfloat16_ring_runs_the_fused_step(monkeypatch):
    """The K/V ring in the model's dtype (M and z float32): the kernel reads its rows widened and
    writes the token back exactly, and its logits agree with the reference to bfloat16's precision."""
    calls: list[int] = []
    original = cpu_steps.infini_step

    def counted(*args, **kwargs):
        calls.append(1)
        return original(*args, **kwargs)

    monkeypatch.setattr(cpu_steps, "infini_step", counted)
    models = _bfloat16_pair(_spec("infini-delta"))
    ids = torch.randint(0, VOCAB, (2, 14), generator=torch.Generator().manual_seed(6))  # (B, T): past a segment
    with torch.no_grad():
        expected = _stepped(models[0], ids, 3).float()
        assert not calls
        got = _stepped(models[1], ids, 3).float()
    assert KVCache(models[1], batch_size=1, max_len=4).layers[0]["k"].dtype == torch.bfloat16
    assert len(calls) == 2 * (14 - 3)
    torch.testing.assert_close(got, expected, atol=3e-2, rtol=3e-2)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_half_precision_inputs_and_parameters_are_widened_inside(dtype: torch.dtype):
    """A half-precision model hands the kernels its projections' outputs and its parameters as
    they are (no cast per tensor in Python): the step equals the step on the same values in
    float32, the updated states bit for bit and the outputs once rounded to the model's dtype."""
    g = torch.Generator().manual_seed(7)
    H, P, N, K = 2, 4, 4, 4
    inner, conv_dim = H * P, H * P + 2 * N

    def rand(*shape: int) -> torch.Tensor:
        return torch.randn(*shape, generator=g).to(dtype)  # values a half precision holds

    conv = torch.nn.Conv1d(conv_dim, conv_dim, K, groups=conv_dim).to(dtype)
    params = (rand(H), rand(H), rand(H), rand(inner))  # dt_bias, A_log, D, norm weight
    proj, q, k, v = rand(1, inner + conv_dim + H), rand(1, H, 1, P), rand(1, H, 1, P), rand(1, H, 1, P)
    states = {"conv": rand(1, conv_dim, K).float(), "ssm": rand(1, H, P, N).float()}
    linear_state = (rand(1, H, P, P).float(), rand(1, H, P).abs().float())
    outputs = []
    with torch.no_grad():
        for widen in (False, True):
            cast = (lambda t: t.float()) if widen else (lambda t: t)
            conv_f = copy.deepcopy(conv).float() if widen else conv  # Module.float() converts in place
            state = {name: t.clone() for name, t in states.items()}
            kv, z = (t.clone() for t in linear_state)
            y = cpu_steps.mamba2_step(cast(proj), conv_f, tuple(map(cast, params)), state, 1, 1e-5, (0.0, 1e4))
            o = cpu_steps.linear_step(cast(q), cast(k), cast(v), kv, z)
            outputs.append((y, o, *state.values(), kv, z))
    assert [t.dtype for t in outputs[0][:2]] == [dtype, dtype]  # rounded once, for the output projection
    for fast, widened in zip(*outputs, strict=True):
        torch.testing.assert_close(fast, widened.to(fast.dtype), atol=0, rtol=0)
