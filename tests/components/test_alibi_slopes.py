"""zoo's ALiBi slopes equal BLOOM's and MPT's, as transformers computes them, for every
head count from 1 to 40 (powers of two and the extended series in between)."""

from __future__ import annotations

import pytest
import torch

from zoo.components.positional import alibi_slopes

bloom = pytest.importorskip("transformers.models.bloom.modeling_bloom")
mpt = pytest.importorskip("transformers.models.mpt.modeling_mpt")


@pytest.mark.parametrize("heads", range(1, 41))
def test_slopes_match_bloom(heads: int) -> None:
    expected = bloom._get_alibi_slopes(heads, torch.device("cpu"))  # (H,)
    torch.testing.assert_close(torch.tensor(alibi_slopes(heads), dtype=torch.float32), expected, rtol=1e-6, atol=0)


@pytest.mark.parametrize("heads", range(1, 41))
def test_slopes_match_mpt(heads: int) -> None:
    """MPT's tensor is slope * (key - last), key 0..S-1: the slope is minus its first entry / (S - 1)."""
    bias = mpt.build_mpt_alibi_tensor(heads, 2, alibi_bias_max=8)  # (H, 1, 2): [-slope, 0]
    torch.testing.assert_close(
        torch.tensor(alibi_slopes(heads), dtype=torch.float32), -bias[:, 0, 0], rtol=1e-6, atol=0
    )
