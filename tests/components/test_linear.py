"""zoo.components.linear.Linear: the one-row bfloat16 CPU product as torch.mv, else F.linear."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from zoo.components.linear import Linear, uses_matrix_vector


@pytest.mark.parametrize("bias", [False, True])
@pytest.mark.parametrize("shape", [(1, 1, 64), (1, 64), (64,)])
def test_one_bfloat16_row_matches_f_linear(shape, bias):
    layer = Linear(64, 48, bias=bias).to(torch.bfloat16)
    x = torch.randn(shape, dtype=torch.bfloat16)
    assert uses_matrix_vector(x, layer.weight)
    out = layer(x)
    assert out.shape == (*shape[:-1], 48) and out.dtype == torch.bfloat16
    # both accumulate in float32 and round once; the summation order may differ
    torch.testing.assert_close(out, F.linear(x, layer.weight, layer.bias), atol=2e-2, rtol=2e-2)


@pytest.mark.parametrize(("dtype", "shape"), [(torch.float32, (1, 1, 64)), (torch.bfloat16, (2, 1, 64)), (torch.bfloat16, (1, 3, 64))])
def test_other_inputs_take_f_linear_exactly(dtype, shape):
    layer = Linear(64, 48).to(dtype)
    x = torch.randn(shape, dtype=dtype)
    assert not uses_matrix_vector(x, layer.weight)
    assert torch.equal(layer(x), F.linear(x, layer.weight, layer.bias))


def test_state_dict_names_are_nn_linear_s():
    assert set(Linear(4, 3).state_dict()) == set(torch.nn.Linear(4, 3).state_dict())
