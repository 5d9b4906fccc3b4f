"""The token mixers' own share of a decode step, per implementation: one process, interleaved rounds.

A whole decode step of a small model is mostly GEMVs (the projections, the MLPs and the LM
head), so a change to the mixers' state update moves ``family_speed``'s tokens/s by less
than this shared machine's noise. Here forward hooks time, inside real decode steps, each
mixer's forward and the ``Linear`` projections inside it; ``state`` is the rest: what runs
between the projections (the state update and read, the convolution window, norms and gates,
and the dispatch of every small op). Families and models are ``family_speed``'s; each round
runs every (family, implementation) model in turn, so all see the same load; figures are
medians over rounds, per layer and step, in microseconds. Compare within one run only.

Run: python bench/mixer_step_speed.py [--families mamba2-130m,gated-deltanet,linear,infini,rwkv]
     [--impls reference,auto] [--rounds 5] [--steps 16] [--prompt-len 128] [--layers 4] [--threads 1]
"""

from __future__ import annotations

import argparse
import statistics
import time
from dataclasses import dataclass, field
from typing import Any

import torch
from family_speed import Case, build, stage_plugins

from zoo.components.kernels import implementations
from zoo.components.linear import Linear
from zoo.model.cache import KVCache
from zoo.model.generation import decode_step, prefill
from zoo.specs.interfaces import TokenMixer


@dataclass
class Timed:
    """Seconds spent in the hooked modules since the last reset."""

    total: float = 0.0
    started: dict[int, float] = field(default_factory=dict)

    def hook(self, module: torch.nn.Module) -> None:
        module.register_forward_pre_hook(self._start)
        module.register_forward_hook(self._stop)

    def _start(self, module: torch.nn.Module, args: Any) -> None:
        self.started[id(module)] = time.perf_counter()

    def _stop(self, module: torch.nn.Module, args: Any, out: Any) -> None:
        self.total += time.perf_counter() - self.started.pop(id(module))


def hooked(case: Case) -> tuple[Timed, Timed, int]:
    """Timers on the model's token mixers and on the projections inside them; the mixer count."""
    mixers, projections = Timed(), Timed()
    found = [m for m in case.model.modules() if isinstance(m, TokenMixer)]
    for mixer in found:
        mixers.hook(mixer)
        for inner in mixer.modules():
            if isinstance(inner, Linear):
                projections.hook(inner)
    return mixers, projections, len(found)


def one_round(case: Case, ids: torch.Tensor, steps: int, timers: tuple[Timed, Timed, int], out: dict) -> None:
    mixers, projections, count = timers
    cache = KVCache(case.model, batch_size=1, max_len=ids.shape[1] + steps)
    token = prefill(case.model, ids, cache).argmax(-1, keepdim=True)  # (1, 1)
    mixers.total = projections.total = 0.0
    for _ in range(steps):
        token = decode_step(case.model, token, cache).argmax(-1, keepdim=True)  # (1, 1)
    per = 1e6 / (steps * count)  # seconds in all layers' steps -> microseconds per layer and step
    out.setdefault("mixer", []).append(mixers.total * per)
    out.setdefault("projections", []).append(projections.total * per)
    out.setdefault("state", []).append((mixers.total - projections.total) * per)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--families", default="mamba2-130m,gated-deltanet,linear,infini,rwkv")
    parser.add_argument("--impls", default="reference,auto")
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--prompt-len", type=int, default=128)
    parser.add_argument("--steps", type=int, default=16)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    stage_plugins(args.families.split(","))
    cases = [build(f, i, args.layers) for f in args.families.split(",") for i in args.impls.split(",")]
    timers = [hooked(case) for case in cases]
    results: list[dict] = [{} for _ in cases]
    ids = torch.randint(0, 50000, (1, args.prompt_len), generator=torch.Generator().manual_seed(0))  # (1, P)
    with torch.inference_mode():
        for case, timer in zip(cases, timers, strict=True):  # warm-up: kernels built, pages touched
            one_round(case, ids[:, :16], 2, timer, {})
        for _ in range(args.rounds):
            for case, timer, out in zip(cases, timers, results, strict=True):
                one_round(case, ids, args.steps, timer, out)
    print(
        f"float32, batch 1, {args.threads} threads, {args.layers} layers, prompt {args.prompt_len}, "
        f"{args.steps} decode steps, {args.rounds} interleaved rounds (medians); microseconds per layer and step\n"
    )
    print("| family | impl | mixer µs | projections µs | state µs | first impl's state µs / this |")
    print("|---|---|---|---|---|---|")
    first: dict[str, float] = {}
    for case, out in zip(cases, results, strict=True):
        mixer, proj, state = (statistics.median(out[key]) for key in ("mixer", "projections", "state"))
        base = first.setdefault(case.family, state)
        print(
            f"| {case.family} | {implementations(case.model) or case.impl} | {mixer:.0f} | {proj:.0f} "
            f"| {state:.0f} | {base / state:.2f}x |"
        )


if __name__ == "__main__":
    main()
