import pytest
import torch

from zoo.analysis.devices import GPUS, device_peaks, gpu, gpu_peaks, matches_device, step_roofline
from zoo.errors import BenchError


def test_the_table_covers_the_required_gpus_with_sources():
    for key in ("h100-sxm", "h100-pcie", "h200", "a100-80gb", "l4", "rtx-4090"):
        row = GPUS[key]
        assert row.source.startswith("https://") and row.bf16_tflops > 0 and row.memory_gb_s > 0


def test_unknown_gpu_is_a_bench_error_with_a_suggestion():
    with pytest.raises(BenchError, match="did you mean 'h100-sxm'"):
        gpu("h100-sx")


def test_device_names_map_to_rows():
    assert matches_device(GPUS["h100-sxm"], "NVIDIA H100 80GB HBM3")
    assert matches_device(GPUS["h100-pcie"], "NVIDIA H100 PCIe")
    assert not matches_device(GPUS["h100-sxm"], "NVIDIA H100 PCIe")
    assert matches_device(GPUS["rtx-4090"], "NVIDIA GeForce RTX 4090")
    assert matches_device(GPUS["l4"], "NVIDIA L4")
    assert not matches_device(GPUS["l4"], "NVIDIA L40S") and not matches_device(GPUS["l4"], "NVIDIA L40")
    assert matches_device(GPUS["a100-80gb"], "NVIDIA A100-SXM4-80GB")
    assert not matches_device(GPUS["a100-80gb"], "NVIDIA A100 80GB PCIe")


def test_device_peaks_are_the_spec_sheet_of_a_known_board_and_none_for_unknown_gpus():
    peaks = device_peaks("cuda", "NVIDIA H100 80GB HBM3")
    assert peaks is not None and peaks.source == "spec sheet h100-sxm" and peaks.bandwidth == 3350e9
    assert peaks.peak_flops(torch.bfloat16) == pytest.approx(989.4e12) and peaks.peak_flops(
        torch.float32
    ) == pytest.approx(66.9e12)
    assert device_peaks("cuda", "NVIDIA L40S") is None  # not in the table
    assert device_peaks("mps", "Apple M2") is None  # no probe for MPS


def test_a_step_is_bound_by_the_slower_of_compute_and_memory():
    peaks = gpu_peaks("l4")  # 121 TFLOP/s bf16, 300 GB/s
    memory = step_roofline(1e9, 3e9, 1, peaks, torch.bfloat16)
    assert (
        memory["bound"] == "memory"
        and memory["seconds"] == pytest.approx(0.01)
        and memory["tokens_per_s"] == pytest.approx(100)
    )
    compute = step_roofline(121e12, 1, 8, peaks, torch.bfloat16)
    assert compute["bound"] == "compute" and compute["tokens_per_s"] == pytest.approx(8)
    assert step_roofline(1e9, 3e9, 1, None, torch.bfloat16) == {
        "flops": 10**9,
        "bytes": 3 * 10**9,
        "seconds": None,
        "tokens_per_s": None,
        "bound": None,
    }
