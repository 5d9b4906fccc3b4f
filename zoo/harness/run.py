"""One benchmark run: build (or load) a model, time prefill and decode, return a Measurement.

The run's parts live in files of their own: its options (``run_config.py``: BenchConfig),
the timed rounds (``timed_rounds.py``: warm-up, then ``repeats`` rounds of prefill and
decode) and the record (``measurement.py``: Measurement, the roofline beside it); they are
re-exported here, where callers have always found them. ``run_in_subprocess`` does the same
run in a fresh interpreter and returns the Measurement parsed from its JSON (sweeps isolate
each point this way).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch

from zoo.errors import BenchError
from zoo.harness.child_run import child_main, run_child
from zoo.harness.environment import pick_device
from zoo.harness.measurement import Measurement, build_measurement, with_prediction
from zoo.harness.run_config import BenchConfig, Progress, make_config
from zoo.harness.phases.timed_rounds import timed_rounds
from zoo.model.build import resolve_dtype
from zoo.specs.model import ModelSpec

__all__ = ["BenchConfig", "Measurement", "Progress", "bench", "make_config", "run_in_subprocess", "with_prediction"]


def _load_model(spec: ModelSpec | None, config: BenchConfig, device: torch.device, dtype: torch.dtype) -> torch.nn.Module:
    if config.weights is None:
        if spec is None:
            raise BenchError("give a spec (an architecture) or weights to benchmark")
        import zoo

        return zoo.build(spec, device=device, dtype=dtype, seed=config.seed)
    from zoo.hub.loading import from_pretrained

    return from_pretrained(config.weights, device=device, dtype=dtype)


def bench(
    spec: ModelSpec | str | Mapping[str, Any] | None,
    config: BenchConfig | None = None,
    *,
    progress: Progress | None = None,
    **options: Any,
) -> Measurement:
    """Measure one spec (or ``weights=``) as ``config`` / keyword options say; see BenchConfig."""
    from zoo.model.build import as_spec
    from zoo.quant import run_dtype

    if config is None:
        config = make_config(**options)
    elif options:
        config = make_config(**{**config.model_dump(), **options})
    model_spec = as_spec(spec) if spec is not None else None
    device = pick_device(config.device)
    dtype = resolve_dtype(run_dtype(config.weights_dtype, config.dtype, "bfloat16" if device.type == "cuda" else "float32"))
    if model_spec is not None:
        _check_run(model_spec, config)
    fit_spec = model_spec
    if fit_spec is None and config.weights:  # a checkpoint's spec, read without loading a weight
        from zoo.hub.loading import checkpoint_spec

        fit_spec = checkpoint_spec(config.weights)
    if fit_spec is not None:  # refuse what cannot fit before allocating anything
        from zoo.harness.memory_check import check_fits

        check_fits(fit_spec, config.batch_size, config.prompt_len, config.gen_len, dtype, device)
    if config.threads is not None:
        torch.set_num_threads(config.threads)
    report = progress or (lambda what, done, total: None)
    report("build", 0, 1 + config.warmup + config.repeats)
    model = _load_model(model_spec, config, device, dtype).eval()
    model_spec = model.spec  # type: ignore[assignment]
    assert model_spec is not None
    from zoo.harness.quantized import prepare_weights

    model, fidelity_fields = prepare_weights(model, config, model_spec.max_seq_len, model_spec.vocab_size)
    _check_run(model_spec, config, predict=False)
    timings = timed_rounds(model, config, device, dtype, report)
    measurement = build_measurement(model, model_spec, config, timings, device, dtype, fidelity_fields)
    if config.predict:
        measurement = with_prediction(measurement, model_spec, config.predict, dtype)
    return measurement


def _check_run(spec: ModelSpec, config: BenchConfig, predict: bool = True) -> None:
    """The run fits the model's context; a roofline asked for can be had (before the run)."""
    context = config.prompt_len + config.gen_len
    if context > spec.max_seq_len:
        raise BenchError(
            f"prompt_len + gen_len = {context} exceeds max_seq_len={spec.max_seq_len} of {spec.name}; "
            f"allowed: at most {spec.max_seq_len}"
        )
    if predict and config.predict:
        from zoo.analysis.counts import flops_per_token

        flops_per_token(spec, context)


# ---- a run in a fresh process ---------------------------------------------------------------
def run_in_subprocess(spec: ModelSpec | None, config: BenchConfig, timeout: float | None = None) -> Measurement:
    """Run ``bench(spec, config)`` in a new Python process; the Measurement comes back as JSON
    (``zoo.harness.child_run``: a ZooError in the child is a BenchError here with its message,
    a crash a BenchError with the tail of its stderr)."""
    request = {"spec": spec.to_dict() if spec is not None else None, "config": config.model_dump()}
    return Measurement.model_validate(run_child("zoo.harness.run", request, timeout)["measurement"])


def _child_bench(request: dict[str, Any]) -> dict[str, Any]:
    spec = ModelSpec.model_validate(request["spec"]) if request.get("spec") is not None else None
    return {"measurement": bench(spec, BenchConfig.model_validate(request["config"])).model_dump(mode="json")}


if __name__ == "__main__":
    raise SystemExit(child_main(_child_bench))
