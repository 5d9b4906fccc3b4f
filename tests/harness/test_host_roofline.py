"""A run on the CPU reports how far it ran from the host's roofline, with the bandwidth sampled
around its own timed phases."""

from __future__ import annotations

import statistics

import pytest

from tests.conftest import tiny_spec
from zoo.analysis import devices, host_probe
from zoo.harness.run import bench

BANDWIDTH = 1e9  # bytes/s of the cached probe, with FLOP/s so high that both phases are memory-bound
SAMPLES = (3e9, 0.5e9, 2e9)  # what the memory gives at each sample of the run


def _fixed_peaks(monkeypatch) -> None:
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


def test_a_cpu_row_divides_by_the_read_bandwidth_sampled_around_its_phases(monkeypatch):
    _fixed_peaks(monkeypatch)
    taken = iter(SAMPLES)
    monkeypatch.setattr(host_probe, "read_sample", lambda: next(taken))
    row = bench(tiny_spec("gpt2"), device="cpu", prompt_len=6, gen_len=6, repeats=1, warmup=1, threads=1)
    assert next(taken, None) is None  # before prefill, between prefill and decode, after decode: three
    assert row.roofline_source == "measured host (f1xed, 1 thread), read bandwidth sampled in this run"
    bandwidth = statistics.median(SAMPLES)
    assert row.roofline_bytes_per_s == bandwidth
    # Tiny gpt2 (d 64, 2 layers, 4 x 16 heads, MLP 48, vocab 97, 64 learned positions, tied), float32:
    # per layer 2 x 128 (norms) + 64 x 192 + 192 (qkv) + 64 x 64 + 64 (out) + 64 x 48 + 48 + 48 x 64 + 64 (MLP)
    # = 23,152; 2 layers + final norm 128 + token table 6,208 + positions 4,096 = 56,736 parameters.
    weights = 56_736 * 4
    kv_per_position = 2 * 2 * 4 * 16 * 4  # layers x (K, V) x heads x head_dim x fp32
    decode_bytes = weights + (6 + 6 // 2) * kv_per_position  # the cache read at the decode midpoint
    prefill_bytes = weights + 6 * kv_per_position  # weights read once, the prompt's K/V written
    assert row.decode_roofline_fraction == pytest.approx(row.decode_tokens_per_s * decode_bytes / bandwidth)
    assert row.prefill_roofline_fraction == pytest.approx(row.prefill_tokens_per_s * prefill_bytes / (6 * bandwidth))


def test_an_encoder_row_samples_around_its_one_rated_phase(monkeypatch):
    _fixed_peaks(monkeypatch)
    taken = []
    monkeypatch.setattr(host_probe, "read_sample", lambda: taken.append(4e9 + len(taken)) or taken[-1])
    row = bench(tiny_spec("bert-base-uncased"), device="cpu", prompt_len=6, repeats=1, warmup=1, threads=1)
    assert taken == [4e9, 4e9 + 1] and row.roofline_bytes_per_s == 4e9 + 0.5
    assert row.encoder_roofline_fraction is not None


def test_the_in_run_sample_reads_a_buffer_of_the_cached_probes_size(monkeypatch):
    sizes = []
    real = host_probe.probe_buffer
    monkeypatch.setattr(host_probe, "probe_buffer", lambda nbytes: sizes.append(nbytes) or real(nbytes))
    assert host_probe.read_sample() > 0
    assert sizes == [host_probe.host_peaks().probe_bytes]
