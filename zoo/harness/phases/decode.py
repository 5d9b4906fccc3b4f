"""Phase ``decode``: ``gen_len - 1`` greedy decode steps after an untimed prefill, per repeat.

Tokens/s counts the generated tokens only. Every step is timed (``StepClock``: CUDA events
read once at the end, so the loop is not synchronised per step), giving inter-token latency
percentiles over all ``(gen_len - 1) x repeats`` steps beside the median rate.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from zoo.analysis.counts import decode_bytes_per_step, forward_flops, topology
from zoo.analysis.devices import DevicePeaks, step_roofline
from zoo.harness.measure import StepClock, joules_per_token
from zoo.harness.phases.base import Phase, RunContext
from zoo.harness.phases.generation import generation
from zoo.harness.phases.stats import median_spread, percentile
from zoo.harness.run_config import BenchConfig
from zoo.harness.shape import run_shape
from zoo.specs.model import ModelSpec


class Decode(Phase):
    name = "decode"
    order = 30
    topologies = frozenset({"decoder", "encoder-decoder"})
    options = ("gen_len", "compile")
    fields = (
        "decode_tokens_per_s",
        "decode_tokens_per_s_min",
        "decode_tokens_per_s_max",
        "decode_tokens_per_s_runs",
        "decode_peak_bytes",
        "itl_p50_s",
        "itl_p90_s",
        "itl_p99_s",
        "itl_steps",
        "decode_joules_per_token",
        "compile_s",
    )
    rate_field = "decode_tokens_per_s"

    def measure(self, ctx: RunContext) -> dict[str, Any]:
        run = generation(ctx)
        batch, steps = run.prompt.shape[0], run.decode_steps
        rates, step_seconds, timed = [], [], []
        for r in range(ctx.config.repeats):
            ctx.progress(f"decode {r + 1}/{ctx.config.repeats}")
            token = run.prefill()
            with run.steady(), ctx.probe.phase() as phase:
                clock = StepClock(ctx.device)
                for _ in range(steps):
                    token = run.step(token)  # (B, 1)
                    clock.mark()
            rates.append(batch * steps / phase.seconds)
            step_seconds += clock.seconds()
            timed.append(phase)
        rate, low, high = median_spread(rates)
        return {
            "decode_tokens_per_s": rate,
            "decode_tokens_per_s_min": low,
            "decode_tokens_per_s_max": high,
            "decode_tokens_per_s_runs": rates,
            "decode_peak_bytes": max(p.peak_bytes for p in timed),
            "itl_steps": len(step_seconds),
            **{f"itl_p{q}_s": percentile(step_seconds, q) for q in (50, 90, 99)},
            "decode_joules_per_token": joules_per_token(timed, batch * steps * len(timed)),
            "compile_s": run.compile_s,
        }

    def predict(
        self,
        spec: ModelSpec,
        config: BenchConfig,
        device: DevicePeaks | None,
        dtype: torch.dtype,
        held: nn.Module | None = None,
    ) -> dict[str, Any]:
        """One step at the midpoint context: its FLOPs against the weights and the cache read."""

        shape = run_shape(topology(spec), config)
        B, at, M = shape.batch, shape.decode_midpoint, shape.memory_len
        flops = forward_flops(spec, 1, at, B, memory_len=M, executed=True)
        nbytes = decode_bytes_per_step(
            spec, B, at, dtype, config.weights_dtype, config.weights_group_size, memory_len=M, held=held
        )
        return step_roofline(flops, nbytes, B, device, dtype)
