"""The checks zoo's own parts pass, run on every kind a plugin registers (``zoo plugins --check``).

Each kind is built into a tiny model: the first of the plugin's presets that uses it, or else
a Qwen3-shaped base with the kind swapped in (its defaults apply), shrunk (d_model 64, 2
layers, vocabulary 64) and with every component's ``Options.tiny`` values applied wherever
the spec sets those options (heads, head sizes, expert counts, inner widths: each kind
declares its own, so this file names none). Each model is built once per device; contexts
are 8 tokens. On that model, on CPU and meta:

- builds on both devices; the parameter count from the meta model equals the built one;
- declared state bytes: the analysis equals the cache's allocation, per-token tensors grow
  with the context and per-sequence ones do not, and all grow with the batch;
- the state is all declared: two caches decoded interleaved equal each decoded alone;
- prefill + cached decode equals the full forward, and a causal model's output at t does
  not depend on tokens after t (causal models only);
- save/load round trip of the plugin's presets where it registers a checkpoint format.

Each failure is one line naming the kind and what differs. The harness layer hosts this
because it is the lowest that imports the model, the analysis and the hub.
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import torch

import zoo
from zoo.analysis.counts import cache_bytes
from zoo.errors import ZooError
from zoo.model.build import ZooModel
from zoo.model.cache import KVCache
from zoo.model.generation import decode_step, prefill
from zoo.specs.model import ModelSpec
from zoo.specs.registry import PluginInfo, get_registry
from zoo.specs.registry_entries import SLOTS

TINY = {"d_model": 64, "n_layers": 2, "vocab_size": 64, "max_seq_len": 64}
BASE = "qwen3-0.6b"
LENGTH, BATCH, TOL = 8, 2, 1e-4


@dataclass(frozen=True)
class Subject:
    """One registered kind and the tiny spec it is checked in."""

    slot: str
    kind: str
    spec: ModelSpec
    from_preset: bool

    @property
    def name(self) -> str:
        return f"{self.slot} kind {self.kind!r}"


def check_plugin(name: str) -> list[str]:
    """Every failed check of every kind plugin ``name`` registers, one line each."""
    info = get_registry().plugins[name]
    failures: list[str] = []
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # tiny tensors: a thread pool only adds synchronisation (10x slower on a busy host)
    try:
        for subject in subjects(info):
            failures += [f"{name}: {subject.name}: {line}" for line in check_subject(subject, info)]
    finally:
        torch.set_num_threads(threads)
    return failures


def subjects(info: PluginInfo) -> Iterator[Subject]:
    presets = [zoo.spec(arch) for arch in info.architectures]
    for slot, kind in info.components:
        users = [spec for spec in presets if _uses(spec, slot, kind)]
        if users:
            yield Subject(slot, kind, tiny_spec(users[0]), True)
        else:
            yield Subject(slot, kind, tiny_spec(zoo.spec(BASE).override({f"{slot}.kind": kind})), False)


def tiny_spec(spec: ModelSpec) -> ModelSpec:
    """``spec`` at TINY sizes, each component's (and each layer override's) ``Options.tiny``
    applied to the options it sets; a null option keeps its meaning (absent, or derived)."""
    data = spec.override(TINY).to_dict()
    components = get_registry().components
    layers = [layer for layer in (data.get("layers") or {}).values() if layer]
    for slot in SLOTS:
        kind = (data.get(slot) or {}).get("kind")
        for part in [data.get(slot)] + [layer.get(slot) for layer in layers]:
            if not part:
                continue
            entry = components.get((slot, part.get("kind", kind)))
            for option, value in (entry.options.tiny if entry else {}).items():
                if part.get(option) is not None:
                    part[option] = value
    return ModelSpec.model_validate(data)


def _uses(spec: ModelSpec, slot: str, kind: str) -> bool:
    data = spec.to_dict()
    if (data.get(slot) or {}).get("kind") == kind:
        return True
    return any(((layer or {}).get(slot) or {}).get("kind") == kind for layer in (data.get("layers") or {}).values())


def check_subject(subject: Subject, info: PluginInfo) -> list[str]:
    try:
        meta = zoo.build(subject.spec, device="meta")
        model = zoo.build(subject.spec, seed=0).eval()
    except (ZooError, ValueError, RuntimeError) as error:
        return [f"does not build at tiny size ({type(error).__name__}: {error})"]
    checks: list[Callable[[], list[str]]] = [
        lambda: _params(subject.spec, meta, model),
        lambda: _state_bytes(subject.spec, model),
    ]
    if model.attention_modules and all(module.causal for module in model.attention_modules):
        checks += [lambda: _decode(model), lambda: _interleaved(model), lambda: _causal(model)]
    if subject.from_preset and info.checkpoint_formats:
        checks.append(lambda: _round_trip(model))
    failures: list[str] = []
    for check in checks:
        try:
            with torch.no_grad():
                failures += check()
        except (ZooError, ValueError, RuntimeError) as error:
            failures.append(f"{check.__name__}: raised {type(error).__name__}: {error}")
    return failures


def _unique_params(model: torch.nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


def _params(spec: ModelSpec, meta: ZooModel, model: ZooModel) -> list[str]:
    counted, on_meta, built = zoo.count_params(spec).total, _unique_params(meta), _unique_params(model)
    if counted == on_meta == built:
        return []
    return [f"parameters differ: count_params {counted}, meta model {on_meta}, built model {built}"]


def _state_bytes(spec: ModelSpec, model: ZooModel) -> list[str]:
    dtype = torch.float32
    failures, reported = [], set()
    allocated = KVCache(model, BATCH, LENGTH, dtype=dtype).nbytes
    declared = cache_bytes(spec, BATCH, LENGTH, dtype=dtype).total
    if allocated != declared:
        failures.append(f"declared cache bytes {declared} != allocated {allocated} (batch {BATCH}, context {LENGTH})")
    for (path, _), base, long, wide in zip(
        model.stateful_modules(),
        model.state_layout(1, LENGTH),
        model.state_layout(1, 2 * LENGTH),
        model.state_layout(2, LENGTH),
        strict=True,
    ):
        for name, tensor in base.items():
            one, two, batch2 = (t[name].nbytes(dtype) for t in (base, long, wide))
            grows = {"token": two == 2 * one, "sequence": two == one, "memory": two == one}[tensor.per]
            if (not grows or batch2 != 2 * one) and name not in reported:  # one line per tensor, not per layer
                reported.add(name)
                failures.append(
                    f"{path}: state {name!r} declared per {tensor.per}, but its bytes are {one} at context "
                    f"{LENGTH}, {two} at {2 * LENGTH} and {batch2} for 2 sequences"
                )
    return failures


def _prompt(model: ZooModel, seed: int, length: int = LENGTH) -> torch.Tensor:
    generator = torch.Generator().manual_seed(seed)
    return torch.randint(0, model.spec.vocab_size, (BATCH, length), generator=generator)


def _decode(model: ZooModel) -> list[str]:
    ids = _prompt(model, 2, 2 * LENGTH)
    full = model(ids)[:, LENGTH - 1 :]  # (B, LENGTH + 1, V)
    cache = KVCache(model, BATCH, 2 * LENGTH)
    steps = [prefill(model, ids[:, :LENGTH], cache)]
    steps += [decode_step(model, ids[:, t : t + 1], cache) for t in range(LENGTH, 2 * LENGTH)]
    diff = (torch.stack(steps, dim=1) - full).abs().amax(dim=(0, 2))  # (LENGTH + 1,)
    if float(diff.max()) <= TOL * max(1.0, float(full.abs().max())):
        return []
    first = int((diff > TOL).nonzero()[0]) + LENGTH - 1
    return [
        (
            f"prefill + cached decode differs from the full forward (max |diff| {float(diff.max()):.3g}, "
            f"first at token {first})"
        )
    ]


def _interleaved(model: ZooModel) -> list[str]:
    a, b = _prompt(model, 3, LENGTH + 4), _prompt(model, 4, LENGTH + 4)
    alone = KVCache(model, BATCH, LENGTH + 4)
    expected = [prefill(model, a[:, :LENGTH], alone)] + [
        decode_step(model, a[:, t : t + 1], alone) for t in range(LENGTH, LENGTH + 4)
    ]
    first, second = KVCache(model, BATCH, LENGTH + 4), KVCache(model, BATCH, LENGTH + 4)
    got = [prefill(model, a[:, :LENGTH], first)]
    prefill(model, b[:, :LENGTH], second)
    for t in range(LENGTH, LENGTH + 4):
        got.append(decode_step(model, a[:, t : t + 1], first))
        decode_step(model, b[:, t : t + 1], second)
    diff = float((torch.stack(got) - torch.stack(expected)).abs().max())
    if diff <= TOL:
        return []
    return [
        (
            f"state outside its declaration: two caches decoded interleaved differ from one decoded alone "
            f"(max |diff| {diff:.3g}); declared state bytes do not hold the state"
        )
    ]


def _causal(model: ZooModel) -> list[str]:
    ids = _prompt(model, 5)
    changed = ids.clone()
    changed[:, LENGTH // 2 :] = (changed[:, LENGTH // 2 :] + 1) % model.spec.vocab_size
    diff = float((model(ids)[:, : LENGTH // 2] - model(changed)[:, : LENGTH // 2]).abs().max())
    if diff <= TOL:
        return []
    return [f"declared causal, but outputs before token {LENGTH // 2} change with later tokens (max |diff| {diff:.3g})"]


def _round_trip(model: ZooModel) -> list[str]:
    ids = _prompt(model, 6)
    with tempfile.TemporaryDirectory(prefix="zoo-check-") as folder:
        zoo.save_pretrained(model, folder)
        loaded = zoo.from_pretrained(folder, dtype="float32").eval()
        diff = float((loaded(ids) - model(ids)).abs().max())
    return [] if diff <= TOL else [f"save/load round trip changes the logits (max |diff| {diff:.3g})"]
