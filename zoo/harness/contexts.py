"""Memory and decode tokens/s against context length, per variant (``--contexts``).

For each point of a plan with ``contexts``, each context length gets one record (stored
in the point's row as ``contexts``):

- memory: the full-size model's weight bytes (the ``weight_bytes`` the row's analysis
  holds) plus ``zoo.analysis.counts.cache_bytes`` at batch × context: exact, marked ``analysis``;
- decode tokens/s, marked ``measured`` or ``predicted``. Measured: the harness's own
  ``bench`` (the executor's ``measure``, on the model cut to the plan's depth) with a
  prompt of ``context - gen_len`` tokens, so its decode steps run at that context; only
  for contexts up to ``measure_up_to`` (default 4k on a host, 32k on CUDA), and a run
  refused as not fitting becomes a prediction with the reason in ``note``. Predicted, when
  the point was timed: ``StepTimeModel``, step time against the bytes a step reads
  (``zoo.analysis.counts.decode_bytes_per_step``), from the measured contexts (else the point's own
  run): the roofline's memory term at the bandwidth this device achieved, so measured and
  predicted points are of one model on one device.
  Predicted without timing (``analysis_only``): the decode phase's roofline
  (``zoo.harness.phases.decode.Decode.predict``) of the full-size model on ``config.predict``
  (default ``h100-sxm``).

``context_frame`` is the long table (one row per variant and context), with ratios to the
baseline variant at the same context; ``crossovers`` solves for the context where a
variant's memory or decode step time equals the baseline's (where a hybrid overtakes full
attention): both are affine in the context, so the crossing is exact, not interpolated. How they are
shown and saved is ``context_report.py``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import torch

from zoo.analysis.counts import cache_bytes, decode_bytes_per_step
from zoo.analysis.devices import gpu_peaks
from zoo.errors import ZooError
from zoo.harness.context_lengths import format_context
from zoo.harness.environment import pick_device
from zoo.harness.phases.decode import Decode
from zoo.harness.report.cells import values_key
from zoo.harness.run_config import make_config
from zoo.harness.sweep.labels import format_value
from zoo.model.build import resolve_dtype

if TYPE_CHECKING:
    import pandas as pd

DEFAULT_PREDICT_GPU = "h100-sxm"
MEASURE_UP_TO = {"cuda": 32 * 1024}  # per device type; others (cpu, mps): HOST_MEASURE_UP_TO
HOST_MEASURE_UP_TO = 4 * 1024


# ---- one point's curve -----------------------------------------------------------------------
Measure = Callable[[Any, Any], Any]


def measure_limit(plan_limit: int | None, device_type: str) -> int:
    """Contexts above this are predicted: the plan's ``measure_up_to``, else the device's default."""
    return plan_limit if plan_limit is not None else MEASURE_UP_TO.get(device_type, HOST_MEASURE_UP_TO)


def context_curve(
    plan: Any,
    spec: Any,
    config: Any,
    analysis: Mapping[str, Any],
    measure: Measure | None,
    measured_spec: Any = None,
    measurement: Mapping[str, Any] | None = None,
) -> list[dict[str, Any]]:
    """The point's record at each of ``plan.contexts`` (see the module docstring)."""

    if analysis["topology"] != "decoder":
        return [_no_decode_record(spec, analysis, n) for n in plan.contexts]
    limit = measure_limit(plan.measure_up_to, pick_device(config.device).type)
    records = [memory_record(spec, config, analysis, n) for n in plan.contexts]
    if measure is not None and measured_spec is not None:
        for record in records:
            if record["context"] <= limit:
                _measure_at(record, measure, measured_spec, config)
    anchors = [r["_measurement"] for r in records if r.get("_measurement")]
    if not anchors and measure is not None and measurement:
        anchors = [measurement]  # nothing measured at these contexts: the point's own run
    model = StepTimeModel(anchors) if anchors and measured_spec is not None else None
    for record in records:
        record.pop("_measurement", None)
        if record["decode_source"] is None:
            _predict_at(record, spec, config, analysis, model, measured_spec)
    return records


class StepTimeModel:
    """Seconds per decode step against the bytes it reads (the row's ``decode_bytes_per_step``),
    from this device's runs: the roofline's memory term at the bandwidth this device achieved.

    By default time is proportional to bytes, scaled from the largest measured context (one
    parameter: robust to the noise of a few runs). With three or more measured contexts whose
    bytes differ and a positive least-squares slope, the fit ``fixed + bytes × s_per_byte``
    instead (the KV bytes' own marginal cost, which on a host exceeds the weights' average),
    used above the smallest measured bytes; below them, proportional from the smallest run."""

    MIN_FIT_RUNS = 3

    def __init__(self, runs: Sequence[Mapping[str, Any]]) -> None:
        self.batch = int(runs[-1]["config"]["batch_size"])
        self.points = sorted(
            (float(r["decode_bytes_per_step"]), self.batch / float(r["decode_tokens_per_s"]), int(r["context_len"]))
            for r in runs
        )
        self.fit: tuple[float, float] | None = None
        xs, ts = [x for x, _, _ in self.points], [t for _, t, _ in self.points]
        if len(set(xs)) >= self.MIN_FIT_RUNS:
            mean_x, mean_t = sum(xs) / len(xs), sum(ts) / len(ts)
            slope = sum((x - mean_x) * (t - mean_t) for x, t in zip(xs, ts)) / sum((x - mean_x) ** 2 for x in xs)
            if slope > 0:
                self.fit = (mean_t - slope * mean_x, slope)

    def predict(self, nbytes: float) -> tuple[float, str]:
        """(tokens/s, basis) for a step reading ``nbytes``."""
        if self.fit is not None and nbytes >= self.points[0][0]:
            fixed, slope = self.fit
            seconds = fixed + slope * nbytes
            if seconds > 0:
                span = f"{format_context(self.points[0][2])}-{format_context(self.points[-1][2])}"
                return self.batch / seconds, f"fit of step time on bytes/step, {span}"
        x, t, context = self.points[0] if nbytes < self.points[0][0] else self.points[-1]
        return self.batch / (t * nbytes / x), f"bytes/step scaled from {format_context(context)}"


def memory_record(spec: Any, config: Any, analysis: Mapping[str, Any], context: int) -> dict[str, Any]:
    """Weights plus the cache at ``context`` (full-size model, batch × context, the run's dtype)."""

    cache = cache_bytes(spec, config.batch_size, context, dtype=analysis["dtype"])
    return {
        "context": context,
        "weight_bytes": analysis["weight_bytes"],
        "cache_bytes": cache.total,
        "cache_token_bytes": cache.token,
        "cache_sequence_bytes": cache.sequence,
        "memory_bytes": analysis["weight_bytes"] + cache.total,
        "memory_source": "analysis",
        "decode_tokens_per_s": None,
        "decode_source": None,
        "decode_basis": None,
        "prefill_tokens_per_s": None,
        "measured_peak_bytes": None,
        "note": f"beyond max_seq_len {spec.max_seq_len:,}" if context > spec.max_seq_len else None,
    }


def _no_decode_record(spec: Any, analysis: Mapping[str, Any], context: int) -> dict[str, Any]:
    """An encoder keeps no cache and never decodes; an encoder-decoder's cache depends on two
    lengths (its decoder's context and the encoder's input), which one context cannot name: the
    record keeps the weights and says why there is nothing else."""
    return {
        "context": context,
        "weight_bytes": analysis["weight_bytes"],
        "cache_bytes": None,
        "cache_token_bytes": None,
        "cache_sequence_bytes": None,
        "memory_bytes": None,
        "memory_source": None,
        "decode_tokens_per_s": None,
        "decode_source": None,
        "decode_basis": None,
        "prefill_tokens_per_s": None,
        "measured_peak_bytes": None,
        "note": f"contexts are for decoders; {spec.name} is an {analysis['topology']} (see its bench columns)",
    }


def _measure_at(record: dict[str, Any], measure: Measure, measured_spec: Any, config: Any) -> None:
    """The harness's run with a prompt of ``context - gen_len`` tokens; a refusal (or running
    out of memory there) is noted, and that context predicted."""
    context, gen = record["context"], config.gen_len
    if context <= gen or context > measured_spec.max_seq_len:
        return  # too short for a prompt, or past the model's limit: predicted
    try:
        result = measure(measured_spec, make_config(**{**config.model_dump(), "prompt_len": context - gen}))
    except (ZooError, MemoryError, torch.cuda.OutOfMemoryError) as exc:
        if torch.cuda.is_available():
            torch.cuda.empty_cache()
        record["note"] = f"not measured: {type(exc).__name__ if not str(exc) else exc}".replace("\n", " ")
        return
    m = result.model_dump(mode="json") if hasattr(result, "model_dump") else dict(result)
    record.update(
        decode_tokens_per_s=m["decode_tokens_per_s"],
        decode_source="measured",
        decode_basis=f"{m['environment']['device']}, {_layers(measured_spec.n_layers)}",
        prefill_tokens_per_s=m["prefill_tokens_per_s"],
        measured_peak_bytes=m["decode_peak_bytes"],
        _measurement=m,
    )


def _predict_at(
    record: dict[str, Any],
    spec: Any,
    config: Any,
    analysis: Mapping[str, Any],
    model: StepTimeModel | None,
    measured_spec: Any,
) -> None:
    """From this device's step-time model, else (no run) the GPU roofline of the full model."""
    context, gen, dtype = record["context"], config.gen_len, analysis["dtype"]
    at = max(1, context - gen + gen // 2)  # the decode midpoint, as the harness reports its bytes
    record["decode_source"] = "predicted"
    try:
        if model is not None:
            nbytes = decode_bytes_per_step(
                measured_spec, config.batch_size, at, dtype, config.weights_dtype, config.weights_group_size
            )
            record["decode_tokens_per_s"], record["decode_basis"] = model.predict(nbytes)
            return
        gpu = config.predict or DEFAULT_PREDICT_GPU
        at_context = make_config(**{**config.model_dump(), "prompt_len": max(1, context - gen)})
        line = Decode().predict(spec, at_context, gpu_peaks(gpu), _torch_dtype(dtype))
        record["decode_tokens_per_s"] = line["tokens_per_s"]
        record["decode_basis"] = f"roofline {gpu}, {_layers(spec.n_layers)}"
    except ZooError as exc:
        record["decode_basis"] = f"no prediction: {exc}".replace("\n", " ")


def _layers(n: int) -> str:
    return f"{n} layer" if n == 1 else f"{n} layers"


def _torch_dtype(name: str) -> Any:
    return resolve_dtype(name)


# ---- the long table and crossovers -----------------------------------------------------------
CONTEXT_COLUMNS = (
    "context",
    "memory_bytes",
    "cache_bytes",
    "cache_token_bytes",
    "cache_sequence_bytes",
    "weight_bytes",
    "memory_source",
    "decode_tokens_per_s",
    "decode_source",
    "decode_basis",
    "prefill_tokens_per_s",
    "measured_peak_bytes",
    "note",
)
RATIO_COLUMNS = ("memory_bytes", "decode_tokens_per_s")


def context_records(
    rows: Iterable[Mapping[str, Any]], keys: Sequence[str], baseline: Mapping[str, Any]
) -> list[dict[str, Any]]:
    """One record per (variant, context), in plan order then by context, with
    ``memory_bytes_vs_baseline`` and ``decode_tokens_per_s_vs_baseline`` at the same context.
    Plain dicts (JSON values, None for missing): what ``frame.attrs["contexts"]`` holds, since
    pandas compares attrs when frames are concatenated and a DataFrame there cannot be."""

    ok = sorted((r for r in rows if r.get("status") == "ok" and r.get("contexts")), key=lambda r: r.get("index", 0))
    by_values = {values_key(r["values"]): {c["context"]: c for c in r["contexts"]} for r in ok}
    records = []
    for row in ok:
        reference = by_values.get(values_key({**row["values"], **baseline}), {})
        for point in row["contexts"]:
            record: dict[str, Any] = {"point_id": row["point_id"], "label": row["label"]}
            for key in keys:
                value = row["values"].get(key)
                record[key] = format_value(value) if isinstance(value, dict) else value
            record.update({c: point.get(c) for c in CONTEXT_COLUMNS})
            theirs = reference.get(point["context"], {})
            for column in RATIO_COLUMNS:
                mine, base = point.get(column), theirs.get(column)
                record[f"{column}_vs_baseline"] = mine / base if mine is not None and base else None
            records.append(record)
    return records


def context_frame(rows: Iterable[Mapping[str, Any]], keys: Sequence[str], baseline: Mapping[str, Any]) -> pd.DataFrame:
    """``context_records`` as a DataFrame (its columns even when empty)."""
    return as_frame(context_records(rows, keys, baseline), keys)


def as_frame(records: Sequence[Mapping[str, Any]], keys: Sequence[str] = ()) -> pd.DataFrame:
    """Per-context records (``frame.attrs["contexts"]``) as a DataFrame."""
    import pandas as pd

    columns = ["point_id", "label", *keys, *CONTEXT_COLUMNS, *(f"{c}_vs_baseline" for c in RATIO_COLUMNS)]
    if records:
        columns = list(records[0])
    return pd.DataFrame.from_records(list(records), columns=columns)


def crossovers(frame: pd.DataFrame, baseline_label: str | None = None) -> list[dict[str, Any]]:
    """Where a variant's memory, or decode step time, equals the baseline's: solved, not
    interpolated. Between two neighbouring contexts both sides are affine in the context
    (weights + per-sequence state + bytes per token × context; a decode step's time is its
    bytes, or FLOPs, over a rate), so the difference is a line through its two values and
    its zero is the crossing, exact unless a side changes slope in between (a sliding
    window filling, a roofline turning compute-bound). A variant whose difference keeps one
    sign over every context given gets one item with ``context`` None: no crossover there."""
    out: list[dict[str, Any]] = []
    if frame.empty:
        return out
    for column, measure in (("memory_bytes", "memory"), ("decode_tokens_per_s", "decode tokens/s")):
        ratio = f"{column}_vs_baseline"
        for label, group in frame.groupby("label", sort=False):
            points = [
                (int(c), _cost(column, v), _cost(column, v / float(r)))  # v / ratio: the baseline's value
                for c, v, r in zip(group["context"], group[column], group[ratio])
                if _present(v) and _present(r)
            ]
            if not points or all(abs(mine - base) <= 1e-12 * abs(base) for _, mine, base in points):
                continue  # the baseline itself (or a variant equal to it)
            item = {"variant": label, "baseline": baseline_label, "measure": measure}
            changes = _zero_crossings([(c, mine - base) for c, mine, base in points])
            for c1, c2, at, after in changes:
                out.append({**item, "between": [c1, c2], "context": at, "after": "better" if after < 0 else "worse"})
            if not changes:
                side = next(mine - base for _, mine, base in points if mine != base)
                out.append(
                    {
                        **item,
                        "between": [points[0][0], points[-1][0]],
                        "context": None,
                        "after": "better" if side < 0 else "worse",
                    }
                )
    return out


def _present(value: Any) -> bool:
    return value is not None and not (isinstance(value, float) and math.isnan(value)) and value > 0


def _cost(column: str, value: Any) -> float:
    """What is affine in the context: bytes held, or seconds per decoded token (1 / rate)."""
    return float(value) if column == "memory_bytes" else 1.0 / float(value)


def _zero_crossings(points: Sequence[tuple[int, float]]) -> list[tuple[int, int, float, float]]:
    """(c1, c2, crossing, difference after) for each change of sign of the difference
    (variant minus baseline: lower is better) between neighbouring contexts; a context where
    it is exactly 0 between two of opposite sign is the crossing. The crossing solves the
    line through (c1, d1) and (c2, d2), to a fraction of a token."""
    changes = []
    sided = [(i, c, d) for i, (c, d) in enumerate(points) if d != 0]
    for (i1, c1, d1), (i2, c2, d2) in zip(sided, sided[1:]):
        if d1 * d2 >= 0:
            continue
        at = points[i1 + 1][0] if i2 > i1 + 1 else c1 + (c2 - c1) * d1 / (d1 - d2)
        changes.append((c1, c2, float(at), d2))
    return changes


def baseline_label(rows: Iterable[Mapping[str, Any]], baseline: Mapping[str, Any]) -> str | None:
    """The label of the first row whose values include ``baseline``'s."""
    for row in rows:
        if all(row["values"].get(k) == v for k, v in baseline.items()):
            return str(row["label"])
    return None
