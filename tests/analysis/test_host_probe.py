"""The host roofline probe: positive figures, measured once per machine and read from the cache after."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest
import torch

from zoo.analysis import host_machine, host_probe
from zoo.analysis.devices import device_peaks, measured_host_peaks
from zoo.components import row_product

# timed: copy, sum, two one-row products; kernel and torch per dtype; the kernel's step shapes fetched past the
# caches and not, per dtype, RUNS turns (where it builds); matmuls by torch and by oneDNN (where torch has it)
PROBE_CALLS = 4 + 4 + (2 * 2 * host_probe.RUNS if row_product.available() else 0) + 3
PROBE_CALLS += 3 if torch.backends.mkldnn.is_available() else 0


@pytest.fixture
def small_probe(monkeypatch, tmp_path):
    """A probe over 4 MiB and small matmuls into a cache of its own, counting the timed calls."""
    monkeypatch.setenv("ZOO_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(host_probe, "probe_bytes", lambda: 4 << 20)
    monkeypatch.setattr(host_probe, "ROW_WIDTH", 128)  # the past-cache probe's layers: 5 float32, 10 bfloat16
    monkeypatch.setattr(host_probe, "MATMUL_SIZES", (64,))
    calls = []
    real = host_probe._median_seconds

    def counted(work, runs):  # type: ignore[no-untyped-def]
        calls.append(runs)
        return real(work, 2)

    monkeypatch.setattr(host_probe, "_median_seconds", counted)
    return calls


def test_the_probe_measures_positive_figures_for_this_machine(small_probe):
    peaks = host_probe.host_peaks()
    assert peaks.copy_bytes_per_s > 0 and peaks.bandwidth >= peaks.copy_bytes_per_s
    assert peaks.read_bytes_per_s > 0 and peaks.bandwidth >= peaks.read_bytes_per_s
    rows = {"float32", "bfloat16", "float32 row kernel", "bfloat16 row kernel"}  # torch's paths, zoo's kernel
    assert set(peaks.gemv_bytes_per_s) == rows and min(peaks.gemv_bytes_per_s.values()) > 0
    assert set(peaks.row_kernel_faster) == {"float32", "bfloat16"}  # where a run takes the kernel
    assert set(peaks.past_cache_faster) == ({"float32", "bfloat16"} if row_product.available() else set())
    assert set(peaks.matmul_flops) == {"float32", "bfloat16", "float16"} and min(peaks.matmul_flops.values()) > 0
    assert set(peaks.onednn_faster) == set(peaks.matmul_flops)  # per dtype: oneDNN's linear against torch's matmul
    assert peaks.machine["threads"] == torch.get_num_threads() and peaks.machine["torch"] == torch.__version__
    assert peaks.probe_bytes == 4 << 20 and peaks.probe_seconds > 0
    assert len(small_probe) == PROBE_CALLS


def test_a_second_call_reads_the_cache_and_refresh_measures_again(small_probe, tmp_path):
    first = host_probe.host_peaks()
    timed = len(small_probe)
    assert host_probe.host_peaks() == first and len(small_probe) == timed  # not measured again
    record = json.loads((tmp_path / host_probe.CACHE_FILE).read_text())
    assert list(record) == [first.fingerprint]
    assert record[first.fingerprint]["machine"]["cpu"] == host_machine.cpu_model()
    host_probe.host_peaks(refresh=True)
    assert len(small_probe) == 2 * timed


def test_each_thread_count_is_its_own_machine(small_probe):
    threads = torch.get_num_threads()
    try:
        one = host_probe.host_peaks()
        torch.set_num_threads(threads + 1)
        other = host_probe.host_peaks()
    finally:
        torch.set_num_threads(threads)
    assert one.fingerprint != other.fingerprint and len(small_probe) == 2 * PROBE_CALLS


def test_a_damaged_cache_is_measured_over(small_probe, tmp_path):
    (tmp_path / host_probe.CACHE_FILE).write_text("{not json")
    assert host_probe.host_peaks().bandwidth > 0 and len(small_probe) == PROBE_CALLS


def test_the_cpu_peaks_are_the_measured_host():
    """The session's cache holds fixed peaks (tests/conftest.py): the CPU's roofline is theirs."""
    peaks = device_peaks("cpu", "any CPU")
    host = host_probe.host_peaks()
    assert peaks == measured_host_peaks(host)
    assert peaks.source.startswith(f"measured host ({host.fingerprint}, ") and peaks.bandwidth == 20e9
    assert peaks.peak_flops(torch.bfloat16) == 200e9 and peaks.peak_flops(torch.float32) == 100e9
    assert peaks.peak_flops(torch.int8) == 100e9  # any other dtype: the float32 rate


def test_a_half_precision_run_widened_to_float32_multiplies_at_float32s_rate():
    """An AVX2-only host: bfloat16's native GEMM at 1.2 GFLOP/s, so a run widens its products to
    float32 and its roofline counts float32's 120; float16, within half of float32's, keeps its own."""
    host = host_probe.HostPeaks(
        "avx2", {"threads": 2}, 30e9, {"float32": 30e9}, {"float32": 120e9, "bfloat16": 1.2e9, "float16": 70e9}, 0, 0.0
    )
    peaks = measured_host_peaks(host)
    assert host.widened_matmul_dtypes == ["bfloat16"]
    assert peaks.peak_flops(torch.bfloat16) == 120e9 and peaks.peak_flops(torch.float16) == 70e9


def test_a_stream_read_is_the_faster_of_a_sum_and_the_row_kernel(monkeypatch):
    """The in-run roofline sample reads as fast as zoo can: where the row kernel out-reads a
    sum (four streams a thread against one), the kernel's figure is the sample's."""
    from zoo.components import row_product

    buffer = host_probe.probe_buffer(1 << 20)  # (R, 4096) float32
    monkeypatch.setattr(host_probe, "read_bytes_per_s", lambda buffer, runs: 1.0)  # a sum slower than any kernel
    kernel_rate = host_probe.stream_bytes_per_s(buffer, 2)
    assert kernel_rate > 1.0 if row_product.available() else kernel_rate == 1.0
    monkeypatch.setattr(host_probe, "read_bytes_per_s", lambda buffer, runs: 1e15)  # faster than any kernel
    assert host_probe.stream_bytes_per_s(buffer, 2) == 1e15


@pytest.mark.parametrize(
    ("cache", "measured", "past"),
    [(1 << 18, True, True), (1 << 18, False, False), (1 << 19, True, False), (None, True, False)],
)
def test_the_row_kernel_reads_the_probe_as_a_run_reads_weights_of_its_size(monkeypatch, cache, measured, past):
    """The probe reads its buffer as a run reads weights of that size: past the caches
    (``row_product.past_cache``) where it is over twice the last-level cache and the fetch
    measured faster here, not where it is not, nor where Linux reports no cache."""
    from zoo.components import row_product

    seen = []
    kernel = row_product.row_product
    host = host_probe.host_peaks()
    monkeypatch.setattr(host_probe, "host_peaks", lambda: replace(host, past_cache_faster={"float32": measured}))
    monkeypatch.setattr(host_probe, "last_level_cache_bytes", lambda: cache)
    monkeypatch.setattr(row_product, "row_product", lambda *a: seen.append(row_product.PastCache.on) or kernel(*a))
    host_probe.stream_bytes_per_s(host_probe.probe_buffer(1 << 20), 1)  # 1 MiB
    assert set(seen) == ({past} if row_product.available() else set()) and row_product.PastCache.on is False


def test_the_step_shapes_are_views_of_the_buffer_within_its_bytes():
    """The past-cache probe's weights: a decode layer's four products at ``ROW_WIDTH``, as many
    layers as the buffer holds, each its own bytes of the buffer, never past its end."""
    width = host_probe.ROW_WIDTH
    flat = torch.zeros(12 * width + 5, width)  # room for two layers of bfloat16 weights (not three), one of float32
    for dtype, layers in ((torch.bfloat16, 2), (torch.float32, 1)):
        pairs = host_probe._step_weights(flat, dtype)
        shapes = [tuple(w.shape) for w, _ in pairs]
        assert shapes == layers * [(3 * width, width), (width, width), (4 * width, width), (width, 4 * width)]
        starts = [w.data_ptr() for w, _ in pairs]
        assert all(w.dtype == dtype and row.shape == (w.shape[1],) and row.dtype == dtype for w, row in pairs)
        assert all(b - a == w.nbytes for a, b, (w, _) in zip(starts, starts[1:], pairs, strict=False))
        assert starts[0] == flat.data_ptr() and starts[-1] + pairs[-1][0].nbytes <= flat.data_ptr() + flat.nbytes


def test_a_dtype_of_which_no_layer_fits_is_left_out_of_the_past_cache_probe():
    """1 MiB holds no decode layer at ``ROW_WIDTH`` 1024 (12 MiB in float32): nothing is timed
    and no dtype is decided (runs read it through the caches)."""
    assert host_probe._past_cache_paths(1 << 20) == {}


@pytest.mark.parametrize(("measured", "cache", "past"), [(True, 1, True), (False, 1, False), (True, None, False)])
def test_a_step_fetches_past_the_caches_only_where_it_outgrows_them_and_that_measured_faster(
    monkeypatch, measured, cache, past
):
    """``fetches_past_cache``: weights over twice the last-level cache, in a dtype whose fetch
    past the caches the probe measured faster here; a dtype it did not measure reads through."""
    host = host_probe.host_peaks()
    monkeypatch.setattr(host_probe, "host_peaks", lambda: replace(host, past_cache_faster={"bfloat16": measured}))
    monkeypatch.setattr(host_probe, "last_level_cache_bytes", lambda: cache)
    assert host_probe.fetches_past_cache(1 << 20, torch.bfloat16) is past
    assert host_probe.fetches_past_cache(1 << 20, torch.float32) is False
