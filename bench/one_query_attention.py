"""One query's attention on the CPU: torch's kernel (through zoo's ``sdpa`` without the C++
kernel) against zoo's (zoo/components/cpu_attention.py), per layer of a decode step.

Each round runs every layer's attention back to back (30 layers, 4 for the long context)
after evicting the caches, as a decode step meets them after streaming the weights; both
sides in the same process, alternating, medians over rounds. Masked: a compiled step's
static cache, the slots not yet written masked; sliced: an eager step's view of the
written slots.

    python bench/one_query_attention.py --threads 1
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from zoo.components import cpu_attention
from zoo.components.sdpa_kernels import sdpa

SHAPES = [  # name, dtype, query heads, key/value heads, head dim, cache slots, keys written
    ("smollm2-135m", torch.bfloat16, 9, 3, 64, 260, 135),
    ("gpt2", torch.float32, 12, 12, 64, 257, 135),
    ("qwen3-0.6b", torch.float32, 16, 8, 128, 200, 135),
    ("long context", torch.bfloat16, 32, 8, 64, 4096, 2048),
]


def per_layer_us(layers: list[tuple[torch.Tensor, torch.Tensor]], call, junk: torch.Tensor, kernel: bool) -> float:  # type: ignore[no-untyped-def]
    cpu_attention.ENABLED = kernel
    junk.mul_(1.0001)  # evict the caches
    start = time.perf_counter()
    for k, v in layers:
        call(k, v)
    return (time.perf_counter() - start) / len(layers) * 1e6


def _modes(q: torch.Tensor, mask: torch.Tensor, written: int, gqa: bool):  # type: ignore[no-untyped-def]
    """The two calls per layer: over the whole static cache, masked; over the written slots."""
    return {
        "masked": lambda k, v: sdpa(q, k, v, attn_mask=mask, enable_gqa=gqa),
        "sliced": lambda k, v: sdpa(q, k[:, :, :written], v[:, :, :written], enable_gqa=gqa),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--rounds", type=int, default=15)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    junk = torch.randn(16 << 20)  # 64 MiB
    print(f"torch {torch.__version__}, {args.threads} thread(s), µs per layer (median of {args.rounds} rounds)")
    print("| shape | mode | torch | zoo | torch / zoo |\n|---|---|---|---|---|")
    for name, dtype, heads, kv_heads, dim, slots, written in SHAPES:
        count = 30 if slots < 1000 else 4
        layers = [(torch.randn(1, kv_heads, slots, dim).to(dtype), torch.randn(1, kv_heads, slots, dim).to(dtype))]
        layers += [(torch.randn_like(layers[0][0]), torch.randn_like(layers[0][1])) for _ in range(count - 1)]
        q = torch.randn(1, heads, 1, dim).to(dtype)
        mask = torch.zeros(1, 1, 1, slots, dtype=torch.bool)
        mask[..., :written] = True
        with torch.no_grad():
            for mode, call in _modes(q, mask, written, heads != kv_heads).items():
                times: dict[bool, list[float]] = {False: [], True: []}
                for r in range(args.rounds):
                    for kernel in (r % 2 == 0, r % 2 == 1):
                        times[kernel].append(per_layer_us(layers, call, junk, kernel))
                ours, theirs = statistics.median(times[True]), statistics.median(times[False])
                print(f"| {name} | {mode} | {theirs:,.0f} | {ours:,.0f} | {theirs / ours:.2f}x |")
    cpu_attention.ENABLED = True


if __name__ == "__main__":
    main()
