"""Decode tokens/s at batch 1 of one model with bf16, int8 and int4 weights, side by side.

The three models hold the same random weights (one seed; the quantized ones are quantized
from the bf16 build) and live in memory together; each round times ``--steps`` greedy
decode steps of each model in turn (order rotated every round), so machine noise falls on
all three alike. Each model runs as a `zoo bench` run here runs it: its projections fused
and the CPU paths the host probe chose (``zoo.harness.run.host_paths``). Reported: median
tokens/s over rounds, the median of the per-round ratios to bf16, weight bytes from the
layout and the bytes each step reads (zoo.analysis.counts).

    python bench/quant_decode.py                       # llama-3.2-1b, all 16 layers
    python bench/quant_decode.py --layers 4 --steps 8 --rounds 3 --write

``--write`` writes results/quant-decode.md (atomically); without it nothing is written.
``--profile`` prints, per weights dtype, torch.profiler's top operators over the timed steps
of one extra round (where decode time goes).
"""

from __future__ import annotations

import argparse
import statistics
import time
from contextlib import nullcontext
from pathlib import Path

import torch

import zoo
from zoo.analysis.counts import decode_bytes_per_step, weight_bytes
from zoo.files.atomic import write_text_atomic
from zoo.harness.run import host_paths
from zoo.model.cache import KVCache
from zoo.model.generation import decode_step, prefill
from zoo.quant import quantize, stored_bytes

KINDS = ("bf16", "int8", "int4")
# The bf16 model again with its one-row products through F.linear instead of zoo's row kernel
# (zoo/components/row_product.py), which a run takes where the host probe measured it faster:
# what the kernel is worth on this host.
LINEAR_VARIANT = "bf16 F.linear"
VARIANTS = (*KINDS, LINEAR_VARIANT)
PROMPT_LEN = 16
RESULTS = Path(__file__).resolve().parents[1] / "results" / "quant-decode.md"


def build_models(spec: zoo.ModelSpec, group_size: int | None, seed: int) -> dict[str, torch.nn.Module]:
    """The three models on the same weights: each a fresh seeded bf16 build, then quantized, its
    projections fused as a `zoo bench` run fuses them."""
    models = {}
    for kind in KINDS:
        model = zoo.build(spec, device="cpu", dtype="bfloat16", seed=seed).eval()
        with torch.no_grad():
            models[kind] = quantize(model, kind, group_size)
        zoo.fuse_projections(models[kind])
    return models


def time_decode(
    model: torch.nn.Module, cache: KVCache, prompt: torch.Tensor, steps: int, plain_linear: bool = False
) -> float:
    """Tokens/s of ``steps`` greedy decode steps after prefilling ``prompt`` (1, P), on the CPU
    paths a run takes for ``model`` here (``host_paths``); ``plain_linear`` sends one-row
    products to F.linear instead of zoo's row kernel."""
    from unittest import mock

    import zoo.components.row_product as rows

    patch = mock.patch.object(rows, "FORCED", False) if plain_linear else nullcontext()  # every caller of the kernel
    with torch.no_grad(), host_paths(torch.device("cpu"), model), patch:
        cache.reset()
        token = prefill(model, prompt, cache).argmax(-1, keepdim=True)  # (1, 1)
        start = time.perf_counter()
        for _ in range(steps):
            token = decode_step(model, token, cache).argmax(-1, keepdim=True)  # (1, 1)
        return steps / (time.perf_counter() - start)


def profile(models: dict[str, torch.nn.Module], caches: dict[str, KVCache], prompt: torch.Tensor, steps: int) -> None:
    """torch.profiler's operator table of ``steps`` decode steps of each model."""
    from torch.profiler import ProfilerActivity
    from torch.profiler import profile as torch_profile

    for kind in KINDS:
        model, cache = models[kind], caches[kind]
        with torch.no_grad(), host_paths(torch.device("cpu"), model):
            cache.reset()
            token = prefill(model, prompt, cache).argmax(-1, keepdim=True)  # (1, 1)
            with torch_profile(activities=[ProfilerActivity.CPU]) as prof:
                for _ in range(steps):
                    token = decode_step(model, token, cache).argmax(-1, keepdim=True)  # (1, 1)
        print(f"## {kind}\n{prof.key_averages().table(sort_by='self_cpu_time_total', row_limit=8)}")


def measure(args: argparse.Namespace) -> list[dict[str, object]]:
    spec = zoo.spec(args.arch)
    if args.layers:
        spec = spec.override({"n_layers": args.layers, "layers": {}})
    models = build_models(spec, args.group_size, args.seed)
    context = PROMPT_LEN + args.steps + 1
    caches = {k: KVCache(m, 1, context, dtype=torch.bfloat16, device="cpu") for k, m in models.items()}
    prompt = torch.randint(spec.vocab_size, (1, PROMPT_LEN), generator=torch.Generator().manual_seed(args.seed))
    for kind in KINDS:  # warm-up: first-touch of pages, kernel setup
        time_decode(models[kind], caches[kind], prompt, 2)
    rates: dict[str, list[float]] = {k: [] for k in VARIANTS}
    for r in range(args.rounds):
        order = VARIANTS[r % len(VARIANTS) :] + VARIANTS[: r % len(VARIANTS)]
        for kind in order:
            base = "bf16" if kind == LINEAR_VARIANT else kind
            rates[kind].append(time_decode(models[base], caches[base], prompt, args.steps, kind == LINEAR_VARIANT))
    if args.profile:
        profile(models, caches, prompt, args.steps)
    rows = []
    for kind in VARIANTS:
        base = "bf16" if kind == LINEAR_VARIANT else kind
        rows.append(
            {
                "weights_dtype": kind,
                "tokens_per_s": statistics.median(rates[kind]),
                "runs": rates[kind],
                "vs_bf16": statistics.median([q / b for q, b in zip(rates[kind], rates["bf16"])]),
                "vs_linear": statistics.median([q / b for q, b in zip(rates[kind], rates[LINEAR_VARIANT])]),
                "weight_bytes": stored_bytes(models[base]),
                "analysis_weight_bytes": weight_bytes(spec, "bfloat16", base, args.group_size),
                "bytes_per_step": decode_bytes_per_step(
                    spec, 1, PROMPT_LEN + args.steps // 2, "bfloat16", base, args.group_size
                ),
            }
        )
    return rows


def render(args: argparse.Namespace, rows: list[dict[str, object]]) -> str:
    lines = [
        f"# Quantized decode, {args.arch}, {args.layers or 'all'} layers, batch 1, CPU",
        "",
        f"torch {torch.__version__}, {torch.get_num_threads()} threads, {args.rounds} rounds of {args.steps} "
        f"decode steps after a {PROMPT_LEN}-token prompt, int4 group size {args.group_size or 'default'}.",
        "",
        "| weights | decode tokens/s (median) | runs | vs bf16 (median ratio) | vs bf16 F.linear | weight bytes "
        "| bytes read per step | GB/s |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for row in rows:
        gbs = float(row["tokens_per_s"]) * int(row["bytes_per_step"]) / 1e9  # type: ignore[arg-type]
        runs = " ".join(f"{v:.2f}" for v in row["runs"])  # type: ignore[attr-defined]
        lines.append(
            f"| {row['weights_dtype']} | {row['tokens_per_s']:.2f} | {runs} | {row['vs_bf16']:.2f}x | "
            f"{row['vs_linear']:.2f}x | "
            f"{row['weight_bytes']:,} | {row['bytes_per_step']:,} | {gbs:.1f} |"
        )
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--arch", default="llama-3.2-1b")
    parser.add_argument("--layers", type=int, default=0, help="cut the model to this many layers (0: all)")
    parser.add_argument("--steps", type=int, default=8, help="decode steps timed per round")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--group-size", type=int, default=None, help="int4 group size (default: zoo's)")
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--profile", action="store_true", help="print torch.profiler tables of one more round")
    parser.add_argument("--write", action="store_true", help=f"write {RESULTS.relative_to(RESULTS.parents[1])}")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    rows = measure(args)
    for row in rows:
        assert row["weight_bytes"] == row["analysis_weight_bytes"], row  # one source of truth
    text = render(args, rows)
    print(text)
    if args.write:
        write_text_atomic(RESULTS, text)


if __name__ == "__main__":
    main()
