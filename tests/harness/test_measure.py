import pytest
import torch

from zoo.harness.measure import CudaProbe, HostProbe, probe_for


def test_host_probe_sees_an_allocation_inside_the_phase_only():
    probe = HostProbe(torch.device("cpu"))
    with probe.phase() as big:
        block = torch.ones(64 * 2**20 // 4)  # 64 MiB, touched
        del block
    with probe.phase() as small:
        pass
    assert big.delta_bytes >= 60 * 2**20
    assert small.delta_bytes < 32 * 2**20  # the peak was reset between phases
    assert big.seconds > 0 and probe.memory_method


def test_probe_kind_follows_the_device():
    assert isinstance(probe_for(torch.device("cpu")), HostProbe)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_cuda_probe_resets_the_peak_per_phase():
    probe = CudaProbe(torch.device("cuda"))
    assert isinstance(probe_for(torch.device("cuda")), CudaProbe)
    with probe.phase() as big:
        block = torch.empty(256 * 2**20, dtype=torch.uint8, device="cuda")
        del block
    with probe.phase() as small:
        torch.ones(8, device="cuda")
    assert big.delta_bytes >= 256 * 2**20 and small.delta_bytes < 2**20
    assert big.seconds >= 0 and "max_memory_allocated" in probe.memory_method
