"""Each recurrent mixer on its kernels (``--impl auto``) against its PyTorch reference, one
process, interleaved rounds: prefill and decode tokens/s from ``zoo.bench`` rows, whose
``impl`` names what ran (``zoo[kernels]`` on CUDA: mamba-ssm, causal-conv1d, fla).

Families: mamba-130m (Mamba, mamba-ssm), mamba2-130m (Mamba2, mamba-ssm), and qwen3-0.6b with
its attention swapped for Gated DeltaNet (fla; Qwen3-Next's head layout) and for linear
attention (fla). Every model runs once per round, reference and kernels alternating, so both
see the same load; figures are medians over rounds. Compare within one run only.

Run: python bench/cuda_kernels.py [--device cuda] [--dtype bfloat16] [--prompt-len 2048]
     [--gen-len 64] [--rounds 3] [--families mamba-130m,mamba2-130m,gated_deltanet,linear] [--train]
"""

from __future__ import annotations

import argparse
import statistics

import zoo

SWAPS = {  # qwen3-0.6b (d_model 1024) with its attention replaced
    "gated_deltanet": {
        "attention.kind": "gated_deltanet",
        "attention.n_k_heads": 8,
        "attention.n_v_heads": 16,
        "attention.head_k_dim": 128,
        "attention.head_v_dim": 128,
    },
    "linear": {"attention.kind": "linear", "attention.n_heads": 16},
}


def family_spec(name: str) -> zoo.ModelSpec:
    return zoo.spec("qwen3-0.6b").override(SWAPS[name]) if name in SWAPS else zoo.spec(name)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--families", default="mamba-130m,mamba2-130m,gated_deltanet,linear")
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--dtype", default="bfloat16")
    parser.add_argument("--prompt-len", type=int, default=2048)
    parser.add_argument("--gen-len", type=int, default=64)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--layers", type=int, help="cut every family to this many layers")
    parser.add_argument("--train", action="store_true", help="also time a training step")
    args = parser.parse_args()
    families = args.families.split(",")
    specs = {f: family_spec(f) for f in families}
    if args.layers:
        specs = {f: s.override({"n_layers": args.layers}) for f, s in specs.items()}
    figures: dict[tuple[str, str], list[tuple[float, float, float | None]]] = {}
    ran: dict[tuple[str, str], str | None] = {}
    for _ in range(args.rounds):
        for family, spec in specs.items():
            for impl in ("reference", "auto"):
                row = zoo.bench(
                    spec,
                    device=args.device,
                    dtype=args.dtype,
                    prompt_len=args.prompt_len,
                    gen_len=args.gen_len,
                    repeats=1,
                    impl=impl,
                    train=args.train,
                )
                step = row.train_step_s_p50 if args.train else None
                figures.setdefault((family, impl), []).append((row.prefill_tokens_per_s, row.decode_tokens_per_s, step))
                ran[family, impl] = row.impl
    print(f"{args.device}, {args.dtype}, prompt {args.prompt_len}, {args.gen_len} generated, {args.rounds} rounds")
    print("| family | impl | prefill tok/s | decode tok/s | train step s | prefill x | decode x |")
    print("|---|---|---|---|---|---|---|")
    for family in families:
        base = [statistics.median(v) for v in zip(*figures[family, "reference"])][:2]
        for impl in ("reference", "auto"):
            columns = list(zip(*figures[family, impl]))
            prefill, decode = statistics.median(columns[0]), statistics.median(columns[1])
            step = f"{statistics.median(columns[2]):.3f}" if args.train else "-"
            print(
                f"| {family} | {ran[family, impl]} | {prefill:.0f} | {decode:.1f} | {step} | "
                f"{prefill / base[0]:.2f} | {decode / base[1]:.2f} |"
            )


if __name__ == "__main__":
    main()
