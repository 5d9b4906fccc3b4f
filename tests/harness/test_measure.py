import ctypes
import time

import pytest
import torch

from zoo.harness.measure import CudaProbe, EnergyMeter, HostProbe, energy_meter, joules_per_token, probe_for


class Watts(EnergyMeter):
    """A board drawing a constant power: its counter is watts x wall time."""

    method = "test: constant power"

    def __init__(self, watts: float) -> None:
        self.watts = watts

    def joules(self) -> float:
        return self.watts * time.perf_counter()


def _return_free_heap() -> None:
    """glibc keeps freed heap pages resident; an allocation that reuses them raises no RSS. An
    earlier test's freed memory would hide this test's block (a suite-order flake)."""
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except OSError:  # not glibc: nothing held back to return
        pass


def test_host_probe_sees_an_allocation_inside_the_phase_only():
    probe = HostProbe(torch.device("cpu"))
    _return_free_heap()
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


def test_a_phase_reads_the_energy_counter_around_its_own_work_only():
    probe = HostProbe(torch.device("cpu"), Watts(300.0))
    time.sleep(0.05)  # before the phase: not billed
    with probe.phase() as phase:
        time.sleep(0.02)
    assert phase.joules == pytest.approx(300.0 * phase.seconds, rel=0.05)
    assert probe.energy_method == "test: constant power"


def test_joules_per_token_needs_every_phase_metered():
    probe, unmetered = HostProbe(torch.device("cpu"), Watts(10.0)), HostProbe(torch.device("cpu"))
    with probe.phase() as a, probe.phase() as b:
        pass
    with unmetered.phase() as c:
        pass
    assert c.joules is None and unmetered.energy_method is None
    assert joules_per_token([a, c], 10) is None and joules_per_token([], 10) is None
    assert joules_per_token([a, b], 4) == pytest.approx((a.joules + b.joules) / 4)


def test_the_cpu_has_no_energy_counter_here():
    assert energy_meter(torch.device("cpu")) is None


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


def test_only_the_host_cpu_samples_its_read_bandwidth(monkeypatch):
    """A CPU run's roofline is measured, so the run samples it; a GPU's is its spec sheet and
    MPS has none: no sample, no seconds spent."""
    from zoo.analysis import host_probe

    monkeypatch.setattr(host_probe, "read_sample", lambda: 7e9)
    assert HostProbe(torch.device("cpu")).read_bandwidth() == 7e9
    assert HostProbe(torch.device("mps")).read_bandwidth() is None
    assert CudaProbe(torch.device("cuda")).read_bandwidth() is None
