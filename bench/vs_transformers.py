"""zoo against transformers on the same weights: prefill and decode tokens/s, and the roofline.

Random weights are built by zoo, written with ``zoo.save_pretrained`` and read back by both
``zoo.from_pretrained`` and transformers' ``AutoModelForCausalLM.from_pretrained``, so both
run the same checkpoint. Each measured case alternates zoo and transformers runs (the order
flips every round, so neither always runs on a warmer cache) and reports medians and the
ratio zoo / transformers taken in the same rounds. Decode is also set against the machine's
memory-bandwidth roofline: bytes read per token (``zoo.analysis.counts.decode_bytes_per_step``:
weights plus KV cache at the midpoint context) over the bandwidth of a large matrix-vector
product timed the same way.

    python bench/vs_transformers.py                      # default: 4 cases, ~4 minutes on the idle 2 cores here,
                                                         # 7 under load
    python bench/vs_transformers.py --write-results      # the same, and regenerate results/perf-vs-transformers.md
    python bench/vs_transformers.py --full               # dtypes x batch 1, 8 x prompt 128, 512
    python bench/vs_transformers.py --profile qwen3      # where decode time goes, both libraries

Both sides run eager under ``torch.inference_mode`` with the same thread count; transformers
uses its own forward with a DynamicCache (``--hf-cache static`` for its StaticCache) and
``logits_to_keep=1`` at prefill, as its ``generate`` does. ``--compile`` compiles both decode
steps (CUDA graphs via ``mode="reduce-overhead"`` on CUDA).
"""

from __future__ import annotations

import argparse
import os
import shlex
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from perf_report import write_markdown

import zoo
from zoo.analysis.counts import decode_bytes_per_step
from zoo.analysis.devices import device_peaks
from zoo.model.cache import KVCache
from zoo.model.generation import compile_decode_step, decode_step, prefill

FAMILIES = {"qwen3": "qwen3-0.6b", "llama": "llama-3.2-1b"}  # real widths; layers cut by --layers
RESULTS = Path(__file__).resolve().parents[1] / "results" / "perf-vs-transformers.md"


@dataclass(frozen=True)
class Case:
    family: str
    dtype: str
    batch: int
    prompt: int
    decode: int
    threads: int


@dataclass
class Timing:
    prefill_s: list[float] = field(default_factory=list)
    decode_s: list[float] = field(default_factory=list)


@dataclass
class Result:
    case: Case
    zoo: Timing
    hf: Timing
    bytes_per_token: int
    bandwidth: float  # bytes/s
    first_tokens_agree: bool

    def rate(self, side: Timing, phase: str) -> float:
        """Median tokens/s of one side's phase."""
        c = self.case
        tokens = c.batch * (c.prompt if phase == "prefill" else c.decode)
        return tokens / statistics.median(getattr(side, f"{phase}_s"))

    def ratio(self, phase: str) -> float:
        """Median over rounds of the per-round ratio zoo / transformers (paired, same round)."""
        pairs = zip(getattr(self.zoo, f"{phase}_s"), getattr(self.hf, f"{phase}_s"))
        return statistics.median(hf / z for z, hf in pairs)

    @property
    def roofline_tokens_per_s(self) -> float:
        return self.case.batch * self.bandwidth / self.bytes_per_token


# ---- the two sides ------------------------------------------------------------------------------
Runner = Callable[[torch.Tensor, int], tuple[float, float, torch.Tensor]]


def zoo_runner(model: torch.nn.Module, batch: int, max_len: int, compiled: bool) -> Runner:
    """Prefill then greedy decode steps on one preallocated cache, reset between runs."""
    cache = KVCache(model, batch, max_len)
    step = compile_decode_step(mode="reduce-overhead" if _on_cuda(model) else "default") if compiled else decode_step

    def run(ids: torch.Tensor, n_decode: int) -> tuple[float, float, torch.Tensor]:
        cache.reset()
        start = _now(ids)
        token = prefill(model, ids, cache).argmax(-1, keepdim=True)  # (B, 1)
        first = token
        middle = _now(ids)
        for _ in range(n_decode):
            token = step(model, token, cache).argmax(-1, keepdim=True)  # (B, 1)
        end = _now(ids)
        return middle - start, end - middle, first

    return run


def hf_runner(model: torch.nn.Module, batch: int, max_len: int, cache_kind: str, compiled: bool) -> Runner:
    """transformers' own forward and cache, the loop its ``generate`` runs minus its bookkeeping.

    Compiled, it always uses its ``StaticCache`` (transformers' own recipe for torch.compile):
    a ``DynamicCache`` grows by new allocations, which under CUDA graphs are graph outputs
    overwritten by the next replay."""
    from transformers import DynamicCache, StaticCache

    forward = torch.compile(model.forward, mode="reduce-overhead", fullgraph=True) if compiled else model.forward
    cache_kind = "static" if compiled else cache_kind
    static = StaticCache(config=model.config, max_cache_len=max_len) if cache_kind == "static" else None

    def run(ids: torch.Tensor, n_decode: int) -> tuple[float, float, torch.Tensor]:
        if static is not None:
            static.reset()
        cache = static if static is not None else DynamicCache(config=model.config)
        start = _now(ids)
        T = ids.shape[1]
        out = model(
            input_ids=ids,
            past_key_values=cache,
            use_cache=True,
            logits_to_keep=1,
            cache_position=torch.arange(T, device=ids.device),
        )
        token = out.logits[:, -1].argmax(-1, keepdim=True)  # (B, 1)
        first = token
        middle = _now(ids)
        for i in range(n_decode):
            position = torch.tensor([T + i], device=ids.device)
            if compiled:
                torch.compiler.cudagraph_mark_step_begin()  # the previous step's outputs were read
            out = forward(input_ids=token, past_key_values=cache, use_cache=True, cache_position=position)
            token = out.logits[:, -1].argmax(-1, keepdim=True)  # (B, 1)
        end = _now(ids)
        return middle - start, end - middle, first

    return run


def _on_cuda(model: torch.nn.Module) -> bool:
    return next(model.parameters()).device.type == "cuda"


def _now(ids: torch.Tensor) -> float:
    if ids.device.type == "cuda":
        torch.cuda.synchronize()
    return time.perf_counter()


# ---- checkpoints and cases ----------------------------------------------------------------------
def make_checkpoint(family: str, layers: int, root: Path) -> Path:
    """Random weights at the family's real width, ``layers`` deep, saved for both libraries."""
    spec = zoo.spec(FAMILIES[family]).override({"n_layers": layers})
    model = zoo.build(spec, dtype="float32", seed=0)
    out = root / family
    zoo.save_pretrained(model, out)
    del model
    return out


def measure(case: Case, checkpoint: Path, args: argparse.Namespace, bandwidth: float) -> Result:
    from transformers import AutoModelForCausalLM

    torch.set_num_threads(case.threads)
    device = torch.device(args.device)
    ours = zoo.from_pretrained(str(checkpoint), dtype=case.dtype, device=device).eval()
    theirs = AutoModelForCausalLM.from_pretrained(checkpoint, dtype=getattr(torch, case.dtype)).to(device).eval()
    max_len = case.prompt + case.decode + 1
    runners = {
        "zoo": zoo_runner(ours, case.batch, max_len, args.compile),
        "hf": hf_runner(theirs, case.batch, max_len, args.hf_cache, args.compile),
    }
    generator = torch.Generator().manual_seed(0)
    ids = torch.randint(0, ours.spec.vocab_size, (case.batch, case.prompt), generator=generator).to(device)
    timings = {"zoo": Timing(), "hf": Timing()}
    firsts = {}
    with torch.inference_mode() if not args.compile else torch.no_grad():
        for name, run in runners.items():  # warm-up: allocator, kernels, compilation
            firsts[name] = run(ids, min(case.decode, 4))[2]
        for round_index in range(args.repeats):
            order = ("zoo", "hf") if round_index % 2 == 0 else ("hf", "zoo")
            for name in order:
                prefill_s, decode_s, _ = runners[name](ids, case.decode)
                timings[name].prefill_s.append(prefill_s)
                timings[name].decode_s.append(decode_s)
    context = case.prompt + case.decode // 2
    bytes_per_token = decode_bytes_per_step(ours.spec, case.batch, context, case.dtype)
    agree = bool(torch.equal(firsts["zoo"].cpu(), firsts["hf"].cpu()))
    del ours, theirs, runners
    return Result(case, timings["zoo"], timings["hf"], bytes_per_token, bandwidth, agree)


def cases(args: argparse.Namespace) -> list[Case]:
    return [
        Case(family, dtype, batch, prompt, args.decode, threads)
        for threads in args.threads
        for family in args.families
        for dtype in args.dtypes
        for batch in args.batch
        for prompt in args.prompt
    ]


def _ints(text: str) -> list[int]:
    return [int(v) for v in text.split(",")]


def _names(text: str) -> list[str]:
    return [v.strip() for v in text.split(",") if v.strip()]


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--families", type=_names, default=list(FAMILIES), help="qwen3,llama")
    p.add_argument("--layers", type=int, default=2, help="layers of each model (real width, fewer layers)")
    p.add_argument("--dtypes", type=_names, default=["float32", "bfloat16"])
    p.add_argument("--batch", type=_ints, default=[1])
    p.add_argument("--prompt", type=_ints, default=[128])
    p.add_argument("--decode", type=int, default=64, help="decode steps timed per run")
    p.add_argument(
        "--threads", type=_ints, default=[1], help="torch threads, e.g. 1,2 (1: steadiest on a shared machine)"
    )
    p.add_argument("--repeats", type=int, default=5, help="timed rounds per case (medians)")
    p.add_argument("--hf-cache", choices=("dynamic", "static"), default="dynamic")
    p.add_argument("--compile", action="store_true", help="compile both decode steps (CUDA graphs on CUDA)")
    p.add_argument("--device", default="cpu")
    p.add_argument("--full", action="store_true", help="the full grid: batch 1,8 x prompt 128,512, threads 1,2")
    p.add_argument("--profile", metavar="FAMILY", help="profile decode of both libraries and print the top ops")
    p.add_argument(
        "--out",
        type=Path,
        default=None,
        help="Markdown results, written whole (default: a file in the temporary folder, named at the end)",
    )
    p.add_argument(
        "--write-results",
        action="store_true",
        help=f"write the tracked {RESULTS.relative_to(RESULTS.parents[1])} instead",
    )
    p.add_argument("--no-write", action="store_true", help="print only")
    args = p.parse_args(argv)
    if args.out is None:
        args.out = RESULTS if args.write_results else Path(tempfile.gettempdir()) / "zoo-perf-vs-transformers.md"
    if args.full:
        args.batch, args.prompt, args.threads = [1, 8], [128, 512], [1, 2]
    unknown = [f for f in args.families if f not in FAMILIES]
    if unknown:
        p.error(f"--families: unknown {unknown}; allowed: {', '.join(FAMILIES)}")
    if args.repeats < 5:
        print("note: fewer than 5 repeats; medians are fragile", file=sys.stderr)
    return args


def main(argv: Sequence[str] | None = None) -> int:
    from rich.console import Console
    from rich.progress import Progress

    args = parse_args(argv)
    console = Console()
    command = "python " + " ".join(
        shlex.quote(a) for a in (sys.argv if argv is None else ["bench/vs_transformers.py", *argv])
    )
    if args.profile:
        from perf_profile import profile_decode

        with tempfile.TemporaryDirectory() as tmp:
            checkpoint = make_checkpoint(args.profile, args.layers, Path(tmp))
            profile_decode(checkpoint, args, console)
        return 0
    all_cases = cases(args)
    results: list[Result] = []
    bandwidths: dict[int, float] = {}
    with tempfile.TemporaryDirectory() as tmp, Progress(console=console) as progress:
        task = progress.add_task("cases", total=len(all_cases))
        checkpoints = {f: make_checkpoint(f, args.layers, Path(tmp)) for f in args.families}
        for case in all_cases:
            if case.threads not in bandwidths:
                torch.set_num_threads(case.threads)
                bandwidths[case.threads] = roofline_bandwidth(args.device)
            progress.update(
                task, description=f"{case.family} {case.dtype} b{case.batch} p{case.prompt} t{case.threads}"
            )
            results.append(measure(case, checkpoints[case.family], args, bandwidths[case.threads]))
            progress.advance(task)
    text = write_markdown(results, args, command, bandwidths, None if args.no_write else args.out)
    print(text)
    if not args.no_write:
        print(
            f"written to {args.out}" + ("" if args.write_results else " (--write-results updates the tracked file)"),
            file=sys.stderr,
        )
    return 0


def roofline_bandwidth(device: str) -> float:
    """Bytes/s of the device's roofline, as a `zoo bench` row's fractions divide by."""
    on = torch.device(device)
    peaks = device_peaks(on, torch.cuda.get_device_name(on) if on.type == "cuda" else "")
    if peaks is None:
        raise SystemExit(f"no roofline for {device}: not a CPU nor a CUDA board of zoo.analysis.devices.GPUS")
    return peaks.bandwidth


if __name__ == "__main__":
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    sys.exit(main())
