"""zoo.components.onednn: several-row products through oneDNN's linear where a run asks for it
(``onednn_products``) equal F.linear's float32 sums in another order, and a Linear takes them only
then: outside autograd, several rows, the weight in x's dtype, eager or compiled (zoo's op)."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from zoo.components import onednn
from zoo.components.linear import Linear


@pytest.mark.parametrize("shape", [(5, 96), (2, 9, 96)])
@pytest.mark.parametrize("bias", [True, False])
def test_onednns_product_is_f_linears_sum_in_another_order(shape, bias):
    generator = torch.Generator().manual_seed(0)
    x, weight = torch.randn(*shape, generator=generator), torch.randn(50, 96, generator=generator)
    b = torch.randn(50, generator=generator) if bias else None
    expected = F.linear(x, weight, b)  # (..., 50)
    got = onednn.linear(x, weight, b)
    assert got.shape == expected.shape and got.dtype == torch.float32
    torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-5 * expected.abs().max().item())
    strided = torch.randn(shape[0], 192, generator=generator)[:, ::2]  # (R, 96), every other column
    torch.testing.assert_close(onednn.linear(strided, weight, b), F.linear(strided, weight, b), rtol=1e-5, atol=1e-4)


def test_a_linear_takes_onednn_only_within_a_run_for_several_rows_outside_autograd(monkeypatch):
    layer = Linear(96, 50)
    rows, one = torch.randn(3, 96), torch.randn(1, 96)
    taken: list[tuple[int, ...]] = []
    real = onednn.linear

    def recorded(x, weight, bias):  # type: ignore[no-untyped-def]
        taken.append(tuple(x.shape))
        return real(x, weight, bias)

    monkeypatch.setattr(onednn, "linear", recorded)
    with torch.no_grad():
        layer(rows)
        assert taken == []  # no run asked for it
        with onednn.onednn_products([torch.float32]):
            got = layer(rows)
            layer(one)  # one row: the one-row paths'
        assert taken == [(3, 96)]
        torch.testing.assert_close(got, F.linear(rows, layer.weight, layer.bias), rtol=1e-5, atol=1e-5)
        with onednn.onednn_products([torch.bfloat16]):
            layer(rows)  # float32 rows: not a dtype of the run's set
        assert taken == [(3, 96)]
    with onednn.onednn_products([torch.float32]):
        out = layer(rows)  # autograd on: oneDNN's op has no backward
        out.sum().backward()
    assert taken == [(3, 96)] and layer.weight.grad is not None


def test_a_compiled_graph_calls_zoos_opaque_op_where_a_run_takes_onednn():
    """Inside ``onednn_products`` a compiled Linear's several-row product is zoo's op (inductor
    cannot lower oneDNN's own with a plain weight), with the eager call's sums."""
    from torch._dynamo.testing import CompileCounterWithBackend

    layer = Linear(96, 50)
    rows = torch.randn(2, 9, 96)
    seen: list[object] = []

    def backend(graph, inputs):  # type: ignore[no-untyped-def]
        seen.extend(node.target for node in graph.graph.nodes)
        return graph.forward

    with torch.no_grad(), onednn.onednn_products([torch.float32]):
        eager = layer(rows)
        got = torch.compile(layer, backend=CompileCounterWithBackend(backend), fullgraph=True)(rows)
    assert torch.ops.zoo.onednn_linear.default in seen
    torch.testing.assert_close(got, eager, rtol=0, atol=0)
