"""The roofline beside a run's measurement: one function for every phase and topology.

Each phase that has an analytic counterpart (``Phase.predict``) and a headline rate
(``Phase.rate_field``) gives two things:

- ``predicted_<rate>``: its roofline on ``config.predict``'s GPU, with the bound of each
  phase in ``predicted_bound`` ("prefill: compute, decode: memory");
- ``<what>_roofline_fraction`` (``phases.base.fraction_field``): the measured rate over its roofline on the device
  the run is on, with the peaks ``zoo.analysis.devices.device_peaks`` gives for it (a GPU of the
  table: its spec sheet; the host CPU: its measured peaks at the run's thread count), named in
  ``roofline_source``. On the CPU the bandwidth is the one the run sampled around its
  timed phases (``zoo.harness.run``), in ``roofline_bytes_per_s``: a shared machine's memory
  gave 28-53 GB/s to the same probe minutes apart, and a fraction of the cached figure would
  measure that moment, not the model.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

import torch
from torch import nn

from zoo.analysis.devices import device_peaks, gpu_peaks
from zoo.harness.phases.base import Phase, fraction_field
from zoo.harness.run_config import BenchConfig
from zoo.specs.model import ModelSpec


def prediction_columns(
    spec: ModelSpec,
    config: BenchConfig,
    phases: Sequence[Phase],
    dtype: torch.dtype,
    device: torch.device,
    device_name: str,
    measured: Mapping[str, Any] | None = None,
    held: nn.Module | None = None,
    bandwidth: float | None = None,
) -> dict[str, Any]:
    """The predicted and fraction columns of a row (before the run, ``measured`` None: the
    predictions only, which also refuses early what cannot be predicted); ``held``: the loaded
    model when it holds its own packed layers, whose bytes the roofline then reads;
    ``bandwidth``: bytes/s measured in the run, in place of the device peaks' own."""
    extra = {} if held is None else {"held": held}  # plugin phases written before ``held`` still run
    rated = [p for p in phases if p.rate_field is not None]
    columns: dict[str, Any] = {}
    if config.predict is not None:
        peaks = gpu_peaks(config.predict)
        bounds = []
        for phase in rated:
            line = phase.predict(spec, config, peaks, dtype, **extra)
            if line is not None:
                columns[f"predicted_{phase.rate_field}"] = line["tokens_per_s"]
                bounds.append(f"{phase.rate_field.removesuffix('_tokens_per_s')}: {line['bound']}")
        columns.update(predicted_gpu=config.predict, predicted_bound=", ".join(bounds) or None)
    if measured is None:  # the host probe (seconds, the first time) runs after the timed phases, not before
        return columns
    here = device_peaks(device, device_name)
    if here is None:
        return columns
    if bandwidth is not None:
        here = replace(here, bandwidth=bandwidth, source=f"{here.source}, read bandwidth sampled in this run")
    columns.update(roofline_source=here.source, roofline_bytes_per_s=here.bandwidth)
    for phase in rated:
        line = phase.predict(spec, config, here, dtype, **extra)
        rate = measured.get(phase.rate_field)  # type: ignore[arg-type]
        if line is not None and rate is not None:
            columns[fraction_field(phase.rate_field)] = rate / line["tokens_per_s"]  # type: ignore[arg-type]
    return columns
