"""Which numerics zoo's CPU int4 product uses, by measurement: one decode token through every
int4 matrix of a SmolLM2-135M-shaped model (30 layers of q, k, v, o, gate, up, down; 66 MB of
packed weights, more than the caches hold), bfloat16 activations as a packed GGUF run has.

Candidates, each timed in every round (the order rotates; medians over rounds, and the
median of per-round ratios against torch's kernel):
- ``aten``: ``aten._weight_int4pack_mm_for_cpu`` on torch's own packing (what zoo used);
- ``float``: zoo's ``int4_rows``, exact weight-only numerics (float32 rows, nibbles widened
  to float, group scale and offset factored out of the inner loop);
- ``q8``: zoo's ``int4_rows_q8``, llama.cpp's numerics (the row quantized to int8 per
  block of 32, integer dot products), its quantization of the row included in the time.
Also printed: each one's error against the float32 product with the dequantized weight.

    python bench/int4_numerics.py --threads 1
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

import torch

from zoo.quant import int4_cpu

SHAPES = [(576, 576), (192, 576), (192, 576), (576, 576), (1536, 576), (1536, 576), (576, 1536)]  # (out, in)


def layers(n_layers: int) -> list[dict[str, torch.Tensor]]:
    made = []
    generator = torch.Generator().manual_seed(0)
    for _ in range(n_layers):
        for out_features, in_features in SHAPES:
            values = torch.randint(0, 16, (out_features, in_features), generator=generator, dtype=torch.int32)
            so = (torch.rand(out_features, in_features // 32, 2, generator=generator) * 0.02).bfloat16()
            zeros = torch.stack([so[..., 0], so[..., 1] + 8 * so[..., 0]], -1).transpose(0, 1).contiguous()
            made.append(
                {
                    "packed": int4_cpu.pack(values),
                    "so": so,
                    "aten": torch.ops.aten._convert_weight_to_int4pack_for_cpu(values, 1),
                    "aten_sz": zeros,  # (G, out, 2): zero at q = 8
                    "x": torch.randn(1, in_features, generator=generator).bfloat16(),
                }
            )
    return made


def candidates(made: list[dict[str, torch.Tensor]]) -> dict[str, Callable[[], list[torch.Tensor]]]:
    module = int4_cpu.load()
    assert module is not None

    def q8(m: dict[str, torch.Tensor]) -> torch.Tensor:
        q, scales, sums = int4_cpu.quantize_rows_q8(m["x"])
        return module.int4_rows_q8(q, scales, sums, m["packed"], m["so"], 32, int4_cpu.ROW_GRAIN).bfloat16()

    return {
        "aten": lambda: [torch.ops.aten._weight_int4pack_mm_for_cpu(m["x"], m["aten"], 32, m["aten_sz"]) for m in made],
        "float": lambda: [int4_cpu.matmul(m["x"], m["packed"], m["so"]) for m in made],
        "q8": lambda: [q8(m) for m in made],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--calls", type=int, default=20)
    parser.add_argument("--layers", type=int, default=30)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    made = layers(args.layers)
    runs = candidates(made)
    reference = [int4_cpu.reference(m["x"], m["packed"], m["so"]) for m in made]
    for name, run in runs.items():
        outs = run()
        error = max(((o.float() - r).abs().max() / r.abs().max()).item() for o, r in zip(outs, reference, strict=True))
        print(f"{name}: max relative error against the float32 product {error:.2e}")
    times: dict[str, list[float]] = {name: [] for name in runs}
    names = list(runs)
    for round_index in range(args.rounds):
        for name in names[round_index % len(names) :] + names[: round_index % len(names)]:
            start = time.perf_counter()
            for _ in range(args.calls):
                runs[name]()
            times[name].append((time.perf_counter() - start) / args.calls * 1e3)
    weight_bytes = sum(m["packed"].numel() for m in made)
    print(f"threads {args.threads}, {len(made)} matrices, {weight_bytes / 1e6:.1f} MB of 4-bit values")
    for name in names:
        ms = statistics.median(times[name])
        ratio = statistics.median(a / b for a, b in zip(times["aten"], times[name], strict=True))
        print(f"{name:6s} {ms:7.2f} ms/token  {weight_bytes / ms / 1e6:6.1f} GB/s  {ratio:5.2f}x aten")


if __name__ == "__main__":
    main()
