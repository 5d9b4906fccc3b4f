"""Gated DeltaNet against transformers' Qwen3-Next torch path, on the same weights."""

from __future__ import annotations

import math

import pytest
import torch

from zoo.components.delta_rule import chunk_gated_delta_rule, gated_delta_step
from zoo.components.gated_deltanet import GatedDeltaNet

transformers = pytest.importorskip("transformers")
qwen3_next = pytest.importorskip("transformers.models.qwen3_next.modeling_qwen3_next")

D, HK, HV, DK, DV, K = 32, 2, 4, 8, 6, 4


def _pair(chunk_size: int = 4):  # type: ignore[no-untyped-def]
    config = transformers.Qwen3NextConfig(
        hidden_size=D,
        linear_num_key_heads=HK,
        linear_num_value_heads=HV,
        linear_key_head_dim=DK,
        linear_value_head_dim=DV,
        linear_conv_kernel_dim=K,
        num_hidden_layers=1,
        layer_types=["linear_attention"],
        num_attention_heads=2,
        num_key_value_heads=1,
        head_dim=8,
        vocab_size=50,
        num_experts=0,
    )
    torch.manual_seed(0)
    reference = qwen3_next.Qwen3NextGatedDeltaNet(config, layer_idx=0).eval()
    with torch.no_grad():
        for param in reference.parameters():
            param.add_(torch.randn_like(param) * 0.1)
    ours = GatedDeltaNet(D, HK, HV, DK, DV, K, eps=config.rms_norm_eps, chunk_size=chunk_size)
    ours.load_state_dict(reference.state_dict())
    return config, reference, ours


def test_chunked_rule_equals_the_token_by_token_rule():
    torch.manual_seed(1)
    B, H, T = 2, 3, 11
    q, k = torch.randn(B, H, T, 5), torch.nn.functional.normalize(torch.randn(B, H, T, 5), dim=-1)
    v = torch.randn(B, H, T, 4)
    g, beta = -torch.rand(B, H, T), torch.rand(B, H, T)
    state = torch.randn(B, H, 5, 4)
    out, final = chunk_gated_delta_rule(q, k, v, g, beta, state, chunk_size=4)
    step_state, steps = state, []
    for t in range(T):
        o, step_state = gated_delta_step(q[:, :, t], k[:, :, t], v[:, :, t], g[:, :, t], beta[:, :, t], step_state)
        steps.append(o)
    torch.testing.assert_close(out, torch.stack(steps, dim=2), atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(final, step_state, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("chunk_size", [4, 64])
def test_full_sequence_matches_transformers(chunk_size: int):
    _, reference, ours = _pair(chunk_size)
    x = torch.randn(2, 13, D)
    with torch.no_grad():
        torch.testing.assert_close(ours.mix(x), reference(x), atol=1e-4, rtol=1e-4)


def test_prefill_then_steps_match_transformers_with_its_cache():
    config, reference, ours = _pair()
    x = torch.randn(2, 12, D)
    cache = transformers.DynamicCache(config=config)
    state = {name: torch.zeros(shape) for name, shape in ours.state_shapes(2).items()}
    with torch.no_grad():
        torch.testing.assert_close(
            ours.mix(x[:, :9], state), reference(x[:, :9], cache_params=cache), atol=1e-4, rtol=1e-4
        )
        for t in range(9, 12):
            expected = reference(x[:, t : t + 1], cache_params=cache)
            torch.testing.assert_close(ours.mix(x[:, t : t + 1], state), expected, atol=1e-4, rtol=1e-4)
        torch.testing.assert_close(state["recurrent"], cache.get_recurrent_state(0, state_idx=0), atol=1e-4, rtol=1e-4)


def test_prefill_then_steps_equal_the_full_sequence():
    _, _, ours = _pair()
    x = torch.randn(2, 12, D)
    state = {name: torch.zeros(shape) for name, shape in ours.state_shapes(2).items()}
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
    plain = {name: torch.zeros(shape) for name, shape in ours.state_shapes(1).items()}
    masked = {name: torch.zeros(shape) for name, shape in ours.state_shapes(1).items()}
    with torch.no_grad():
        expected = ours.mix(x, plain)
        got = ours.mix(padded, masked, token_valid=valid)[:, 3:]
    torch.testing.assert_close(got, expected, atol=1e-5, rtol=1e-5)
    for name in plain:
        torch.testing.assert_close(masked[name], plain[name], atol=1e-5, rtol=1e-5)


def _chunked_and_looped(inputs: list[torch.Tensor], chunk_size: int) -> tuple:
    """Leaf copies of ``inputs`` (q, k, v, g, beta, state) through the chunked rule and through
    the one-token rule: (chunked leaves, looped leaves, (out, final), (stacked steps, last state))."""
    chunked = [t.clone().requires_grad_() for t in inputs]
    looped = [t.clone().requires_grad_() for t in inputs]
    out, final = chunk_gated_delta_rule(*chunked, chunk_size=chunk_size)
    q, k, v, g, beta, state = looped
    steps = []
    for t in range(q.shape[2]):
        o, state = gated_delta_step(q[:, :, t], k[:, :, t], v[:, :, t], g[:, :, t], beta[:, :, t], state)
        steps.append(o)
    return chunked, looped, (out, final), (torch.stack(steps, dim=2), state)


@pytest.mark.parametrize(("T", "chunk_size"), [(11, 4), (7, 64)])
def test_training_gradients_through_the_chunked_rule_equal_the_token_loop(T: int, chunk_size: int):
    """Training runs the chunked rule under autograd (a sequence shorter than a chunk is one
    chunk of its length); values and gradients of every input equal the one-token rule's."""
    torch.manual_seed(3)
    B, H = 2, 3
    k = torch.nn.functional.normalize(torch.randn(B, H, T, 5), dim=-1)
    inputs = [
        torch.randn(B, H, T, 5),
        k,
        torch.randn(B, H, T, 4),
        -torch.rand(B, H, T),
        torch.rand(B, H, T),
        torch.randn(B, H, 5, 4),
    ]
    chunked, looped, (out, final), (stepped, state) = _chunked_and_looped(inputs, chunk_size)
    torch.testing.assert_close(out, stepped, atol=1e-5, rtol=1e-5)
    weights = torch.randn_like(out)
    ((out * weights).sum() + final.sum()).backward()
    ((stepped * weights).sum() + state.sum()).backward()
    for ours, reference in zip(chunked, looped):
        torch.testing.assert_close(ours.grad, reference.grad, atol=1e-5, rtol=1e-5)


def test_fresh_layers_start_with_the_gdn_authors_decay_init_so_the_state_remembers():
    """Trained from scratch, the layer starts as fla's ``GatedDeltaNet`` (the GDN authors'
    training code) does: A = exp(A_log) uniform in (0, 16] and softplus(dt_bias) = dt
    log-uniform in [0.001, 0.1], so a token's decay exp(-A dt) at zero decay input is at least
    exp(-1.6). transformers' checkpoint-loading placeholder (dt_bias = 1: dt = 1.31) instead
    starts every head at exp(-1.31 A) <= 0.27 per token; a key written 16 tokens back was then
    gone (< 1e-9), and MQAR at 8 pairs never trained. Built through zoo.build (whose init
    calls the layer's reset_parameters) as the MQAR probe builds it."""
    import zoo

    spec = zoo.spec("llama-3.2-1b").override(
        {"n_layers": 2, "d_model": 32, "vocab_size": 64, "ffn.kind": "none", "attention.kind": "gated_deltanet"}
        | {f"attention.{k}": v for k, v in {"n_k_heads": 4, "n_v_heads": 16, "head_k_dim": 8, "head_v_dim": 8}.items()}
    )
    layers = [m for m in zoo.build(spec, seed=0).modules() if isinstance(m, GatedDeltaNet)]
    assert len(layers) == 2
    for layer in layers:
        A, dt = layer.A_log.detach().exp(), torch.nn.functional.softplus(layer.dt_bias.detach())
        assert bool(((A > 0) & (A <= 16)).all()), A
        assert bool(((dt >= 1e-3 * (1 - 1e-5)) & (dt <= 0.1 * (1 + 1e-5))).all()), dt
        decay = torch.exp(-A * dt)  # per token, at zero decay input
        assert float(decay.min()) >= math.exp(-1.6) * (1 - 1e-5)
        assert float(decay.max()) > 0.99  # the state's lifetime spans the 64-token MQAR sequence in some head


@pytest.mark.parametrize("chunk_size", [1, 4, 7, 64])
@pytest.mark.parametrize(("g_range", "beta_range"), [((-1e-3, 0.0), (0.99, 1.0)), ((-12.0, -6.0), (0.0, 0.01))])
def test_float64_gradients_at_extreme_gates_equal_the_token_loop(
    chunk_size: int, g_range: tuple[float, float], beta_range: tuple[float, float]
):
    """The training path's gradients, in float64 so only the algebra is compared: decays near 1
    with full writes, and near 0 with almost no writes, for chunk sizes that do and do not
    divide T = 23 (and one longer than T); every input's gradient equals the one-token rule's."""
    torch.manual_seed(4)
    B, H, T = 2, 3, 23

    def uniform(low: float, high: float) -> torch.Tensor:
        return torch.rand(B, H, T, dtype=torch.float64) * (high - low) + low

    inputs = [
        torch.randn(B, H, T, 5, dtype=torch.float64),
        torch.nn.functional.normalize(torch.randn(B, H, T, 5, dtype=torch.float64), dim=-1),
        torch.randn(B, H, T, 4, dtype=torch.float64),
        uniform(*g_range),
        uniform(*beta_range),
        torch.randn(B, H, 5, 4, dtype=torch.float64),
    ]
    chunked, looped, (out, final), (stepped, state) = _chunked_and_looped(inputs, chunk_size)
    weights, state_weights = torch.randn_like(out), torch.randn_like(final)
    ((out * weights).sum() + (final * state_weights).sum()).backward()
    ((stepped * weights).sum() + (state * state_weights).sum()).backward()
    for ours, reference in zip(chunked, looped):
        torch.testing.assert_close(ours.grad, reference.grad, atol=1e-10, rtol=1e-10)
