"""Where a packed GGUF's decode step spends its time: the whole step (eager and compiled) and
its parts timed alone on the model's own tensors, milliseconds per token, one process.

Parts: every 4-bit layer's one-row product (zoo's kernel, zoo/quant/int4_cpu.py), the int8
head through torch's kernel and through zoo's row kernel (zoo/quant/int8_rows.py), and
attention at the compiled step's shapes (one query over the whole static cache, masked by
time). Each round times every item in turn (the order rotates); medians over rounds. What
the parts leave of the step is the rest: norms, RoPE, cache writes, activations, and in
eager mode the per-operator host cost.

    python bench/make_smollm_gguf.py /tmp/smollm2-135m-q4_1.gguf
    python bench/decode_breakdown.py /tmp/smollm2-135m-q4_1.gguf --threads 1
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

import torch

import zoo
from zoo.components.sdpa_kernels import sdpa
from zoo.model.cache import KVCache
from zoo.model.generation import compile_decode_step, decode_step, prefill
from zoo.quant import int8_rows
from zoo.quant.linear import Int4Linear, Int8Linear


def per_call_ms(fn: Callable[[], object], calls: int) -> float:
    start = time.perf_counter()
    for _ in range(calls):
        fn()
    return (time.perf_counter() - start) / calls * 1e3


def parts(model: torch.nn.Module, context: int) -> dict[str, Callable[[], object]]:
    """Each part of one token's work, as a call."""
    int4 = [m for m in model.modules() if isinstance(m, Int4Linear)]
    head = model.lm_head
    assert isinstance(head, Int8Linear)
    spec = model.spec
    heads, kv, dim = spec.attention.n_heads, spec.attention.n_kv_heads, spec.attention.head_dim
    dim = dim or spec.d_model // heads
    q = torch.randn(1, heads, 1, dim, dtype=torch.bfloat16)  # (B, H, 1, D)
    k, v = torch.randn(2, 1, kv, context, dim, dtype=torch.bfloat16)  # (B, Hkv, S, D) each
    mask = (torch.arange(context) < context // 2).view(1, 1, 1, context)  # (1, 1, 1, S): half the cache written
    rows = {m: torch.randn(1, m.in_features, dtype=torch.bfloat16) for m in int4}

    def attention() -> None:
        for _ in range(spec.n_layers):
            sdpa(q, k, v, attn_mask=mask, enable_gqa=kv != heads)  # zoo's path: one bfloat16 query in float32

    x = torch.randn(1, head.in_features, dtype=torch.bfloat16)
    return {
        f"int4 layers ({len(int4)})": lambda: [m(rows[m]) for m in int4],
        "int8 head, aten": lambda: torch.ops.aten._weight_int8pack_mm(x, head.qweight, head.scales),
        "int8 head, zoo kernel": lambda: int8_rows.int8_rows(head.qweight, head.scales, x[0]),
        f"attention x{spec.n_layers}": attention,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("gguf")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--steps", type=int, default=32, help="decode steps (and part calls) per round")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    model = zoo.from_pretrained(args.gguf, dtype="bfloat16", progress=False)
    context = 128 + args.steps + 1
    cache = KVCache(model, 1, context, dtype=torch.bfloat16, device="cpu")
    prompt = torch.randint(3, model.spec.vocab_size, (1, 128), generator=torch.Generator().manual_seed(0))
    compiled = compile_decode_step()

    def step(run: Callable[..., torch.Tensor]) -> Callable[[], object]:
        def tokens() -> None:
            cache.reset()
            token = prefill(model, prompt, cache).argmax(-1, keepdim=True)  # (1, 1)
            start = time.perf_counter()
            for _ in range(args.steps):
                token = run(model, token, cache).argmax(-1, keepdim=True)  # (1, 1)
            times["_last"] = (time.perf_counter() - start) / args.steps * 1e3

        return tokens

    items = {"decode step, eager": step(decode_step), "decode step, compiled": step(compiled)}
    items.update(parts(model, context))
    times: dict[str, float] = {}
    results: dict[str, list[float]] = {name: [] for name in items}
    with torch.no_grad():
        items["decode step, compiled"]()  # compiles
        for r in range(args.rounds):
            names = list(items)
            for name in names[r % len(names) :] + names[: r % len(names)]:
                if name.startswith("decode step"):
                    items[name]()
                    results[name].append(times["_last"])
                else:
                    results[name].append(per_call_ms(items[name], args.steps))
    print(f"{model.weights_layout}; {args.threads} threads, ms per token (median of {args.rounds} rounds)")
    print("| item | ms | runs |\n|---|---|---|")
    for name, runs in results.items():
        print(f"| {name} | {statistics.median(runs):.2f} | {' '.join(f'{t:.2f}' for t in runs)} |")


if __name__ == "__main__":
    main()
