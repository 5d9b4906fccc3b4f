"""Timers and peak-memory probes, one implementation per device kind.

CUDA: a phase is bracketed by CUDA events recorded after a ``synchronize`` (so earlier
work is not billed to it) and its peak is ``max_memory_allocated`` after
``reset_peak_memory_stats`` at the phase start: tensors allocated by torch's caching
allocator, weights and cache included.

CPU (and MPS, whose allocator exposes no per-phase peak): wall time with ``perf_counter``
and the peak resident set size of the whole process (weights, cache, allocator slack and
the Python runtime). ``ru_maxrss`` cannot be used per phase because it never goes down;
on Linux the kernel's own high-water mark ``VmHWM`` is reset at each phase start by
writing 5 to ``/proc/self/clear_refs`` and read at its end: exact, and no thread competes
with the timed loop for the GIL. Elsewhere a thread samples RSS every 10 ms (psutil) and
can miss a shorter spike. ``delta_bytes`` is the peak above the RSS at the phase start.

Bandwidth: on the CPU, whose roofline is measured (``zoo.analysis.host_probe``) and moves
with what else the machine runs, ``read_bandwidth`` samples the memory's read bandwidth now;
a run takes it around its timed phases. A GPU's roofline is its spec sheet: no sample.

Energy: where the device has a cumulative energy counter (a CUDA device with NVML,
``pip install nvidia-ml-py``), a phase also reads it after each synchronisation, so its
``joules`` are those of the timed work alone: a model's build, warm-up and compilation,
which a reading around the whole process would bill to its tokens, are outside.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import torch

from zoo.analysis import host_probe

SAMPLE_PERIOD_S = 0.01
_STATUS = Path("/proc/self/status")
_CLEAR_REFS = Path("/proc/self/clear_refs")


@dataclass
class PhaseResult:
    seconds: float = 0.0
    peak_bytes: int = 0  # CUDA: max_memory_allocated; CPU: peak process RSS
    start_bytes: int = 0  # the same measure at the phase start
    joules: float | None = None  # the device's energy over the phase (None: no counter)

    @property
    def delta_bytes(self) -> int:
        return max(0, self.peak_bytes - self.start_bytes)


class EnergyMeter:
    """A device's cumulative energy counter; ``method`` says what it reads, for the row."""

    method = ""

    def joules(self) -> float:  # pragma: no cover - abstract
        raise NotImplementedError


class NvmlEnergy(EnergyMeter):
    """NVML's total energy since the driver loaded (Volta and later), in millijoules. NVML
    refreshes it every few tens of milliseconds, so a phase of well under a second reads
    coarsely: the phases sum their repeats before dividing by tokens."""

    method = "NVML total energy consumption, read around each phase"

    def __init__(self, index: int) -> None:
        import pynvml

        pynvml.nvmlInit()
        self._read = pynvml.nvmlDeviceGetTotalEnergyConsumption
        self._handle = pynvml.nvmlDeviceGetHandleByIndex(index)
        self.joules()  # raises where the board does not count energy

    def joules(self) -> float:
        return self._read(self._handle) / 1000.0


def energy_meter(device: torch.device) -> EnergyMeter | None:
    """The device's energy counter, or None where it has none this process can read."""
    if device.type != "cuda":
        return None
    try:
        return NvmlEnergy(torch.cuda.current_device() if device.index is None else device.index)
    except Exception:  # no nvidia-ml-py, no NVML library, or a board without the counter
        return None


class Probe:
    """Measures phases on one device: ``with probe.phase() as result: ...``."""

    memory_method = ""

    def __init__(self, device: torch.device, energy: EnergyMeter | None = None) -> None:
        self.device = device
        self.energy = energy

    @property
    def energy_method(self) -> str | None:
        return None if self.energy is None else self.energy.method

    def _joules(self) -> float | None:
        return None if self.energy is None else self.energy.joules()

    def synchronize(self) -> None:
        """Wait for queued device work (no-op on the CPU)."""

    def read_bandwidth(self) -> float | None:
        """The device's memory read bandwidth now (bytes/s), under whatever else the machine is
        doing, for the roofline of the run in hand; None where that roofline is a spec sheet's."""
        return None

    @contextmanager
    def phase(self) -> Iterator[PhaseResult]:  # pragma: no cover - abstract
        raise NotImplementedError
        yield PhaseResult()


class CudaProbe(Probe):
    memory_method = "torch.cuda.max_memory_allocated, peak reset per phase"

    def synchronize(self) -> None:
        torch.cuda.synchronize(self.device)

    @contextmanager
    def phase(self) -> Iterator[PhaseResult]:
        result = PhaseResult()
        torch.cuda.synchronize(self.device)
        torch.cuda.reset_peak_memory_stats(self.device)
        result.start_bytes = torch.cuda.memory_allocated(self.device)
        before = self._joules()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        yield result
        end.record()
        torch.cuda.synchronize(self.device)
        after = self._joules()
        result.joules = None if before is None or after is None else after - before
        result.seconds = start.elapsed_time(end) / 1000.0
        result.peak_bytes = torch.cuda.max_memory_allocated(self.device)


class _RssSampler(threading.Thread):
    """Samples this process's RSS until stopped, keeping the maximum."""

    def __init__(self) -> None:
        super().__init__(daemon=True)
        import psutil

        self._process = psutil.Process()
        self._stop_event = threading.Event()
        self.start_bytes = self._process.memory_info().rss
        self.peak = self.start_bytes

    def run(self) -> None:
        while not self._stop_event.wait(SAMPLE_PERIOD_S):
            self.peak = max(self.peak, self._process.memory_info().rss)

    def stop(self) -> int:
        self._stop_event.set()
        self.join()
        return max(self.peak, self._process.memory_info().rss)


def _status_kib(field: str) -> int:
    for line in _STATUS.read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise OSError(f"{field} not in {_STATUS}")


def _can_reset_peak_rss() -> bool:
    try:
        _CLEAR_REFS.write_text("5")
        _status_kib("VmHWM")
        return True
    except OSError:
        return False


class HostProbe(Probe):
    def __init__(self, device: torch.device, energy: EnergyMeter | None = None) -> None:
        super().__init__(device, energy)
        self.kernel_peak = _can_reset_peak_rss()
        self.memory_method = (
            "process peak RSS (Linux VmHWM, reset per phase via /proc/self/clear_refs)"
            if self.kernel_peak
            else f"process RSS sampled every {SAMPLE_PERIOD_S * 1000:g} ms (psutil), peak per phase"
        )

    def synchronize(self) -> None:
        if self.device.type == "mps":
            torch.mps.synchronize()

    def read_bandwidth(self) -> float | None:
        """The host's read bandwidth sampled now (``host_probe.read_sample``); None on MPS,
        which has no roofline."""
        return host_probe.read_sample() if self.device.type == "cpu" else None

    @contextmanager
    def phase(self) -> Iterator[PhaseResult]:
        result = PhaseResult()
        self.synchronize()
        sampler = None
        if self.kernel_peak:
            _CLEAR_REFS.write_text("5")
            result.start_bytes = _status_kib("VmRSS") * 1024
        else:
            sampler = _RssSampler()
            sampler.start()
            result.start_bytes = sampler.start_bytes
        before = self._joules()
        start = time.perf_counter()
        try:
            yield result
            self.synchronize()
        finally:
            result.seconds = time.perf_counter() - start
            after = self._joules()
            result.joules = None if before is None or after is None else after - before
            result.peak_bytes = sampler.stop() if sampler else _status_kib("VmHWM") * 1024


class StepClock:
    """Times of each step of a loop without distorting it: on CUDA an event recorded after
    each step and one synchronisation at the end (``seconds``); on the host ``perf_counter``
    per step (on MPS after a synchronisation, as its work is queued like CUDA's)."""

    def __init__(self, device: torch.device) -> None:
        self.device = device
        self.cuda = device.type == "cuda"
        self._marks: list = []  # type: ignore[type-arg]
        self.mark()

    def mark(self) -> None:
        """The end of a step (and the start of the next)."""
        if self.cuda:
            event = torch.cuda.Event(enable_timing=True)
            event.record()
            self._marks.append(event)
            return
        if self.device.type == "mps":
            torch.mps.synchronize()
        self._marks.append(time.perf_counter())

    def seconds(self) -> list[float]:
        """The duration of each step marked."""
        if self.cuda:
            torch.cuda.synchronize(self.device)
            return [a.elapsed_time(b) / 1000.0 for a, b in zip(self._marks, self._marks[1:])]
        return [b - a for a, b in zip(self._marks, self._marks[1:])]


def probe_for(device: torch.device) -> Probe:
    energy = energy_meter(device)
    return CudaProbe(device, energy) if device.type == "cuda" else HostProbe(device, energy)


def joules_per_token(phases: list[PhaseResult], tokens: int) -> float | None:
    """The phases' energy summed, per token of all of them (None where any went unmetered)."""
    total = 0.0
    for phase in phases:
        if phase.joules is None:
            return None
        total += phase.joules
    return total / tokens if phases else None
