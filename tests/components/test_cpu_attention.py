"""zoo.components.cpu_attention: one query's attention through zoo's C++ kernel equals torch's
on the same inputs (float32 exactly enough, half precision to its rounding), over strided
caches, boolean and additive masks and every head grouping; what it does not compute stays
torch's."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from zoo.components import cpu_attention
from zoo.components.sdpa_kernels import sdpa


def _inputs(heads: int, kv_heads: int, dim: int, dtype: torch.dtype = torch.float32, slots: int = 40, keys: int = 27):
    g = torch.Generator().manual_seed(heads * 100 + kv_heads * 10 + dim)
    q = torch.randn(2, heads, 1, dim, generator=g).to(dtype)
    cache_k = torch.randn(2, kv_heads, slots, dim, generator=g).to(dtype)
    cache_v = torch.randn(2, kv_heads, slots, dim, generator=g).to(dtype)
    mask = torch.rand(2, 1, 1, slots, generator=g) > 0.4
    return q, cache_k, cache_v, mask, keys


def _torch(q, k, v, **options):  # type: ignore[no-untyped-def]
    return F.scaled_dot_product_attention(q.float(), k.float(), v.float(), **options)


@pytest.mark.parametrize(
    ("heads", "kv_heads", "dim"),
    [(4, 4, 16), (6, 2, 24), (8, 1, 64), (3, 3, 7), (10, 2, 80), (4, 2, 128), (2, 1, 256), (18, 1, 32)],
)
def test_the_kernel_equals_torchs_attention_masked_and_over_a_sliced_cache(heads, kv_heads, dim):
    q, cache_k, cache_v, mask, keys = _inputs(heads, kv_heads, dim)
    gqa = heads != kv_heads
    with torch.no_grad():
        masked = {"attn_mask": mask, "scale": 0.3, "enable_gqa": gqa}
        assert cpu_attention.applies(q, cache_k, cache_v, masked)
        torch.testing.assert_close(sdpa(q, cache_k, cache_v, **masked), _torch(q, cache_k, cache_v, **masked))
        k, v = cache_k[:, :, :keys], cache_v[:, :, :keys]  # an eager step's view of the written slots
        plain = {"enable_gqa": gqa}
        assert cpu_attention.applies(q, k, v, plain) and not k.is_contiguous()
        torch.testing.assert_close(sdpa(q, k, v, **plain), _torch(q, k, v, **plain))


@pytest.mark.parametrize(("batch", "heads"), [(1, 1), (2, 1), (1, 6), (2, 6)])
def test_an_additive_mask_is_added_to_the_scores_as_torch_adds_it(batch, heads):
    """A position bias with -inf where keys are masked (T5's relative buckets at a decode
    step): per sequence or shared, per head or shared, as torch broadcasts it."""
    q, k, v, mask, _ = _inputs(6, 2, 16)
    g = torch.Generator().manual_seed(batch * 10 + heads)
    bias = torch.randn(batch, heads, 1, k.shape[2], generator=g)
    bias = bias.masked_fill(~mask[:batch], float("-inf"))  # (B|1, H|1, 1, S)
    options = {"attn_mask": bias, "enable_gqa": True}
    with torch.no_grad():
        assert cpu_attention.applies(q, k, v, options)
        torch.testing.assert_close(sdpa(q, k, v, **options), _torch(q, k, v, **options))
        half = {"attn_mask": bias.bfloat16(), "enable_gqa": True}
        got = sdpa(q.bfloat16(), k.bfloat16(), v.bfloat16(), **half)
        expected = _torch(q.bfloat16(), k.bfloat16(), v.bfloat16(), attn_mask=bias.bfloat16().float(), enable_gqa=True)
        torch.testing.assert_close(got.float(), expected, atol=8e-3, rtol=8e-3)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_half_precision_is_the_float32_result_to_its_rounding(dtype):
    q, cache_k, cache_v, mask, _ = _inputs(9, 3, 64, dtype, slots=160)
    with torch.no_grad():
        got = sdpa(q, cache_k, cache_v, attn_mask=mask, enable_gqa=True)
    assert got.dtype == dtype
    expected = _torch(q, cache_k, cache_v, attn_mask=mask, enable_gqa=True)
    torch.testing.assert_close(got.float(), expected, atol=8e-3, rtol=8e-3)


def test_what_the_kernel_does_not_compute_stays_torchs(monkeypatch):
    q, k, v, mask, _ = _inputs(4, 2, 16)
    two = torch.randn(2, 4, 2, 16)
    with torch.no_grad():
        assert not cpu_attention.applies(two, k, v, {})  # two queries
        assert not cpu_attention.applies(q, k, v, {"attn_mask": mask[:, :, :, :4]})  # not the keys' length
        assert not cpu_attention.applies(q, k, v, {"attn_mask": mask.expand(2, 4, 1, -1)})  # boolean per head
        assert not cpu_attention.applies(q, k, v, {"attn_mask": torch.zeros(2, 3, 1, k.shape[2])})  # 3 of 4 heads
        assert not cpu_attention.applies(q, k, v, {"is_causal": True})
        assert not cpu_attention.applies(q, k.double(), v.double(), {})
        assert not cpu_attention.applies(q, k, v, {"dropout_p": 0.1})
        monkeypatch.setenv(cpu_attention.ENV_SWITCH, "0")
        assert not cpu_attention.applies(q, k, v, {})
    monkeypatch.delenv(cpu_attention.ENV_SWITCH)
    assert not cpu_attention.applies(q.requires_grad_(), k, v, {})  # training: autograd needs torch's


def test_inside_a_compiled_graph_the_kernel_is_the_opaque_op_and_agrees():
    q, k, v, mask, _ = _inputs(6, 2, 16)
    seen: list[object] = []

    def backend(graph: torch.fx.GraphModule, inputs: list[torch.Tensor]) -> object:
        seen.extend(node.target for node in graph.graph.nodes if node.op == "call_function")
        return graph.forward

    compiled = torch.compile(lambda q, k, v, m: sdpa(q, k, v, attn_mask=m, enable_gqa=True), backend=backend)
    with torch.no_grad():
        got = compiled(q, k, v, mask)
    assert torch.ops.zoo.row_product_one_query_attention.default in seen
    torch.testing.assert_close(got, _torch(q, k, v, attn_mask=mask, enable_gqa=True))
