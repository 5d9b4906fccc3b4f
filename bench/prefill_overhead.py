"""The fixed cost of a prefill: time to first token of a tiny, deep model at two prompt lengths.

A tiny model (llama-3.2-1b's structure and 16 layers at width 64) does almost no arithmetic,
so its time to first token is the per-call cost a prefill pays whatever the prompt: Python,
operator dispatch, allocations (on a GPU, kernel launches and any host sync). Measured as
the harness does (cache reset, prefill, argmax), eager and compiled (``compile_prefill``),
rounds interleaved in one process; also the operator calls per prefill (torch.profiler),
which on a GPU are the kernel launches an eager prefill queues.

    python bench/prefill_overhead.py                    # eager vs compiled, prompts 8 and 128
    python bench/prefill_overhead.py --no-compile --profile   # eager only, with the top Python costs
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import statistics
import sys
import time
from collections.abc import Callable, Sequence

import torch

import zoo
from zoo.model.cache import KVCache
from zoo.model.generation import prefill

TINY = {
    "n_layers": 16,
    "d_model": 64,
    "attention.n_heads": 4,
    "attention.n_kv_heads": 2,
    "attention.head_dim": 16,
    "ffn.hidden": 128,
    "vocab_size": 128,
}


def ttft(run: Callable[..., torch.Tensor], model: torch.nn.Module, cache: KVCache, ids: torch.Tensor) -> float:
    cache.reset()
    start = time.perf_counter()
    run(model, ids, cache).argmax(-1, keepdim=True)  # (B, 1)
    return time.perf_counter() - start


def operator_calls(run: Callable[..., torch.Tensor], model: torch.nn.Module, cache: KVCache, ids: torch.Tensor) -> int:
    """Top-level aten operator calls of one prefill (nested calls not counted)."""
    from torch.profiler import ProfilerActivity, profile

    cache.reset()
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        run(model, ids, cache)
    events = [e for e in prof.events() if e.name.startswith("aten::")]
    ids_seen = {id(e) for e in events}
    return sum(1 for e in events if e.cpu_parent is None or id(e.cpu_parent) not in ids_seen)


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--prompts", default="8,128")
    p.add_argument("--rounds", type=int, default=21)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--no-compile", action="store_true")
    p.add_argument("--profile", action="store_true", help="cProfile 50 eager prefills of the first prompt length")
    args = p.parse_args(argv)
    torch.set_num_threads(args.threads)
    spec = zoo.spec("llama-3.2-1b").override(TINY)
    model = zoo.build(spec, dtype="float32", seed=0).eval()
    prompts = [int(v) for v in args.prompts.split(",")]
    cache = KVCache(model, 1, max(prompts) + 8)
    runs: dict[str, Callable[..., torch.Tensor]] = {"eager": prefill}
    if not args.no_compile:
        from zoo.model.generation import compile_prefill

        runs["compiled"] = compile_prefill()
    inputs = {n: torch.randint(0, 128, (1, n), generator=torch.Generator().manual_seed(n)) for n in prompts}
    for name, run in runs.items():  # warm-up, and compilation (one graph per prompt length)
        for ids in inputs.values():
            start = time.perf_counter()
            ttft(run, model, cache, ids)
            print(f"first {name} prefill of {ids.shape[1]} tokens: {time.perf_counter() - start:.2f} s")
    times = {(name, n): [] for name in runs for n in prompts}
    for r in range(args.rounds):
        for name in list(runs) if r % 2 == 0 else list(runs)[::-1]:
            for n in prompts:
                times[(name, n)].append(ttft(runs[name], model, cache, inputs[n]))
    print(
        f"torch {torch.__version__}, {args.threads} thread(s), {args.rounds} rounds; "
        "time to first token, median (min) ms; top-level aten calls per prefill"
    )
    print("| prefill | " + " | ".join(f"prompt {n}" for n in prompts) + " | aten calls |")
    print("|---|" + "---|" * (len(prompts) + 1))
    for name, run in runs.items():
        cells = [
            f"{statistics.median(times[(name, n)]) * 1e3:.2f} ({min(times[(name, n)]) * 1e3:.2f})" for n in prompts
        ]
        print(f"| {name} | " + " | ".join(cells) + f" | {operator_calls(run, model, cache, inputs[prompts[0]])} |")
    if args.profile:
        profiler = cProfile.Profile()
        profiler.enable()
        for _ in range(50):
            ttft(prefill, model, cache, inputs[prompts[0]])
        profiler.disable()
        pstats.Stats(profiler).sort_stats("tottime").print_stats(15)
    return 0


if __name__ == "__main__":
    sys.exit(main())
