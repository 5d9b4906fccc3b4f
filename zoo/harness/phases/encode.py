"""Phase ``encode``: the prompt through the encoder, ``repeats`` times after the warm-up.

An encoder-only model's whole forward (its head included); an encoder-decoder's encoder
(``model.encode``), whose output the decoder phases then attend to.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from zoo.analysis.counts import encoder_flops, forward_flops, topology
from zoo.analysis.devices import DevicePeaks, step_roofline
from zoo.analysis.encoder import encoder_weight_bytes_read
from zoo.harness.environment import sdpa_backends_used
from zoo.harness.measure import joules_per_token
from zoo.harness.phases.base import Phase, RunContext
from zoo.harness.phases.stats import median_spread
from zoo.harness.run_config import BenchConfig
from zoo.harness.shape import run_shape
from zoo.specs.model import ModelSpec


class Encode(Phase):
    name = "encode"
    order = 10
    topologies = frozenset({"encoder", "encoder-decoder"})
    fields = (
        "seq_len",
        "encoder_tokens_per_s",
        "encoder_tokens_per_s_min",
        "encoder_tokens_per_s_max",
        "encoder_time_s",
        "encoder_peak_bytes",
        "encoder_joules_per_token",
    )
    rate_field = "encoder_tokens_per_s"

    @torch.no_grad()
    def measure(self, ctx: RunContext) -> dict[str, Any]:
        B, S = ctx.shape.batch, ctx.shape.encoder_len
        generator = torch.Generator().manual_seed(ctx.config.seed)
        ids = torch.randint(ctx.spec.vocab_size, (B, S), generator=generator).to(ctx.device)  # (B, S)
        forward = ctx.model.encode if ctx.shape.memory_len else ctx.model
        ctx.progress("warm-up")
        ctx.note(sdpa_backend=sdpa_backends_used(lambda: forward(ids)))
        for _ in range(ctx.config.warmup - 1):
            forward(ids)
        timed = []
        for r in range(ctx.config.repeats):
            ctx.progress(f"encode {r + 1}/{ctx.config.repeats}")
            with ctx.probe.phase() as phase:
                forward(ids)
            timed.append(phase)
        seconds = [p.seconds for p in timed]
        rate, low, high = median_spread([B * S / s for s in seconds])
        return {
            "seq_len": S,
            "encoder_tokens_per_s": rate,
            "encoder_tokens_per_s_min": low,
            "encoder_tokens_per_s_max": high,
            "encoder_time_s": median_spread(seconds)[0],
            "encoder_peak_bytes": max(p.peak_bytes for p in timed),
            "encoder_joules_per_token": joules_per_token(timed, B * S * len(timed)),
        }

    def predict(
        self,
        spec: ModelSpec,
        config: BenchConfig,
        device: DevicePeaks | None,
        dtype: torch.dtype,
        held: nn.Module | None = None,
    ) -> dict[str, Any]:
        """One forward of the batch (an encoder-decoder's encoder only) against its weights read once."""

        shape = run_shape(topology(spec), config)
        B, S = shape.batch, shape.encoder_len
        flops = (
            encoder_flops(spec, S, B, executed=True)
            if shape.memory_len
            else forward_flops(spec, S, S, B, executed=True)
        )
        return step_roofline(flops, encoder_weight_bytes_read(spec, S, dtype), B * S, device, dtype)
