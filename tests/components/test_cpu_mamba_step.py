"""Mamba-1's fused one-token decode step (``zoo.components.cpu_mamba_step``, implementation
``cpu-step``) equals the reference step: a prefill then decode steps gives the reference
model's logits to 1e-5 in float32, and the full forward's; ``--impl reference`` runs the
PyTorch step; a padded decode token and a half-precision state run the reference."""

from __future__ import annotations

import copy

import pytest
import torch

import zoo
from zoo.components import cpu_mamba_step
from zoo.components.kernels import implementations, preferring
from zoo.components.mamba import MambaMixer
from zoo.model.cache import KVCache
from zoo.model.generation import decode_step, left_pad, prefill
from zoo.specs.model import ModelSpec
from zoo.specs.state import LayerState

VOCAB = 61
CASES = {  # case -> mamba options beyond the tiny defaults
    "mamba": {},
    "falcon-norms": {"bcdt_norm_eps": 1e-6},
    "no-conv-bias-with-proj-bias": {"conv_bias": False, "bias": True, "d_conv": 3},
    # Mamba-130m's dt rank, and a state wider than a register: the vector loops and their tails
    "wide": {"d_state": 24, "dt_rank": 48},
    # 40 channels: two whole blocks of 16 (a register of state a row) and a last block of 8; a dt row of 7
    "ragged": {"d_state": 16, "dt_rank": 7, "expand": 1, "d_model": 40},
}


def _spec(case: str, state_dtype: str = "float32") -> ModelSpec:
    options = dict(CASES[case])
    d_model = options.pop("d_model", 32)
    return ModelSpec.model_validate(
        {
            "name": f"mamba-step-{case}",
            "vocab_size": VOCAB,
            "d_model": d_model,
            "n_layers": 2,
            "max_seq_len": 32,
            "norm": {"kind": "rmsnorm"},
            "positional": {"kind": "none"},
            "attention": {"kind": "mamba", "d_state": 8, "dt_rank": 4, **options},
            "ffn": {"kind": "swiglu", "hidden": 24},
            "block": {"kind": "pre_norm"},
            "state_dtype": state_dtype,
        }
    )


def _built(spec: ModelSpec, impl: str, dtype: str = "float32") -> torch.nn.Module:
    with preferring(impl):
        model = zoo.build(spec, device="cpu", dtype=dtype, seed=0).eval()
    with torch.no_grad():  # no parameter at its initial value (D = 1, A_log = log n, zero biases)
        generator = torch.Generator().manual_seed(1)
        for param in model.parameters():
            param.add_((0.1 * torch.randn(param.shape, generator=generator)).to(param.dtype))
    return model


def _stepped(
    model: torch.nn.Module,
    ids: torch.Tensor,
    split: int,
    mask: torch.Tensor | None = None,
    cache_dtype: torch.dtype | None = None,
) -> torch.Tensor:
    """Logits after a prefill of ``split`` tokens and one decode step per later token (B, T - split + 1, V)."""
    cache = KVCache(model, batch_size=ids.shape[0], max_len=ids.shape[1], dtype=cache_dtype)
    out = [prefill(model, ids[:, :split], cache, None if mask is None else mask[:, :split])]  # (B, V)
    for t in range(split, ids.shape[1]):
        out.append(decode_step(model, ids[:, t : t + 1], cache))  # (B, V)
    return torch.stack(out, dim=1)


@pytest.fixture
def kernel_calls(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """One entry per call of the fused step (the mixer calls it through the module)."""
    calls: list[int] = []
    original = cpu_mamba_step.mamba_step

    def counted(*args, **kwargs):  # type: ignore[no-untyped-def]
        calls.append(1)
        return original(*args, **kwargs)

    monkeypatch.setattr(cpu_mamba_step, "mamba_step", counted)
    return calls


def _ran_step(model: torch.nn.Module) -> bool:
    used = implementations(model) or ""
    return cpu_mamba_step.KERNEL.name in used.removeprefix("mamba: ").split("+")


def test_the_mamba_step_builds_with_the_dev_install():
    """A C++ compiler and ninja are there (as for cpu_scan): no silent skip of the checks below."""
    assert cpu_mamba_step.EXTENSION.available()


@pytest.mark.parametrize("state_dtype", ["float32", "cache"])
@pytest.mark.parametrize("case", sorted(CASES))
def test_the_fused_step_equals_the_reference_step_and_the_full_forward(
    case: str, state_dtype: str, kernel_calls: list[int]
):
    spec = _spec(case, state_dtype)
    reference, fast = _built(spec, "reference"), _built(spec, "auto")
    ids = torch.randint(0, VOCAB, (2, 19), generator=torch.Generator().manual_seed(2))  # (B, T)
    with torch.no_grad():
        full = reference(ids)  # (B, T, V)
        expected = _stepped(reference, ids, 6)
        got = _stepped(fast, ids, 6)
    assert len(kernel_calls) == 2 * (19 - 6)  # every decode step of both layers (the reference's: none)
    assert implementations(fast) == "mamba: cpu-scan+cpu-step"
    assert implementations(reference) == "mamba: reference"
    torch.testing.assert_close(got, expected, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(got, full[:, 5:], atol=1e-5, rtol=1e-5)


def test_the_kept_decay_follows_a_changed_a_log(kernel_calls: list[int]):
    """The kernel keeps each layer's decay -exp(A_log) between tokens: an in-place change of
    A_log (its version), a ``load_state_dict`` and a new parameter in its place each give the
    decay of the new values, as the reference, which makes it from A_log every step."""
    spec = _spec("mamba")
    reference, fast = _built(spec, "reference"), _built(spec, "auto")
    ids = torch.randint(0, VOCAB, (1, 10), generator=torch.Generator().manual_seed(7))  # (B, T)

    def agree() -> None:
        with torch.no_grad():
            torch.testing.assert_close(_stepped(fast, ids, 5), _stepped(reference, ids, 5), atol=1e-5, rtol=1e-5)

    agree()
    with torch.no_grad():
        for model in (reference, fast):
            for mixer in (m for m in model.modules() if isinstance(m, MambaMixer)):
                mixer.A_log.add_(0.5)  # in place: a new version of the same tensor
    agree()
    changed = {name: t + 0.25 if name.endswith("A_log") else t for name, t in reference.state_dict().items()}
    for model in (reference, fast):
        model.load_state_dict(changed)
    agree()
    for model in (reference, fast):
        for mixer in (m for m in model.modules() if isinstance(m, MambaMixer)):
            mixer.A_log = torch.nn.Parameter(mixer.A_log.detach() - 0.75)  # another tensor
    agree()
    assert len(kernel_calls) == 4 * 2 * (10 - 5)


def test_the_fused_step_after_a_left_padded_prefill():
    """Rows of different prompt lengths: the padding slots left the window and state as they
    were, and every decode token is real, so the fused step runs on what the prefill left."""
    spec = _spec("mamba")
    reference, fast = _built(spec, "reference"), _built(spec, "cpu-step")
    prompts = [[5, 9, 3, 7, 1, 2, 8], [4, 6]]
    ids, mask = left_pad(prompts, pad_token_id=0)  # (B, 7)
    more = torch.randint(1, VOCAB, (2, 9), generator=torch.Generator().manual_seed(3))  # (B, 9)
    ids, mask = torch.cat([ids, more], dim=1), torch.cat([mask, torch.ones_like(more)], dim=1)
    with torch.no_grad():
        expected = _stepped(reference, ids, 7, mask)
        got = _stepped(fast, ids, 7, mask)
    assert _ran_step(fast)
    torch.testing.assert_close(got, expected, atol=1e-5, rtol=1e-5)


def test_a_half_precision_state_runs_the_reference_step(kernel_calls: list[int]):
    """``state_dtype: cache`` in bfloat16: the kernel updates float32 state only, so the step
    is the reference's, bit for bit (the step's kernel forced alone: the fused prompt path sums
    in float32 where the reference rounds between its ops)."""
    spec = _spec("mamba", "cache")
    reference, fast = _built(spec, "reference", "bfloat16"), _built(spec, "cpu-step", "bfloat16")
    ids = torch.randint(0, VOCAB, (1, 8), generator=torch.Generator().manual_seed(5))  # (B, T)
    with torch.no_grad():
        expected, got = _stepped(reference, ids, 4), _stepped(fast, ids, 4)
    assert torch.equal(got, expected)
    assert not kernel_calls


@pytest.mark.parametrize("case", ["mamba", "wide", "ragged"])
@pytest.mark.parametrize("cache_dtype", [torch.float32, None])
def test_a_bfloat16_model_runs_the_fused_step(case: str, cache_dtype: torch.dtype | None, kernel_calls: list[int]):
    """bfloat16 weights (x_proj and dt_proj read in bfloat16 inside the kernel), the state in
    float32 and the window in float32 or (the default cache) bfloat16: the step is the
    kernel's, in float32 where the reference rounds its activations to bfloat16 between ops,
    so the logits agree to bfloat16's precision."""
    spec = _spec(case)
    reference, fast = _built(spec, "reference", "bfloat16"), _built(spec, "auto", "bfloat16")
    ids = torch.randint(0, VOCAB, (2, 12), generator=torch.Generator().manual_seed(4))  # (B, T)
    with torch.no_grad():
        expected = _stepped(reference, ids, 4, cache_dtype=cache_dtype).float()
        got = _stepped(fast, ids, 4, cache_dtype=cache_dtype).float()
    assert len(kernel_calls) == 2 * (12 - 4)
    torch.testing.assert_close(got, expected, atol=3e-2, rtol=3e-2)


def test_a_float64_model_runs_the_fused_step_on_a_float32_cache(kernel_calls: list[int]):
    """A model moved to float64 (``Module.double()``; zoo builds float32 and half precisions):
    with a float32 cache its weights are read by the kernel's one-row products, narrowed to
    float32, the precision of the kernel's sums, so the logits agree with the float64
    reference to 1e-5; its own float64 cache, whose window the kernel does not store, runs the
    reference step (the prefills still differ: the fused scan's order of sums)."""
    spec = _spec("wide")
    reference, fast = _built(spec, "reference").double(), _built(spec, "auto").double()
    ids = torch.randint(0, VOCAB, (2, 10), generator=torch.Generator().manual_seed(8))  # (B, T)
    with torch.no_grad():
        expected = _stepped(reference, ids, 4, cache_dtype=torch.float32)
        got = _stepped(fast, ids, 4, cache_dtype=torch.float32)
        assert len(kernel_calls) == 2 * (10 - 4)
        torch.testing.assert_close(got, expected, atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(_stepped(fast, ids, 4), _stepped(reference, ids, 4), atol=1e-5, rtol=1e-5)
    assert len(kernel_calls) == 2 * (10 - 4)


def test_the_reference_runs_under_autograd():
    """With gradients on, the inference-only step is not used: a stateful one-token call runs the
    reference, whose output is part of the autograd graph."""
    fast = _built(_spec("mamba"), "auto")
    mixer = next(m for m in fast.modules() if isinstance(m, MambaMixer))
    layout = mixer.state_layout(1, 8)
    tensors = {name: torch.zeros(t.shape, dtype=t.dtype) for name, t in layout.items()}
    state = LayerState(tensors, torch.arange(1), None, 8)
    out = mixer(torch.randn(1, 1, 32, generator=torch.Generator().manual_seed(6)), None, state)  # (B, 1, d)
    assert out.grad_fn is not None
    assert mixer.impl is None  # no kernel resolved: the call could not use one


def test_half_precision_inputs_and_parameters_are_widened_inside():
    """in_proj's bfloat16 output and the mixer's bfloat16 parameters go to the kernel as they are:
    the step equals the step on the same values in float32: the state bit for bit, the output
    once rounded to bfloat16."""
    g = torch.Generator().manual_seed(3)
    D, N, K, R = 16, 4, 4, 3

    def rand(*shape: int) -> torch.Tensor:
        return torch.randn(*shape, generator=g).bfloat16()

    conv = torch.nn.Conv1d(D, D, K, groups=D).bfloat16()
    xz, x_proj, dt_proj = rand(1, 2 * D), rand(R + 2 * N, D), (rand(D, R), rand(D))
    params = (rand(D, N), rand(D))  # A_log, D
    states = {"conv": rand(1, D, K), "ssm": rand(1, D, N).float()}
    outputs = []
    with torch.no_grad():
        for widen in (False, True):
            cast = (lambda t: t.float()) if widen else (lambda t: t)
            state = {name: t.clone() for name, t in states.items()}
            layer = copy.deepcopy(conv).float() if widen else conv  # Module.float() converts in place
            dt = tuple(map(cast, dt_proj))
            y = cpu_mamba_step.mamba_step(cast(xz), layer, (x_proj, None), dt, tuple(map(cast, params)), state, None)
            outputs.append((y, *state.values()))
    assert outputs[0][0].dtype == torch.bfloat16  # rounded once, for out_proj
    for fast, widened in zip(*outputs, strict=True):
        torch.testing.assert_close(fast, widened.to(fast.dtype), atol=0, rtol=0)


def test_the_step_gives_the_same_bits_whatever_the_thread_count():
    """Threads take whole blocks of 16 channels, whose sums (dt rows, C . h) are made together:
    one thread or two, the output and the state are the same bits (a block split between threads
    would have summed its channels another way). 200 channels: twelve whole blocks and one of 8."""
    g = torch.Generator().manual_seed(9)
    D, N, K, R = 200, 16, 4, 13
    conv = torch.nn.Conv1d(D, D, K, groups=D)
    xz, x_proj = torch.randn(1, 2 * D, generator=g), 0.1 * torch.randn(R + 2 * N, D, generator=g)
    dt_proj = (0.3 * torch.randn(D, R, generator=g), torch.randn(D, generator=g) - 2)
    params = (torch.log(1 + 15 * torch.rand(D, N, generator=g)), torch.randn(D, generator=g))  # A_log, D
    outputs = []
    threads = torch.get_num_threads()
    try:
        for count in (1, 2):
            torch.set_num_threads(count)
            state = {"conv": torch.zeros(1, D, K), "ssm": torch.zeros(1, D, N)}
            with torch.no_grad():
                ys = [
                    cpu_mamba_step.mamba_step(xz * t, conv, (x_proj, None), dt_proj, params, state, None)
                    for t in (1, -2, 3)
                ]
            outputs.append((torch.stack(ys), state["ssm"]))
    finally:
        torch.set_num_threads(threads)
    assert torch.equal(outputs[0][0], outputs[1][0]) and torch.equal(outputs[0][1], outputs[1][1])
