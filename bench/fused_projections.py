"""Decode with fused q|k|v and gate|up projections (``zoo.fuse_projections``) against unfused.

Two copies of the same model (same seed, same weights), one fused, decode the same prompt
in interleaved rounds (the order flips each round); the figure to read is the median over
rounds of the per-round ratio ``time(unfused) / time(fused)`` (> 1: fusing is faster).

    python bench/fused_projections.py                                 # tiny and llama-3.2-1b (2 layers), fp32 + bf16
    python bench/fused_projections.py --models llama --dtypes bfloat16 --rounds 9
    python bench/fused_projections.py --models tiny --compile         # compiled decode steps (slow to compile)
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Sequence

import torch

import zoo
from zoo.model.cache import KVCache
from zoo.model.generation import compile_decode_step, decode_step, prefill

MODELS = {
    "tiny": (
        "llama-3.2-1b",
        {
            "n_layers": 2,
            "d_model": 64,
            "attention.n_heads": 4,
            "attention.n_kv_heads": 2,
            "attention.head_dim": 16,
            "ffn.hidden": 128,
            "vocab_size": 128,
        },
    ),
    "llama": ("llama-3.2-1b", {"n_layers": 2}),  # real widths, 2 layers
    "qwen3": ("qwen3-0.6b", {"n_layers": 2}),
}
PROMPT = 16


def decode_seconds(model: torch.nn.Module, step, cache: KVCache, prompt: torch.Tensor, steps: int) -> float:
    """Seconds per decode step after prefilling ``prompt`` (1, P)."""
    cache.reset()
    token = prefill(model, prompt, cache).argmax(-1, keepdim=True)  # (1, 1)
    start = time.perf_counter()
    for _ in range(steps):
        token = step(model, token, cache).argmax(-1, keepdim=True)  # (1, 1)
    return (time.perf_counter() - start) / steps


def measure(name: str, dtype: str, args: argparse.Namespace) -> str:
    arch, overrides = MODELS[name]
    spec = zoo.spec(arch).override(overrides)
    models = {
        "unfused": zoo.build(spec, dtype=dtype, seed=0).eval(),
        "fused": zoo.build(spec, dtype=dtype, seed=0).eval(),
    }
    zoo.fuse_projections(models["fused"])
    caches = {k: KVCache(m, 1, PROMPT + args.steps + 8) for k, m in models.items()}
    prompt = torch.randint(0, spec.vocab_size, (1, PROMPT), generator=torch.Generator().manual_seed(0))
    steps = {k: (compile_decode_step() if args.compile else decode_step) for k in models}
    times: dict[str, list[float]] = {k: [] for k in models}
    with torch.no_grad():
        first = {k: prefill(m, prompt, caches[k]).argmax(-1) for k, m in models.items()}
        assert torch.equal(first["fused"], first["unfused"]), "fused and unfused disagree"
        for k, m in models.items():  # warm-up (and compilation)
            decode_seconds(m, steps[k], caches[k], prompt, 3)
        for r in range(args.rounds):
            for k in ("unfused", "fused") if r % 2 == 0 else ("fused", "unfused"):
                times[k].append(decode_seconds(models[k], steps[k], caches[k], prompt, args.steps))
    ratio = statistics.median(u / f for u, f in zip(times["unfused"], times["fused"]))
    rates = {k: 1 / statistics.median(v) for k, v in times.items()}
    mode = "compiled" if args.compile else "eager"
    return (
        f"| {name:5} | {dtype:8} | {mode:8} | {rates['unfused']:8.1f} | {rates['fused']:8.1f} | "
        f"{ratio:.3f} ({min(u / f for u, f in zip(times['unfused'], times['fused'])):.2f}-"
        f"{max(u / f for u, f in zip(times['unfused'], times['fused'])):.2f}) |"
    )


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--models", default="tiny,llama")
    p.add_argument("--dtypes", default="float32,bfloat16")
    p.add_argument("--steps", type=int, default=16, help="decode steps timed per round")
    p.add_argument("--rounds", type=int, default=7)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--compile", action="store_true", help="compile both decode steps")
    args = p.parse_args(argv)
    torch.set_num_threads(args.threads)
    print(f"torch {torch.__version__}, {args.threads} thread(s), {args.steps} steps x {args.rounds} rounds")
    print("| model | dtype | decode | unfused tok/s | fused tok/s | fused speed-up, median (range) |")
    print("|---|---|---|---|---|---|")
    for name in args.models.split(","):
        for dtype in args.dtypes.split(","):
            print(measure(name, dtype, args), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
