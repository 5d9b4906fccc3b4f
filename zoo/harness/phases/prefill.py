"""Phase ``prefill``: the prompt through the decoder into a fresh cache, to the first token.

A decoder's prefill is its prompt; an encoder-decoder's is its start token, the cross K/V
projected from the encoder's memory as it is written. Time to first token is this phase
(forward plus argmax), its spread over repeats beside the median.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from zoo.analysis.counts import cache_bytes, forward_flops, topology, weight_bytes_read
from zoo.analysis.devices import DevicePeaks, step_roofline
from zoo.analysis.encoder import memory_flops
from zoo.harness.measure import joules_per_token
from zoo.harness.phases.base import Phase, RunContext
from zoo.harness.phases.generation import generation
from zoo.harness.phases.stats import median_spread
from zoo.harness.run_config import BenchConfig
from zoo.harness.shape import run_shape
from zoo.specs.model import ModelSpec


class Prefill(Phase):
    name = "prefill"
    order = 20
    topologies = frozenset({"decoder", "encoder-decoder"})
    options = ("gen_len", "compile")
    fields = (
        "prefill_tokens_per_s",
        "prefill_tokens_per_s_min",
        "prefill_tokens_per_s_max",
        "time_to_first_token_s",
        "ttft_min_s",
        "ttft_max_s",
        "prefill_peak_bytes",
        "prefill_joules_per_token",
        "compile_s",
    )
    rate_field = "prefill_tokens_per_s"

    def measure(self, ctx: RunContext) -> dict[str, Any]:
        run = generation(ctx)
        tokens = run.prompt.numel()
        timed = []
        for r in range(ctx.config.repeats):
            ctx.progress(f"prefill {r + 1}/{ctx.config.repeats}")
            with run.steady(), ctx.probe.phase() as phase:
                run.prefill()
            timed.append(phase)
        seconds = [p.seconds for p in timed]
        rate, low, high = median_spread([tokens / s for s in seconds])
        ttft, ttft_min, ttft_max = median_spread(seconds)
        return {
            "prefill_tokens_per_s": rate,
            "prefill_tokens_per_s_min": low,
            "prefill_tokens_per_s_max": high,
            "time_to_first_token_s": ttft,
            "ttft_min_s": ttft_min,
            "ttft_max_s": ttft_max,
            "prefill_peak_bytes": max(p.peak_bytes for p in timed),
            "prefill_joules_per_token": joules_per_token(timed, tokens * len(timed)),
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
        """The prompt's FLOPs (and an encoder-decoder's cross K/V projections) against the
        weights read once plus the cache written."""

        shape = run_shape(topology(spec), config)
        B, T, M = shape.batch, shape.prefill_len, shape.memory_len
        flops = forward_flops(spec, T, T, B, last_only=True, memory_len=M, executed=True) + (
            memory_flops(spec, M, B) if M else 0
        )
        nbytes = weight_bytes_read(spec, B * T, dtype, config.weights_dtype, config.weights_group_size, held)
        nbytes += cache_bytes(spec, B, T, M, dtype=dtype).total
        return step_roofline(flops, nbytes, B * T, device, dtype)
