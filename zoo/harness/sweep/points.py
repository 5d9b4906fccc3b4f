"""One sweep point -> one row: the analysis of the full-size model and the harness's
measurement of it (at the plan's reduced depth), or the error that stopped it.

``evaluate_point`` never raises for a point's own failure: a spec that cannot be built, a run
that fails, become ``status: failed`` with the error, so the sweep goes on. The measurement
is the harness's one run (``zoo.harness.run.measure``, or ``measure_in_subprocess``): there is
no second path.
"""

from __future__ import annotations

import time
import traceback
from collections.abc import Callable, Mapping
from datetime import datetime, timezone
from typing import Any

import torch

import zoo
from zoo.analysis.counts import topology
from zoo.errors import SpecError, ZooError
from zoo.harness.analysis_columns import analysis_columns
from zoo.harness.contexts import context_curve
from zoo.harness.run_config import BenchConfig, make_config
from zoo.harness.source import resolve_source
from zoo.harness.sweep.grid import ARCH_KEY, WEIGHTS_KEY, SweepPlan, SweepPoint
from zoo.hub.loading import checkpoint_spec
from zoo.specs.model import ModelSpec, parse_layer_selector
from zoo.specs.registry import get_registry

OnRow = Callable[[dict[str, Any]], None]  # what an executor hands each row it gathers

Measure = Callable[[Any, Any], Any]  # (ModelSpec, BenchConfig) -> zoo.harness.row.Row


def point_spec(plan: SweepPlan, point: SweepPoint) -> ModelSpec:
    """The point's full-size spec: base (or the point's arch), then --set and the point's
    spec values applied together, so a kind swap and its options land in one override."""
    run_fields = set(BenchConfig.model_fields)
    weights = point.values.get(WEIGHTS_KEY, plan.run.get(WEIGHTS_KEY))
    if weights is not None:  # the checkpoint's own spec, read from its config or GGUF header
        return checkpoint_spec(str(weights))
    arch = point.values.get(ARCH_KEY, plan.arch)
    base = (
        zoo.spec(arch)
        if arch is not None and (ARCH_KEY in point.values or plan.spec is None)
        else ModelSpec.model_validate(plan.spec)
    )
    values = {k: v for k, v in point.values.items() if k != ARCH_KEY and k.split(".")[0] not in run_fields}
    updates = {**_shared_sets(plan.set, values), **values}
    return base.override(updates) if updates else base


def _shared_sets(shared: Mapping[str, Any], values: Mapping[str, Any]) -> dict[str, Any]:
    """``--set`` values less the options a point's new kind fixes itself (its
    ``reset_on_kind_change``: mha's and mqa's ``n_kv_heads``), so ``--set attention.n_kv_heads=2
    --attention mha,gqa,mqa`` compares MHA, GQA with 2 K/V heads and MQA, not two refusals."""
    kinds = {key.removesuffix(".kind"): kind for key, kind in values.items() if key.endswith(".kind")}
    kinds.update({key: v["kind"] for key, v in values.items() if isinstance(v, Mapping) and "kind" in v})
    registry = get_registry()
    fixed = set()
    for path, kind in kinds.items():
        slot = path.split(".")[-1]
        if str(kind) in registry.kinds(slot):
            options = registry.component(slot, str(kind), path=f"{path}.kind").options
            fixed |= {f"{path}.{option}" for option in options.reset_on_kind_change}
    return {key: value for key, value in shared.items() if key not in fixed}


def point_config(plan: SweepPlan, point: SweepPoint):  # type: ignore[no-untyped-def]
    run_fields = set(BenchConfig.model_fields)
    return make_config(**{**plan.run, **{k: v for k, v in point.values.items() if k in run_fields}})


def reduced_depth(spec, n_layers: int | None):  # type: ignore[no-untyped-def]
    """The spec cut to its first ``n_layers`` layers (an encoder-decoder's encoder too);
    per-layer overrides naming only layers past the cut are dropped (slices such as '5::6'
    adapt by themselves)."""
    encoder = spec.encoder
    if n_layers is None or (n_layers >= spec.n_layers and (encoder is None or n_layers >= encoder.n_layers)):
        return spec
    data = spec.to_dict()
    data.update(n_layers=min(n_layers, spec.n_layers), layers=_layers_within(spec.layers, n_layers))
    if encoder is not None:
        data["encoder"].update(
            n_layers=min(n_layers, encoder.n_layers), layers=_layers_within(encoder.layers, n_layers)
        )
    return type(spec).model_validate(data)


def _layers_within(overrides, n_layers: int) -> dict:  # type: ignore[no-untyped-def,type-arg]
    """The per-layer overrides whose selectors name a layer below ``n_layers``, those kept."""

    layers = {}
    for key, override in overrides.items():
        kept = []
        for item in str(key).split(","):
            try:
                if parse_layer_selector(item, n_layers):
                    kept.append(item)
            except SpecError:
                continue  # names a layer past the cut
        if kept:
            layers[",".join(kept)] = override
    return layers


def analyse(spec, config) -> dict[str, Any]:  # type: ignore[no-untyped-def]
    """Exact figures of the full-size model, from zoo.analysis.counts (meta device, no memory):
    the row's analysis columns (``zoo.harness.analysis_columns``; columns a topology lacks are None).
    A checkpoint held in packed layers (a GGUF) is loaded once on the CPU: its bytes are the
    ones it holds, as in its measured row."""

    source = resolve_source(spec, config)
    _, dtype = source.placement(config)
    held = source.load(torch.device("cpu"), dtype, config.seed) if source.packed else None
    return analysis_columns(spec, config, topology(spec), dtype, held)


def evaluate_point(plan: SweepPlan, point: SweepPoint, measure: Measure | None) -> dict[str, Any]:
    """The point's row. ``measure`` is None for analysis only, else ``zoo.harness.run.measure``
    or ``measure_in_subprocess`` (the one run, whatever the topology)."""
    start = time.perf_counter()
    analysis = measurement = None
    error = None
    measured_layers = measured = contexts = None
    try:
        spec = point_spec(plan, point)
        config = point_config(plan, point)
        analysis = analyse(spec, config)
        if measure is not None and not plan.analysis_only:
            measured = spec if config.weights else reduced_depth(spec, plan.depth)  # a checkpoint runs whole
            measured_layers = measured.n_layers
            measurement = measure(measured, config).model_dump(mode="json")
        if plan.contexts:  # memory and decode tokens/s at each context (zoo.harness.contexts)
            timed = measure if measured is not None else None
            contexts = context_curve(plan, spec, config, analysis, timed, measured, measurement)
    except ZooError as exc:
        error = str(exc).replace("\n", " ")
    except Exception as exc:
        error = f"{type(exc).__name__}: {exc}".replace("\n", " ")
        traceback.print_exc()
    row = make_row(point, error, analysis, measured_layers, measurement, time.perf_counter() - start)
    if contexts is not None:
        row["contexts"] = contexts
    return row


def make_row(
    point: SweepPoint,
    error: str | None,
    analysis: Mapping[str, Any] | None = None,
    measured_layers: int | None = None,
    measurement: Mapping[str, Any] | None = None,
    elapsed_s: float = 0.0,
) -> dict[str, Any]:
    """The JSON row of the results log (one per point; failed rows carry the error)."""
    return {
        "point_id": point.id,
        "index": point.index,
        "label": point.label,
        "values": point.values,
        "status": "failed" if error else "ok",
        "error": error,
        "analysis": dict(analysis) if analysis else None,
        "measured_n_layers": measured_layers,
        "measurement": dict(measurement) if measurement else None,
        "elapsed_s": round(elapsed_s, 3),
        "finished_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
    }
