"""The CUDA kernels' adapters (``zoo/components/cuda_kernels/``) and how they are chosen.

Without a GPU: the kernel libraries' functions are replaced by their own PyTorch references,
in the libraries' API and layout, with the kernels' argument checks
(``tests/components/library_kernels.py``), and each mixer forced onto its kernel path must
equal the reference path — a full forward, and a prefill, a continued prefill and decode
steps. That checks every transposition, argument and state hand-over of the adapters; the
kernels themselves are checked by the ``gpu`` tests at the end, on a CUDA device with
``zoo[kernels]`` installed.
"""

from __future__ import annotations

import logging

import pytest
import torch

import zoo
from tests.components import library_kernels as lib
from zoo.components.cuda_kernels import causal_conv1d, fla, mamba_ssm
from zoo.components.kernels import KernelChoice, implementations, preferring
from zoo.components.mamba import CPU_SCAN as MAMBA_CPU_SCAN
from zoo.components.mamba2 import MAMBA_SSM as MAMBA2_SSM
from zoo.model.cache import KVCache
from zoo.model.generation import decode_step, prefill
from zoo.specs.state import LayerState

MIXERS = {  # small enough for the references' Python loops; several chunks, groups and heads
    "mamba": ({"kind": "mamba", "d_state": 8, "expand": 2, "dt_rank": 4}, "mamba-ssm"),
    "mamba2": (
        {"kind": "mamba2", "n_heads": 4, "head_dim": 8, "n_groups": 2, "state_size": 8, "chunk_size": 8},
        "mamba-ssm",
    ),
    "gated_deltanet": (
        {"kind": "gated_deltanet", "n_k_heads": 2, "n_v_heads": 4, "head_k_dim": 8, "head_v_dim": 8, "chunk_size": 8},
        "fla",
    ),
    "linear": ({"kind": "linear", "n_heads": 4}, "fla"),
}


def _spec(kind: str, **extra: object) -> zoo.ModelSpec:
    return zoo.ModelSpec.model_validate(
        {
            "name": f"{kind}-kernels",
            "vocab_size": 61,
            "d_model": 32,
            "n_layers": 2,
            "max_seq_len": 64,
            "norm": {"kind": "rmsnorm"},
            "positional": {"kind": "none"},
            "block": {"kind": "pre_norm"},
            "attention": MIXERS[kind][0],
            "ffn": {"kind": "swiglu", "hidden": 48},
            **extra,
        }
    )


def _built(spec: zoo.ModelSpec, impl: str, device: str = "cpu", dtype: str = "float32"):  # type: ignore[no-untyped-def]
    """Built under ``impl``, with steps dt about 1 (the initial 0.001-0.1 leaves states too
    faint to tell a state handed over from one dropped, at these tolerances)."""
    with preferring(impl):
        model = zoo.build(spec, device=device, dtype=dtype, seed=0).eval()
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            if name.endswith(("dt_bias", "dt_proj.bias")):
                parameter.fill_(0.5)  # softplus(0.5 + ...) about 1
    return model


def _forced(model, impl: str):  # type: ignore[no-untyped-def]
    """Each mixer's implementation set to ``impl`` as if resolved on CUDA."""
    for module in model.modules():
        if isinstance(module, KernelChoice):
            module.impl = impl
    return model


def _in_steps(model, ids: torch.Tensor, first: int, second: int) -> torch.Tensor:  # type: ignore[no-untyped-def]
    """Logits of positions first-1 ... T-1: a prefill of ``first`` tokens, a continued prefill
    up to ``second`` (the state is no longer zeros), then one decode step per token."""
    cache = KVCache(model, batch_size=ids.shape[0], max_len=ids.shape[1])
    out = [prefill(model, ids[:, :first], cache)]  # (B, V)
    out += model(ids[:, first:second], cache=cache).unbind(dim=1)  # (B, V) each
    for t in range(second, ids.shape[1]):
        out.append(decode_step(model, ids[:, t : t + 1], cache))  # (B, V)
    return torch.stack(out, dim=1)  # (B, T - first + 1, V)


@pytest.fixture
def library_references(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(causal_conv1d.LIBRARY, "ops", causal_conv1d.Ops(lib.causal_conv1d_fn, lib.causal_conv1d_update))
    monkeypatch.setattr(
        mamba_ssm.LIBRARY,
        "ops",
        mamba_ssm.Ops(lib.selective_scan_fn, lib.selective_state_update, lib.mamba_chunk_scan_combined),
    )
    monkeypatch.setattr(fla.LIBRARY, "ops", fla.Ops(lib.gated_delta_rule, lib.gated_delta_rule, lib.chunk_linear_attn))


@pytest.mark.parametrize("kind", sorted(MIXERS))
@pytest.mark.parametrize("state_dtype", ["float32", "cache"])
def test_each_adapter_on_its_library_reference_equals_zoo_reference(kind: str, state_dtype: str, library_references):
    spec = _spec(kind, state_dtype=state_dtype)
    reference = _built(spec, "reference")
    kernel = _forced(_built(spec, "reference"), MIXERS[kind][1])
    ids = torch.randint(0, spec.vocab_size, (2, 23), generator=torch.Generator().manual_seed(1))  # (B, T)
    with torch.no_grad():
        expected = reference(ids)  # (B, T, V)
        torch.testing.assert_close(kernel(ids), expected, atol=1e-4, rtol=1e-4)
        stepped = _in_steps(kernel, ids, 7, 16)
    assert implementations(kernel) == f"{kind}: {MIXERS[kind][1]}"
    torch.testing.assert_close(stepped, expected[:, 6:], atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("kind", sorted(MIXERS))
@pytest.mark.parametrize("T", [1, 9])
def test_each_adapter_carries_a_state_far_from_zero_as_the_reference(kind: str, T: int, library_references):
    """A random O(1) state entering a call (as after a long prompt; a tiny model's own states
    stay too faint to show a state dropped): the outputs and every state tensor after the
    call equal the reference's, for a decode step (T = 1) and a continued prefill."""
    mixers = {
        "reference": _built(_spec(kind), "reference").layers[0].attention,
        "kernel": _forced(_built(_spec(kind), "reference"), MIXERS[kind][1]).layers[0].attention,
    }
    generator = torch.Generator().manual_seed(3)
    layout = mixers["reference"].state_layout(2, 64)
    start = {name: torch.randn(tensor.shape, generator=generator) for name, tensor in layout.items()}
    if "k_sum" in start:  # a sum of positive features, as linear attention's normaliser is
        start["k_sum"] = start["k_sum"].abs() + 1.0
    x = torch.randn(2, T, 32, generator=generator)  # (B, T, d)
    got = {}
    for name, mixer in mixers.items():
        tensors = {key: value.clone() for key, value in start.items()}
        layer = LayerState(tensors, torch.arange(16, 16 + T), None, 64, filled=16 + T)
        with torch.no_grad():
            got[name] = (mixer(x, None, layer), tensors)
    torch.testing.assert_close(got["kernel"][0], got["reference"][0], atol=1e-4, rtol=1e-4)
    for key in start:
        torch.testing.assert_close(got["kernel"][1][key], got["reference"][1][key], atol=1e-4, rtol=1e-4, msg=key)


def test_a_left_padded_batch_on_the_kernels_equals_each_row_alone(library_references):
    """Padding enters the kernels as zero inputs with a zero step: the state is untouched."""
    for kind, (_, impl) in MIXERS.items():
        model = _forced(_built(_spec(kind), "reference"), impl)
        ids = torch.randint(0, 61, (2, 12), generator=torch.Generator().manual_seed(2))  # (B, T)
        mask = torch.ones_like(ids)
        mask[0, :5] = 0  # row 0: 5 pads, then 7 tokens
        with torch.no_grad():
            cache = KVCache(model, batch_size=2, max_len=12)
            padded = prefill(model, ids, cache, attention_mask=mask)  # (B, V)
            alone = prefill(model, ids[:1, 5:], KVCache(model, batch_size=1, max_len=7))
        torch.testing.assert_close(padded[0], alone[0], atol=1e-4, rtol=1e-4, msg=kind)


def test_a_mamba_convolution_wider_than_the_library_compiles_runs_in_pytorch(library_references):
    """causal-conv1d compiles widths 2 to 4: a width of 5 convolves in PyTorch, the scan still
    on the kernel (the stand-in asserts the width, so a call would fail)."""
    spec = _spec("mamba").override({"attention.d_conv": 5})
    ids = torch.randint(0, 61, (1, 9))  # (B, T)
    with torch.no_grad():
        torch.testing.assert_close(_forced(_built(spec, "reference"), "mamba-ssm")(ids), _built(spec, "reference")(ids))


def test_without_the_libraries_auto_on_cuda_runs_the_reference_and_says_so(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
):
    """The device check is by kind, so a module built on the CPU resolves for "cuda" as one
    on a GPU would: with the libraries absent (their imports made to fail, whether or not they
    are installed here), each loader fails, once, saying why and what to install."""

    def absent() -> None:
        raise ImportError("No module named 'the library'")

    for module in (causal_conv1d, mamba_ssm, fla):  # a fresh loader: nothing imported, no failure yet
        monkeypatch.setattr(module.LIBRARY, "importer", absent)
        monkeypatch.setattr(module.LIBRARY, "ops", None)
        monkeypatch.setattr(module.LIBRARY, "failed", None)
    with caplog.at_level(logging.WARNING):
        for kind in MIXERS:
            mixer = next(m for m in _built(_spec(kind), "auto").modules() if isinstance(m, KernelChoice))
            assert mixer.resolve_kernel(torch.device("cuda")) == "reference", kind
    said = caplog.text
    assert "mamba-ssm is not usable" in said and "flash-linear-attention is not usable" in said
    assert "pip install 'zoo[kernels]'" in said


@pytest.mark.parametrize("kind", sorted(MIXERS))
def test_naming_a_cuda_kernel_on_the_cpu_runs_the_reference(kind: str):
    spec = _spec(kind)
    named = _built(spec, MIXERS[kind][1])
    ids = torch.randint(0, 61, (1, 9))  # (B, T)
    with torch.no_grad():
        torch.testing.assert_close(named(ids), _built(spec, "reference")(ids))
    assert implementations(named) == f"{kind}: reference"


def test_under_autograd_a_declared_backward_lets_the_kernel_run_without_state(library_references):
    """``Kernel.autograd``: the CUDA libraries define their prefill kernels' backward, so a
    training forward (no cached state) keeps the kernel; the CPU scan has none."""
    cuda_mixer = _forced(_built(_spec("mamba2"), "reference"), "mamba-ssm").layers[0].attention
    cpu = torch.device("cpu")
    with torch.enable_grad():
        assert not cuda_mixer.uses(MAMBA2_SSM, cpu, stateful=False)  # not this device's
        cuda_mixer.impl = None
        cuda_mixer.impl_preference = "mamba-ssm"
        assert not cuda_mixer.uses(MAMBA2_SSM, cpu, stateful=False)
        assert cuda_mixer.impl is None  # nothing resolved: no kernel of the CPU may run under autograd
    mamba = _built(_spec("mamba"), "cpu-scan").layers[0].attention
    with torch.enable_grad():
        assert not mamba.uses(MAMBA_CPU_SCAN, cpu, stateful=False) and mamba.impl is None
    with torch.no_grad():  # inference: the CPU scan runs
        assert mamba.uses(MAMBA_CPU_SCAN, cpu, stateful=True) and mamba.impl == "cpu-scan"
    declared = {k.name: k.autograd for k in type(mamba).kernels}
    assert declared == {"mamba-ssm": True, "cpu-scan": False, "cpu-step": False}


# ---- on a CUDA device with zoo[kernels] ---------------------------------------------------------
LOADS = {  # what each mixer's CUDA kernel needs (as its Kernel.loads)
    "mamba": lambda: mamba_ssm.load_mamba1() and causal_conv1d.load(),
    "mamba2": lambda: mamba_ssm.load_mamba2() and causal_conv1d.load(),
    "gated_deltanet": lambda: fla.load() and causal_conv1d.load(),
    "linear": fla.load,
}
DEVICE_SIZES = {  # the widths real models use, so every Triton block is a full one
    "mamba": {"d_state": 16, "dt_rank": 16},
    "mamba2": {"n_heads": 4, "head_dim": 64, "n_groups": 2, "state_size": 64, "chunk_size": 64},
    "gated_deltanet": {"n_k_heads": 2, "n_v_heads": 4, "head_k_dim": 64, "head_v_dim": 64, "chunk_size": 64},
    "linear": {"n_heads": 4, "head_dim": 64},
}


def _device_spec(kind: str) -> zoo.ModelSpec:
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA device")
    if not LOADS[kind]():
        pytest.skip(f"{MIXERS[kind][1]}'s libraries are not usable here (zoo[kernels])")
    sizes = {f"attention.{key}": value for key, value in DEVICE_SIZES[kind].items()}
    return _spec(kind).override({"d_model": 256, "max_seq_len": 160, "ffn.hidden": 512, **sizes})


def _relative_error(got: torch.Tensor, expected: torch.Tensor) -> float:
    """RMS of the difference over RMS of the reference: fla's tests' ``get_err_ratio``."""
    return float((got.float() - expected.float()).pow(2).mean().sqrt() / expected.float().pow(2).mean().sqrt())


# Bounds: fla's tests/ops/test_gated_delta.py allow error ratios of 0.005-0.02 in bfloat16;
# float32 here, whose Triton dots run in TF32, is held to 0.005.
RATIO = {"float32": 5e-3, "bfloat16": 2e-2}


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize("kind", sorted(MIXERS))
def test_each_cuda_kernel_equals_the_reference_on_the_device(kind: str, dtype: str):
    spec = _device_spec(kind)
    reference, kernel = _built(spec, "reference", "cuda", dtype), _built(spec, "auto", "cuda", dtype)
    ids = torch.randint(0, spec.vocab_size, (2, 150), device="cuda")  # (B, T): several chunks
    with torch.no_grad():
        expected = reference(ids)  # (B, T, V)
        full = kernel(ids)
        stepped = _in_steps(kernel, ids, 100, 130)  # a prefill, a continued prefill, 20 decode steps
    assert implementations(kernel) == f"{kind}: {MIXERS[kind][1]}"
    assert _relative_error(full, expected) < RATIO[dtype]
    assert _relative_error(stepped, expected[:, 99:]) < RATIO[dtype]


@pytest.mark.gpu
@pytest.mark.parametrize("kind", sorted(MIXERS))
def test_training_runs_the_cuda_kernel_and_its_gradients_match(kind: str):
    spec = _device_spec(kind)
    ids = torch.randint(0, spec.vocab_size, (2, 100), device="cuda")  # (B, T)
    grads = {}
    for impl in ("reference", "auto"):
        model = _built(spec, impl, "cuda").train()
        model(ids).float().logsumexp(-1).mean().backward()
        grads[impl] = torch.cat([p.grad.flatten() for p in model.parameters() if p.grad is not None])
    assert implementations(model) == f"{kind}: {MIXERS[kind][1]}"
    assert _relative_error(grads["auto"], grads["reference"]) < RATIO["float32"]
