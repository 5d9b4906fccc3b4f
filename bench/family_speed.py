"""Per-family speed on the host beside its measured roofline: one process, interleaved rounds.

For each family (a preset, or a preset with its mixer swapped, cut to ``--layers`` layers so
every family has the same depth; gpt2-shaped families share gpt2's width) and each
implementation of ``--impls`` (``zoo.components.kernels``: ``reference`` is the pure-PyTorch
maths, ``auto`` the fastest that runs here), the table gives decode tokens/s, the bytes one
decode step moves (``decode_bytes_per_step`` at the decode midpoint), the bandwidth that
achieves, its fraction of the measured host bandwidth (``zoo hardware``), prefill tokens/s
and prefill as a multiple of gpt2's in the same implementation; ``decode vs gpt2`` is the
median over rounds of each round's decode tokens/s over gpt2's (same implementation, same
round), steadier than the tokens/s under a load that changes from round to round. Models run
in turns (every model once per round, ``--rounds`` rounds; a family's implementations back
to back) so that all see the same load on a shared machine; figures are medians over
rounds. Compare within one run only.

Run: python bench/family_speed.py [--prompt-len 128] [--decode 32] [--rounds 3] [--threads 2]
     [--layers 4] [--impls reference,auto] [--families gpt2,mamba-130m,...] [--dtype bfloat16]

``rwkv`` is the zoo-rwkv plugin (plugins/zoo-rwkv), staged from the source tree when it is
not installed. ``qwen3-0.6b`` runs at its own width (1024, a 151,936-row head);
``t5-small`` is an encoder-decoder cut to ``--layers`` on both sides: its prefill is the
encoder pass over the prompt plus the decoder's first token, its decode steps attend to the
encoded prompt (the cross-attention K/V, ``--prompt-len`` tokens, counted in the bytes).
``--dtype bfloat16`` builds the weights in bfloat16 and keeps the cache in the model's dtype
as a ``zoo bench`` run does: the recurrent states stay float32 (``state_dtype``'s default),
convolution windows and token-shift inputs are bfloat16.
"""

from __future__ import annotations

import argparse
import statistics
import time
from dataclasses import dataclass, field
from pathlib import Path

import torch

import zoo
from zoo.analysis.counts import decode_bytes_per_step
from zoo.analysis.devices import device_peaks
from zoo.analysis.host_probe import cpu_description, host_peaks
from zoo.components import row_product
from zoo.components.kernels import implementations, preferring
from zoo.model.cache import KVCache
from zoo.model.generation import decode_step, decoder_start, prefill
from zoo.specs.model import ModelSpec
from zoo.specs.registry import reset_registry
from zoo.specs.staging import stage_plugin

PLUGINS = {"rwkv": Path(__file__).resolve().parents[1] / "plugins" / "zoo-rwkv"}  # family -> plugin source

FAMILIES = {  # name -> (preset, overrides)
    "gpt2": ("gpt2", {}),
    "mamba-130m": ("mamba-130m", {}),
    "mamba2-130m": ("mamba2-130m", {}),
    "gated-deltanet": (
        "gpt2",
        {
            "attention.kind": "gated_deltanet",
            "attention.n_k_heads": 6,
            "attention.n_v_heads": 12,
            "attention.head_k_dim": 128,
            "attention.head_v_dim": 64,
        },
    ),
    "linear": ("gpt2", {"attention.kind": "linear"}),
    "infini": ("gpt2", {"attention.kind": "infini"}),
    "rwkv": ("rwkv-4-169m-pile", {}),
    "qwen3-0.6b": ("qwen3-0.6b", {}),
    "t5-small": ("t5-small", {}),
}


@dataclass
class Case:
    family: str
    impl: str
    spec: ModelSpec
    model: torch.nn.Module
    prefill: list[float] = field(default_factory=list)  # tokens/s per round
    decode: list[float] = field(default_factory=list)

    @property
    def seq2seq(self) -> bool:
        return self.spec.encoder is not None


def build(family: str, impl: str, layers: int, dtype: str = "float32") -> Case:
    preset, overrides = FAMILIES[family]
    spec = zoo.spec(preset)
    depth = {"n_layers": layers, **({"encoder.n_layers": layers} if spec.encoder is not None else {})}
    spec = spec.override({**overrides, **depth})
    with preferring(impl):
        model = zoo.build(spec, device="cpu", dtype=dtype, seed=0).eval()
    return Case(family, impl, spec, model)


def _prefill(case: Case, ids: torch.Tensor, steps: int) -> tuple[KVCache, torch.Tensor]:
    """A fresh cache and the prompt's last logits (1, V): for an encoder-decoder the encoder
    pass over ``ids`` and the decoder's start token."""
    if not case.seq2seq:
        cache = KVCache(case.model, batch_size=1, max_len=ids.shape[1] + steps)
        return cache, prefill(case.model, ids, cache)
    cache = KVCache(case.model, batch_size=1, max_len=1 + steps, memory_len=ids.shape[1])
    memory = case.model.encode(ids)  # (1, P, d)
    return cache, prefill(case.model, decoder_start(case.model, 1, ids.device), cache, memory=memory)


def one_round(case: Case, ids: torch.Tensor, steps: int) -> None:
    ids = ids % case.spec.vocab_size  # (1, P): t5-small's vocabulary is smaller than the others'
    start = time.perf_counter()
    cache, logits = _prefill(case, ids, steps)  # (1, V)
    case.prefill.append(ids.shape[1] / (time.perf_counter() - start))
    token = logits.argmax(-1, keepdim=True)  # (1, 1)
    start = time.perf_counter()
    for _ in range(steps):
        token = decode_step(case.model, token, cache).argmax(-1, keepdim=True)  # (1, 1)
    case.decode.append(steps / (time.perf_counter() - start))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--families", default=",".join(FAMILIES))
    parser.add_argument("--impls", default="reference,auto")
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--prompt-len", type=int, default=128)
    parser.add_argument("--decode", type=int, default=32)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--threads", type=int, default=torch.get_num_threads())
    parser.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"])
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    for family in args.families.split(","):
        if family in PLUGINS:
            stage_plugin(PLUGINS[family])
            reset_registry()
    cases = [build(f, i, args.layers, args.dtype) for i in args.impls.split(",") for f in args.families.split(",")]
    ids = torch.randint(0, 50000, (1, args.prompt_len), generator=torch.Generator().manual_seed(0))  # (1, P)
    faster = [getattr(torch, name) for name, wins in host_peaks().row_kernel_faster.items() if wins]
    with torch.inference_mode(), row_product.measured_faster(faster):  # as a `zoo bench` run on this host
        for case in cases:  # warm-up: kernels built, pages touched
            one_round(case, ids[:, :16], 2)
            case.prefill.clear(), case.decode.clear()
        for index in range(args.rounds):
            # a family's implementations back to back, their order flipped every round: the second of a
            # pair ran up to 20% faster whatever it was (gpt2 against itself), so neither always goes second
            for case in sorted(cases, key=lambda c: (c.family, cases.index(c) * (-1) ** index)):
                one_round(case, ids, args.decode)
    peaks = device_peaks("cpu", "")
    print(
        f"{cpu_description()}; torch {torch.__version__}; {args.threads} threads; roofline {peaks.source}: "
        f"{peaks.bandwidth / 1e9:.1f} GB/s"
    )
    print(
        f"{args.dtype}, batch 1, {args.layers} layers, prompt {args.prompt_len}, {args.decode} decode steps, "
        f"{args.rounds} interleaved rounds (medians)\n"
    )
    print(
        "| family | impl | decode tok/s | decode vs gpt2 | MB per step | achieved GB/s | of roofline "
        "| prefill tok/s | prefill vs gpt2 |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    gpt2 = {c.impl: c for c in cases if c.family == "gpt2"}
    for c in cases:
        decode, pre = statistics.median(c.decode), statistics.median(c.prefill)
        context, memory = (1, args.prompt_len) if c.seq2seq else (args.prompt_len, 0)
        nbytes = decode_bytes_per_step(c.spec, 1, context + args.decode // 2, args.dtype, memory_len=memory)
        achieved = decode * nbytes
        base = gpt2.get(c.impl)
        versus = f"{pre / statistics.median(base.prefill):.2f}x" if base else "-"
        ratios = [d / g for d, g in zip(c.decode, base.decode, strict=True)] if base else []
        decode_versus = f"{statistics.median(ratios):.2f}x" if ratios else "-"
        print(
            f"| {c.family} | {implementations(c.model) or c.spec.attention.kind + ': only impl'} | {decode:.1f} | "
            f"{decode_versus} | {nbytes / 1e6:.0f} "
            f"| {achieved / 1e9:.2f} | {achieved / peaks.bandwidth:.0%} | {pre:.0f} | {versus} |"
        )


if __name__ == "__main__":
    main()
