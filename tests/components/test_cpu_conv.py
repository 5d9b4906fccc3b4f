"""The fused prompt convolution (``cpu_conv``) equals ``causal_conv.causal_conv``: its output
laid out by tokens and the window it leaves, across channel counts that are not whole blocks,
strided rows, prompts shorter than the kernel, no bias, and half precision."""

from __future__ import annotations

import pytest
import torch

from zoo.components import cpu_conv
from zoo.components.causal_conv import causal_conv


def test_the_cpu_conv_builds_with_the_dev_install():
    assert cpu_conv.EXTENSION.available()


@pytest.mark.parametrize("channels", [16, 37, 130])
@pytest.mark.parametrize("steps", [1, 2, 9])
@pytest.mark.parametrize("with_window", [False, True])
def test_rows_equal_the_reference_convolution(channels: int, steps: int, with_window: bool):
    gen = torch.Generator().manual_seed(channels + steps)
    rows = torch.randn(2, steps, 2 * channels + 3, generator=gen)  # (B, T, .): in_proj's output
    x = rows[:, :, 3 : 3 + channels]  # (B, T, C), strided rows as a split leaves them
    weight, bias = torch.randn(channels, 1, 4, generator=gen), torch.randn(channels, generator=gen)
    window = torch.randn(2, channels, 4, generator=gen) if with_window else None
    expected_window = None if window is None else window.clone()
    expected = causal_conv(x.transpose(1, 2), weight, bias, expected_window).transpose(1, 2)  # (B, T, C)
    got = cpu_conv.causal_conv_rows(x, weight, bias, window)
    assert got.is_contiguous() and got.shape == (2, steps, channels)
    torch.testing.assert_close(got, expected, atol=1e-5, rtol=1e-5)
    if window is not None:
        torch.testing.assert_close(window, expected_window, atol=0, rtol=0)


def test_no_bias_and_bfloat16_rows_with_a_float32_window():
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(1, 7, 48, generator=gen).bfloat16()  # (B, T, C)
    weight = torch.randn(48, 1, 4, generator=gen).bfloat16()
    window = torch.randn(1, 48, 4, generator=gen).bfloat16().float()  # a float32 state holding the model's values
    expected_window = window.clone()
    expected = causal_conv(x.transpose(1, 2), weight, None, expected_window).transpose(1, 2)  # bfloat16 ops
    got = cpu_conv.causal_conv_rows(x, weight, None, window)  # summed in float32, rounded once
    assert got.dtype == torch.bfloat16
    torch.testing.assert_close(got.float(), expected.float(), atol=2e-2, rtol=2e-2)
    torch.testing.assert_close(window, expected_window, atol=0, rtol=0)
