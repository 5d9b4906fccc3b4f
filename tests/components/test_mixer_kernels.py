"""Each fast mixer implementation equals the reference maths: logits to 1e-5 in float32, and a
prefill followed by decode steps equals the full forward (``zoo.components.kernels``)."""

from __future__ import annotations

import pytest
import torch

import zoo
from tests.conftest import tiny_spec
from zoo.components import cpu_scan
from zoo.components.kernels import implementations, preferring
from zoo.errors import BenchError
from zoo.model.cache import KVCache
from zoo.model.generation import decode_step, prefill


def test_the_cpu_scan_builds_with_the_dev_install():
    """The dev install brings ninja (pyproject's dev extra) and the machine a C++ compiler, so
    the fused scan the tests below compare builds here: no silent skip of what they check."""
    assert cpu_scan.EXTENSION.available()


def _built(spec, impl: str):  # type: ignore[no-untyped-def]
    with preferring(impl):
        return zoo.build(spec, device="cpu", dtype="float32", seed=0).eval()


def _prefill_then_steps(model, ids: torch.Tensor, split: int) -> torch.Tensor:  # type: ignore[no-untyped-def]
    """Logits of every position after the first ``split - 1``: a prefill of ``split`` tokens,
    then one decode step per remaining token."""
    cache = KVCache(model, batch_size=ids.shape[0], max_len=ids.shape[1])
    out = [prefill(model, ids[:, :split], cache)]  # (B, V)
    for t in range(split, ids.shape[1]):
        out.append(decode_step(model, ids[:, t : t + 1], cache))  # (B, V)
    return torch.stack(out, dim=1)  # (B, T - split + 1, V)


@pytest.mark.parametrize("state_dtype", ["float32", "cache"])
def test_mamba_cpu_scan_equals_the_reference(state_dtype: str):
    spec = tiny_spec("mamba-130m").override({"state_dtype": state_dtype})
    reference, fast = _built(spec, "reference"), _built(spec, "auto")
    ids = torch.randint(0, spec.vocab_size, (2, 37), generator=torch.Generator().manual_seed(1))  # (B, T)
    with torch.no_grad():
        expected = reference(ids)  # (B, T, V)
        got = fast(ids)
        assert implementations(fast) == "mamba: cpu-scan+cpu-step"  # the step's kernel: cpu_mamba_step
        assert implementations(reference) == "mamba: reference"
        torch.testing.assert_close(got, expected, atol=1e-5, rtol=1e-5)
        stepped = _prefill_then_steps(fast, ids, 20)
    torch.testing.assert_close(stepped, expected[:, 19:], atol=1e-5, rtol=1e-5)


def test_naming_the_kernel_forces_it_and_reference_forces_the_reference():
    spec = tiny_spec("mamba-130m")
    ids = torch.randint(0, spec.vocab_size, (1, 9))  # (B, T)
    with torch.no_grad():
        named, reference = _built(spec, "cpu-scan"), _built(spec, "reference")
        named(ids), reference(ids)
    assert implementations(named) == "mamba: cpu-scan" and implementations(reference) == "mamba: reference"


def test_training_takes_the_reference_scan():
    """The fused kernel has no backward: under autograd the reference runs and gradients flow."""
    model = _built(tiny_spec("mamba-130m"), "auto").train()
    model(torch.randint(0, 97, (1, 9))).sum().backward()
    assert implementations(model) is None  # the kernel is never resolved under autograd: the reference ran
    assert all(p.grad is not None for name, p in model.named_parameters() if "A_log" in name)


def test_an_unknown_implementation_is_a_bench_error():
    with (
        pytest.raises(BenchError, match="impl: 'fast' is not an implementation; allowed: .*auto.*reference"),
        preferring("fast"),
    ):
        pass
