"""One-row int8 products on the CPU: torch's ``_weight_int8pack_mm`` against zoo's C++
row kernel (zoo/quant/int8_rows.py), which a large int8 matrix (a tied LM head) takes.

Both paths multiply the same int8 weight in the same process, in interleaved rounds (the
order rotates each round); read the median per-round ratio ``time(aten) / time(kernel)``
(> 1: the kernel is faster). Shapes: SmolLM2-135M's tied head and layer widths, a 1B
model's widths, a long-row down projection.

    python bench/int8_rows.py --threads 1 --rounds 5
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from zoo.quant.int8_rows import int8_rows

SHAPES = [
    ("smollm2 head", 49152, 576),
    ("smollm2 gate|up", 1536, 576),
    ("1b gate|up", 8192, 2048),
    ("1b down", 2048, 8192),
]


def seconds_per_call(fn, seconds: float) -> float:  # type: ignore[no-untyped-def]
    fn()
    calls, start = 0, time.perf_counter()
    while True:
        fn()
        calls += 1
        elapsed = time.perf_counter() - start
        if elapsed >= seconds and calls >= 3:
            return elapsed / calls


def measure(out: int, inp: int, rounds: int, seconds: float) -> dict[str, list[float]]:
    q = torch.randint(-127, 128, (out, inp), dtype=torch.int8)  # (out, in)
    scales = torch.rand(out, dtype=torch.bfloat16) / 100  # (out,)
    x = torch.randn(1, inp, dtype=torch.bfloat16)  # (1, in)
    paths = {
        "aten": lambda: torch.ops.aten._weight_int8pack_mm(x, q, scales),
        "kernel": lambda: int8_rows(q, scales, x[0]),
    }
    expected = paths["aten"]().float()[0]
    got = paths["kernel"]().float()
    assert torch.allclose(got, expected, atol=2e-2 * expected.abs().max().item(), rtol=0)
    times: dict[str, list[float]] = {name: [] for name in paths}
    names = list(paths)
    for r in range(rounds):
        for name in names[r % 2 :] + names[: r % 2]:
            times[name].append(seconds_per_call(paths[name], seconds))
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", default="1")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--seconds", type=float, default=0.1, help="timed per path per round")
    args = parser.parse_args()
    print(f"torch {torch.__version__}, {torch.backends.cpu.get_cpu_capability()}, one bfloat16 row")
    print("| threads | shape | aten GB/s | kernel GB/s | aten / kernel time (median ratio) |\n|---|---|---|---|---|")
    with torch.no_grad():
        for threads in (int(t) for t in args.threads.split(",")):
            torch.set_num_threads(threads)
            for name, out, inp in SHAPES:
                times = measure(out, inp, args.rounds, args.seconds)
                aten, kernel = (out * inp / statistics.median(times[p]) / 1e9 for p in ("aten", "kernel"))
                ratio = statistics.median(a / k for a, k in zip(times["aten"], times["kernel"]))
                print(f"| {threads} | {name} {out}x{inp} | {aten:.1f} | {kernel:.1f} | {ratio:.2f}x |", flush=True)


if __name__ == "__main__":
    main()
