"""Prefill tokens/s of mamba-130m beside gpt2 (similar size) on the host, float32.

The models are timed in turns (A, B, A, B, ...) so both see the same load on a shared
machine; the figure reported is the best round (the least disturbed), with the median,
and the process CPU time per round, which other processes do not inflate.

Run: python bench/mamba_vs_gpt2.py [--prompt-len 512] [--rounds 5] [--threads 2]
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

import zoo
from zoo.model.cache import KVCache
from zoo.model.generation import prefill


def _round(model: torch.nn.Module, ids: torch.Tensor) -> tuple[float, float]:
    cache = KVCache(model, batch_size=ids.shape[0], max_len=ids.shape[1])
    wall, cpu = time.perf_counter(), time.process_time()
    prefill(model, ids, cache)
    return time.perf_counter() - wall, time.process_time() - cpu


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--archs", default="gpt2,mamba-130m")
    parser.add_argument("--prompt-len", type=int, default=512)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--threads", type=int, default=torch.get_num_threads())
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    models = {name: zoo.build(name, device="cpu", dtype="float32", seed=0).eval() for name in args.archs.split(",")}
    ids = torch.randint(0, 50000, (1, args.prompt_len), generator=torch.Generator().manual_seed(0))
    times: dict[str, list[tuple[float, float]]] = {name: [] for name in models}
    for model in models.values():  # warm-up
        _round(model, ids)
    for _ in range(args.rounds):
        for name, model in models.items():
            times[name].append(_round(model, ids))
    print(f"prefill of {args.prompt_len} tokens, batch 1, float32, {args.threads} threads, {args.rounds} rounds")
    for name, rounds in times.items():
        walls, cpus = [w for w, _ in rounds], [c for _, c in rounds]
        print(
            f"{name:>12}: best {args.prompt_len / min(walls):8.1f} tok/s, median "
            f"{args.prompt_len / statistics.median(walls):8.1f}"
            f" tok/s (wall); {args.prompt_len / min(cpus):8.1f} tok/s per CPU-second (best)"
        )


if __name__ == "__main__":
    main()
