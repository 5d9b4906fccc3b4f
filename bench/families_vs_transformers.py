"""zoo against transformers on the same weights, one model of each family, in one process.

gpt2, mamba-130m and mamba2-130m (causal LMs: prefill, then greedy decode steps on each
library's own cache), bert-base-uncased (an encoder pass) and t5-small (the encoder pass plus
the decoder's start token, then decode steps over self and cross caches). Each model is built
by zoo at its real width and ``--layers`` deep with seed 0, written with
``zoo.save_pretrained`` and read back by ``zoo.from_pretrained`` (its projections then fused,
``zoo.fuse_projections``, as ``zoo bench`` runs a model) and by the transformers class its
config names, so both libraries run one checkpoint. Rounds alternate the libraries (the
order flips each round, so neither always runs on a warmer cache); tokens/s are medians over
rounds and the ratio is the median of the per-round ratios zoo / transformers, so machine
noise falls on both sides of a ratio alike. "same tokens": both libraries' greedy tokens
agree over the whole timed run (else how many agree before the first that does not: in
bfloat16 the two libraries round differently). "zoo impl": the mixer implementations zoo ran
(``--impl``, ``zoo.components.kernels``); transformers runs its own CPU path (for Mamba
without mamba-ssm, its reference state update).

A decode row also says how fast it could be: the read bandwidth is sampled just before and
just after each side's decode steps (``host_probe.stream_bytes_per_s``, as ``zoo bench``
samples around its phases; this host's memory can change speed within seconds), and "zoo of
roofline" is zoo's decode against the bytes one step moves (``decode_bytes_per_step``) at the
mean of its samples, "bound" the ratio zoo would reach decoding at the bandwidth sampled
around transformers' decode: a target ratio above it is one this host cannot give, whatever
zoo's kernels do.

    python bench/families_vs_transformers.py                    # 2 layers, 1 thread, 5 rounds
    python bench/families_vs_transformers.py --layers 4 --threads 2 --write
    python bench/families_vs_transformers.py --layers 0 --dtype bfloat16 --threads 2  # own depths
"""

from __future__ import annotations

import argparse
import os
import shlex
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import torch

import zoo
from zoo.analysis.counts import decode_bytes_per_step
from zoo.analysis.host_probe import SAMPLE_RUNS, probe_buffer, probe_bytes, stream_bytes_per_s
from zoo.components.kernels import implementations, preferring
from zoo.files.atomic import write_text_atomic
from zoo.harness.run import host_paths
from zoo.model.build import ZooModel
from zoo.model.cache import KVCache
from zoo.model.generation import decode_step, decoder_start, prefill

FAMILIES = {  # name -> (preset, kind)
    "gpt2": ("gpt2", "causal"),
    "mamba": ("mamba-130m", "causal"),
    "mamba2": ("mamba2-130m", "causal"),
    "bert": ("bert-base-uncased", "encoder"),
    "t5": ("t5-small", "seq2seq"),
}
RESULTS = Path(__file__).resolve().parents[1] / "results"  # --write: perf-families-vs-transformers-<dtype>.md

# a runner: prompt ids (B, T), decode steps, a bandwidth sample (B/s) taken just before and just after the decode
# steps -> (first-phase seconds, decode seconds, tokens (B, n) or None, the samples' mean; 0 with no decode)
Outcome = tuple[float, float, torch.Tensor | None, float]
Runner = Callable[[torch.Tensor, int, Callable[[], float]], Outcome]


@dataclass
class Sides:
    """Per-round seconds of each phase, for zoo and transformers."""

    seconds: dict[tuple[str, str], list[float]] = field(default_factory=dict)  # (side, phase) -> per round
    bandwidths: dict[str, list[float]] = field(default_factory=dict)  # side -> around each decode, B/s
    agreeing: int | None = None  # greedy tokens that agree before the first that does not; None: all agree

    def add(self, side: str, phase: str, value: float) -> None:
        self.seconds.setdefault((side, phase), []).append(value)


# ---- zoo ----------------------------------------------------------------------------------------
def zoo_runner(model: ZooModel, kind: str, batch: int, prompt: int, steps: int) -> Runner:
    if kind == "encoder":
        return lambda ids, n, sample: (_timed(lambda: model(ids)), 0.0, None, 0.0)
    memory_len = prompt if kind == "seq2seq" else 0
    cache = KVCache(model, batch, (1 if kind == "seq2seq" else prompt) + steps + 1, memory_len=memory_len)

    def run(ids: torch.Tensor, n: int, sample: Callable[[], float]) -> Outcome:
        cache.reset()
        start = time.perf_counter()
        if kind == "seq2seq":
            memory = model.encode(ids)  # (B, S, d)
            logits = prefill(model, decoder_start(model, ids.shape[0], ids.device), cache, memory=memory)
        else:
            logits = prefill(model, ids, cache)  # (B, vocab)
        token = logits.argmax(-1, keepdim=True)  # (B, 1)
        first, before = time.perf_counter() - start, sample()
        middle = time.perf_counter()
        tokens = [token]
        for _ in range(n):
            token = decode_step(model, token, cache).argmax(-1, keepdim=True)  # (B, 1)
            tokens.append(token)
        decode = time.perf_counter() - middle
        return first, decode, torch.cat(tokens, 1), (before + sample()) / 2

    return run


# ---- transformers -------------------------------------------------------------------------------
def hf_runner(model: torch.nn.Module, kind: str) -> Runner:
    """transformers' own forward and cache: the loop its ``generate`` runs, minus its bookkeeping."""
    if kind == "encoder":
        return lambda ids, n, sample: (_timed(lambda: model(input_ids=ids)), 0.0, None, 0.0)
    start_id = model.config.decoder_start_token_id if kind == "seq2seq" else None

    def run(ids: torch.Tensor, n: int, sample: Callable[[], float]) -> Outcome:
        start = time.perf_counter()
        if kind == "seq2seq":
            encoded = model.get_encoder()(input_ids=ids)
            first = torch.full((ids.shape[0], 1), start_id, dtype=torch.long)
            out = model(encoder_outputs=encoded, decoder_input_ids=first, use_cache=True)
        else:
            out = model(input_ids=ids, use_cache=True, logits_to_keep=1)
        token = out.logits[:, -1].argmax(-1, keepdim=True)  # (B, 1)
        first, before = time.perf_counter() - start, sample()
        middle = time.perf_counter()
        tokens = [token]
        for _ in range(n):
            if kind == "seq2seq":
                out = model(encoder_outputs=encoded, decoder_input_ids=token, cache=out.cache, use_cache=True)
            else:
                out = model(input_ids=token, cache=out.cache, use_cache=True)
            token = out.logits[:, -1].argmax(-1, keepdim=True)  # (B, 1)
            tokens.append(token)
        decode = time.perf_counter() - middle
        return first, decode, torch.cat(tokens, 1), (before + sample()) / 2

    return run


def _timed(call: Callable[[], object]) -> float:
    start = time.perf_counter()
    call()
    return time.perf_counter() - start


# ---- one family ---------------------------------------------------------------------------------
def checkpoint(family: str, layers: int, root: Path) -> Path:
    """Random weights at the family's real width, ``layers`` deep (its encoder too; 0: the
    preset's own depth), saved once."""
    preset, kind = FAMILIES[family]
    depth = {"n_layers": layers, **({"encoder.n_layers": layers} if kind == "seq2seq" else {})} if layers else {}
    model = zoo.build(zoo.spec(preset).override(depth), dtype="float32", seed=0)
    out = root / family
    zoo.save_pretrained(model, out)
    return out


def measure(family: str, folder: Path, args: argparse.Namespace) -> tuple[Sides, ZooModel]:
    import transformers

    kind = FAMILIES[family][1]
    with preferring(args.impl):
        ours = zoo.from_pretrained(str(folder), dtype=args.dtype, progress=False).eval()
    zoo.fuse_projections(ours)  # q|k|v and gate|up as one product each, as `zoo bench` runs them
    config = transformers.AutoConfig.from_pretrained(folder)
    dtype = getattr(torch, args.dtype)
    theirs = getattr(transformers, config.architectures[0]).from_pretrained(folder, dtype=dtype).eval()
    ids = torch.randint(1, ours.spec.vocab_size, (args.batch, args.prompt), generator=torch.Generator().manual_seed(0))
    runners = {"zoo": zoo_runner(ours, kind, args.batch, args.prompt, args.decode), "hf": hf_runner(theirs, kind)}
    sides, buffer = Sides(), probe_buffer(probe_bytes())  # (R, 4096) float32: the roofline's probe

    def sample() -> float:  # the read bandwidth now, as `zoo bench` samples around its phases
        return stream_bytes_per_s(buffer, SAMPLE_RUNS)

    with torch.inference_mode(), host_paths(torch.device("cpu"), ours):  # zoo's product paths as a run here takes them
        for run in runners.values():  # warm-up: allocator, kernels, the C++ extensions' first load
            run(ids, 2, lambda: 0.0)
        for round_index in range(args.rounds):
            order = ("zoo", "hf") if round_index % 2 == 0 else ("hf", "zoo")
            tokens = {}
            for side in order:
                first_s, decode_s, tokens[side], bandwidth = runners[side](ids, args.decode, sample)
                sides.add(side, "first", first_s)
                sides.add(side, "decode", decode_s)
                sides.bandwidths.setdefault(side, []).append(bandwidth)
            if tokens["zoo"] is not None:
                sides.agreeing = _agreeing(tokens["zoo"], tokens["hf"], sides.agreeing)
    return sides, ours


def _agreeing(ours: torch.Tensor, theirs: torch.Tensor, before: int | None) -> int | None:
    """Tokens (B, n) that agree before the first column that does not, the fewer of that and
    ``before``; None where every column agrees and ``before`` is None."""
    differ = (ours != theirs).any(0).nonzero()  # (k, 1): the columns where a sequence differs
    first = int(differ[0, 0]) if len(differ) else None
    return first if before is None else before if first is None else min(first, before)


# ---- the table ----------------------------------------------------------------------------------
PHASES = {  # kind -> [(phase, row label, tokens per timed phase)]
    "causal": [("first", "prefill", "prompt"), ("decode", "decode", "decode")],
    "encoder": [("first", "encoder pass", "prompt")],
    "seq2seq": [("first", "encode + start token", "prompt"), ("decode", "decode", "decode")],
}


def rows(family: str, sides: Sides, ours: ZooModel, args: argparse.Namespace) -> list[str]:
    kind = FAMILIES[family][1]
    impl = implementations(ours) or "-"
    same = "-" if kind == "encoder" else "yes" if sides.agreeing is None else f"first {sides.agreeing}"
    out = []
    for phase, label, count in PHASES[kind]:
        tokens = args.batch * (args.prompt if count == "prompt" else args.decode)
        zoo_s, hf_s = sides.seconds[("zoo", phase)], sides.seconds[("hf", phase)]
        ratio = statistics.median(h / z for z, h in zip(zoo_s, hf_s))
        fraction, bound = _against_roofline(ours, kind, sides, args) if phase == "decode" else ("-", "-")
        out.append(
            f"| {FAMILIES[family][0]} | {label} | {tokens / statistics.median(zoo_s):,.1f} | "
            f"{tokens / statistics.median(hf_s):,.1f} | {ratio:.2f}x | {fraction} | {bound} | {impl} | {same} |"
        )
    return out


def _against_roofline(ours: ZooModel, kind: str, sides: Sides, args: argparse.Namespace) -> tuple[str, str]:
    """Zoo's decode as a fraction of the read bandwidth sampled around it, and the ratio to
    transformers a step reading its bytes at the bandwidth sampled around theirs would give
    (medians over rounds)."""
    context, memory = (1, args.prompt) if kind == "seq2seq" else (args.prompt, 0)
    nbytes = decode_bytes_per_step(ours.spec, args.batch, context + args.decode // 2, args.dtype, memory_len=memory)
    zoo_s, hf_s = sides.seconds[("zoo", "decode")], sides.seconds[("hf", "decode")]

    def ideal(side: str) -> list[float]:  # seconds of each round's decode at the bandwidth sampled around it
        return [nbytes * args.decode / b for b in sides.bandwidths[side]]

    fraction = statistics.median(i / z for i, z in zip(ideal("zoo"), zoo_s, strict=True))
    bound = statistics.median(h / i for h, i in zip(hf_s, ideal("hf"), strict=True))
    return f"{fraction:.0%}", f"{bound:.2f}x"


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--families", default=",".join(FAMILIES), help=f"comma-separated, of {', '.join(FAMILIES)}")
    p.add_argument("--layers", type=int, default=2, help="layers of each model (real width; t5's encoder too); 0: own")
    p.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"], help="both libraries' weights")
    p.add_argument("--batch", type=int, default=1)
    p.add_argument("--prompt", type=int, default=128, help="prompt tokens (the encoder's input for bert and t5)")
    p.add_argument("--decode", type=int, default=32, help="decode steps timed per round")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--impl", default="auto", help="zoo's mixer implementations: auto, reference or a kernel")
    p.add_argument(
        "--write", action="store_true", help="write results/perf-families-vs-transformers-<dtype>.md, whole, atomically"
    )
    args = p.parse_args(argv)
    args.families = [f.strip() for f in args.families.split(",") if f.strip()]
    unknown = sorted(set(args.families) - set(FAMILIES))
    if unknown:
        p.error(f"--families: unknown {unknown}; allowed: {', '.join(FAMILIES)}")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    torch.set_num_threads(args.threads)
    command = "python " + shlex.join(["bench/families_vs_transformers.py", *(sys.argv[1:] if argv is None else argv)])
    lines = [
        "| model | phase | zoo tok/s | transformers tok/s | zoo / transformers | zoo of roofline | bound "
        "| zoo impl | same tokens |",
        "|---|---|---:|---:|---:|---:|---:|---|---|",
    ]
    with tempfile.TemporaryDirectory() as tmp:
        for family in args.families:
            folder = checkpoint(family, args.layers, Path(tmp))
            sides, ours = measure(family, folder, args)
            lines += rows(family, sides, ours, args)
            print(lines[-1] if FAMILIES[family][1] == "encoder" else "\n".join(lines[-2:]), flush=True)
    shape = f"{args.layers} layers at each model's real width" if args.layers else "each model at its own depth"
    header = (
        f"# zoo vs transformers, one model per family\n\n`{command}`  \n"
        f"{shape}, {args.dtype}, batch {args.batch}, prompt {args.prompt}, "
        f"{args.decode} decode steps, {args.threads} thread(s), {args.rounds} interleaved rounds; "
        f"torch {torch.__version__}.\n\n"
    )
    text = header + "\n".join(lines) + "\n"
    print("\n" + text)
    if args.write:
        write_text_atomic(RESULTS / f"perf-families-vs-transformers-{args.dtype}.md", text)
    return 0


if __name__ == "__main__":
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    sys.exit(main())
