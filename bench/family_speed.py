"""Per-family speed on the host beside its measured roofline: one process, interleaved rounds.

For each family (a preset, or a preset with its mixer swapped, cut to ``--layers`` layers so
every family has the same depth, or at its own depth with ``--layers 0``, as ``zoo bench`` runs
it; gpt2-shaped families share gpt2's width), each dtype of
``--dtypes``, each implementation of ``--impls`` (``zoo.components.kernels``: ``reference`` is
the pure-PyTorch maths, ``auto`` the fastest that runs here) and each step of ``--steps``
(projections fused either way, as ``zoo bench`` runs them; ``eager``; ``compiled``: what
``zoo bench --compile`` times, ``zoo.harness.phases.compiling``: prefill and decode step
compiled whole), the table gives decode tokens/s,
the bytes one decode step moves (``decode_bytes_per_step`` at the decode midpoint), the
bandwidth that achieves, its fraction of the host's read bandwidth sampled just before and just
after that decode (``host_probe.stream_bytes_per_s``, as a ``zoo bench`` run samples around each
timed phase: the faster of a sum and zoo's row kernel over one buffer; ``of sampled roofline``:
the median over rounds of each decode's figure against the mean of its two samples; on this
project's shared 2-core VMs the probe read 28 to 42 GB/s in three runs a minute apart, and 30
to 59 GB/s within one run on a Zen 4 one, where a sample taken once a round stood for up to
ten seconds of other models' decodes: only a probe taken under the decode's own load makes a
fraction that means something) and of the cached
probe (``zoo hardware``), prefill tokens/s, and two medians over rounds of per-round ratios (steadier than tokens/s
under a load that changes from round to round): ``vs gpt2``, decode tokens/s over gpt2's (same
dtype, implementation and step), and ``vs first``, over the same family's first variant in
the same dtype (its first implementation and step: compiled against eager, auto against
reference). Models run in turns
(every model once per round, ``--rounds`` rounds; a family's variants back to back, their
order flipped every round) so that all see the same load on a shared machine; figures are
medians over rounds. Compare within one run only.

Run: python bench/family_speed.py [--prompt-len 128] [--decode 32] [--rounds 3] [--threads 2]
     [--layers 4] [--impls reference,auto] [--dtypes float32,bfloat16] [--steps eager,compiled]
     [--families gpt2,mamba-130m,...]

``gated-deltanet`` is gpt2 with every layer's attention a Gated DeltaNet, ``gdn-hybrid`` three
of every four (Qwen3-Next's pattern; layers 3, 7 and 11 keep gpt2's attention).
``rwkv`` is the zoo-rwkv plugin (plugins/zoo-rwkv), staged from the source tree when it is
not installed. ``qwen3-0.6b`` runs at its own width (1024, a 151,936-row head);
``t5-small`` is an encoder-decoder cut to ``--layers`` on both sides: its prefill is the
encoder pass over the prompt plus the decoder's first token, its decode steps attend to the
encoded prompt (the cross-attention K/V, ``--prompt-len`` tokens, counted in the bytes).
``--dtypes bfloat16`` builds the weights in bfloat16 and keeps the cache in the model's dtype
as a ``zoo bench`` run does: the recurrent states stay float32 (``state_dtype``'s default),
convolution windows and token-shift inputs are bfloat16. ``--weights float,int8,int4`` adds each
model with its linear layers quantized (``zoo.quant.quantize``, after its projections are fused,
as ``zoo bench --weights-dtype`` runs it; activations in the model's dtype), its bytes per step
those of the quantized weights.
"""

from __future__ import annotations

import argparse
import functools
import statistics
import time
from dataclasses import dataclass, field
from pathlib import Path

import torch

import zoo
from zoo.analysis.counts import decode_bytes_per_step
from zoo.analysis.devices import device_peaks
from zoo.analysis.host_machine import cpu_description
from zoo.analysis.host_probe import SAMPLE_RUNS, probe_buffer, probe_bytes, stream_bytes_per_s
from zoo.components.kernels import implementations, preferring
from zoo.files.host_memory import rehome
from zoo.harness.phases.compiling import RunSteps, run_steps
from zoo.harness.run import host_paths
from zoo.model.cache import KVCache
from zoo.model.generation import decode_step, decoder_start, prefill
from zoo.model.sampling import greedy
from zoo.specs.model import ModelSpec
from zoo.specs.registry import reset_registry
from zoo.specs.staging import stage_plugin

PLUGINS = {"rwkv": Path(__file__).resolve().parents[1] / "plugins" / "zoo-rwkv"}  # family -> plugin source

GDN = {"kind": "gated_deltanet", "n_k_heads": 6, "n_v_heads": 12, "head_k_dim": 128, "head_v_dim": 64}  # gpt2's width
FAMILIES = {  # name -> (preset, overrides)
    "gpt2": ("gpt2", {}),
    "mamba-130m": ("mamba-130m", {}),
    "mamba2-130m": ("mamba2-130m", {}),
    "gated-deltanet": ("gpt2", {f"attention.{key}": value for key, value in GDN.items()}),
    "gdn-hybrid": ("gpt2", {"layers": {"0::4,1::4,2::4": {"attention": GDN}}}),  # Qwen3-Next's 3 : 1 pattern
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
    dtype: str = "float32"
    step: str = "eager"
    run: RunSteps = field(default_factory=lambda: RunSteps(prefill, decode_step))
    weights: str = "float"  # float (the model's dtype), int8 or int4
    prefill: list[float] = field(default_factory=list)  # tokens/s per round
    decode: list[float] = field(default_factory=list)
    bandwidth: list[float] = field(default_factory=list)  # bytes/s per round, read just before and after its decode

    @property
    def seq2seq(self) -> bool:
        return self.spec.encoder is not None


def build(
    family: str, impl: str, layers: int, dtype: str = "float32", step: str = "eager", weights: str = "float"
) -> Case:
    """``family``'s model as ``zoo bench`` runs it: projections fused, then its linear layers
    quantized where ``weights`` is int8 or int4."""
    preset, overrides = FAMILIES[family]
    spec = zoo.spec(preset)
    depth = {"n_layers": layers, **({"encoder.n_layers": layers} if spec.encoder is not None else {})} if layers else {}
    spec = spec.override({**overrides, **depth})
    with preferring(impl):
        model = zoo.build(spec, device="cpu", dtype=dtype, seed=0).eval()
    run = run_steps(model, torch.device("cpu"), compiled=step == "compiled")  # projections fused
    zoo.quant.quantize(model, None if weights == "float" else weights)  # the fused layers too, as a run quantizes
    return Case(family, impl, spec, model, dtype, step, run, weights)


def _prefill(case: Case, ids: torch.Tensor, max_len: int) -> tuple[KVCache, torch.Tensor]:
    """A fresh cache and the prompt's last logits (1, V): for an encoder-decoder the encoder
    pass over ``ids`` and the decoder's start token."""
    if not case.seq2seq:
        cache = KVCache(case.model, batch_size=1, max_len=max_len)
        return cache, case.run.prefill(case.model, ids, cache)
    cache = KVCache(case.model, batch_size=1, max_len=1 + max_len - ids.shape[1], memory_len=ids.shape[1])
    memory = case.model.encode(ids)  # (1, P, d)
    return cache, case.run.prefill(case.model, decoder_start(case.model, 1, ids.device), cache, memory=memory)


def stage_plugins(families: list[str]) -> None:
    """Those of ``families`` that are plugins (``PLUGINS``), staged from the source tree and registered."""
    for family in families:
        if family in PLUGINS:
            stage_plugin(PLUGINS[family])
            reset_registry()


def one_round(case: Case, ids: torch.Tensor, steps: int, max_len: int, probe: torch.Tensor | None = None) -> None:
    """A prefill and ``steps`` greedy decode steps on a fresh cache of ``max_len`` slots (one
    size for every round: a compiled step is specialised to the cache's shape); with ``probe``
    (the roofline's buffer), the read bandwidth sampled just before and just after the decode
    steps, their mean the round's roofline for this case, as ``zoo bench`` samples around each
    timed phase (``zoo.harness.run``)."""
    ids = ids % case.spec.vocab_size  # (1, P): t5-small's vocabulary is smaller than the others'
    # the products' paths as a `zoo bench` run of this model here takes them; compiled and settled: the warm
    # graphs run without their guards, as in `zoo bench`
    with host_paths(torch.device("cpu"), case.model), case.run.steady():
        start = time.perf_counter()
        cache, logits = _prefill(case, ids, max_len)  # (1, V)
        case.prefill.append(ids.shape[1] / (time.perf_counter() - start))
        token = greedy(logits)[:, None]  # (1, 1): as `zoo bench` picks (max, not argmax, of half precision)
        before = 0.0 if probe is None else stream_bytes_per_s(probe, SAMPLE_RUNS)
        start = time.perf_counter()
        for _ in range(steps):
            token = greedy(case.run.decode(case.model, token, cache))[:, None]  # (1, 1)
        case.decode.append(steps / (time.perf_counter() - start))
        if probe is not None:
            case.bandwidth.append((before + stream_bytes_per_s(probe, SAMPLE_RUNS)) / 2)


def _median_ratio(mine: list[float], base: list[float]) -> str:
    return f"{statistics.median(a / b for a, b in zip(mine, base, strict=True)):.2f}x"


def _table(cases: list[Case], args: argparse.Namespace) -> None:
    peaks = device_peaks("cpu", "")
    sampled = [b for c in cases for b in c.bandwidth]
    print(
        f"{cpu_description()}; torch {torch.__version__}; {args.threads} threads; roofline {peaks.source}: "
        f"{peaks.bandwidth / 1e9:.1f} GB/s; read bandwidth sampled around each decode (its roofline): "
        f"{min(sampled) / 1e9:.1f} to {max(sampled) / 1e9:.1f} GB/s"
    )
    print(
        f"batch 1, {f'{args.layers} layers' if args.layers else 'each preset at its own depth'}, "
        f"prompt {args.prompt_len}, {args.decode} decode steps, "
        f"{args.rounds} interleaved rounds (medians)\n"
    )
    print(
        "| family | layers | dtype | weights | step | impl | decode tok/s | vs gpt2 | vs first | MB per step "
        "| achieved GB/s | of sampled roofline | of cached roofline | prefill tok/s |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for c in cases:
        decode = statistics.median(c.decode)
        context, memory = (1, args.prompt_len) if c.seq2seq else (args.prompt_len, 0)
        weights = None if c.weights == "float" else c.weights
        nbytes = decode_bytes_per_step(c.spec, 1, context + args.decode // 2, c.dtype, weights, memory_len=memory)
        achieved = decode * nbytes
        fraction = statistics.median(d * nbytes / b for d, b in zip(c.decode, c.bandwidth, strict=True))
        gpt2 = next(
            (o for o in cases if (o.family, o.dtype, o.weights, o.impl, o.step) == ("gpt2", *_variant(c))), None
        )
        first = next(o for o in cases if (o.family, o.dtype, o.weights) == (c.family, c.dtype, c.weights))
        impl = implementations(c.model) or f"{c.spec.attention.kind}: only impl"
        print(
            f"| {c.family} | {c.spec.n_layers} | {c.dtype} | {c.weights} | {c.step} | {impl} | {decode:.1f} "
            f"| {_median_ratio(c.decode, gpt2.decode) if gpt2 else '-'} | {_median_ratio(c.decode, first.decode)} "
            f"| {nbytes / 1e6:.0f} | {achieved / 1e9:.2f} | {fraction:.0%} | {achieved / peaks.bandwidth:.0%} "
            f"| {statistics.median(c.prefill):.0f} |"
        )


def _variant(c: Case) -> tuple[str, str, str, str]:
    return c.dtype, c.weights, c.impl, c.step


def eager_cases(description: str, families: str, rounds: int) -> tuple[argparse.Namespace, list[Case]]:
    """The eager-step benches' command line (``--families``, ``--dtype``, ``--layers``,
    ``--prompt-len``, ``--decode``, ``--rounds``, ``--threads``, ``--weights-dtype``; the threads set) and each
    family's model, built as this script builds them, weights re-homed after all are built."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--families", default=families)
    parser.add_argument("--dtype", default="bfloat16")
    parser.add_argument("--layers", type=int, default=0, help="0: each preset at its own depth")
    parser.add_argument("--prompt-len", type=int, default=128)
    parser.add_argument("--decode", type=int, default=32)
    parser.add_argument("--rounds", type=int, default=rounds)
    parser.add_argument("--threads", type=int, default=torch.get_num_threads())
    parser.add_argument("--weights-dtype", default="float", help="int8 or int4: weights quantized, --dtype activations")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    names = args.families.split(",")
    stage_plugins(names)
    cases = [build(family, "auto", args.layers, args.dtype, "eager", args.weights_dtype) for family in names]
    for case in cases:  # as main does (its note there)
        rehome(case.model)
    return args, cases


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--families", default=",".join(FAMILIES))
    parser.add_argument("--impls", default="reference,auto")
    parser.add_argument("--dtypes", default="float32")
    parser.add_argument("--steps", default="eager", help="eager, compiled or both: eager,compiled")
    parser.add_argument("--weights", default="float", help="float (the dtype's), int8, int4, or several: float,int4")
    parser.add_argument("--layers", type=int, default=4, help="0: each preset at its own depth")
    parser.add_argument("--prompt-len", type=int, default=128)
    parser.add_argument("--decode", type=int, default=32)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--threads", type=int, default=torch.get_num_threads())
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    families = args.families.split(",")
    stage_plugins(families)
    variants = [
        (d, i, s, w)
        for d in args.dtypes.split(",")
        for w in args.weights.split(",")
        for i in args.impls.split(",")
        for s in args.steps.split(",")
    ]
    cases = [build(f, i, args.layers, d, s, w) for f in families for d, i, s, w in variants]
    # every model's weights copied after all are built (zoo.files.host_memory.rehome): the first
    # model a process built streamed its weights 15-23% slower than a second, identical one, so
    # the first of --families paid it (gpt2 66% with `gpt2,linear`, 77% with `linear,gpt2`)
    for case in cases:
        rehome(case.model)
    ids = torch.randint(0, 50000, (1, args.prompt_len), generator=torch.Generator().manual_seed(0))  # (1, P)
    max_len = args.prompt_len + args.decode
    buffer = probe_buffer(probe_bytes())  # (R, 4096) float32: the roofline probe, read around each decode
    # no_grad, not inference_mode: a compiled step that writes the cache in place cannot be traced under it
    with torch.no_grad():
        for case in cases:  # warm-up: kernels built, graphs compiled (for the full prompt), pages touched
            one_round(case, ids, 3, max_len)
            case.run.settle(functools.partial(one_round, case, ids, 3, max_len))  # compiled: recompiles nothing?
            case.prefill.clear(), case.decode.clear()
        for index in range(args.rounds):
            # a family's variants back to back, their order flipped every round: the second of a pair
            # ran up to 20% faster whatever it was (gpt2 against itself), so none always goes second
            for case in sorted(cases, key=lambda c: (c.family, cases.index(c) * (-1) ** index)):
                one_round(case, ids, args.decode, max_len, buffer)
    del buffer
    _table(cases, args)


if __name__ == "__main__":
    main()
