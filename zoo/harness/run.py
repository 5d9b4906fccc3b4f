"""One run: resolve the model source -> check it fits -> build or load once -> each phase
that applies -> one ``Row``. ``zoo.bench``, ``zoo bench`` and every sweep point run this.

The phases (``zoo.harness.phases``: encode, prefill, decode, weights, and any phase defined
later) are found by registration, never listed here; an option no applicable phase reads,
given for a model it means nothing to (``gen_len`` of an encoder), is one BenchError.
``measure_in_subprocess`` does the same run in a fresh interpreter (``child_run``).
"""

from __future__ import annotations

import contextlib
import statistics
import sys
from collections.abc import Collection, Iterator, Mapping
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import torch

from zoo.analysis.counts import weight_bytes_read
from zoo.analysis.host_probe import fetches_past_cache, host_peaks
from zoo.analysis.memory_check import check_fits
from zoo.components import row_product
from zoo.components.kernels import implementations, preferring
from zoo.components.onednn import onednn_products
from zoo.components.widened import widened_products
from zoo.errors import BenchError
from zoo.harness.analysis_columns import analysis_columns
from zoo.harness.child_run import child_main, run_child
from zoo.harness.environment import (
    Environment,
    device_name,
    zoo_git_commit,
)
from zoo.harness.measure import probe_for
from zoo.harness.phases import phases_for, registered_phases
from zoo.harness.phases.base import Phase, RunContext, run_phase
from zoo.harness.prediction import prediction_columns
from zoo.harness.row import Row
from zoo.harness.run_config import BenchConfig, Progress, make_config
from zoo.harness.shape import check_shape, run_shape
from zoo.harness.source import ModelSource, model_source, names_checkpoint, resolve_source
from zoo.model.build import ZooModel
from zoo.specs.model import ModelSpec

GRID_SHARED = frozenset({"gen_len"})  # a grid's gen_len is every row's: an encoder's row runs without it


def bench(
    spec: ModelSpec | str | Path | Mapping[str, Any] | torch.nn.Module | None = None,
    config: BenchConfig | None = None,
    *,
    progress: Progress | None = None,
    **options: Any,
) -> Row:
    """``zoo.bench``: measure a spec (a preset name, a mapping or a ModelSpec), a checkpoint (a
    path, a GGUF file or a hub id ``org/name``, or ``weights=``), or a model already loaded
    (``zoo.from_pretrained``'s, measured on its own device and dtype). Keyword options are
    BenchConfig fields; one given for a model none of whose phases reads it is refused
    (``gen_len`` of an encoder)."""
    if names_checkpoint(spec):
        spec, options = None, {**options, "weights": str(spec)}
    merged = make_config(**{**(config.model_dump() if config else {}), **options})
    given = {k for k, v in options.items() if v is not None and v is not False}
    defaults = BenchConfig()
    given |= {k for k in BenchConfig.model_fields if getattr(merged, k) != getattr(defaults, k)} - GRID_SHARED
    if isinstance(spec, torch.nn.Module):
        source, merged = model_source(spec, merged)
        return run(source, merged, given - {"weights"}, progress)
    return run(resolve_source(spec, merged), merged, given, progress)


def measure(spec: ModelSpec, config: BenchConfig) -> Row:
    """A sweep point's run (the executors' ``measure``)."""
    return bench(spec, config)


def _refuse_unread(source: ModelSource, given: Collection[str]) -> None:
    """An option that only phases not applying to this topology read, given anyway, is a
    one-line error (an encoder's ``gen_len``)."""
    readers: dict[str, list[str]] = {}
    read_here = set()
    for cls in registered_phases().values():
        for option in cls.options:
            readers.setdefault(option, []).append(cls.name)
        if source.topology in cls.topologies:
            read_here.update(cls.options)
    for option in sorted(given):
        if option in readers and option not in read_here:
            flag = "--" + option.replace("_", "-")
            raise BenchError(
                f"{option}: read by the {', '.join(sorted(readers[option]))} phase; {source.spec.name} is an "
                f"{source.topology} and runs none of them (allowed: without {flag})"
            )


def run(source: ModelSource, config: BenchConfig, given: Collection[str] = (), progress: Progress | None = None) -> Row:
    """The run of ``source`` as ``config`` says (module docstring)."""

    spec, topology = source.spec, source.topology
    device, dtype = source.placement(config)
    check_shape(spec, topology, config)
    phases = phases_for(topology, config)
    _refuse_unread(source, given)
    name = device_name(device)
    prediction_columns(spec, config, phases, dtype, device, name)  # what cannot be predicted fails before the run
    check_fits(spec, config.batch_size, config.prompt_len, config.gen_len, dtype, device)  # before allocating
    if config.threads is not None:
        torch.set_num_threads(config.threads)
    ticks = _ticker(progress, 1 + config.warmup + config.repeats * len(phases))
    ticks("build")
    with preferring(config.impl):
        model = source.load(device, dtype, config.seed)
    ctx = RunContext(
        model,
        model.spec or spec,
        topology,
        config,
        run_shape(topology, config),
        device,
        dtype,
        probe_for(device),
        ticks,
    )
    measured, bandwidth = _run_phases(phases, ctx)
    ticks("done")
    peaks = [measured.get(f) for f in ("encoder_peak_bytes", "prefill_peak_bytes", "decode_peak_bytes")]
    environment = Environment(
        torch_version=torch.__version__,
        python_version=_python(),
        device=str(device),
        device_name=name,
        dtype=str(dtype).removeprefix("torch."),
        sdpa_backend=ctx.environment.get("sdpa_backend", "none"),
        compile_mode=ctx.environment.get("compile_mode", "none"),
        compile_guards=ctx.environment.get("compile_guards", "none"),
        threads=torch.get_num_threads(),
        zoo_commit=zoo_git_commit(),
    )
    held = _held(ctx.model)
    analysis = {
        k: v for k, v in analysis_columns(ctx.spec, config, topology, dtype, held).items() if k in Row.model_fields
    }
    return Row(
        **analysis,
        config=config,
        phases=[p.name for p in phases],
        **measured,
        memory_method=ctx.probe.memory_method,
        energy_method=ctx.probe.energy_method,
        peak_bytes=max((p for p in peaks if p is not None), default=None),
        impl=implementations(ctx.model),
        **prediction_columns(ctx.spec, config, phases, dtype, device, name, measured, held, bandwidth),
        environment=environment,
        timestamp=datetime.now(timezone.utc).isoformat(timespec="seconds"),
    )


def _run_phases(phases: list[Phase], ctx: RunContext) -> tuple[dict[str, Any], float | None]:
    """Each phase's fields, and the bandwidth its roofline fractions divide by: the median of
    the device's read bandwidth sampled just before and just after each phase with a rate
    (``Probe.read_bandwidth``; None where it has no sample, a GPU's spec sheet). One-row CPU
    products go through whichever path this host measured faster, several-row ones in a half
    precision this host multiplies slowly run widened to float32, and others through oneDNN's
    linear where it measured faster than torch's GEMM."""
    measured: dict[str, Any] = {}
    samples: list[float | None] = []
    sampled_last = False  # the phase just run was rated and sampled after: its sample opens the next
    with host_paths(ctx.device, ctx.model):
        for phase in phases:  # each phase sets its own grad mode: inference under no_grad, a training step not
            rated = phase.rate_field is not None
            if rated and not sampled_last:
                samples.append(ctx.probe.read_bandwidth())
            measured.update(run_phase(phase, ctx))
            if rated:
                samples.append(ctx.probe.read_bandwidth())
            sampled_last = rated
    taken = [s for s in samples if s is not None]
    return measured, statistics.median(taken) if taken else None


@contextlib.contextmanager
def host_paths(device: torch.device, model: torch.nn.Module) -> Iterator[None]:
    """The CPU paths this host's probe chose for ``model``, taken while the block runs as a run's
    phases take them: one-row products through zoo's row kernel in the dtypes it measured
    faster, their weights fetched past the caches where they outgrow the last-level cache and
    the probe measured that faster (the int8 rows and int4 panels then fetch theirs ahead into
    L1, and otherwise leave it to the hardware), several-row half precision widened to float32
    where its matmul measured slow, several-row products through oneDNN's linear in the dtypes
    where it beat torch's matmul; none off the CPU."""
    with (
        row_product.measured_faster(_row_kernel_dtypes(device)),
        row_product.past_cache(_past_cache(device, model)),
        widened_products(_widened_dtypes(device)),
        onednn_products(_onednn_dtypes(device)),
    ):
        yield


def _past_cache(device: torch.device, model: torch.nn.Module) -> bool:
    """Whether the row kernel fetches the weights a decode step of ``model`` reads
    (``weight_bytes_read``: not an encoder's, nor an untied input table) past the caches: where
    they outgrow this host's last-level cache, so that each step reads them from memory whatever
    it keeps, and the host probe measured the fetch faster in their dtype
    (``host_probe.fetches_past_cache``); False off the CPU and for a model that is not zoo's."""
    if device.type != "cpu" or not isinstance(model, ZooModel):
        return False
    dtype = next((p.dtype for p in model.parameters() if p.is_floating_point()), torch.float32)
    return fetches_past_cache(weight_bytes_read(model, 1, dtype), dtype)


def _row_kernel_dtypes(device: torch.device) -> list[torch.dtype]:
    """The dtypes whose one-row CPU products the host probe measured faster through zoo's row
    kernel than through torch's (``zoo.components.row_product``); none off the CPU."""
    return _measured_faster(host_peaks().row_kernel_faster) if device.type == "cpu" else []


def _onednn_dtypes(device: torch.device) -> list[torch.dtype]:
    """The dtypes whose several-row CPU products go through oneDNN's linear, measured faster
    than torch's matmul on this host (``zoo.components.onednn``); none off the CPU."""
    return _measured_faster(host_peaks().onednn_faster) if device.type == "cpu" else []


def _measured_faster(by_dtype: dict[str, bool]) -> list[torch.dtype]:
    """The dtypes, named as a ``HostPeaks`` record names them, whose path the probe measured faster."""
    return [getattr(torch, name) for name, faster in by_dtype.items() if faster]


def _widened_dtypes(device: torch.device) -> list[torch.dtype]:
    """The dtypes whose several-row CPU products run widened to float32, their matmul measured
    slow on this host (``zoo.components.widened``); none off the CPU."""
    if device.type != "cpu":
        return []
    return [getattr(torch, name) for name in host_peaks().widened_matmul_dtypes]


def _held(model: torch.nn.Module) -> torch.nn.Module | None:
    """The model when it is a loaded checkpoint keeping its own storage (a GGUF's packed blocks,
    ``weights_layout`` set): its weight bytes and bytes read per step are what it holds, not
    the analysis of the spec in the run's dtype. None else."""

    return model if isinstance(model, ZooModel) and model.weights_layout is not None else None


def _ticker(progress: Progress | None, total: int) -> Any:
    """``ticks(what)``: one step of the run done, reported as ``progress(what, done, total)``."""
    done = 0

    def tick(what: str) -> None:
        nonlocal done
        if progress is not None:
            progress(what, min(done, total), total)
        done += 1

    return tick


def _python() -> str:
    return sys.version.split()[0]


# ---- a run in a fresh interpreter ------------------------------------------------------------
def measure_in_subprocess(spec: ModelSpec | None, config: BenchConfig, timeout: float | None = None) -> Row:
    """``bench(spec, config)`` in a new Python process (``isolation="interpreter"``); the Row
    comes back as JSON (``child_run``: a ZooError in the child is a BenchError here with its
    message, a crash a BenchError with the tail of its stderr)."""
    request = {"spec": spec.to_dict() if spec is not None else None, "config": config.model_dump()}
    return Row.model_validate(run_child("zoo.harness.run", request, timeout)["row"])


def _child_bench(request: dict[str, Any]) -> dict[str, Any]:
    spec = ModelSpec.model_validate(request["spec"]) if request.get("spec") is not None else None
    return {"row": bench(spec, BenchConfig.model_validate(request["config"])).model_dump(mode="json")}


if __name__ == "__main__":
    raise SystemExit(child_main(_child_bench))
