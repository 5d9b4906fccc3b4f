"""A run on the CPU reports how far it ran from the host's measured roofline."""

from __future__ import annotations

import pytest

from tests.conftest import tiny_spec
from zoo.analysis import devices, host_probe
from zoo.harness.run import bench

BANDWIDTH = 1e9  # bytes/s, with FLOP/s so high that both phases are memory-bound


def test_a_cpu_row_carries_its_fractions_of_the_measured_roofline(monkeypatch):
    fixed = host_probe.HostPeaks(
        "f1xed",
        {"threads": 1},
        BANDWIDTH,
        {"float32": BANDWIDTH},
        {"float32": 1e18, "bfloat16": 1e18, "float16": 1e18},
        0,
        0.0,
    )
    monkeypatch.setattr(devices, "host_peaks", lambda: fixed)
    row = bench(tiny_spec("gpt2"), device="cpu", prompt_len=6, gen_len=6, repeats=1, warmup=1, threads=1)
    assert row.roofline_source == "measured host (f1xed, 1 thread)"
    # Tiny gpt2 (d 64, 2 layers, 4 x 16 heads, MLP 48, vocab 97, 64 learned positions, tied), float32:
    # per layer 2 x 128 (norms) + 64 x 192 + 192 (qkv) + 64 x 64 + 64 (out) + 64 x 48 + 48 + 48 x 64 + 64 (MLP)
    # = 23,152; 2 layers + final norm 128 + token table 6,208 + positions 4,096 = 56,736 parameters.
    weights = 56_736 * 4
    kv_per_position = 2 * 2 * 4 * 16 * 4  # layers x (K, V) x heads x head_dim x fp32
    decode_bytes = weights + (6 + 6 // 2) * kv_per_position  # the cache read at the decode midpoint
    prefill_bytes = weights + 6 * kv_per_position  # weights read once, the prompt's K/V written
    assert row.decode_roofline_fraction == pytest.approx(row.decode_tokens_per_s * decode_bytes / BANDWIDTH)
    assert row.prefill_roofline_fraction == pytest.approx(row.prefill_tokens_per_s * prefill_bytes / (6 * BANDWIDTH))
