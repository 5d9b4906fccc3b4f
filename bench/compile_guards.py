"""What dynamo's guards cost a compiled decode step on the CPU: ``compile_decode_step`` as it
is (the guards on the model's modules and parameters skipped) against the same step keeping
every guard, interleaved rounds in one process, one model.

    python bench/compile_guards.py /tmp/smollm2-135m-q4_1.gguf --dtype bfloat16 --threads 1
    python bench/compile_guards.py gpt2 --layers 4 --dtype float32

A path or Hugging Face folder loads with ``zoo.from_pretrained``; a preset name builds it
(``--layers`` cut) with random weights.
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

import torch

import zoo
from zoo.model.cache import KVCache
from zoo.model.generation import compile_decode_step, prefill


def keep_every_guard(entries: list[object]) -> list[bool]:
    return [True] * len(entries)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model", help="a GGUF file, a checkpoint folder or a preset name")
    parser.add_argument("--dtype", default="bfloat16")
    parser.add_argument("--layers", type=int, default=4, help="layers of a preset")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--steps", type=int, default=48)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    if Path(args.model).exists():
        model = zoo.from_pretrained(args.model, dtype=args.dtype, progress=False)
    else:
        spec = zoo.spec(args.model).override({"n_layers": args.layers})
        model = zoo.build(spec, device="cpu", dtype=args.dtype, seed=0).eval()
    steps = {
        "guards on modules skipped (zoo's)": compile_decode_step(),
        "every guard kept": compile_decode_step(options={"guard_filter_fn": keep_every_guard}),
    }
    ids = torch.randint(3, model.spec.vocab_size, (1, 128), generator=torch.Generator().manual_seed(0))  # (1, P)

    def tokens_per_s(step: object, n: int) -> float:
        cache = KVCache(model, 1, ids.shape[1] + n + 1, dtype=getattr(torch, args.dtype), device="cpu")
        with torch.no_grad():
            token = prefill(model, ids, cache).argmax(-1, keepdim=True)  # (1, 1)
            start = time.perf_counter()
            for _ in range(n):
                token = step(model, token, cache).argmax(-1, keepdim=True)  # type: ignore[operator]
            return n / (time.perf_counter() - start)

    for step in steps.values():  # compiled, warmed up
        tokens_per_s(step, 3)
    rates: dict[str, list[float]] = {name: [] for name in steps}
    for index in range(args.rounds):
        for name in list(steps)[:: (-1) ** index]:
            rates[name].append(tokens_per_s(steps[name], args.steps))
    base = rates["every guard kept"]
    print(f"{args.model}, {args.dtype}, {args.threads} thread(s), {args.rounds} interleaved rounds (medians)")
    for name, values in rates.items():
        ratio = statistics.median(a / b for a, b in zip(values, base, strict=True))
        print(f"| {name} | {statistics.median(values):.1f} tok/s | {ratio:.2f}x |")


if __name__ == "__main__":
    main()
