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
import subprocess
import sys
from collections.abc import Callable, Mapping
from typing import Any

import torch
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from zoo.errors import BenchError, ZooError
from zoo.harness.environment import Environment, device_name, pick_device, sdpa_backends_used, zoo_git_commit
from zoo.harness.measure import probe_for
from zoo.model_spec import ModelSpec

HOST_WARMUP_PROMPT = 32  # host devices warm up on at most this many prompt tokens
WARMUP_DECODE_STEPS = 3  # enough for CUDA graphs to be recorded under reduce-overhead
Progress = Callable[[str, int, int], None]  # (what, done, total)


class BenchConfig(BaseModel):
    """How to run: defaults keep `zoo bench --arch qwen3-0.6b` under a minute on 2 CPU cores."""

    model_config = ConfigDict(extra="forbid")

    device: str = Field("auto", description="auto (cuda, mps, cpu), cpu, cuda, cuda:N or mps")
    dtype: str | None = Field(None, description="default bfloat16 on CUDA, float32 elsewhere")
    batch_size: int = Field(1, ge=1)
    prompt_len: int = Field(128, ge=1)
    gen_len: int = Field(16, ge=2, description="tokens generated per row: 1 by prefill, the rest by decode")
    repeats: int = Field(2, ge=1, description="timed rounds; medians and spread over these")
    warmup: int = Field(1, ge=1, description="untimed rounds before timing")
    compile: bool = Field(False, description="torch.compile the decode step (reduce-overhead on CUDA)")
    seed: int = 0
    weights: str | None = Field(None, description="a checkpoint (hub id or directory) instead of random weights")
    predict: str | None = Field(None, description="a GPU of zoo.harness.hardware.GPUS for a roofline estimate")
    threads: int | None = Field(None, ge=1, description="torch CPU threads; default: torch's choice")

    @model_validator(mode="after")
    def _check_predict(self) -> BenchConfig:
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
    weight_bytes: int  # bytes of the model's parameters as built (tied once)
    kv_bytes_per_token: int
    kv_bytes: int  # the allocated cache at batch_size x (prompt_len + gen_len)
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
    flops_per_token: int | None  # decode, at the midpoint context prompt_len + gen_len // 2
    decode_bytes_per_step: int  # weights read + KV read at that context
    predicted_gpu: str | None = None
    predicted_prefill_tokens_per_s: float | None = None
    predicted_decode_tokens_per_s: float | None = None
    predicted_bound: str | None = None  # "prefill: compute, decode: memory"
    prefill_roofline_fraction: float | None = None  # only when measured on that GPU
    decode_roofline_fraction: float | None = None
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


def _median_spread(values: list[float]) -> tuple[float, float, float]:
    return statistics.median(values), min(values), max(values)


def bench(
    spec: ModelSpec | str | Mapping[str, Any] | None,
    config: BenchConfig | None = None,
    *,
    progress: Progress | None = None,
    **options: Any,
) -> Measurement:
    """Measure one spec (or ``weights=``) as ``config`` / keyword options say; see BenchConfig."""
    from datetime import datetime, timezone

    from zoo.analysis import count_params, decode_bytes_per_step, kv_bytes_per_token
    from zoo.cache import KVCache
    from zoo.generation import compile_decode_step, decode_step, prefill
    from zoo.model import as_spec, resolve_dtype

    if config is None:
        config = make_config(**options)
    elif options:
        config = make_config(**{**config.model_dump(), **options})
    model_spec = as_spec(spec) if spec is not None else None
    device = pick_device(config.device)
    dtype = resolve_dtype(config.dtype or ("bfloat16" if device.type == "cuda" else "float32"))
    B, P, G = config.batch_size, config.prompt_len, config.gen_len
    context = P + G
    if model_spec is not None and context > model_spec.max_seq_len:
        raise BenchError(
            f"prompt_len + gen_len = {context} exceeds max_seq_len={model_spec.max_seq_len} of {model_spec.name}; "
            f"allowed: at most {model_spec.max_seq_len}"
        )
    if config.predict and model_spec is not None:
        from zoo.analysis import flops_per_token

        flops_per_token(model_spec, context)  # fail before the run when the roofline cannot be had
    if config.threads is not None:
        torch.set_num_threads(config.threads)
    total_steps = 1 + config.warmup + config.repeats
    report = progress or (lambda what, done, total: None)

    report("build", 0, total_steps)
    model = _load_model(model_spec, config, device, dtype).eval()
    model_spec = model.spec  # type: ignore[assignment]
    assert model_spec is not None
    if context > model_spec.max_seq_len:
        raise BenchError(f"prompt_len + gen_len = {context} exceeds max_seq_len={model_spec.max_seq_len}")
    compile_mode = "none"
    step = decode_step
    if config.compile:  # the whole step in one graph; the cache's bounds check stays eager
        compile_mode = "reduce-overhead" if device.type == "cuda" else "default"
        step = compile_decode_step(mode=compile_mode)
    probe = probe_for(device)
    cache = KVCache(model, B, context, dtype=dtype, device=device)
    generator = torch.Generator().manual_seed(config.seed)
    prompt = torch.randint(model_spec.vocab_size, (B, P), generator=generator).to(device)  # (B, P)

    def one_round(prompt_ids: torch.Tensor, decode_steps: int) -> None:
        cache.reset()
        token = prefill(model, prompt_ids, cache).argmax(-1, keepdim=True)  # (B, 1)
        for _ in range(decode_steps):
            token = step(model, token, cache).argmax(-1, keepdim=True)
        probe.synchronize()

    warm_prompt = prompt if device.type == "cuda" else prompt[:, :HOST_WARMUP_PROMPT]
    warm_steps = min(WARMUP_DECODE_STEPS, G - 1)
    report("warm-up", 1, total_steps)
    sdpa = sdpa_backends_used(lambda: one_round(warm_prompt, warm_steps))
    for i in range(1, config.warmup):
        one_round(warm_prompt, warm_steps)
        report("warm-up", 1 + i, total_steps)

    prefill_rates, decode_rates, ttfts = [], [], []
    prefill_peak = decode_peak = 0
    for r in range(config.repeats):
        report(f"repeat {r + 1}/{config.repeats}", 1 + config.warmup + r, total_steps)
        cache.reset()
        with probe.phase() as pre:
            token = prefill(model, prompt, cache).argmax(-1, keepdim=True)  # (B, 1)
        with probe.phase() as dec:
            for _ in range(G - 1):
                token = step(model, token, cache).argmax(-1, keepdim=True)  # (B, 1)
        ttfts.append(pre.seconds)
        prefill_rates.append(B * P / pre.seconds)
        decode_rates.append(B * (G - 1) / dec.seconds)
        prefill_peak, decode_peak = max(prefill_peak, pre.peak_bytes), max(decode_peak, dec.peak_bytes)
    report("done", total_steps, total_steps)

    count = count_params(model_spec)
    unique = {id(p): p for p in model.parameters()}
    prefill_tps, prefill_lo, prefill_hi = _median_spread(prefill_rates)
    decode_tps, decode_lo, decode_hi = _median_spread(decode_rates)
    midpoint = P + G // 2
    env = Environment(
        torch_version=torch.__version__,
        python_version=sys.version.split()[0],
        device=str(device),
        device_name=device_name(device),
        dtype=str(dtype).removeprefix("torch."),
        sdpa_backend=sdpa,
        compile_mode=compile_mode,
        threads=torch.get_num_threads(),
        zoo_commit=zoo_git_commit(),
    )
    measurement = Measurement(
        arch=model_spec.name,
        config=config,
        params_total=count.total,
        params_active=count.active,
        params_embedding=count.embedding,
        params_unembedding=count.unembedding,
        weight_bytes=sum(p.numel() * p.element_size() for p in unique.values()),
        kv_bytes_per_token=kv_bytes_per_token(model_spec, dtype=dtype),
        kv_bytes=cache.nbytes,
        context_len=context,
        prefill_peak_bytes=prefill_peak,
        decode_peak_bytes=decode_peak,
        memory_method=probe.memory_method,
        prefill_tokens_per_s=prefill_tps,
        prefill_tokens_per_s_min=prefill_lo,
        prefill_tokens_per_s_max=prefill_hi,
        decode_tokens_per_s=decode_tps,
        decode_tokens_per_s_min=decode_lo,
        decode_tokens_per_s_max=decode_hi,
        decode_tokens_per_s_runs=decode_rates,
        time_to_first_token_s=statistics.median(ttfts),
        flops_per_token=_flops_or_none(model_spec, midpoint),
        decode_bytes_per_step=decode_bytes_per_step(model_spec, B, midpoint, dtype),
        environment=env,
        timestamp=datetime.now(timezone.utc).isoformat(timespec="seconds"),
    )
    if config.predict:
        measurement = with_prediction(measurement, model_spec, config.predict, dtype)
    return measurement


def with_prediction(measurement: Measurement, spec: ModelSpec, gpu_key: str, dtype: torch.dtype) -> Measurement:
    """The measurement with the roofline on ``gpu_key`` beside it, and the achieved fraction
    of it when the run was on that GPU."""
    from zoo.harness.hardware import gpu, matches_device, roofline

    c = measurement.config
    line = roofline(spec, gpu_key, batch_size=c.batch_size, prompt_len=c.prompt_len, gen_len=c.gen_len, dtype=dtype)
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
