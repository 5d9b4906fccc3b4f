"""What one run measured: ``Measurement`` (one row of a sweep), built from a run's timings
and the spec's analysis, and ``with_prediction`` (the roofline on a named GPU beside it).
"""

from __future__ import annotations

import statistics
import sys
from typing import Any

import torch
from pydantic import BaseModel

from zoo.harness.environment import Environment, device_name, zoo_git_commit
from zoo.harness.run_config import BenchConfig
from zoo.harness.phases.timed_rounds import Timings
from zoo.specs.model import ModelSpec


class Measurement(BaseModel):
    """Everything one run measured, with the environment that produced it."""

    arch: str
    config: BenchConfig
    params_total: int
    params_active: int
    params_embedding: int
    params_unembedding: int
    weight_bytes: int  # bytes of the weights as laid out (tied once; packed weights and scales when quantized)
    weights_dtype: str = ""  # bf16, float32, float16, int8 or int4: how the linear weights were stored
    kv_bytes_per_token: int
    state_bytes: int = 0  # fixed per sequence (recurrent state, convolution windows), any context
    kv_bytes: int  # the allocated cache (KV and state) at batch_size x (prompt_len + gen_len)
    context_len: int
    prefill_peak_bytes: int
    decode_peak_bytes: int
    memory_method: str
    prefill_tokens_per_s: float  # median over repeats
    prefill_tokens_per_s_min: float
    prefill_tokens_per_s_max: float
    decode_tokens_per_s: float  # median over repeats, generated tokens only
    decode_tokens_per_s_min: float
    decode_tokens_per_s_max: float
    decode_tokens_per_s_runs: list[float]
    time_to_first_token_s: float  # median
    compile_s: float | None = None  # compiled runs: first calls of the compiled prefill and decode step
    flops_per_token: int | None  # decode, at the midpoint context prompt_len + gen_len // 2
    decode_bytes_per_step: int  # weights read + KV read at that context
    predicted_gpu: str | None = None
    predicted_prefill_tokens_per_s: float | None = None
    predicted_decode_tokens_per_s: float | None = None
    predicted_bound: str | None = None  # "prefill: compute, decode: memory"
    prefill_roofline_fraction: float | None = None  # only when measured on that GPU
    decode_roofline_fraction: float | None = None
    fidelity_max_logit_error: float | None = None  # quantized runs: against the same weights unquantized
    fidelity_kl: float | None = None  # mean KL(unquantized || quantized) per position, nats
    eval_perplexity: float | None = None  # of eval_text, this run's model
    eval_perplexity_reference: float | None = None  # of eval_text, unquantized (quantized runs only)
    environment: Environment
    timestamp: str

    def flat(self) -> dict[str, Any]:
        """One flat row (config and environment fields inlined) for CSV and tables."""
        row = self.model_dump(exclude={"config", "environment", "decode_tokens_per_s_runs"})
        row.update(self.config.model_dump())
        row.update(self.environment.model_dump())
        row["decode_tokens_per_s_runs"] = " ".join(f"{v:.3f}" for v in self.decode_tokens_per_s_runs)
        return row


def _flops_or_none(spec: ModelSpec, context: int) -> int | None:
    from zoo.analysis.counts import flops_per_token
    from zoo.errors import PluginError

    try:
        return flops_per_token(spec, context)
    except PluginError:
        return None


def _dtype_name(dtype: torch.dtype) -> str:
    return {torch.bfloat16: "bf16"}.get(dtype, str(dtype).removeprefix("torch."))


def _loaded_layout(model: torch.nn.Module) -> str | None:
    """A checkpoint's own storage when it says more than the dtype (a GGUF: "Q4_1 -> int4 x168; ...")."""
    from zoo.model.build import ZooModel

    return model.weights_layout if isinstance(model, ZooModel) else None


def _median_spread(values: list[float]) -> tuple[float, float, float]:
    return statistics.median(values), min(values), max(values)


def build_measurement(
    model: torch.nn.Module, spec: ModelSpec, config: BenchConfig, t: Timings, device: torch.device, dtype: torch.dtype,
    fidelity_fields: dict[str, Any],
) -> Measurement:
    """The Measurement of a run: its timings with the spec's analysis and the environment."""
    from datetime import datetime, timezone

    from zoo.analysis.counts import count_params, decode_bytes_per_step, kv_bytes_per_token, state_bytes
    from zoo.quant import normalize, stored_bytes

    B, P, G = config.batch_size, config.prompt_len, config.gen_len
    count = count_params(spec)
    prefill_tps, prefill_lo, prefill_hi = _median_spread(t.prefill_rates)
    decode_tps, decode_lo, decode_hi = _median_spread(t.decode_rates)
    midpoint = P + G // 2
    env = Environment(
        torch_version=torch.__version__, python_version=sys.version.split()[0], device=str(device),
        device_name=device_name(device), dtype=str(dtype).removeprefix("torch."), sdpa_backend=t.sdpa,
        compile_mode=t.compile_mode, threads=torch.get_num_threads(), zoo_commit=zoo_git_commit(),
    )
    return Measurement(
        arch=spec.name, config=config, params_total=count.total, params_active=count.active,
        params_embedding=count.embedding, params_unembedding=count.unembedding,
        weight_bytes=stored_bytes(model),
        weights_dtype=normalize(config.weights_dtype) or _loaded_layout(model) or _dtype_name(dtype),
        kv_bytes_per_token=kv_bytes_per_token(spec, dtype=dtype), state_bytes=state_bytes(spec, dtype=dtype),
        kv_bytes=t.cache_bytes, context_len=P + G,
        prefill_peak_bytes=t.prefill_peak, decode_peak_bytes=t.decode_peak, memory_method=t.memory_method,
        prefill_tokens_per_s=prefill_tps, prefill_tokens_per_s_min=prefill_lo, prefill_tokens_per_s_max=prefill_hi,
        decode_tokens_per_s=decode_tps, decode_tokens_per_s_min=decode_lo, decode_tokens_per_s_max=decode_hi,
        decode_tokens_per_s_runs=t.decode_rates, time_to_first_token_s=statistics.median(t.ttfts),
        compile_s=t.compile_s,
        flops_per_token=_flops_or_none(spec, midpoint),
        decode_bytes_per_step=decode_bytes_per_step(
            spec, B, midpoint, dtype, config.weights_dtype, config.weights_group_size
        ),
        **fidelity_fields,
        environment=env, timestamp=datetime.now(timezone.utc).isoformat(timespec="seconds"),
    )


def with_prediction(measurement: Measurement, spec: ModelSpec, gpu_key: str, dtype: torch.dtype) -> Measurement:
    """The measurement with the roofline on ``gpu_key`` beside it, and the achieved fraction
    of it when the run was on that GPU."""
    from zoo.analysis.devices import gpu, matches_device, roofline

    c = measurement.config
    line = roofline(
        spec, gpu_key, batch_size=c.batch_size, prompt_len=c.prompt_len, gen_len=c.gen_len, dtype=dtype,
        weights_dtype=c.weights_dtype, group_size=c.weights_group_size,
    )
    same_gpu = measurement.environment.device.startswith("cuda") and matches_device(gpu(gpu_key), measurement.environment.device_name)
    return measurement.model_copy(update={
        "predicted_gpu": gpu_key,
        "predicted_prefill_tokens_per_s": line.prefill_tokens_per_s,
        "predicted_decode_tokens_per_s": line.decode_tokens_per_s,
        "predicted_bound": f"prefill: {line.prefill_bound}, decode: {line.decode_bound}",
        "prefill_roofline_fraction": measurement.prefill_tokens_per_s / line.prefill_tokens_per_s if same_gpu else None,
        "decode_roofline_fraction": measurement.decode_tokens_per_s / line.decode_tokens_per_s if same_gpu else None,
    })
