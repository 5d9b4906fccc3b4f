"""The decoder side of a run, made once and shared by the prefill and decode phases.

It holds the prompt (a decoder's random prompt; an encoder-decoder's start token, with the
encoder's output over the random prompt as memory), the preallocated cache, and the prefill
and decode step the run times (projections fused; eager or compiled: ``compiling.run_steps``). It
is made on first use (``ctx.share``), which also runs the warm-up rounds: never timed, and
where a compiled run compiles (``compile_s``) and the SDPA kernels are read off the profiler.
"""

from __future__ import annotations

from contextlib import AbstractContextManager

import torch

from zoo.harness.environment import sdpa_backends_used
from zoo.harness.phases.base import RunContext
from zoo.harness.phases.compiling import run_steps
from zoo.model.cache import KVCache
from zoo.model.generation import decoder_start
from zoo.model.sampling import greedy

HOST_WARMUP_PROMPT = 32  # host devices warm up on at most this many prompt tokens
WARMUP_DECODE_STEPS = 3  # enough for CUDA graphs to be recorded under reduce-overhead


class Generation:
    def __init__(self, ctx: RunContext) -> None:
        model, config, shape = ctx.model, ctx.config, ctx.shape
        self.model, self.probe = model, ctx.probe
        self.steps = run_steps(model, ctx.device, config.compile)  # projections fused; compiled: both steps
        generator = torch.Generator().manual_seed(config.seed)
        ids = torch.randint(
            ctx.spec.vocab_size, (shape.batch, shape.encoder_len or shape.prefill_len), generator=generator
        ).to(ctx.device)  # (B, P)
        with torch.no_grad():
            self.memory = model.encode(ids) if shape.memory_len else None  # (B, S, d)
        self.prompt = decoder_start(model, shape.batch, ctx.device) if shape.memory_len else ids  # (B, P) or (B, 1)
        self.cache = KVCache(
            model, shape.batch, shape.context_len, dtype=ctx.dtype, device=ctx.device, memory_len=shape.memory_len
        )
        self.decode_steps = config.gen_len - 1
        self._warm_up(ctx)
        ctx.note(compile_mode=self.steps.mode)

    def prefill(self, prompt: torch.Tensor | None = None) -> torch.Tensor:
        """A fresh cache filled with the prompt; the first generated token (B, 1)."""
        self.cache.reset()
        logits = self.steps.prefill(
            self.model, self.prompt if prompt is None else prompt, self.cache, memory=self.memory
        )
        return greedy(logits)[:, None]  # (B, 1)

    def step(self, token: torch.Tensor) -> torch.Tensor:
        return greedy(self.steps.decode(self.model, token, self.cache))[:, None]  # (B, 1)

    def _warm_round(self, prompt: torch.Tensor, steps: int) -> None:
        token = self.prefill(prompt)
        for _ in range(steps):
            token = self.step(token)
        self.probe.synchronize()

    def _warm_up(self, ctx: RunContext) -> None:
        """``config.warmup`` untimed rounds (compiled: at least two, the later ones settling
        the guards): the full prompt where the prefill is a graph specialised to its shape or
        on a GPU, else its first tokens."""
        full = self.prompt.device.type == "cuda" or ctx.config.compile
        prompt = self.prompt if full else self.prompt[:, :HOST_WARMUP_PROMPT]
        steps = min(WARMUP_DECODE_STEPS, self.decode_steps)
        ctx.progress("warm-up")
        ctx.note(sdpa_backend=sdpa_backends_used(lambda: self._warm_round(prompt, steps)))
        rounds = ctx.config.warmup if self.steps.mode == "none" else max(ctx.config.warmup, 2)
        for _ in range(1, rounds):  # compiled: at least one round after the graphs were made
            ctx.progress("warm-up")
            self.steps.settle(lambda: self._warm_round(prompt, steps))
        ctx.note(compile_guards=self.steps.guards)

    def steady(self) -> AbstractContextManager[object]:
        """Where the phases time their calls: compiled graphs run without dynamo's guards
        once the warm-up showed that nothing recompiles (``RunSteps.steady``)."""
        return self.steps.steady()

    @property
    def compile_s(self) -> float | None:
        return self.steps.compile_s


def generation(ctx: RunContext) -> Generation:
    """The run's one Generation (made, and warmed up, on first use)."""
    return ctx.share("generation", lambda: Generation(ctx))
