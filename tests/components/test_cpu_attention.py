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


@pytest.mark.parametrize("threads", [2, 4])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_keys_split_over_threads_give_the_same_attention(threads, dtype):
    """Where the (sequence, K/V head) pairs do not share evenly over the threads (SmolLM2's three
    K/V heads over two or four), each pair's keys go in parts to the threads and the parts' softmaxes
    are merged: torch's attention still, masked (a static cache's unwritten tail leaves a part
    with no key), with a position bias, and over a sliced cache."""
    g = torch.Generator().manual_seed(threads)
    q = torch.randn(1, 9, 1, 64, generator=g).to(dtype)
    cache_k = torch.randn(1, 3, 400, 64, generator=g).to(dtype)
    cache_v = torch.randn(1, 3, 400, 64, generator=g).to(dtype)
    written = torch.zeros(1, 1, 1, 400, dtype=torch.bool)
    written[..., :190] = True  # the last part of two (or of three) sees no key
    bias = torch.randn(1, 9, 1, 400, generator=g).masked_fill(~written, float("-inf"))
    tolerance = {} if dtype == torch.float32 else {"atol": 1e-2, "rtol": 1e-2}
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        with torch.no_grad():
            for options, k, v in [
                ({"attn_mask": written, "enable_gqa": True}, cache_k, cache_v),
                ({"attn_mask": bias.to(dtype), "enable_gqa": True}, cache_k, cache_v),
                ({"enable_gqa": True}, cache_k[:, :, :333], cache_v[:, :, :333]),
            ]:
                assert cpu_attention.applies(q, k, v, options)
                got = sdpa(q, k, v, **options)
                mask = options.get("attn_mask")
                reference = {
                    **options,
                    "attn_mask": mask.float() if mask is not None and mask.is_floating_point() else mask,
                }
                torch.testing.assert_close(got.float(), _torch(q, k, v, **reference), **tolerance)
    finally:
        torch.set_num_threads(before)


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


def test_masks_are_read_through_their_strides():
    """Masks that are views (a bias sliced from a wider table, keys every other column; a boolean
    mask expanded over the batch) read as their values, not their storage's order."""
    q, k, v, mask, _ = _inputs(6, 2, 16)
    slots = k.shape[2]
    g = torch.Generator().manual_seed(7)
    table = torch.randn(2, 6, 1, 2 * slots + 3, generator=g)
    bias = table[..., 3::2]  # (B, H, 1, S), key stride 2, offset 3
    shared = mask[:1].expand(2, 1, 1, slots)  # (B, 1, 1, S), batch stride 0
    with torch.no_grad():
        for attn_mask in (bias, table.bfloat16()[..., 3::2], shared):
            options = {"attn_mask": attn_mask, "enable_gqa": True}
            assert not attn_mask.is_contiguous() and cpu_attention.applies(q, k, v, options)
            expected = {**options, "attn_mask": attn_mask.float() if attn_mask.is_floating_point() else attn_mask}
            torch.testing.assert_close(sdpa(q, k, v, **options), _torch(q, k, v, **expected))


def test_scores_far_below_the_rows_top_weigh_what_torchs_do():
    """A finite bias reaching far below the row's top (-80 to -300: the exponentials' range
    ends, e^-87 on AVX2, e^-100 on AVX-512) leaves torch's softmax, and a row of equal
    scores weighs every key alike."""
    q, k, v, _, _ = _inputs(4, 4, 64, slots=48)
    bias = torch.zeros(1, 4, 1, 48)
    bias[..., 1::2] = -torch.linspace(80, 300, 24)  # every other key far below the top
    with torch.no_grad():
        for options in ({"attn_mask": bias}, {"attn_mask": torch.zeros(1, 4, 1, 48)}):
            assert cpu_attention.applies(q, k, v, options)
            torch.testing.assert_close(sdpa(q, k, v, **options), _torch(q, k, v, **options))


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
        monkeypatch.setattr(cpu_attention, "ENABLED", False)
        assert not cpu_attention.applies(q, k, v, {})
    monkeypatch.setattr(cpu_attention, "ENABLED", True)
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


@pytest.mark.parametrize(
    ("dtype", "additive"), [(torch.float32, False), (torch.bfloat16, False), (torch.float32, True)]
)
def test_append_and_attend_writes_the_new_row_and_attends_as_the_two_steps_did(dtype, additive):
    """An eager decode step's one call: the new K/V land in slot ``filled - 1`` (every other
    slot untouched), and the output is index_copy_ then attention over the filled slots."""
    q, k_cache, v_cache, _, filled = _inputs(6, 2, 64, dtype)
    g = torch.Generator().manual_seed(7)
    k, v = (torch.randn(2, 2, 1, 64, generator=g).to(dtype) for _ in range(2))  # (B, Hkv, 1, D)
    options: dict[str, object] = {"scale": 0.2}
    if additive:  # T5's position bias over the filled slots
        options["attn_mask"] = torch.randn(1, 6, 1, filled, generator=g)
    expected_k, expected_v = k_cache.clone(), v_cache.clone()
    expected_k[:, :, filled - 1 : filled], expected_v[:, :, filled - 1 : filled] = k, v
    with torch.no_grad():
        write = cpu_attention.CacheWrite(k, v, k_cache, v_cache, filled)
        assert cpu_attention.appends(q, write, options)
        got = cpu_attention.append_and_attend(q, write, options)
    assert torch.equal(k_cache, expected_k) and torch.equal(v_cache, expected_v)
    expected = _torch(q, expected_k[:, :, :filled], expected_v[:, :, :filled], enable_gqa=True, **options)
    tolerance = {} if dtype == torch.float32 else {"atol": 8e-3, "rtol": 8e-3}
    torch.testing.assert_close(got.float(), expected, **tolerance)


@pytest.mark.parametrize(
    ("dtype", "rotary", "table_batch"), [(torch.float32, 64, 2), (torch.bfloat16, 64, 1), (torch.float32, 24, 1)]
)
def test_append_and_attend_rotates_q_and_k_as_the_rotation_does(dtype, rotary, table_batch):
    """With the step's rotary tables, the call equals ``RopeRotation`` then the unrotated call,
    bit for bit: the cached key is the rotated one, partial rotations keep the rest."""
    from zoo.components.rope import RopeRotation, rope_cos_sin

    q, k_cache, v_cache, _, filled = _inputs(6, 2, 64, dtype)
    g = torch.Generator().manual_seed(3)
    k, v = (torch.randn(2, 2, 1, 64, generator=g).to(dtype) for _ in range(2))  # (B, Hkv, 1, D)
    positions = torch.tensor([[filled - 1], [filled + 4]])[:table_batch]  # (B|1, 1)
    rotation = RopeRotation(*rope_cos_sin(positions, 1e4 ** -(torch.arange(0, rotary, 2) / rotary), 1.0), False)
    expected_k, expected_v = k_cache.clone(), v_cache.clone()
    with torch.no_grad():
        q_rot, k_rot = rotation(q, k)  # the rotation kernel (itself checked against PyTorch's)
        plain = cpu_attention.append_and_attend(
            q_rot, cpu_attention.CacheWrite(k_rot, v, expected_k, expected_v, filled), {}
        )
        write = cpu_attention.CacheWrite(k, v, k_cache, v_cache, filled, rotation.half_split(dtype))
        assert cpu_attention.appends(q, write, {})
        got = cpu_attention.append_and_attend(q, write, {})
    assert torch.equal(k_cache, expected_k) and torch.equal(v_cache, expected_v)
    torch.testing.assert_close(got, plain, atol=0, rtol=0)


def test_append_and_attend_refuses_what_it_does_not_compute():
    q, k_cache, v_cache, _, filled = _inputs(6, 2, 16)
    k, v = torch.randn(2, 2, 1, 16), torch.randn(2, 2, 1, 16)
    two = torch.randn(2, 2, 2, 16)

    def appends(k: torch.Tensor, v: torch.Tensor, filled: int, options: dict[str, object]) -> bool:
        return cpu_attention.appends(q, cpu_attention.CacheWrite(k, v, k_cache, v_cache, filled), options)

    with torch.no_grad():
        assert appends(k, v, filled, {})
        assert not appends(k, v, k_cache.shape[2] + 1, {})  # past the cache
        assert not appends(k, v, 0, {})
        assert not appends(k.bfloat16(), v.bfloat16(), filled, {})  # a cast
        assert not appends(two, two, filled, {})  # two new tokens
        meta = torch.empty_like(k_cache, device="meta")
        assert not cpu_attention.appends(q, cpu_attention.CacheWrite(k, v, meta, meta, filled), {})  # not the CPU
        assert not appends(k, v, filled, {"attn_mask": torch.ones(1, 1, 1, 3)})  # not the filled length
        for tables in (torch.ones(1, 1, 1, 18), torch.ones(1, 1, 1, 5), torch.ones(1, 1, 2, 8)):  # > D, odd, 2 tokens
            write = cpu_attention.CacheWrite(k, v, k_cache, v_cache, filled, (tables, tables))
            assert not cpu_attention.appends(q, write, {})
        halves = torch.ones(1, 1, 1, 8)
        assert not cpu_attention.appends(
            q, cpu_attention.CacheWrite(k, v, k_cache, v_cache, filled, (halves, halves.bfloat16())), {}
        )
    assert not appends(k, v, filled, {})  # gradients on: the cache is not written


def test_an_eager_cached_step_takes_the_appending_kernel_and_equals_the_full_forward(monkeypatch):
    import zoo
    from tests.conftest import tiny_spec
    from zoo.model.cache import KVCache
    from zoo.model.generation import decode_step, prefill

    calls: list[int] = []
    real = cpu_attention.append_and_attend

    def spy(q: torch.Tensor, write: cpu_attention.CacheWrite, options: dict) -> torch.Tensor:
        assert write.rotation is not None  # qwen3's RoPE rotates inside the call
        calls.append(write.filled)
        return real(q, write, options)

    monkeypatch.setattr(cpu_attention, "append_and_attend", spy)
    model = zoo.build(tiny_spec("qwen3-0.6b"), seed=0).eval()
    ids = torch.randint(0, 97, (1, 7), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        cache = KVCache(model, 1, 12)
        prefill(model, ids[:, :5], cache)
        steps = [decode_step(model, ids[:, t : t + 1], cache) for t in (5, 6)]  # (1, V) each
        full = model(ids)  # (1, 7, V)
    assert calls == [6] * model.spec.n_layers + [7] * model.spec.n_layers
    torch.testing.assert_close(torch.stack(steps, 1), full[:, 5:], atol=1e-5, rtol=0)
