"""zoo against llama.cpp on the same GGUF: prefill and decode tokens/s, resident memory.

Each side runs in its own worker process per thread count (so each one's resident memory
is its own), all alive together; the parent asks each in turn for one generation and the
order rotates every round, so machine noise falls on both sides alike. A generation is a
``--prompt``-token prompt (seeded random ids, the same for both) then ``--new`` greedy
decode steps. Figures: median tokens/s over rounds and the median of the per-round ratios
zoo / llama.cpp (> 1: zoo is faster). Resident memory is the worker's RSS after the last
round minus its RSS before loading the model (the runtime: python, torch or libllama, and
what a first load imports or sets up: each side loads the model once, frees it, and takes
its baseline then); zoo's line also gives the bytes its packed weights hold. With the
compiled step, torch's compiler (dynamo, inductor and their first use, on a one-op function)
is runtime too, taken into the baseline as torch itself is, and shown in its own column;
what compiling this model's step holds (its graphs, guards and generated code) stays in
zoo's resident memory.

zoo loads the file packed (4-bit blocks as int4, 8-bit as int8, the rest in ``--dtype``)
and decodes with its compiled decode step, compiled as ``zoo bench --compile`` compiles it
(``compiling.compile_options``: on the CPU, inductor's C++ wrapper; ``--zoo-step eager`` for the eager one),
projections fused first as ``zoo bench`` does; the compile time is reported apart, not
timed. llama.cpp runs through llama-cpp-python, from ``--llama-python`` (an interpreter
with ``llama_cpp`` installed; it is no dependency of zoo).

    python bench/make_smollm_gguf.py /tmp/smollm2-135m-q4_1.gguf
    python bench/vs_llamacpp.py /tmp/smollm2-135m-q4_1.gguf --llama-python /work/llamacpp-venv/bin/python
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

SIDES = ("zoo", "llama.cpp")


def rss_bytes() -> int:
    """This process's resident set (Linux: /proc/self/statm)."""
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def settle() -> int:
    """RSS once freed objects are collected and glibc handed its free heap pages back."""
    import ctypes
    import gc

    gc.collect()
    ctypes.CDLL("libc.so.6").malloc_trim(0)
    return rss_bytes()


def prompt_ids(length: int, vocab: int, seed: int) -> list[int]:
    import random

    rng = random.Random(seed)
    return [rng.randrange(3, vocab) for _ in range(length)]  # 0..2: special tokens


class ZooSide:
    """zoo's packed model, its KV cache and decode step, in this (worker) process."""

    def __init__(self, args: argparse.Namespace) -> None:
        import torch

        import zoo
        from zoo.harness.phases.compiling import compile_options
        from zoo.model.cache import KVCache
        from zoo.model.generation import compile_decode_step, decode_step
        from zoo.quant import stored_bytes

        torch.set_num_threads(args.threads)
        zoo.from_pretrained(args.gguf, dtype=args.dtype, progress=False)  # loaded once and freed: the
        runtime = settle()  # modules the loader imports count as runtime
        if args.zoo_step == "compiled":  # and so does the compiler: its modules, first used on a one-op function
            torch.compile(lambda t: t + 1, dynamic=False)(torch.zeros(1))
            torch._dynamo.reset()
        self.torch, self.base = torch, settle()
        self.compiler = self.base - runtime
        self.model = zoo.from_pretrained(args.gguf, dtype=args.dtype, progress=False)
        self.loaded = rss_bytes()
        self.stored = stored_bytes(self.model)
        self.layout = self.model.weights_layout
        self.vocab = self.model.spec.vocab_size
        self.cache = KVCache(self.model, 1, args.prompt + args.new + 1, dtype=torch.bfloat16, device="cpu")
        zoo.fuse_projections(self.model)  # as `zoo bench` runs it: q|k|v and gate|up stacked first
        options, _ = compile_options(torch.device("cpu"))  # as `zoo bench --compile` compiles it
        self.step = compile_decode_step(**options) if args.zoo_step == "compiled" else decode_step
        start = time.perf_counter()
        self.generate(prompt_ids(args.prompt, self.vocab, args.seed), 2)  # compiles; first touch
        self.warmup_s = time.perf_counter() - start

    def generate(self, ids: list[int], new: int) -> tuple[float, float, list[int]]:
        """Seconds of the prefill, seconds of ``new`` decode steps, and the greedy tokens."""
        from zoo.harness.run import host_paths
        from zoo.model.generation import prefill
        from zoo.model.sampling import greedy

        torch = self.torch
        with torch.no_grad(), host_paths(torch.device("cpu"), self.model):  # the CPU paths a `zoo bench` run takes here
            self.cache.reset()
            start = time.perf_counter()
            token = greedy(prefill(self.model, torch.tensor([ids]), self.cache))[:, None]  # (1, 1)
            prefilled = time.perf_counter()
            tokens = [int(token)]
            for _ in range(new):
                token = greedy(self.step(self.model, token, self.cache))[:, None]  # (1, 1)
                tokens.append(int(token))
            return prefilled - start, time.perf_counter() - prefilled, tokens


class LlamaSide:
    """llama.cpp through llama-cpp-python, in this (worker) process."""

    def __init__(self, args: argparse.Namespace) -> None:
        import llama_cpp
        import numpy

        options = {
            "model_path": str(args.gguf),
            "n_ctx": args.prompt + args.new + 8,
            "n_batch": args.prompt,
            "n_ubatch": args.prompt,
            "n_threads": args.threads,
            "n_threads_batch": args.threads,
            "verbose": False,
        }
        if args.llama_no_repack:  # the weights in the file's layout: no extra buffer types (AMX, repacked blocks)
            defaults = llama_cpp.llama_cpp.llama_model_default_params

            def no_repack() -> Any:
                params = defaults()
                params.use_extra_bufts = False
                return params

            llama_cpp.llama_cpp.llama_model_default_params = no_repack  # what Llama() reads its defaults from
        llama_cpp.Llama(**options)  # loaded once and freed, as zoo's side does
        self.llama_cpp, self.numpy, self.base = llama_cpp, numpy, settle()
        self.model = llama_cpp.Llama(**options)
        self.loaded = rss_bytes()
        self.stored = Path(args.gguf).stat().st_size  # the file, mapped
        self.compiler = 0
        self.layout = "llama.cpp (mmap)"
        self.vocab = self.model.n_vocab()
        start = time.perf_counter()
        self.generate(prompt_ids(args.prompt, self.vocab, args.seed), 2)
        self.warmup_s = time.perf_counter() - start

    def generate(self, ids: list[int], new: int) -> tuple[float, float, list[int]]:
        llm = self.model
        llm.reset()
        start = time.perf_counter()
        llm.eval(ids)
        prefilled = time.perf_counter()
        tokens = [self.greedy()]
        for _ in range(new):
            llm.eval(tokens[-1:])
            tokens.append(self.greedy())
        return prefilled - start, time.perf_counter() - prefilled, tokens

    def greedy(self) -> int:
        """The argmax of the last token's logits (llama.cpp's own buffer: ``Llama.scores`` is
        filled only with ``logits_all``)."""
        logits = self.llama_cpp.llama_get_logits_ith(self.model.ctx, -1)
        return int(self.numpy.ctypeslib.as_array(logits, shape=(self.vocab,)).argmax())


def worker(args: argparse.Namespace) -> None:
    """Load one side, say so on stdout, then answer each line of stdin with one generation."""
    side = ZooSide(args) if args.worker == "zoo" else LlamaSide(args)
    ids = prompt_ids(args.prompt, side.vocab, args.seed)
    info = {"load_mb": (side.loaded - side.base) / 1e6, "stored_mb": side.stored / 1e6, "layout": side.layout}
    info["compiler_mb"] = side.compiler / 1e6
    print(json.dumps({**info, "warmup_s": side.warmup_s}), flush=True)
    for _ in sys.stdin:
        prefill_s, decode_s, tokens = side.generate(ids, args.new)
        result = {"prefill": args.prompt / prefill_s, "decode": args.new / decode_s, "tokens": tokens[:8]}
        print(json.dumps({**result, "resident_mb": (rss_bytes() - side.base) / 1e6}), flush=True)


def start_worker(args: argparse.Namespace, side: str, threads: int) -> tuple[subprocess.Popen[str], dict[str, Any]]:
    python = sys.executable if side == "zoo" else args.llama_python
    command = [python, __file__, str(args.gguf), "--worker", "zoo" if side == "zoo" else "llama"]
    command += ["--threads", str(threads), "--prompt", str(args.prompt), "--new", str(args.new)]
    command += ["--seed", str(args.seed), "--dtype", args.dtype, "--zoo-step", args.zoo_step]
    command += ["--llama-no-repack"] if args.llama_no_repack else []
    env = {**os.environ, "OMP_NUM_THREADS": str(threads)}
    process = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env)
    assert process.stdout is not None
    line = process.stdout.readline()
    if not line:
        raise SystemExit(f"the {side} worker ({threads} threads) failed to start: {' '.join(command)}")
    return process, json.loads(line)


def ask(process: subprocess.Popen[str]) -> dict[str, Any]:
    assert process.stdin is not None and process.stdout is not None
    process.stdin.write("run\n")
    process.stdin.flush()
    return json.loads(process.stdout.readline())


def measure(args: argparse.Namespace) -> dict[tuple[str, int], dict[str, Any]]:
    """Per (side, threads): the worker's start line and its rounds' results."""
    found: dict[tuple[str, int], dict[str, Any]] = {}
    workers = {}
    for threads in args.threads_list:
        for side in SIDES:  # one at a time: loading and compiling are not timed
            workers[side, threads], info = start_worker(args, side, threads)
            found[side, threads] = {**info, "runs": []}
    keys = list(workers)
    for r in range(args.rounds):
        for key in keys[r % len(keys) :] + keys[: r % len(keys)]:
            found[key]["runs"].append(ask(workers[key]))
    for process in workers.values():
        assert process.stdin is not None
        process.stdin.close()
        process.wait()
    return found


def ratio(found: dict[tuple[str, int], dict[str, Any]], threads: int, metric: str) -> float:
    zoo, llama = found["zoo", threads]["runs"], found["llama.cpp", threads]["runs"]
    return statistics.median(z[metric] / ll[metric] for z, ll in zip(zoo, llama))


def render(args: argparse.Namespace, found: dict[tuple[str, int], dict[str, Any]]) -> str:
    lines = [
        f"# zoo vs llama.cpp, {Path(args.gguf).name}, CPU, batch 1",
        "",
        f"{args.rounds} interleaved rounds; prompt {args.prompt} tokens, {args.new} greedy decode steps; "
        f"zoo: {args.dtype} activations, {args.zoo_step} decode step"
        + ("; llama.cpp without repacking (--llama-no-repack)." if args.llama_no_repack else "."),
        "",
        "| threads | side | prefill tok/s | decode tok/s | resident MB (load) | resident MB (after runs) "
        "| weights MB | compiler MB (in the baseline) | warm-up s | layout |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for (side, threads), data in found.items():
        runs = data["runs"]
        prefill = statistics.median(r["prefill"] for r in runs)
        decode = statistics.median(r["decode"] for r in runs)
        lines.append(
            f"| {threads} | {side} | {prefill:.1f} | {decode:.1f} | {data['load_mb']:.0f} | "
            f"{runs[-1]['resident_mb']:.0f} | {data['stored_mb']:.1f} | {data['compiler_mb']:.0f} | "
            f"{data['warmup_s']:.1f} | {data['layout']} |"
        )
    lines += [
        "",
        "| threads | prefill zoo/llama.cpp | decode zoo/llama.cpp | resident zoo/llama.cpp |",
        "|---|---|---|---|",
    ]
    for threads in args.threads_list:
        memory = (
            found["zoo", threads]["runs"][-1]["resident_mb"] / found["llama.cpp", threads]["runs"][-1]["resident_mb"]
        )
        lines.append(
            f"| {threads} | {ratio(found, threads, 'prefill'):.2f}x | {ratio(found, threads, 'decode'):.2f}x "
            f"| {memory:.2f}x |"
        )
    lines.append("")
    for (side, threads), data in found.items():  # same file, same prompt: a check that both run the same model
        lines.append(f"- first greedy tokens, {side}, {threads} threads: {data['runs'][-1]['tokens']}")
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("gguf", type=Path)
    parser.add_argument("--llama-python", default=sys.executable, help="a python with llama_cpp installed")
    parser.add_argument("--threads", default="1,2", help="thread counts, comma-separated")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--prompt", type=int, default=128)
    parser.add_argument("--new", type=int, default=128)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--dtype", default="bfloat16", help="zoo's activation / float weights dtype")
    parser.add_argument("--zoo-step", choices=("compiled", "eager"), default="compiled")
    parser.add_argument(
        "--llama-no-repack",
        action="store_true",
        help="llama.cpp without its extra buffer types (AMX, repacked blocks): on a 2-vCPU Sapphire Rapids VM its "
        "AMX path crashed in llama_decode (llama-cpp-python 0.3.36)",
    )
    parser.add_argument("--worker", choices=("zoo", "llama"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        args.threads = int(args.threads)
        worker(args)
        return
    args.threads_list = [int(t) for t in args.threads.split(",")]
    print(render(args, measure(args)))


if __name__ == "__main__":
    main()
