"""Benchmarks of models that are not decoder-only: an encoder's forward throughput, and an
encoder-decoder's encoder time, decoder prefill and decode, with self and cross KV bytes.

Decoder-only models are measured by ``zoo.harness.run.bench``; ``zoo bench`` and
``zoo.bench`` send the others here (``zoo.harness.families.family_of_run``), with random
weights or a checkpoint's (``config.weights``). Options that mean nothing for the
family (decoding options on an encoder) are a one-line ``BenchError``.
"""

from __future__ import annotations

import statistics
import sys
from collections.abc import Callable
from datetime import datetime, timezone
from typing import Any

import torch
from pydantic import BaseModel

from zoo.analysis.counts import Family, cache_bytes, count_params, encoder_flops, forward_flops, model_family
from zoo.model.cache import KVCache
from zoo.errors import BenchError
from zoo.model.generation import decode_step, decoder_start, prefill
from zoo.harness.environment import Environment, device_name, pick_device, sdpa_backends_used, zoo_git_commit
from zoo.harness.measure import probe_for
from zoo.harness.run import BenchConfig
from zoo.model.build import ZooModel, build, resolve_dtype
from zoo.specs.model import ModelSpec

family_of = model_family  # which benchmark a spec gets: decided in zoo.analysis.counts, once


class EncoderMeasurement(BaseModel):
    """What one encoder or encoder-decoder run measured (decoder fields None for encoders)."""

    arch: str
    family: Family
    config: BenchConfig
    params_total: int
    weight_bytes: int
    seq_len: int  # tokens per row through the encoder (prompt_len)
    encoder_tokens_per_s: float  # encoder forward, median over repeats
    encoder_tokens_per_s_min: float
    encoder_tokens_per_s_max: float
    encoder_time_s: float  # median
    peak_bytes: int
    memory_method: str
    encoder_flops: int  # one forward of the batch
    decoder_prefill_tokens_per_s: float | None = None  # the start token (+ cross K/V from memory)
    decode_tokens_per_s: float | None = None
    self_kv_bytes: int | None = None  # decoder self-attention K/V at gen_len tokens
    cross_kv_bytes: int | None = None  # cross-attention K/V of seq_len encoder tokens
    predicted_gpu: str | None = None  # --predict: the roofline (zoo.analysis.devices.encoder_roofline)
    predicted_encoder_tokens_per_s: float | None = None
    predicted_decoder_prefill_tokens_per_s: float | None = None
    predicted_decode_tokens_per_s: float | None = None
    predicted_bound: str | None = None  # "encoder: memory, decoder prefill: memory, decode: memory"
    encoder_roofline_fraction: float | None = None  # only when measured on that GPU
    decode_roofline_fraction: float | None = None
    environment: Environment
    timestamp: str

    def flat(self) -> dict[str, Any]:
        """One flat row (config and environment fields inlined) for the results CSV, as
        ``Measurement.flat``; the family column tells the two kinds of row apart."""
        row = self.model_dump(exclude={"config", "environment"})
        row.update(self.config.model_dump())
        row.update(self.environment.model_dump())
        if self.family == "encoder":
            row["gen_len"] = None  # an encoder decodes nothing: the config's default was not run
        return row


def _refuse_decoder_options(spec: ModelSpec, config: BenchConfig, family: Family) -> None:
    what = f"{spec.name} is an {family}"
    if config.compile:
        raise BenchError(f"compile: a decode-step option; {what} (allowed: without --compile)")
    for field, flag in (("weights_dtype", "--weights-dtype"), ("eval_text", "--eval-text")):
        if getattr(config, field) is not None:
            raise BenchError(f"{field}: measured for decoder-only models; {what} (allowed: without {flag})")


def _model(spec: ModelSpec, config: BenchConfig, device: torch.device, dtype: torch.dtype) -> ZooModel:
    """Random weights of the spec, or the checkpoint's (``config.weights``, whose spec the
    caller read from it: ``zoo.harness.families.family_of_run``)."""
    if config.weights is None:
        return build(spec, device=device, dtype=dtype, seed=config.seed).eval()
    from zoo.hub.loading import from_pretrained

    return from_pretrained(config.weights, device=device, dtype=dtype, progress=False).eval()


def _timed(probe, rounds: int, step: Callable[[], object]) -> tuple[list[float], int]:  # type: ignore[no-untyped-def]
    """Seconds of each round of ``step`` and the peak bytes over them."""
    seconds, peak = [], 0
    for _ in range(rounds):
        with probe.phase() as phase:
            step()
        seconds.append(phase.seconds)
        peak = max(peak, phase.peak_bytes)
    return seconds, peak


@torch.no_grad()
def bench_encoder(spec: ModelSpec, config: BenchConfig, gen_len_given: bool = False) -> EncoderMeasurement:
    """Measure an encoder (forward of batch × prompt_len) or an encoder-decoder (encoder,
    then the decoder's start token and ``gen_len - 1`` greedy decode steps)."""
    family = family_of(spec)
    _refuse_decoder_options(spec, config, family)
    if family == "encoder" and gen_len_given:
        raise BenchError(f"gen_len: {spec.name} is an encoder and decodes nothing (allowed: without --gen-len)")
    if config.prompt_len > spec.max_seq_len:
        raise BenchError(f"prompt_len: {config.prompt_len} exceeds max_seq_len={spec.max_seq_len} of {spec.name}")
    device = pick_device(config.device)
    dtype = resolve_dtype(config.dtype or ("bfloat16" if device.type == "cuda" else "float32"))
    from zoo.harness.memory_check import check_fits

    check_fits(spec, config.batch_size, config.prompt_len, config.gen_len, dtype, device)  # before building
    if config.threads is not None:
        torch.set_num_threads(config.threads)
    model = _model(spec, config, device, dtype)
    B, S, G = config.batch_size, config.prompt_len, config.gen_len
    ids = torch.randint(spec.vocab_size, (B, S), generator=torch.Generator().manual_seed(config.seed)).to(device)
    probe = probe_for(device)
    run_encoder = (lambda: model(ids)) if family == "encoder" else (lambda: model.encode(ids))
    sdpa = sdpa_backends_used(run_encoder)
    _timed(probe, config.warmup - 1, run_encoder)
    seconds, peak = _timed(probe, config.repeats, run_encoder)
    rates = [B * S / s for s in seconds]
    decoder = {}
    if family == "encoder-decoder":
        decoder = _decoder_phase(model, ids, config, probe)
        decoder["self_kv_bytes"] = cache_bytes(spec, B, G, dtype=dtype).token
        decoder["cross_kv_bytes"] = cache_bytes(spec, B, 1, S, dtype=dtype).memory
        peak = max(peak, decoder.pop("peak"))
    flops = encoder_flops(spec, S, B) if family == "encoder-decoder" else forward_flops(spec, S, S, B)
    measurement = EncoderMeasurement(
        arch=spec.name or "spec", family=family, config=config, params_total=count_params(spec).total,
        weight_bytes=sum(p.numel() * p.element_size() for p in {id(p): p for p in model.parameters()}.values()),
        seq_len=S, encoder_tokens_per_s=statistics.median(rates), encoder_tokens_per_s_min=min(rates),
        encoder_tokens_per_s_max=max(rates), encoder_time_s=statistics.median(seconds), peak_bytes=peak,
        memory_method=probe.memory_method, encoder_flops=flops, **decoder,
        environment=_environment(device, dtype, sdpa), timestamp=datetime.now(timezone.utc).isoformat(timespec="seconds"),
    )
    return with_prediction(measurement, spec, config.predict, dtype) if config.predict else measurement


def with_prediction(m: EncoderMeasurement, spec: ModelSpec, gpu_key: str, dtype: torch.dtype) -> EncoderMeasurement:
    """The measurement with the roofline on ``gpu_key`` beside it, and the achieved fraction
    of it when the run was on that GPU (as ``zoo.harness.run.with_prediction`` for decoders)."""
    from zoo.analysis.devices import encoder_roofline, gpu, matches_device

    c = m.config
    line = encoder_roofline(spec, gpu_key, batch_size=c.batch_size, prompt_len=c.prompt_len, gen_len=c.gen_len, dtype=dtype)
    same = m.environment.device.startswith("cuda") and matches_device(gpu(gpu_key), m.environment.device_name)
    decode = m.decode_tokens_per_s is not None and line.decode_tokens_per_s is not None
    return m.model_copy(update={
        "predicted_gpu": gpu_key,
        "predicted_encoder_tokens_per_s": line.encoder_tokens_per_s,
        "predicted_decoder_prefill_tokens_per_s": line.decoder_prefill_tokens_per_s,
        "predicted_decode_tokens_per_s": line.decode_tokens_per_s,
        "predicted_bound": line.bound,
        "encoder_roofline_fraction": m.encoder_tokens_per_s / line.encoder_tokens_per_s if same else None,
        "decode_roofline_fraction": m.decode_tokens_per_s / line.decode_tokens_per_s if same and decode else None,  # type: ignore[operator]
    })


def _decoder_phase(model: ZooModel, ids: torch.Tensor, config: BenchConfig, probe) -> dict:  # type: ignore[no-untyped-def,type-arg]
    """Decoder prefill (the start token, cross K/V written from memory) and decode rates."""
    B, S, G = config.batch_size, config.prompt_len, config.gen_len
    memory = model.encode(ids)
    cache = KVCache(model, B, G, memory_len=S)
    prefill_s, decode_s, peak = [], [], 0
    for round_ in range(config.warmup + config.repeats):
        cache.reset()
        with probe.phase() as pre:
            token = prefill(model, decoder_start(model, B, ids.device), cache, memory=memory).argmax(-1, keepdim=True)
        with probe.phase() as dec:
            for _ in range(G - 1):
                token = decode_step(model, token, cache).argmax(-1, keepdim=True)  # (B, 1)
        if round_ >= config.warmup:
            prefill_s.append(pre.seconds)
            decode_s.append(dec.seconds)
            peak = max(peak, pre.peak_bytes, dec.peak_bytes)
    return {
        "decoder_prefill_tokens_per_s": statistics.median(B / s for s in prefill_s),
        "decode_tokens_per_s": statistics.median(B * (G - 1) / s for s in decode_s),
        "peak": peak,
    }


def _environment(device: torch.device, dtype: torch.dtype, sdpa: str) -> Environment:
    return Environment(
        torch_version=torch.__version__, python_version=sys.version.split()[0], device=str(device),
        device_name=device_name(device), dtype=str(dtype).removeprefix("torch."), sdpa_backend=sdpa,
        compile_mode="none", threads=torch.get_num_threads(), zoo_commit=zoo_git_commit(),
    )
