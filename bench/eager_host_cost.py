"""Whether an eager decode step is bound by its host: wall time a step against the device's
busy time, kernel launches and operator calls a step, and host synchronisations.

On an H200 VM (2026-11-28) eager batch-1 decode took 16 ms a step for llama-3.2-1b and 22 ms
for mamba-130m while their kernels took 1.6-1.7 ms: each aten op cost its host 15-25 µs
(results/README.md). This prints that split for any preset, so a change to the eager path
(fewer operator calls a layer) can be timed where it matters:

    python bench/eager_host_cost.py llama-3.2-1b mamba-130m         # on CUDA where present
    python bench/eager_host_cost.py gpt2 --device cpu --layers 2    # the same counts on the CPU
"""

from __future__ import annotations

import argparse
import collections
import time
import warnings

import torch
from torch.profiler import ProfilerActivity, profile

import zoo
from zoo.harness.phases.compiling import run_steps
from zoo.model.cache import KVCache
from zoo.model.sampling import greedy

STEPS = 30  # timed eager steps
PROFILED = 3  # steps under the profiler


def measure(name: str, device: torch.device, layers: int | None) -> dict[str, float]:
    """ms a step (wall, unprofiled), the profiler's device ms, launches and top-level ops a step,
    and the synchronisations torch's sync debug mode reports in one step (CUDA only)."""
    spec = zoo.spec(name) if layers is None else zoo.spec(name).override({"n_layers": layers})
    model = zoo.build(spec, device=device, dtype="bfloat16").eval()
    steps = run_steps(model, device, False)
    cache = KVCache(model, 1, 128 + STEPS + PROFILED + 8, dtype=torch.bfloat16, device=device)
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    with torch.no_grad():
        token = greedy(steps.prefill(model, torch.randint(spec.vocab_size, (1, 128), device=device), cache))[:, None]
        for _ in range(3):
            token = greedy(steps.decode(model, token, cache))[:, None]
        sync()
        start = time.perf_counter()
        for _ in range(STEPS):
            token = greedy(steps.decode(model, token, cache))[:, None]
        sync()
        wall = (time.perf_counter() - start) / STEPS
        syncs = 0
        if device.type == "cuda":
            torch.cuda.set_sync_debug_mode("warn")
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                token = greedy(steps.decode(model, token, cache))[:, None]
            torch.cuda.set_sync_debug_mode(0)
            syncs = sum("synchroniz" in str(w.message) for w in caught)
        activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else [])
        with profile(activities=activities) as prof:
            for _ in range(PROFILED):
                token = greedy(steps.decode(model, token, cache))[:, None]
            sync()
    events = prof.events()
    top = collections.Counter(e.name for e in events if e.cpu_parent is None and e.name.startswith("aten::"))
    launches = sum(1 for e in events if e.name in ("cudaLaunchKernel", "cuLaunchKernelEx", "cuLaunchKernel"))
    device_us = sum(e.self_device_time_total for e in events) if device.type == "cuda" else 0.0
    return {
        "ms_per_step": wall * 1e3,
        "device_ms_per_step": device_us / PROFILED / 1e3,
        "launches_per_step": launches / PROFILED,
        "aten_ops_per_step": sum(top.values()) / PROFILED,
        "syncs_per_step": float(syncs),
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("presets", nargs="+", help="preset names (random weights, bfloat16, batch 1, prompt 128)")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--layers", type=int, help="cut every model to this many layers")
    args = parser.parse_args(argv)
    device = torch.device(args.device)
    print(f"{'preset':>16} {'ms/step':>8} {'device ms':>9} {'launches':>8} {'aten ops':>8} {'syncs':>5}")
    for name in args.presets:
        m = measure(name, device, args.layers)
        print(
            f"{name:>16} {m['ms_per_step']:8.2f} {m['device_ms_per_step']:9.2f} {m['launches_per_step']:8.0f} "
            f"{m['aten_ops_per_step']:8.0f} {m['syncs_per_step']:5.0f}"
        )


if __name__ == "__main__":
    main()
