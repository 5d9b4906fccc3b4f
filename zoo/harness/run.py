"""One benchmark run: build (or load) a model, time prefill and decode, return a Measurement.

A run is: warm-up (never timed), then ``repeats`` rounds of [prefill the prompt -> first
token] and [``gen_len - 1`` greedy decode steps]. Time to first token is the prefill phase
(forward plus the argmax); decode tokens/s counts only tokens the decode steps generate.
``run_in_subprocess`` does the same in a fresh interpreter and returns the Measurement
parsed from its JSON (sweeps isolate each point this way).
"""

from __future__ import annotations

import json
import statistics
import time
from dataclasses import dataclass
import subprocess
import sys
from collections.abc import Callable, Mapping
from typing import Any

import torch
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from zoo.errors import BenchError, ZooError
from zoo.harness.environment import Environment, device_name, pick_device, sdpa_backends_used, zoo_git_commit
from zoo.harness.measure import probe_for
from zoo.model import resolve_dtype
from zoo.model_spec import ModelSpec
from zoo.strict_numbers import StrictNumbers

HOST_WARMUP_PROMPT = 32  # host devices warm up on at most this many prompt tokens
WARMUP_DECODE_STEPS = 3  # enough for CUDA graphs to be recorded under reduce-overhead
Progress = Callable[[str, int, int], None]  # (what, done, total)


class BenchConfig(StrictNumbers):
    """How to run: defaults keep `zoo bench --arch qwen3-0.6b` under a minute on 2 CPU cores."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    device: str = Field("auto", description="auto (cuda, mps, cpu), cpu, cuda, cuda:N or mps")
    dtype: str | None = Field(None, description="default bfloat16 on CUDA, float32 elsewhere")
    batch_size: int = Field(1, ge=1)
    prompt_len: int = Field(128, ge=1)
    gen_len: int = Field(16, ge=2, description="tokens generated per row: 1 by prefill, the rest by decode")
    repeats: int = Field(2, ge=1, description="timed rounds; medians and spread over these")
    warmup: int = Field(1, ge=1, description="untimed rounds before timing")
    compile: bool = Field(
        False, description="fuse q|k|v and gate|up, torch.compile prefill and decode step (CUDA graphs and "
        "coordinate-descent tuning on CUDA; zoo/harness/compiling.py)"
    )
    seed: int = Field(0, ge=0, lt=2**64, description="seed of the random weights and prompt (0 to 2**64 - 1)")
    weights: str | None = Field(None, description="a checkpoint (hub id or directory) instead of random weights")
    predict: str | None = Field(None, description="a GPU of zoo.harness.hardware.GPUS for a roofline estimate")
    threads: int | None = Field(None, ge=1, description="torch CPU threads; default: torch's choice")
    weights_dtype: str | None = Field(
        None, description="bf16, float32 (the model in that dtype) or int8, int4 (weight-only quantized linears; "
        "the rest in dtype, default bfloat16); default: unquantized in dtype"
    )
    weights_group_size: int | None = Field(None, description="int4 group size: 32, 64, 128 or 256 (default 32)")
    eval_text: str | None = Field(None, description="a UTF-8 text file whose perplexity the run reports")

    @field_validator("weights_dtype")
    @classmethod
    def _check_weights_dtype(cls, value: str | None) -> str | None:
        from zoo.quant import normalize

        return normalize(value)

    @model_validator(mode="after")
    def _check_predict(self) -> BenchConfig:
        if self.weights_group_size is not None:
            from zoo.quant import check_group_size

            check_group_size(self.weights_group_size)
        if self.predict is not None:
            from zoo.harness.hardware import gpu

            gpu(self.predict)
        return self


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


def make_config(**options: Any) -> BenchConfig:
    """A BenchConfig, with validation errors as one-line BenchErrors naming the field."""
    try:
        return BenchConfig(**options)
    except ValidationError as exc:
        parts = [f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in exc.errors()]
        raise BenchError("; ".join(parts)) from None


def _load_model(spec: ModelSpec | None, config: BenchConfig, device: torch.device, dtype: torch.dtype) -> torch.nn.Module:
    if config.weights is None:
        if spec is None:
            raise BenchError("give a spec (an architecture) or weights to benchmark")
        import zoo

        return zoo.build(spec, device=device, dtype=dtype, seed=config.seed)
    from zoo.hub.loading import from_pretrained

    return from_pretrained(config.weights, device=device, dtype=dtype)


def _flops_or_none(spec: ModelSpec, context: int) -> int | None:
    from zoo.analysis import flops_per_token
    from zoo.errors import PluginError

    try:
        return flops_per_token(spec, context)
    except PluginError:
        return None


def _dtype_name(dtype: torch.dtype) -> str:
    return {torch.bfloat16: "bf16"}.get(dtype, str(dtype).removeprefix("torch."))


def _median_spread(values: list[float]) -> tuple[float, float, float]:
    return statistics.median(values), min(values), max(values)


def _duration(seconds: float) -> str:
    """A rough human duration for progress estimates: 12 s, 3 min, 1.5 h."""
    if seconds < 90:
        return f"{max(seconds, 1):.0f} s"
    if seconds < 5400:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


def bench(
    spec: ModelSpec | str | Mapping[str, Any] | None,
    config: BenchConfig | None = None,
    *,
    progress: Progress | None = None,
    **options: Any,
) -> Measurement:
    """Measure one spec (or ``weights=``) as ``config`` / keyword options say; see BenchConfig."""
    from zoo.model import as_spec
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
    if model_spec is not None:  # refuse what cannot fit before allocating anything
        from zoo.harness.memory_check import check_fits

        context = config.prompt_len + config.gen_len
        check_fits(model_spec, config.batch_size, config.prompt_len, context, dtype, device)
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
    timings = _timed_rounds(model, config, device, dtype, report)
    measurement = _measurement(model, model_spec, config, timings, device, dtype, fidelity_fields)
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
        from zoo.analysis import flops_per_token

        flops_per_token(spec, context)


@dataclass
class _Timings:
    prefill_rates: list[float]
    decode_rates: list[float]
    ttfts: list[float]
    prefill_peak: int
    decode_peak: int
    sdpa: str
    compile_mode: str
    cache_bytes: int
    memory_method: str
    compile_s: float | None = None


def _timed_rounds(
    model: torch.nn.Module, config: BenchConfig, device: torch.device, dtype: torch.dtype, report: Progress
) -> _Timings:
    """Warm-up rounds (untimed), then ``repeats`` timed rounds of prefill and decode."""
    from zoo.cache import KVCache
    from zoo.harness.compiling import run_steps

    B, P, G = config.batch_size, config.prompt_len, config.gen_len
    total_steps = 1 + config.warmup + config.repeats
    steps = run_steps(model, device, config.compile)  # compiled: projections fused, prefill and step compiled
    prefill, step, compile_mode = steps.prefill, steps.decode, steps.mode
    probe = probe_for(device)
    cache = KVCache(model, B, P + G, dtype=dtype, device=device)
    generator = torch.Generator().manual_seed(config.seed)
    prompt = torch.randint(model.spec.vocab_size, (B, P), generator=generator).to(device)  # type: ignore[union-attr]

    warm_times: list[tuple[float, float]] = []  # (prefill s, s per decode step) of each warm-up round

    def one_round(prompt_ids: torch.Tensor, decode_steps: int) -> None:
        cache.reset()
        start = time.perf_counter()
        token = prefill(model, prompt_ids, cache).argmax(-1, keepdim=True)  # (B, 1)
        probe.synchronize()
        middle = time.perf_counter()
        for _ in range(decode_steps):
            token = step(model, token, cache).argmax(-1, keepdim=True)
        probe.synchronize()
        warm_times.append((middle - start, (time.perf_counter() - middle) / max(decode_steps, 1)))

    # the full prompt where the prefill is a graph specialised to its shape, or a GPU's
    warm_prompt = prompt if device.type == "cuda" or config.compile else prompt[:, :HOST_WARMUP_PROMPT]
    warm_steps = min(WARMUP_DECODE_STEPS, G - 1)
    report("warm-up", 1, total_steps)
    sdpa = sdpa_backends_used(lambda: one_round(warm_prompt, warm_steps))
    for i in range(1, config.warmup):
        one_round(warm_prompt, warm_steps)
        report("warm-up", 1 + i, total_steps)
    # a timed round's length, guessed from the last warm-up round until a timed one has run
    warm_prefill, warm_step = warm_times[-1] if warm_times else (0.0, 0.0)
    round_s = warm_prefill * P / warm_prompt.shape[1] + warm_step * (G - 1)

    timings = _Timings([], [], [], 0, 0, sdpa, compile_mode, cache.nbytes, probe.memory_method, steps.compile_s)
    for r in range(config.repeats):
        left = round_s * (config.repeats - r)
        report(f"repeat {r + 1}/{config.repeats}, about {_duration(left)} left", 1 + config.warmup + r, total_steps)
        round_start = time.perf_counter()
        cache.reset()
        with probe.phase() as pre:
            token = prefill(model, prompt, cache).argmax(-1, keepdim=True)  # (B, 1)
        with probe.phase() as dec:
            for _ in range(G - 1):
                token = step(model, token, cache).argmax(-1, keepdim=True)  # (B, 1)
        timings.ttfts.append(pre.seconds)
        timings.prefill_rates.append(B * P / pre.seconds)
        timings.decode_rates.append(B * (G - 1) / dec.seconds)
        timings.prefill_peak = max(timings.prefill_peak, pre.peak_bytes)
        timings.decode_peak = max(timings.decode_peak, dec.peak_bytes)
        round_s = time.perf_counter() - round_start
    report("done", total_steps, total_steps)
    timings.memory_method = probe.memory_method  # known once a phase has run
    return timings


def _measurement(
    model: torch.nn.Module, spec: ModelSpec, config: BenchConfig, t: _Timings, device: torch.device, dtype: torch.dtype,
    fidelity_fields: dict[str, Any],
) -> Measurement:
    from datetime import datetime, timezone

    from zoo.analysis import count_params, decode_bytes_per_step, kv_bytes_per_token, state_bytes
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
        weight_bytes=stored_bytes(model), weights_dtype=normalize(config.weights_dtype) or _dtype_name(dtype),
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
    from zoo.harness.hardware import gpu, matches_device, roofline

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


# ---- a run in a fresh process ---------------------------------------------------------------
def run_in_subprocess(spec: ModelSpec | None, config: BenchConfig, timeout: float | None = None) -> Measurement:
    """Run ``bench(spec, config)`` in a new Python process; the Measurement comes back as JSON.

    A ZooError in the child becomes a BenchError here with the child's message; a crash
    (out of memory, a signal) becomes a BenchError with the tail of its stderr.
    """
    request = json.dumps({"spec": spec.to_dict() if spec is not None else None, "config": config.model_dump()})
    try:
        done = subprocess.run(
            [sys.executable, "-m", "zoo.harness.run"], input=request, capture_output=True, text=True, timeout=timeout
        )
    except subprocess.TimeoutExpired:
        raise BenchError(f"run: the benchmark subprocess exceeded its timeout of {timeout} s") from None
    lines = done.stdout.strip().splitlines()
    reply = json.loads(lines[-1]) if lines and lines[-1].startswith("{") else {}
    if done.returncode == 0 and "measurement" in reply:
        return Measurement.model_validate(reply["measurement"])
    if "error" in reply:
        raise BenchError(reply["error"])
    tail = " | ".join(done.stderr.strip().splitlines()[-3:])
    raise BenchError(f"run: the benchmark subprocess failed with exit status {done.returncode}: {tail}")


def _subprocess_main() -> int:
    request = json.loads(sys.stdin.read())
    try:
        spec = ModelSpec.model_validate(request["spec"]) if request.get("spec") is not None else None
        measurement = bench(spec, BenchConfig.model_validate(request["config"]))
    except ZooError as exc:
        print(json.dumps({"error": str(exc)}))
        return 2
    print(json.dumps({"measurement": measurement.model_dump(mode="json")}))
    return 0


if __name__ == "__main__":
    raise SystemExit(_subprocess_main())
