"""The fused prefill scans (``zoo.components.cpu_prefill``, implementation ``cpu-scan``) equal
the chunked reference: the model's logits to 1e-5 in float32, a prefill then decode steps
equal the full forward, left padding leaves the state as without it, and training (autograd)
runs the reference."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import zoo
from zoo.components import cpu_prefill, delta_rule, ssd
from zoo.components.gated_deltanet import GatedRMSNorm
from zoo.components.kernels import implementations, preferring
from zoo.components.mamba2 import GroupedGatedRMSNorm
from zoo.model.cache import KVCache
from zoo.model.generation import decode_step, left_pad, prefill
from zoo.specs.model import ModelSpec

VOCAB = 61
MIXERS = {  # family -> attention options (grouped B/C and grouped keys: heads share them)
    "mamba2": {"kind": "mamba2", "n_heads": 4, "head_dim": 8, "n_groups": 2, "state_size": 8, "chunk_size": 8},
    "gated_deltanet": {
        "kind": "gated_deltanet",
        "n_k_heads": 2,
        "n_v_heads": 4,
        "head_k_dim": 8,
        "head_v_dim": 6,
        "chunk_size": 4,
    },
}


def _spec(family: str, state_dtype: str = "float32") -> ModelSpec:
    return ModelSpec.model_validate(
        {
            "name": f"prefill-{family}",
            "vocab_size": VOCAB,
            "d_model": 32,
            "n_layers": 2,
            "max_seq_len": 64,
            "norm": {"kind": "rmsnorm"},
            "positional": {"kind": "none"},
            "attention": MIXERS[family],
            "ffn": {"kind": "swiglu", "hidden": 24},
            "block": {"kind": "pre_norm"},
            "state_dtype": state_dtype,
        }
    )


def _built(spec: ModelSpec, impl: str) -> torch.nn.Module:
    with preferring(impl):
        return zoo.build(spec, device="cpu", dtype="float32", seed=0).eval()


def _prefills_then_steps(model: torch.nn.Module, ids: torch.Tensor, cuts: tuple[int, int]) -> torch.Tensor:
    """Logits after two prefills (tokens up to each cut), then one decode step per later token."""
    cache = KVCache(model, batch_size=ids.shape[0], max_len=ids.shape[1])
    out = [prefill(model, ids[:, : cuts[0]], cache), prefill(model, ids[:, cuts[0] : cuts[1]], cache)]  # (B, V) each
    out += [decode_step(model, ids[:, t : t + 1], cache) for t in range(cuts[1], ids.shape[1])]
    return torch.stack(out, dim=1)  # (B, 2 + T - cut, V)


def test_the_cpu_prefill_scans_build_with_the_dev_install():
    """A C++ compiler and ninja are there (as for cpu_scan): no silent skip of the checks below."""
    assert cpu_prefill.EXTENSION.available()


@pytest.mark.parametrize("state_dtype", ["float32", "cache"])
@pytest.mark.parametrize("family", sorted(MIXERS))
def test_the_fused_scan_equals_the_reference(family: str, state_dtype: str):
    spec = _spec(family, state_dtype)
    reference, fast = _built(spec, "reference"), _built(spec, "cpu-scan")
    ids = torch.randint(0, VOCAB, (2, 29), generator=torch.Generator().manual_seed(1))  # (B, T): several chunks
    with torch.no_grad():
        expected = reference(ids)  # (B, T, V)
        got = fast(ids)
        assert implementations(fast) == f"{family}: cpu-scan"
        assert implementations(reference) == f"{family}: reference"
        torch.testing.assert_close(got, expected, atol=1e-5, rtol=1e-5)
        stepped = _prefills_then_steps(fast, ids, (7, 24))
        referenced = _prefills_then_steps(reference, ids, (7, 24))
    torch.testing.assert_close(stepped, expected[:, [6, *range(23, 29)]], atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(stepped, referenced, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("family", sorted(MIXERS))
def test_a_left_padded_prefill_equals_the_reference(family: str):
    """Padding tokens enter with a zero step / zero write strength: the kernel must leave the
    state as the reference does, so the decode steps after it agree."""
    spec = _spec(family)
    reference, fast = _built(spec, "reference"), _built(spec, "auto")
    ids, mask = left_pad([[5, 9, 3, 7, 1, 2, 8, 4, 4, 1], [4, 6, 2]], pad_token_id=0)  # (B, 10)
    more = torch.randint(1, VOCAB, (2, 5), generator=torch.Generator().manual_seed(3))  # (B, 5)
    ids, mask = torch.cat([ids, more], dim=1), torch.cat([mask, torch.ones_like(more)], dim=1)
    results = []
    for model in (reference, fast):
        cache = KVCache(model, batch_size=2, max_len=ids.shape[1])
        with torch.no_grad():
            out = [prefill(model, ids[:, :10], cache, mask[:, :10])]
            out += [decode_step(model, ids[:, t : t + 1], cache) for t in range(10, ids.shape[1])]
        results.append(torch.stack(out, dim=1))  # (B, 6, V)
    assert cpu_prefill.KERNEL.name in implementations(fast).removeprefix(f"{family}: ").split("+")
    torch.testing.assert_close(results[1], results[0], atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("carried", [True, False])
def test_ssd_rows_equals_the_mixers_reference_maths(dtype, carried):
    """``ssd_rows`` against Mamba2's reference written out: dt's softplus and clamp, ``ssd.chunk_scan``
    (from a nonzero state, or zeros where none is carried), the D skip rounded to the model's
    dtype and ``GroupedGatedRMSNorm``; two groups, a padded row (a zero step), dt and z read as
    in_proj's split views; the state updated in place as the chunked scan leaves it."""
    g = torch.Generator().manual_seed(4)
    b, T, H, G, P, N, eps, limit = 2, 23, 6, 2, 5, 7, 1e-5, (0.01, 2.0)
    inner = H * P
    proj = torch.randn(b, T, 2 * inner + 2 * G * N + H, generator=g).to(dtype)  # in_proj's output
    z, xbc, dt = torch.split(proj, [inner, inner + 2 * G * N, H], dim=-1)
    xbc = xbc.contiguous()  # as the convolution writes it
    dt_bias, A_log, D = torch.randn(H, generator=g), torch.rand(H, generator=g).log(), torch.randn(H, generator=g)
    norm = GroupedGatedRMSNorm(inner, G, eps).to(dtype)
    with torch.no_grad():
        norm.weight.copy_(torch.rand(inner, generator=g) + 0.5)
    valid = torch.ones(b, T, dtype=torch.bool)
    valid[1, :4] = False
    state = torch.randn(b, H, P, N, generator=g) if carried else torch.zeros(b, H, P, N)

    xs, Bm, Cm = torch.split(xbc.float(), [inner, G * N, G * N], dim=-1)
    xs, Bm, Cm = xs.reshape(b, T, H, P), Bm.reshape(b, T, G, N), Cm.reshape(b, T, G, N)
    step = F.softplus(dt.float() + dt_bias).clamp(*limit) * valid[..., None]  # (b, T, H)
    y, final = ssd.chunk_scan(xs, step, -A_log.exp(), Bm, Cm, state, chunk_size=4)  # (b, T, H, P)
    with torch.no_grad():
        expected = norm((y + xs * D[:, None]).reshape(b, T, inner).to(dtype), z)

    after = state.clone() if carried else None
    params = (dt_bias, A_log, D, norm.weight.detach())
    out = cpu_prefill.ssd_rows(xbc, dt, z, params, valid, after, G, eps, limit)
    tolerance = 1e-5 if dtype == torch.float32 else 2e-2  # bfloat16: an ulp where the two sums round apart
    torch.testing.assert_close(out, expected, atol=tolerance, rtol=tolerance)
    if after is not None:
        torch.testing.assert_close(after, final, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("carried", [True, False])
def test_delta_rows_equals_the_mixers_reference_maths(dtype, carried):
    """``delta_rows`` against Gated DeltaNet's reference written out: q and k L2-normalised (q
    scaled), beta and the log decay from b and a, ``delta_rule.chunk_gated_delta_rule`` (from a
    nonzero state, or zeros where none is carried), the output rounded to the model's dtype and
    ``GatedRMSNorm``; two value heads a key head, a padded row (decay 1, no write); the state
    updated in place as the chunked rule leaves it."""
    g = torch.Generator().manual_seed(4)
    b, T, Hk, H, K, V, eps = 2, 23, 2, 4, 8, 6, 1e-6
    qkv = torch.randn(b, T, 2 * Hk * K + H * V, generator=g).to(dtype)  # the convolution's output
    beta_raw, a = torch.randn(b, T, H, generator=g).to(dtype), torch.randn(b, T, H, generator=g).to(dtype)
    z = torch.randn(b, T, H, V, generator=g).to(dtype)
    A_log, dt_bias = (16 * torch.rand(H, generator=g)).log(), torch.randn(H, generator=g)
    norm = GatedRMSNorm(V, eps).to(dtype)
    with torch.no_grad():
        norm.weight.copy_(torch.rand(V, generator=g) + 0.5)
    valid = torch.ones(b, T, dtype=torch.bool)
    valid[1, :4] = False
    state = torch.randn(b, H, K, V, generator=g) if carried else torch.zeros(b, H, K, V)

    q, k, v = torch.split(qkv.float(), [Hk * K, Hk * K, H * V], dim=-1)
    q = delta_rule.l2_normalize(q.reshape(b, T, Hk, K)) * K**-0.5
    k = delta_rule.l2_normalize(k.reshape(b, T, Hk, K))
    beta = beta_raw.float().sigmoid() * valid[..., None]  # (b, T, H)
    decay = -A_log.exp() * F.softplus(a.float() + dt_bias) * valid[..., None]  # (b, T, H): log decay
    heads = [t.repeat_interleave(H // Hk, dim=2).transpose(1, 2) for t in (q, k)]  # (b, H, T, K)
    out, final = delta_rule.chunk_gated_delta_rule(
        *heads, v.reshape(b, T, H, V).transpose(1, 2), decay.transpose(1, 2), beta.transpose(1, 2), state, 4
    )
    with torch.no_grad():
        expected = norm(out.transpose(1, 2).to(dtype), z)  # (b, T, H, V)

    after = state.clone() if carried else None
    params = (A_log, dt_bias, norm.weight.detach())
    got = cpu_prefill.delta_rows(qkv, beta_raw, a, z, params, valid, after, Hk, eps)
    tolerance = 1e-5 if dtype == torch.float32 else 2e-2  # bfloat16: an ulp where the two sums round apart
    torch.testing.assert_close(got, expected, atol=tolerance, rtol=tolerance)
    if after is not None:
        torch.testing.assert_close(after, final, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("family", sorted(MIXERS))
def test_training_takes_the_chunked_reference(family: str):
    """The kernels have no backward: under autograd the chunked form runs and gradients flow."""
    model = _built(_spec(family), "auto").train()
    model(torch.randint(0, VOCAB, (1, 9))).sum().backward()
    assert implementations(model) is None  # never resolved under autograd
    assert all(p.grad is not None for name, p in model.named_parameters() if "A_log" in name)


@pytest.mark.parametrize(
    ("impl", "ran"), [("auto", "cpu-scan+cpu-step"), ("cpu-step", "cpu-step"), ("cpu-scan", "cpu-scan")]
)
def test_auto_runs_each_cpu_kernel_on_its_own_calls(impl: str, ran: str):
    """Kernels of one device cover different calls (``zoo.components.kernels``): under ``auto``
    a prompt runs the fused scan and a decode step the fused step; a named kernel runs alone."""
    model = _built(_spec("mamba2"), impl)
    ids = torch.randint(0, VOCAB, (1, 9))  # (B, T)
    cache = KVCache(model, batch_size=1, max_len=10)
    with torch.no_grad():
        prefill(model, ids, cache)
        decode_step(model, ids[:, -1:], cache)
    assert implementations(model) == f"mamba2: {ran}"
