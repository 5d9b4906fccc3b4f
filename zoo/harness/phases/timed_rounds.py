"""The timed part of a run: warm-up rounds (never timed), then ``repeats`` timed rounds of
[prefill the prompt -> first token] and [``gen_len - 1`` greedy decode steps].

Time to first token is the prefill phase (forward plus the argmax); decode tokens/s counts
only tokens the decode steps generate. Memory peaks come from the device's probe, per phase.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch

from zoo.harness.environment import sdpa_backends_used
from zoo.harness.measure import Probe, probe_for
from zoo.harness.run_config import BenchConfig, Progress

HOST_WARMUP_PROMPT = 32  # host devices warm up on at most this many prompt tokens
WARMUP_DECODE_STEPS = 3  # enough for CUDA graphs to be recorded under reduce-overhead


@dataclass
class Timings:
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


@dataclass
class _Rounds:
    """What every round shares: the model, its cache, the decode step and the memory probe."""

    model: torch.nn.Module
    cache: Any  # zoo.model.cache.KVCache
    prefill: Callable[..., torch.Tensor]  # eager or compiled (zoo.harness.phases.compiling.run_steps)
    step: Callable[..., torch.Tensor]
    probe: Probe
    warm_times: list[tuple[float, float]] = field(default_factory=list)  # (prefill s, s per decode step)

    def warm(self, prompt_ids: torch.Tensor, decode_steps: int) -> None:
        """One untimed round; its rough times go to ``warm_times`` for the progress estimate."""
        self.cache.reset()
        start = time.perf_counter()
        token = self.prefill(self.model, prompt_ids, self.cache).argmax(-1, keepdim=True)  # (B, 1)
        self.probe.synchronize()
        middle = time.perf_counter()
        for _ in range(decode_steps):
            token = self.step(self.model, token, self.cache).argmax(-1, keepdim=True)
        self.probe.synchronize()
        self.warm_times.append((middle - start, (time.perf_counter() - middle) / max(decode_steps, 1)))

    def timed(self, prompt: torch.Tensor, decode_steps: int, timings: Timings) -> None:
        """One timed round: prefill and decode phases, each with its memory peak."""
        B, P = prompt.shape
        self.cache.reset()
        with self.probe.phase() as pre:
            token = self.prefill(self.model, prompt, self.cache).argmax(-1, keepdim=True)  # (B, 1)
        with self.probe.phase() as dec:
            for _ in range(decode_steps):
                token = self.step(self.model, token, self.cache).argmax(-1, keepdim=True)  # (B, 1)
        timings.ttfts.append(pre.seconds)
        timings.prefill_rates.append(B * P / pre.seconds)
        timings.decode_rates.append(B * decode_steps / dec.seconds)
        timings.prefill_peak = max(timings.prefill_peak, pre.peak_bytes)
        timings.decode_peak = max(timings.decode_peak, dec.peak_bytes)


def _warm_up(rounds: _Rounds, config: BenchConfig, prompt: torch.Tensor, report: Progress, total_steps: int) -> tuple[str, float]:
    """Run the warm-up rounds; the SDPA backends they used and a timed round's length, guessed
    from the last warm-up round (the progress estimate until a timed round has run)."""
    P, G = config.prompt_len, config.gen_len
    # the full prompt where the prefill is a graph specialised to its shape, or on a GPU
    warm_prompt = prompt if prompt.device.type == "cuda" or config.compile else prompt[:, :HOST_WARMUP_PROMPT]
    warm_steps = min(WARMUP_DECODE_STEPS, G - 1)
    report("warm-up", 1, total_steps)
    sdpa = sdpa_backends_used(lambda: rounds.warm(warm_prompt, warm_steps))
    for i in range(1, config.warmup):
        rounds.warm(warm_prompt, warm_steps)
        report("warm-up", 1 + i, total_steps)
    warm_prefill, warm_step = rounds.warm_times[-1] if rounds.warm_times else (0.0, 0.0)
    return sdpa, warm_prefill * P / warm_prompt.shape[1] + warm_step * (G - 1)


def timed_rounds(
    model: torch.nn.Module, config: BenchConfig, device: torch.device, dtype: torch.dtype, report: Progress
) -> Timings:
    """Warm-up rounds (untimed), then ``repeats`` timed rounds of prefill and decode."""
    from zoo.model.cache import KVCache
    from zoo.harness.phases.compiling import run_steps

    B, P, G = config.batch_size, config.prompt_len, config.gen_len
    total_steps = 1 + config.warmup + config.repeats
    steps = run_steps(model, device, config.compile)  # compiled: projections fused, prefill and step compiled
    probe = probe_for(device)
    rounds = _Rounds(model, KVCache(model, B, P + G, dtype=dtype, device=device), steps.prefill, steps.decode, probe)
    generator = torch.Generator().manual_seed(config.seed)
    prompt = torch.randint(model.spec.vocab_size, (B, P), generator=generator).to(device)  # type: ignore[union-attr]
    sdpa, round_s = _warm_up(rounds, config, prompt, report, total_steps)

    timings = Timings([], [], [], 0, 0, sdpa, steps.mode, rounds.cache.nbytes, probe.memory_method)
    for r in range(config.repeats):
        left = round_s * (config.repeats - r)
        report(f"repeat {r + 1}/{config.repeats}, about {_duration(left)} left", 1 + config.warmup + r, total_steps)
        round_start = time.perf_counter()
        rounds.timed(prompt, G - 1, timings)
        round_s = time.perf_counter() - round_start
    report("done", total_steps, total_steps)
    timings.memory_method = probe.memory_method  # known once a phase has run
    timings.compile_s = steps.compile_s  # the compiled functions' first calls, in the warm-up
    return timings


def _duration(seconds: float) -> str:
    """A rough human duration for progress estimates: 12 s, 3 min, 1.5 h."""
    if seconds < 90:
        return f"{max(seconds, 1):.0f} s"
    if seconds < 5400:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"
