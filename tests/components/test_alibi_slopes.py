"""zoo's ALiBi slopes equal BLOOM's and MPT's, as transformers computes them, for every
head count from 1 to 40 (powers of two and the extended series in between); a model keeps
them per device."""

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


def test_the_slopes_are_made_once_per_device_and_fake_tensors_get_their_own():
    """A decode step's bias reads slopes kept on the device (made from a list every step they
    were a blocking host-to-device copy on a GPU); a fake tensor mode's are not kept."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    from zoo.components.positional import Alibi

    alibi = Alibi(8.0)
    times = torch.arange(6)[None]  # (1, S)
    expected = torch.tensor(alibi_slopes(4))[None, :, None, None] * (times[:, None, :] - times[:, :, None])[:, None]
    assert torch.equal(alibi.score_bias(times, times, 4), expected)  # (1, H, T, S)
    kept = alibi._slopes[(4, torch.device("cpu"))]
    assert torch.equal(alibi.score_bias(times[:, -1:], times, 4), expected[:, :, -1:])
    assert alibi._slopes[(4, torch.device("cpu"))] is kept and len(alibi._slopes) == 1
    with FakeTensorMode() as mode:
        fake = mode.from_tensor(times)
        assert alibi.score_bias(fake, fake, 8).shape == (1, 8, 6, 6)
    assert len(alibi._slopes) == 1
