"""zoo's norms against the encoder families' own: T5's mean-free RMS LayerNorm, ModernBERT's bias-free LayerNorm."""

import pytest
import torch

from zoo.components.norms import LayerNorm, RMSNorm

transformers = pytest.importorskip("transformers")


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_rmsnorm_is_t5_layernorm(dtype: torch.dtype) -> None:
    from transformers.models.t5.modeling_t5 import T5LayerNorm

    theirs = T5LayerNorm(48, eps=1e-6)
    ours = RMSNorm(48, eps=1e-6)
    with torch.no_grad():
        theirs.weight.copy_(torch.randn(48))
        ours.weight.copy_(theirs.weight)
    x = torch.randn(2, 5, 48) * 3 + 1  # a mean far from 0: T5 does not subtract it
    theirs, ours, x = theirs.to(dtype), ours.to(dtype), x.to(dtype)
    torch.testing.assert_close(ours(x), theirs(x), rtol=0, atol=1e-6 if dtype == torch.float32 else 0)


def test_bias_free_layernorm_is_modernbert_norm() -> None:
    theirs = torch.nn.LayerNorm(32, eps=1e-5, bias=False)  # ModernBERT's norm_bias=False
    ours = LayerNorm(32, eps=1e-5, bias=False)
    with torch.no_grad():
        theirs.weight.copy_(torch.randn(32))
        ours.weight.copy_(theirs.weight)
    x = torch.randn(3, 32)
    torch.testing.assert_close(ours(x), theirs(x))
    assert [name for name, _ in ours.named_parameters()] == ["weight"]
