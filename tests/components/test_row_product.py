"""zoo.components.row_product: the opt-in C++ one-row CPU kernel, its fallback and its op in
compiled graphs; and the default one-row paths, torch.mv (float32) and F.linear (bf16, fp16)."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import zoo
from zoo.components import row_product as rows
from zoo.components.linear import Linear, uses_matrix_vector, uses_row_kernel
from zoo.model.cache import KVCache
from zoo.model.generation import decode_step, prefill

# 16 KiB and up takes the kernel (row_product.MIN_WEIGHT_BYTES)
TOLERANCE = {torch.float32: {"atol": 1e-4, "rtol": 1e-5}, torch.bfloat16: {"atol": 2e-2, "rtol": 2e-2}}


@pytest.fixture(autouse=True)
def kernel_on(monkeypatch):
    """The kernel is opt-in; these tests opt in unless they say otherwise."""
    monkeypatch.setattr(rows, "FORCED", True)


@pytest.mark.parametrize("bias", [False, True])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_one_row_through_the_kernel_matches_f_linear(dtype, bias):
    layer = Linear(512, 1024, bias=bias).to(dtype)  # (1024, 512): 1-2 MiB
    x = torch.randn(1, 1, 512, dtype=dtype)
    with torch.inference_mode():
        assert uses_row_kernel(x, layer.weight)
        out = layer(x)
        expected = F.linear(x, layer.weight, layer.bias)
    assert out.shape == (1, 1, 1024) and out.dtype == dtype
    # both accumulate in float32 and round once; only the summation order differs
    torch.testing.assert_close(out, expected, **TOLERANCE[dtype])


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_the_kernel_equals_its_reference_for_any_shape(dtype):
    """Float32 accumulation then one rounding (``rows.reference``): rows of any length, a tail
    shorter than a register, a tail of one register or more past the last whole block (48, 90),
    long rows, with and without a bias; the weights fetched ahead past the caches (``past_cache``)
    give the same sums."""
    generator = torch.Generator().manual_seed(0)
    with torch.inference_mode():
        for out_features, in_features in [(1024, 512), (37, 70), (512, 1000), (128, 8192), (3, 5), (96, 48), (19, 90)]:
            weight = torch.randn(out_features, in_features, generator=generator).to(dtype)
            x = torch.randn(in_features, generator=generator).to(dtype)
            for bias in (None, torch.randn(out_features, generator=generator).to(dtype)):
                got = rows.row_product(weight, x, bias)
                assert got.dtype == dtype and got.shape == (out_features,)
                expected = rows.reference(weight, x, bias)
                # the same float32 sum in another order; a half-precision output may round one ulp apart
                ulp = 0.0 if dtype == torch.float32 else torch.finfo(dtype).eps
                tolerance = {"atol": 1e-5 * in_features**0.5 + ulp, "rtol": 1e-5 + ulp}
                torch.testing.assert_close(got.float(), expected.float(), **tolerance)
                rows_kept = rows.row_product(weight, x.view(1, 1, in_features), bias)  # a decode step's (B, T, in)
                assert rows_kept.shape == (1, 1, out_features) and torch.equal(rows_kept.view(-1), got)
                with rows.past_cache(True):  # weights fetched ahead, not kept: the same sums
                    assert torch.equal(rows.row_product(weight, x, bias), got)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_a_strided_row_and_a_float32_bias_are_read_as_they_are(dtype):
    """The call widens x and the bias itself: a row that is a strided view, and a bias kept in
    float32 beside half-precision weights, give F.linear's float32 sum rounded once."""
    generator = torch.Generator().manual_seed(1)
    weight = torch.randn(300, 100, generator=generator).to(dtype)
    x = torch.randn(100, 2, generator=generator).to(dtype)[:, 0]  # (100,) with stride 2
    bias = torch.randn(300, generator=generator)  # float32
    with torch.inference_mode():
        got = rows.row_product(weight, x, bias)
        expected = F.linear(x.float(), weight.float(), bias).to(dtype)
    assert not x.is_contiguous() and got.dtype == dtype
    torch.testing.assert_close(got, expected, atol=torch.finfo(dtype).eps * 4, rtol=torch.finfo(dtype).eps)


@pytest.mark.parametrize(
    ("x_shape", "weight_shape", "grad"),
    [
        ((2, 1, 512), (1024, 512), False),  # two rows: a GEMM, F.linear's job
        ((1, 3, 512), (1024, 512), False),  # a prompt
        ((1, 1, 64), (48, 64), False),  # a small weight: the call would cost more than it saves
        ((1, 1, 512), (1024, 512), True),  # autograd
    ],
)
def test_other_products_skip_the_kernel(x_shape, weight_shape, grad):
    layer = Linear(weight_shape[1], weight_shape[0])
    x = torch.randn(x_shape)
    with torch.set_grad_enabled(grad):
        assert not uses_row_kernel(x, layer.weight)
        expected = F.linear(x, layer.weight, layer.bias)
        if x.numel() == x.shape[-1]:  # one row: torch.mv, another summation order
            torch.testing.assert_close(layer(x), expected, **TOLERANCE[torch.float32])
        else:
            assert torch.equal(layer(x), expected)


@pytest.mark.parametrize("switch", [None, False])
def test_without_the_switch_one_float32_row_is_torch_mv(monkeypatch, switch):
    monkeypatch.setattr(rows, "FORCED", switch)
    dtype = torch.float32
    layer = Linear(512, 1024).to(dtype)
    x = torch.randn(1, 1, 512, dtype=dtype)
    with torch.inference_mode():
        assert not uses_row_kernel(x, layer.weight) and uses_matrix_vector(x, layer.weight)
        out = layer(x)
        assert out.shape == (1, 1, 1024)
        assert torch.equal(out, (torch.mv(layer.weight, x.reshape(-1)) + layer.bias).view(1, 1, 1024))
        torch.testing.assert_close(out, F.linear(x, layer.weight, layer.bias), **TOLERANCE[dtype])
        assert not uses_matrix_vector(torch.randn(2, 512, dtype=dtype), layer.weight)  # two rows: F.linear


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_one_half_precision_row_is_f_linear(monkeypatch, dtype):
    """bf16/fp16 one-row products stream faster through F.linear (linear.py's measurements)."""
    monkeypatch.setattr(rows, "FORCED", None)
    layer = Linear(512, 1024).to(dtype)
    x = torch.randn(1, 1, 512, dtype=dtype)
    with torch.inference_mode():
        assert not uses_matrix_vector(x, layer.weight)
        assert torch.equal(layer(x), F.linear(x, layer.weight, layer.bias))


def test_where_the_kernel_cannot_be_built_one_row_is_torchs(monkeypatch):
    monkeypatch.setattr(rows, "available", lambda: False)
    layer = Linear(512, 1024)
    x = torch.randn(1, 512)
    with torch.inference_mode():
        assert not rows.enabled(torch.float32) and not uses_row_kernel(x, layer.weight)
        assert torch.equal(layer(x), (torch.mv(layer.weight, x[0]) + layer.bias)[None])
        assert torch.equal(rows.row_product(layer.weight, x[0], layer.bias), F.linear(x[0], layer.weight, layer.bias))


@pytest.mark.parametrize("fresh", [False, True])
def test_a_compiled_graph_calls_the_kernel_as_one_opaque_op(monkeypatch, fresh):
    """Also where the first one-row product of a process is inside a trace (``fresh``: as
    ``zoo bench --compile`` in a new process): the extension is built outside the trace, and
    the graph is not traced again at the second call."""
    if fresh:
        from zoo.components import cpu_extension

        monkeypatch.delitem(cpu_extension._loaded, rows.EXTENSION.name, raising=False)
        monkeypatch.setattr(rows.EXTENSION, "_available", None)
        torch._dynamo.reset()
    layer = Linear(512, 1024).eval()
    x = torch.randn(1, 1, 512)
    graphs: list[torch.fx.GraphModule] = []

    def record(graph: torch.fx.GraphModule, example_inputs):
        graphs.append(graph)
        return graph.forward

    compiled = torch.compile(layer, backend=record, fullgraph=True)
    with torch.no_grad():
        out = compiled(x)
        expected = F.linear(x, layer.weight, layer.bias)
        with torch.compiler.set_stance("fail_on_recompile"):  # no guard on the memo the trace filled
            torch.testing.assert_close(compiled(x), out, atol=0, rtol=0)
    torch.testing.assert_close(out, expected, **TOLERANCE[torch.float32])
    assert len(graphs) == 1
    targets = [node.target for node in graphs[0].graph.nodes if node.op == "call_function"]
    assert torch.ops.zoo.row_product_row_product.default in targets


def test_cached_decode_through_the_kernel_equals_the_full_forward():
    # a vocabulary of 4096 x d_model 128 makes the LM head 2 MiB, so every decode step's
    # logits come from the kernel while the full forward's come from F.linear
    spec = zoo.spec("llama-3.2-1b").override(
        {
            "vocab_size": 4096,
            "d_model": 128,
            "n_layers": 2,
            "max_seq_len": 32,
            "attention.n_heads": 4,
            "attention.n_kv_heads": 2,
            "attention.head_dim": 32,
            "ffn.hidden": 256,
        }
    )
    model = zoo.build(spec, seed=0).eval()
    ids = torch.randint(0, 4096, (1, 10))
    with torch.inference_mode():
        assert uses_row_kernel(torch.randn(1, 1, 128), model.lm_head.weight)
        full = model(ids)  # (1, 10, vocab)
        cache = KVCache(model, batch_size=1, max_len=10)
        steps = [prefill(model, ids[:, :6], cache)]
        steps += [decode_step(model, ids[:, t : t + 1], cache) for t in range(6, 10)]
    torch.testing.assert_close(torch.stack(steps, dim=1), full[:, 5:], atol=1e-5, rtol=1e-5)


def test_without_the_switch_a_run_takes_the_kernel_for_the_dtypes_measured_faster(monkeypatch):
    """``measured_faster``: the harness passes the dtypes the host probe found the kernel faster
    in; the switch, where set, decides regardless."""
    monkeypatch.setattr(rows, "FORCED", None)
    layer = Linear(512, 1024)  # 2 MiB float32: large enough for the kernel
    x = torch.randn(1, 512)
    with torch.inference_mode():
        assert not uses_row_kernel(x, layer.weight)
        with rows.measured_faster([torch.float32]):
            assert uses_row_kernel(x, layer.weight) and not uses_row_kernel(x.bfloat16(), layer.weight.bfloat16())
            torch.testing.assert_close(layer(x), F.linear(x, layer.weight, layer.bias), **TOLERANCE[torch.float32])
            monkeypatch.setattr(rows, "FORCED", False)
            assert not uses_row_kernel(x, layer.weight)
        monkeypatch.setattr(rows, "FORCED", None)
        assert not uses_row_kernel(x, layer.weight)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_a_rows_sum_does_not_depend_on_how_the_threads_split_the_rows(dtype):
    """Each thread reads four rows at once and its last ones alone: 1027 rows split over one
    and over two threads give the same outputs, bit for bit, and the reference's within
    tolerance (a width that is no multiple of the vector, for the scalar tail)."""
    weight = torch.randn(1027, 300, generator=torch.Generator().manual_seed(0)).to(dtype)
    x = torch.randn(1, 300, generator=torch.Generator().manual_seed(1)).to(dtype)
    bias = torch.randn(1027, generator=torch.Generator().manual_seed(2)).to(dtype)
    threads = torch.get_num_threads()
    try:
        outputs = []
        for count in (1, 2):
            torch.set_num_threads(count)
            outputs.append(rows.row_product(weight, x, bias))
    finally:
        torch.set_num_threads(threads)
    assert torch.equal(outputs[0], outputs[1])
    torch.testing.assert_close(outputs[0], rows.reference(weight, x, bias), **TOLERANCE[dtype])


def test_the_eager_calls_checks_in_cpp_take_what_pythons_take():
    """An eager product's checks run in C++ (``eager_row_product``: None where it declines): it
    takes exactly the products ``uses_row_kernel`` takes (the compiled graph's check), and what it
    takes is the kernel's product."""
    g = torch.Generator().manual_seed(7)
    weight, x, bias = torch.randn(96, 64, generator=g), torch.randn(1, 1, 64, generator=g), torch.randn(96)
    cases = [
        (weight, x),
        (weight.bfloat16(), x.bfloat16()),
        (weight.half(), x.half()),
        (weight, x.bfloat16()),  # dtypes differ
        (weight.t().contiguous().t(), x),  # not contiguous
        (weight[:, :63].contiguous(), x),  # widths differ
        (weight, x.expand(1, 2, 64)),  # two rows
        (weight[:8].contiguous(), x),  # 2 KiB: below MIN_WEIGHT_BYTES
        (weight.double(), x.double()),  # a dtype the kernel has no loop for
    ]
    with torch.no_grad():
        for w, row in cases:
            out = rows.eager_row_product(w, row, None)
            assert (out is not None) == uses_row_kernel(row, w)
            if out is not None:
                assert torch.equal(out, rows.row_product(w, row, None))
        assert rows.eager_row_product(weight, x, bias) is not None  # a bias of the rows' dtype
        assert rows.eager_row_product(weight, x, bias[:95]) is None  # one short
        assert rows.eager_row_product(weight, x, bias.bfloat16()) is None  # another dtype
    assert rows.eager_row_product(weight, x, None) is None and uses_row_kernel(x, weight) is False  # gradients on
