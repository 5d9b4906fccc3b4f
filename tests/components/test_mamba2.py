"""The Mamba2 mixer against transformers' torch path (Mamba2Mixer.torch_forward), same weights."""

from __future__ import annotations

import pytest
import torch

from zoo.components.mamba2 import Mamba2Mixer
from zoo.components.ssd import chunk_scan, ssd_step

transformers = pytest.importorskip("transformers")
modeling = pytest.importorskip("transformers.models.mamba2.modeling_mamba2")

D, H, P, G, N, K = 32, 4, 16, 2, 8, 4


def _pair(chunk_size: int = 4):  # type: ignore[no-untyped-def]
    config = transformers.Mamba2Config(
        hidden_size=D,
        expand=2,
        num_heads=H,
        head_dim=P,
        n_groups=G,
        state_size=N,
        conv_kernel=K,
        chunk_size=chunk_size,
        num_hidden_layers=1,
        vocab_size=50,
    )
    torch.manual_seed(0)
    reference = modeling.Mamba2Mixer(config, layer_idx=0).eval()
    with torch.no_grad():
        for param in reference.parameters():
            param.add_(torch.randn_like(param) * 0.1)
    ours = Mamba2Mixer(D, 2 * D, H, G, N, K, chunk_size=chunk_size, conv_bias=True, eps=config.layer_norm_epsilon)
    ours.load_state_dict(reference.state_dict())
    return config, reference, ours


def _state(ours: Mamba2Mixer, batch: int) -> dict[str, torch.Tensor]:
    return {name: torch.zeros(shape) for name, shape in ours.state_shapes(batch).items()}


def test_chunked_scan_equals_the_token_by_token_scan():
    torch.manual_seed(1)
    b, T, h, p, n = 2, 11, 3, 4, 5
    x, B, C = torch.randn(b, T, h, p), torch.randn(b, T, h, n), torch.randn(b, T, h, n)
    dt, A = torch.rand(b, T, h), -torch.rand(h) * 2
    state = torch.randn(b, h, p, n)
    y, final = chunk_scan(x, dt, A, B, C, state, chunk_size=4)
    step_state, steps = state, []
    for t in range(T):
        out, step_state = ssd_step(x[:, t], dt[:, t], A, B[:, t], C[:, t], step_state)
        steps.append(out)
    torch.testing.assert_close(y, torch.stack(steps, dim=1), atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(final, step_state, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("chunk_size", [4, 256])
def test_full_sequence_matches_transformers(chunk_size: int):
    _, reference, ours = _pair(chunk_size)
    x = torch.randn(2, 13, D)
    with torch.no_grad():
        torch.testing.assert_close(ours.mix(x), reference(x), atol=1e-4, rtol=1e-4)


def test_prefill_then_steps_match_transformers_with_its_cache():
    config, reference, ours = _pair()
    x = torch.randn(2, 12, D)
    cache = transformers.DynamicCache(config=config)
    state = _state(ours, 2)
    with torch.no_grad():
        torch.testing.assert_close(
            ours.mix(x[:, :9], state), reference(x[:, :9], cache_params=cache), atol=1e-4, rtol=1e-4
        )
        for t in range(9, 12):
            expected = reference(x[:, t : t + 1], cache_params=cache)
            torch.testing.assert_close(ours.mix(x[:, t : t + 1], state), expected, atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(state["ssm"], cache.get_recurrent_state(0, state_idx=0), atol=1e-4, rtol=1e-4)


def test_prefill_then_steps_equal_the_full_sequence():
    _, _, ours = _pair()
    x = torch.randn(2, 12, D)
    state = _state(ours, 2)
    with torch.no_grad():
        full = ours.mix(x)
        parts = [ours.mix(x[:, :5], state), ours.mix(x[:, 5:9], state)]
        parts += [ours.mix(x[:, t : t + 1], state) for t in range(9, 12)]
    torch.testing.assert_close(torch.cat(parts, dim=1), full, atol=1e-5, rtol=1e-5)


def test_left_padding_leaves_the_state_as_without_the_pads():
    _, _, ours = _pair()
    x = torch.randn(1, 7, D)
    padded = torch.cat([torch.randn(1, 3, D), x], dim=1)
    valid = torch.tensor([[False] * 3 + [True] * 7])
    plain, masked = _state(ours, 1), _state(ours, 1)
    with torch.no_grad():
        expected = ours.mix(x, plain)
        got = ours.mix(padded, masked, token_valid=valid)[:, 3:]
    torch.testing.assert_close(got, expected, atol=1e-5, rtol=1e-5)
    for name in plain:
        torch.testing.assert_close(masked[name], plain[name], atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("T", [5, 11])
def test_training_gradients_through_the_chunked_scan_equal_the_token_loop(T: int):
    """Training runs the chunked form under autograd; a sequence shorter than ``chunk_size``
    (256 by default) is one chunk of its own length, not padded. Values and gradients of
    every input equal the one-token recurrence's."""
    torch.manual_seed(2)
    b, h, p, n = 2, 3, 4, 5
    inputs = [
        torch.randn(b, T, h, p),
        torch.rand(b, T, h),
        -torch.rand(h) * 2,
        torch.randn(b, T, h, n),
        torch.randn(b, T, h, n),
        torch.randn(b, h, p, n),
    ]
    chunked = [t.clone().requires_grad_() for t in inputs]
    looped = [t.clone().requires_grad_() for t in inputs]
    y, final = chunk_scan(*chunked, chunk_size=256)
    x, dt, A, B, C, state = looped
    steps = []
    for t in range(T):
        out, state = ssd_step(x[:, t], dt[:, t], A, B[:, t], C[:, t], state)
        steps.append(out)
    torch.testing.assert_close(y, torch.stack(steps, dim=1), atol=1e-5, rtol=1e-5)
    weights = torch.randn_like(y)
    ((y * weights).sum() + final.sum()).backward()
    ((torch.stack(steps, dim=1) * weights).sum() + state.sum()).backward()
    for ours, reference in zip(chunked, looped):
        torch.testing.assert_close(ours.grad, reference.grad, atol=1e-5, rtol=1e-5)


def test_grouped_b_and_c_equal_b_and_c_repeated_per_head_with_gradients():
    """``chunk_scan`` takes B, C per group (heads share them, no repeat): values and gradients
    equal the one-token recurrence on B, C repeated to every head, across several chunks."""
    torch.manual_seed(3)
    b, T, h, g, p, n = 2, 11, 6, 2, 4, 5
    inputs = [torch.randn(b, T, h, p), torch.rand(b, T, h), -torch.rand(h) * 2]
    inputs += [torch.randn(b, T, g, n), torch.randn(b, T, g, n), torch.randn(b, h, p, n)]
    grouped = [t.clone().requires_grad_() for t in inputs]
    looped = [t.clone().requires_grad_() for t in inputs]
    y, final = chunk_scan(*grouped, chunk_size=4)
    x, dt, A, B, C, state = looped
    B_heads, C_heads = (t.repeat_interleave(h // g, dim=2) for t in (B, C))  # (b, T, h, n)
    steps = []
    for t in range(T):
        out, state = ssd_step(x[:, t], dt[:, t], A, B_heads[:, t], C_heads[:, t], state)
        steps.append(out)
    torch.testing.assert_close(y, torch.stack(steps, dim=1), atol=1e-5, rtol=1e-5)
    weights = torch.randn_like(y)
    ((y * weights).sum() + final.sum()).backward()
    ((torch.stack(steps, dim=1) * weights).sum() + state.sum()).backward()
    for ours, reference in zip(grouped, looped, strict=True):
        torch.testing.assert_close(ours.grad, reference.grad, atol=1e-5, rtol=1e-5)
