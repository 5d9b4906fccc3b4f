"""One-row CPU products: ``F.linear`` against ``torch.mv`` (and the opt-in row kernel).

A batch-1 decode step is a chain of one-row products, so which call streams a weight fastest
decides the CPU default of ``zoo/components/linear.py``. Every path is timed on the same
weights in the same process, in interleaved rounds (the order of the paths rotates each
round, so none always runs on a warmer cache), and the figure to read is the median over
rounds of the per-round ratio ``time(F.linear) / time(path)`` (> 1: the path is faster).

    python bench/linear_rows.py                          # float32 and bfloat16, threads 1 and 2
    python bench/linear_rows.py --kernel                 # also the ZOO_ROW_KERNEL kernel (compiles)
    python bench/linear_rows.py --families qwen3 --threads 1 --rounds 9

Shapes are the layer projections of qwen3-0.6b and llama-3.2-1b (fused q|k|v and gate|up
too, as ``zoo.fuse_projections`` makes them); ``--heads`` adds their LM heads (large).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable, Sequence

import torch
import torch.nn.functional as F

# (name, out, in) of each family's projections at its real width
SHAPES = {
    "qwen3": [
        ("q", 2048, 1024),
        ("k|v", 1024, 1024),
        ("o", 1024, 2048),
        ("gate|up", 3072, 1024),
        ("down", 1024, 3072),
        ("qkv fused", 4096, 1024),
        ("gate+up fused", 6144, 1024),
    ],
    "llama": [
        ("q|o", 2048, 2048),
        ("k|v", 512, 2048),
        ("gate|up", 8192, 2048),
        ("down", 2048, 8192),
        ("qkv fused", 3072, 2048),
        ("gate+up fused", 16384, 2048),
    ],
}
HEADS = {"qwen3": ("lm head", 151936, 1024), "llama": ("lm head", 128256, 2048)}
Product = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]


def paths(kernel: bool) -> dict[str, Product]:
    chosen: dict[str, Product] = {
        "F.linear": lambda w, x: F.linear(x, w),  # x (1, in) -> (1, out)
        "torch.mv": lambda w, x: torch.mv(w, x.reshape(-1)),  # (out,)
    }
    if kernel:
        from zoo.components import row_product as rows

        chosen["row kernel"] = lambda w, x: rows.row_product(w, x.reshape(-1), None)
    return chosen


def time_calls(fn: Product, w: torch.Tensor, x: torch.Tensor, seconds: float) -> float:
    """Seconds per call, over as many calls as fit in about ``seconds``."""
    fn(w, x)
    calls, start = 0, time.perf_counter()
    while True:
        fn(w, x)
        calls += 1
        elapsed = time.perf_counter() - start
        if elapsed >= seconds and calls >= 3:
            return elapsed / calls


def measure(
    shape: tuple[str, int, int], dtype: torch.dtype, products: dict[str, Product], rounds: int, seconds: float
) -> dict[str, list[float]]:
    """Per-path seconds per call, one entry per round, paths rotated each round."""
    _, out, inp = shape
    w = torch.randn(out, inp, dtype=dtype)  # (out, in)
    x = torch.randn(1, inp, dtype=dtype)  # (1, in)
    reference = F.linear(x.float(), w.float()).reshape(-1)
    for name, fn in products.items():  # same numbers on every path before any is timed
        got = fn(w, x).float().reshape(-1)
        tol = 1e-2 * reference.abs().max().item() if dtype != torch.float32 else 1e-3
        assert torch.allclose(got, reference, atol=tol, rtol=0), name
    names = list(products)
    times: dict[str, list[float]] = {n: [] for n in names}
    for r in range(rounds):
        order = names[r % len(names) :] + names[: r % len(names)]
        for name in order:
            times[name].append(time_calls(products[name], w, x, seconds))
    return times


def report(
    family: str, dtype: torch.dtype, threads: int, shape: tuple[str, int, int], times: dict[str, list[float]]
) -> str:
    name, out, inp = shape
    nbytes = out * inp * torch.finfo(dtype).bits // 8
    cells = []
    base = times["F.linear"]
    for path, per_round in times.items():
        gbs = nbytes / statistics.median(per_round) / 1e9
        ratio = statistics.median(b / t for b, t in zip(base, per_round))
        cells.append(f"{path} {gbs:5.1f} GB/s x{ratio:4.2f}")
    label = f"{family:5} {str(dtype).removeprefix('torch.'):8} t{threads} {name:13} {out:>6}x{inp:<5}"
    return f"| {label} | " + " | ".join(cells) + " |"


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--families", default="qwen3,llama")
    p.add_argument("--dtypes", default="float32,bfloat16")
    p.add_argument("--threads", default="1,2")
    p.add_argument("--rounds", type=int, default=7)
    p.add_argument("--seconds", type=float, default=0.05, help="timed per path per round")
    p.add_argument("--kernel", action="store_true", help="also time the opt-in compiled row kernel")
    p.add_argument("--heads", action="store_true", help="also the LM heads (0.3-1 GB each in float32)")
    return p.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    products = paths(args.kernel)
    print(
        f"torch {torch.__version__}, {torch.backends.cpu.get_cpu_capability()}; "
        "per path: median GB/s and median per-round speed ratio against F.linear (>1 faster)"
    )
    with torch.inference_mode():
        for threads in (int(t) for t in args.threads.split(",")):
            torch.set_num_threads(threads)
            for dtype in (getattr(torch, d) for d in args.dtypes.split(",")):
                for family in args.families.split(","):
                    shapes = SHAPES[family] + ([HEADS[family]] if args.heads else [])
                    for shape in shapes:
                        times = measure(shape, dtype, products, args.rounds, args.seconds)
                        print(report(family, dtype, threads, shape, times), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
