"""Prefill speed of the WKV alone: the parallel scan against the per-token recurrence
(transformers' CPU path) and the fused C++ loop (``cpu_wkv``, where it builds), same inputs,
same process, best of ``--repeats``; prints tokens/s and the ratios.
``python -m zoo_rwkv.wkv_speed --tokens 1024 --channels 768``."""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable

import torch

from zoo_rwkv import cpu_wkv
from zoo_rwkv.wkv import empty_state, wkv, wkv_reference


def best_seconds(fn: Callable[[], object], repeats: int) -> float:
    fn()  # warm-up
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--tokens", type=int, default=1024)
    parser.add_argument("--channels", type=int, default=768)
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    B, T, C = args.batch, args.tokens, args.channels
    w, u = -torch.exp(torch.randn(C)), torch.randn(C)
    k, v = torch.randn(B, T, C), torch.randn(B, T, C)
    with torch.no_grad():
        scan = best_seconds(lambda: wkv(w, u, k, v, None, empty_state(B, C, k.device)), args.repeats)
        loop = best_seconds(lambda: wkv_reference(w, u, k, v), args.repeats)
        fused = None
        if cpu_wkv.EXTENSION.available():
            fused = best_seconds(lambda: cpu_wkv.wkv_scan(w, u, k, v, None, empty_state(B, C, k.device)), args.repeats)
    print(
        f"B={B} T={T} C={C} threads={args.threads}: scan {B * T / scan:,.0f} tokens/s, "
        f"per-token loop {B * T / loop:,.0f} tokens/s, scan/loop speed ratio {loop / scan:.2f}"
        + ("" if fused is None else f"; fused C++ loop {B * T / fused:,.0f} tokens/s, {scan / fused:.1f}x the scan")
    )


if __name__ == "__main__":
    main()
