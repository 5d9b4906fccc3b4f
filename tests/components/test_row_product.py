"""zoo.components.row_product: the opt-in fused one-row CPU kernel, its fallback and its
custom op; and the default one-row paths, torch.mv (float32) and F.linear (bf16, fp16)."""

from __future__ import annotations

import logging
import os

import pytest
import torch
import torch.nn.functional as F

import zoo
from zoo.components import row_product as rows
from zoo.components.linear import Linear, uses_matrix_vector, uses_row_kernel
from zoo.model.cache import KVCache
from zoo.model.generation import decode_step, prefill

# one MiB and up takes the kernel: 512 x 512 float32, 1024 x 512 bfloat16
TOLERANCE = {torch.float32: {"atol": 1e-4, "rtol": 1e-5}, torch.bfloat16: {"atol": 2e-2, "rtol": 2e-2}}


@pytest.fixture(autouse=True)
def kernel_on(monkeypatch):
    """The kernel is opt-in; these tests opt in unless they say otherwise."""
    monkeypatch.setenv(rows.ENV_SWITCH, "1")


@pytest.fixture
def fresh_kernel(monkeypatch):
    """Module state as in a new process: no compiled kernels, no recorded failure."""
    monkeypatch.setattr(rows, "_kernels", {})
    monkeypatch.setattr(rows, "_failed", None)


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


def test_one_kernel_serves_every_weight_shape_of_a_dtype():
    with torch.inference_mode():
        for out_features, in_features in [(1024, 512), (512, 1024), (768, 768), (2048, 640)]:
            weight = torch.randn(out_features, in_features)
            x = torch.randn(in_features)
            torch.testing.assert_close(
                rows.compiled_row_product(weight, x, None), torch.mv(weight, x), **TOLERANCE[torch.float32]
            )
    assert len([key for key in rows._kernels if key[0] == torch.float32 and not key[1]]) == 1


def test_layers_of_every_shape_with_a_bias_share_one_compiled_kernel(fresh_kernel):
    """A bias is a parameter, whose shape dynamo would hold static: one variant per layer shape
    (gpt2's 2304, 768 and 3072) and per dispatch context (eager, inside the op of a compiled
    graph) passed the recompile limit, and the process fell back to F.linear for good. It is
    passed as a view, so every shape shares the dynamic kernel compiled first."""
    import torch._dynamo

    layers = [Linear(512, out) for out in (1536, 512, 2048)]
    with torch.no_grad():
        for i, layer in enumerate(layers):
            x = torch.randn(512)
            with torch._dynamo.config.patch(error_on_recompile=i > 0):
                out = rows.compiled_row_product(layer.weight, x, layer.bias)
            torch.testing.assert_close(out, F.linear(x, layer.weight, layer.bias), **TOLERANCE[torch.float32])
    assert rows.compile_failure() is None


@pytest.mark.parametrize(
    ("x_shape", "weight_shape", "grad"),
    [
        ((2, 1, 512), (1024, 512), False),  # two rows: a GEMM, F.linear's job
        ((1, 3, 512), (1024, 512), False),  # a prompt
        ((1, 1, 64), (48, 64), False),  # a small weight: the call would cost more than it saves
        ((1, 1, 8192), (128, 8192), False),  # a long row: inductor's split reduction is slower
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


@pytest.mark.parametrize("switch", [None, "0"])
def test_without_the_switch_one_float32_row_is_torch_mv(monkeypatch, switch):
    if switch is None:
        monkeypatch.delenv(rows.ENV_SWITCH)
    else:
        monkeypatch.setenv(rows.ENV_SWITCH, switch)
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
    monkeypatch.delenv(rows.ENV_SWITCH, raising=False)
    layer = Linear(512, 1024).to(dtype)
    x = torch.randn(1, 1, 512, dtype=dtype)
    with torch.inference_mode():
        assert not uses_matrix_vector(x, layer.weight)
        assert torch.equal(layer(x), F.linear(x, layer.weight, layer.bias))


def test_a_kernel_that_cannot_compile_is_reported_once_and_f_linear_used(fresh_kernel, monkeypatch, caplog):
    def no_compiler(*args, **kwargs):
        raise RuntimeError("no C++ compiler found\nmore detail")

    monkeypatch.setattr(torch, "compile", lambda fn, **kwargs: no_compiler)
    layer = Linear(512, 1024)
    x = torch.randn(1, 512)
    with caplog.at_level(logging.WARNING, logger=rows.__name__), torch.inference_mode():
        first = layer(x)
        second = layer(x)
    assert torch.equal(first, F.linear(x, layer.weight, layer.bias)) and torch.equal(second, first)
    assert [r.getMessage() for r in caplog.records] == [
        "zoo: the CPU row-product kernel could not be compiled (RuntimeError: no C++ compiler found); using F.linear"
    ]
    assert not rows.enabled(torch.float32)


def test_a_compiled_graph_calls_the_kernel_as_one_opaque_op():
    layer = Linear(512, 1024).eval()
    x = torch.randn(1, 1, 512)
    graphs: list[torch.fx.GraphModule] = []

    def record(graph: torch.fx.GraphModule, example_inputs):
        graphs.append(graph)
        return graph.forward

    with torch.no_grad():
        out = torch.compile(layer, backend=record, fullgraph=True)(x)
        expected = F.linear(x, layer.weight, layer.bias)
    torch.testing.assert_close(out, expected, **TOLERANCE[torch.float32])
    targets = [node.target for node in graphs[0].graph.nodes if node.op == "call_function"]
    assert torch.ops.zoo.row_product.default in targets


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
    monkeypatch.delenv(rows.ENV_SWITCH, raising=False)
    layer = Linear(512, 1024)  # 2 MiB float32: large enough for the kernel
    x = torch.randn(1, 512)
    with torch.inference_mode():
        assert not uses_row_kernel(x, layer.weight)
        with rows.measured_faster([torch.float32]):
            assert uses_row_kernel(x, layer.weight) and not uses_row_kernel(x.bfloat16(), layer.weight.bfloat16())
            torch.testing.assert_close(layer(x), F.linear(x, layer.weight, layer.bias), **TOLERANCE[torch.float32])
            monkeypatch.setenv(rows.ENV_SWITCH, "0")
            assert not uses_row_kernel(x, layer.weight)
        assert not uses_row_kernel(x, layer.weight) or os.environ[rows.ENV_SWITCH] == "1"
