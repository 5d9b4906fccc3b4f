"""The harness's decode tokens/s against an independent greedy loop timed with perf_counter.

Both run in this process with interleaved rounds (order alternating, one thread), so drifts
in a shared machine's load cancel in the paired ratios; the median ratio is printed and kept
in the benchmark's ``extra_info`` (it was within 0.9-1.1 on a quiet machine). A timing, so a
benchmark and not a test: `pytest bench/test_decode_agreement.py --benchmark-only -s`.
"""

from __future__ import annotations

import statistics
import time

import torch

import zoo
from zoo.harness.run import bench
from zoo.model.cache import KVCache
from zoo.model.generation import decode_step, prefill

ROUNDS = 15
PROMPT, STEPS = 32, 32


def _spec() -> zoo.ModelSpec:
    return zoo.spec("llama-3.2-1b").override(
        {
            "d_model": 256,
            "n_layers": 4,
            "vocab_size": 2048,
            "ffn.hidden": 768,
            "max_seq_len": 256,
            "attention.n_heads": 4,
            "attention.n_kv_heads": 2,
            "attention.head_dim": 16,
        }
    )


def _independent_decode_rate(spec: zoo.ModelSpec) -> float:
    """The same greedy decode loop, timed here with perf_counter, nothing of the harness."""
    model = zoo.build(spec, device="cpu", dtype="float32", seed=0).eval()
    cache = KVCache(model, 1, PROMPT + STEPS + 1)
    prompt = torch.randint(spec.vocab_size, (1, PROMPT))  # (1, T)
    token = prefill(model, prompt, cache).argmax(-1, keepdim=True)  # (1, 1)
    for _ in range(3):  # warm-up, as the harness does
        token = decode_step(model, token, cache).argmax(-1, keepdim=True)
    cache.reset()
    token = prefill(model, prompt, cache).argmax(-1, keepdim=True)
    start = time.perf_counter()
    for _ in range(STEPS):
        token = decode_step(model, token, cache).argmax(-1, keepdim=True)
    return STEPS / (time.perf_counter() - start)


def _paired_ratios(spec: zoo.ModelSpec) -> list[float]:
    def harness() -> float:
        return bench(spec, device="cpu", prompt_len=PROMPT, gen_len=STEPS + 1, repeats=1, threads=1).decode_tokens_per_s

    ratios = []
    for i in range(ROUNDS):
        if i % 2:
            independent, measured = _independent_decode_rate(spec), harness()
        else:
            measured, independent = harness(), _independent_decode_rate(spec)
        ratios.append(measured / independent)
    return ratios


def test_harness_decode_rate_against_an_independent_loop(benchmark):
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # one thread: least exposed to other processes on a shared machine
    try:
        ratios = benchmark.pedantic(_paired_ratios, args=(_spec(),), rounds=1, iterations=1)
    finally:
        torch.set_num_threads(threads)
    benchmark.extra_info["median_ratio"] = statistics.median(ratios)
    print(f"harness / independent decode tokens/s: median {statistics.median(ratios):.3f} over {ROUNDS} pairs")
