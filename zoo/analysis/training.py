"""What a training step costs, from the modules themselves: memory by part, and a roofline.

Weights, gradients and optimizer state are counted from the parameters' own shapes and
dtypes. Activations are what autograd keeps for backward: the model's forward and loss run
under ``FakeTensorMode`` (shapes and dtypes, no memory, any size) with a saved-tensors hook
that sums the bytes of each distinct storage saved, parameters excluded, attributed to the
block part (attention kind, FFN kind, norms) running when it was saved. The kernels are the
ones a CPU run dispatches to (SDPA's fused flash kernel unless ``attention="materialised"``
forces the math path that keeps the scores), so the figures are what the modules save, not
a closed form; Korthikanti et al. 2022's sbh(34 + 5as/h) is checked against them in tests.

Mixed precision (``bf16-mixed``) is AMP: float32 weights are the master copy; autocast keeps
a bf16 copy of each weight for backward, reported apart as ``weight_copies``. With AdamW this
is 4 (weights) + 4 (grads) + 8 (moments) = 16 bytes per parameter, the ZeRO paper's total
(2 + 2 + 4 master + 8) in another split.
"""

from __future__ import annotations

import contextlib
from collections import defaultdict
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from torch import nn
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.utils._python_dispatch import TorchDispatchMode

from zoo.analysis.counts import encoder_flops, forward_flops
from zoo.analysis.devices import gpu
from zoo.errors import SpecError
from zoo.model.build import ZooModel, build, init_buffers
from zoo.specs.model import ModelSpec

OUTSIDE = "embedding+head+loss"  # activations saved outside any block
Adapt = Callable[[nn.Module], object]  # changes a built model before a step (LoRA: wraps and freezes)


def optimizer_state_elements(shape: tuple[int, ...], optimizer: str, momentum: float = 0.0) -> int:
    """float32 elements of optimizer state for one parameter (scalar step counters excluded):
    AdamW two moments; SGD one momentum buffer, none without momentum; Adafactor a row and a
    column statistic per trailing matrix, a full vector for vectors (torch.optim.Adafactor)."""
    numel = 1
    for size in shape:
        numel *= size
    if optimizer == "adamw":
        return 2 * numel
    if optimizer == "sgd":
        return numel if momentum > 0 else 0
    if optimizer == "adafactor":
        if len(shape) >= 2:
            return numel // (shape[-1] * shape[-2]) * (shape[-1] + shape[-2])
        return numel
    raise SpecError(f"optimizer: unknown {optimizer!r}; allowed: adafactor, adamw, sgd")


@dataclass
class TrainingMemory:
    """Bytes of one training step, by part. ``activations`` is the sum of ``by_kind``."""

    weights: int
    gradients: int
    optimizer_state: int
    master_weights: int  # float32 copies apart from the weights (0 in AMP: the weights are the master)
    weight_copies: int  # bf16 copies autocast keeps for backward
    activations: int
    by_kind: dict[str, int] = field(default_factory=dict)
    per_layer: list[int] = field(default_factory=list)
    checkpointed_activations: int = 0  # block inputs kept + one block recomputed at a time
    checkpointing: bool = False

    @property
    def total(self) -> int:
        acts = self.checkpointed_activations if self.checkpointing else self.activations
        return self.weights + self.gradients + self.optimizer_state + self.master_weights + self.weight_copies + acts

    def as_dict(self) -> dict[str, object]:
        return {
            "weights": self.weights,
            "gradients": self.gradients,
            "optimizer_state": self.optimizer_state,
            "master_weights": self.master_weights,
            "weight_copies": self.weight_copies,
            "activations": self.activations,
            "activations_checkpointed": self.checkpointed_activations,
            "activations_by_kind": dict(self.by_kind),
            "checkpointing": self.checkpointing,
            "total": self.total,
        }


def state_bytes_of(params: list[nn.Parameter], optimizer: str, momentum: float = 0.0) -> tuple[int, int, int]:
    """(weights, gradients, optimizer state) bytes of distinct ``params``; gradients in each
    parameter's dtype, optimizer state float32."""
    unique = list({id(p): p for p in params}.values())
    weights = sum(p.numel() * p.element_size() for p in unique)
    trainable = [p for p in unique if p.requires_grad]
    grads = sum(p.numel() * p.element_size() for p in trainable)
    state = sum(4 * optimizer_state_elements(tuple(p.shape), optimizer, momentum) for p in trainable)
    return weights, grads, state


class _WeightCopies(TorchDispatchMode):
    """Records the storages of casts of parameters (autocast's bf16 weight copies).

    It also gives ``_grouped_mm`` an output shape where torch's meta function refuses the
    dtype (float32, which the CPU kernel runs): autograd records what it saves above this
    level, so the saved bytes are the real ones.
    """

    def __init__(self, params: set[int]) -> None:
        super().__init__()
        self.params, self.copies = params, set()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
        if func is torch.ops.aten._grouped_mm.default and args[0].dtype != torch.bfloat16:
            return torch.empty(args[0].shape[0], args[1].shape[-1], dtype=args[0].dtype, device=args[0].device)
        out = func(*args, **(kwargs or {}))
        if func is torch.ops.aten._to_copy.default and _storage(args[0]) in self.params:
            self.copies.add(_storage(out))
        return out


def _storage(t: torch.Tensor) -> int:
    return t.untyped_storage()._cdata


class _SavedBytes:
    """Distinct storages autograd saves for backward, by the label running when first saved."""

    def __init__(self, params: set[int]) -> None:
        self.params = params
        self.labels: list[str] = [OUTSIDE]
        self.seen: dict[int, tuple[str, int]] = {}

    def pack(self, t: torch.Tensor) -> torch.Tensor:
        key = _storage(t)
        if key not in self.params and key not in self.seen:
            self.seen[key] = (self.labels[-1], t.untyped_storage().nbytes())
        return t

    @contextlib.contextmanager
    def labelled(self, module: nn.Module, label: str) -> Iterator[None]:
        def push(*_: object) -> None:
            self.labels.append(label)

        def pop(*_: object) -> None:
            self.labels.pop()

        handles = [module.register_forward_pre_hook(push), module.register_forward_hook(pop)]
        try:
            yield
        finally:
            for handle in handles:
                handle.remove()


def _part_labels(model: ZooModel) -> list[tuple[nn.Module, str, int]]:
    """(module, label, layer number) for each part of each block: its attention kind, FFN kind,
    cross-attention, norms; layers numbered encoder first."""
    stacks = [] if model.encoder is None else [("encoder ", model.encoder.layers, model.spec.encoder_spec())]
    stacks.append(("", model.layers, model.spec))
    parts, number = [], 0
    for prefix, layers, spec in stacks:
        assert spec is not None
        for block, layer in zip(layers, spec.layer_specs()):
            for name, child in block.named_children():
                kind = {
                    "attention": f"attention:{layer.attention.kind}",
                    "ffn": f"ffn:{layer.ffn.kind}",
                    "cross_attention": "cross_attention",
                }.get(name, "norms")
                parts.append((child, prefix + kind, number))
            parts.append((block, prefix + "block", number))
            number += 1
    return parts


def _fake_model(spec: ModelSpec, mode: FakeTensorMode, adapt: Adapt | None = None) -> ZooModel:
    """Built on meta outside the fake mode (meta casts and fake tensors do not mix), then
    materialised as fake CPU tensors, so CPU kernels are dispatched and nothing allocated."""
    model = build(spec, device="meta")
    if adapt is not None:
        adapt(model)
    with mode:
        model.to_empty(device="cpu")
        model.tie_weights()
        init_buffers(model)
    return model


def _lm_loss(model: ZooModel, batch_size: int, seq_len: int) -> torch.Tensor:
    """A token-scoring loss over fake ids: decoder (or encoder) logits, encoder-decoders
    teacher-forced over ``seq_len`` source and ``seq_len`` target tokens."""
    ids = torch.zeros(batch_size, seq_len, dtype=torch.long)  # (B, T)
    logits = model(ids, memory=model.encode(ids)) if model.encoder is not None else model(ids)  # (B, T, V)
    return F.cross_entropy(logits.flatten(0, 1).float(), ids.flatten())


def activation_bytes(
    spec: ModelSpec,
    batch_size: int,
    seq_len: int,
    precision: str = "float32",
    attention: str = "fused",
    adapt: Adapt | None = None,
) -> tuple[dict[str, int], list[int], int, int]:
    """(bytes by part kind, bytes per layer, bf16 weight-copy bytes, block-input bytes) that a
    training forward saves for backward, traced on fake tensors. Frozen weights change what is
    saved (a frozen projection's input is not kept for its weight's gradient)."""
    mode = FakeTensorMode(allow_non_fake_inputs=True)
    model = _fake_model(spec, mode, adapt)
    with mode:
        params = {_storage(p) for p in model.parameters()}
        saved, copies = _SavedBytes(params), _WeightCopies(params)
        parts = _part_labels(model)
        inputs: list[int] = []
        hooks = [
            block.register_forward_pre_hook(lambda m, a: inputs.append(a[0].numel() * a[0].element_size()))
            for block, label, _ in parts
            if label.endswith("block")
        ]
        autocast = (
            torch.autocast("cpu", dtype=torch.bfloat16) if precision == "bf16-mixed" else contextlib.nullcontext()
        )
        kernel = sdpa_kernel(SDPBackend.MATH) if attention == "materialised" else contextlib.nullcontext()
        with contextlib.ExitStack() as stack:
            for module, label, number in parts:
                stack.enter_context(saved.labelled(module, f"{number}\t{label}"))
            stack.enter_context(torch.autograd.graph.saved_tensors_hooks(saved.pack, lambda t: t))
            stack.enter_context(copies)
            stack.enter_context(autocast)
            stack.enter_context(kernel)
            _lm_loss(model, batch_size, seq_len)
        for hook in hooks:
            hook.remove()
    by_kind: dict[str, int] = defaultdict(int)
    per_layer = [0] * len(inputs)
    weight_copies = 0
    for key, (label, nbytes) in saved.seen.items():
        if key in copies.copies:
            weight_copies += nbytes
            continue
        number, _, kind = label.partition("\t")
        by_kind[kind or number] += nbytes
        if kind:
            per_layer[int(number)] += nbytes
    return dict(by_kind), per_layer, weight_copies, sum(inputs)


def training_memory(
    spec: ModelSpec,
    batch_size: int,
    seq_len: int,
    *,
    optimizer: str = "adamw",
    momentum: float = 0.0,
    precision: str = "float32",
    checkpointing: bool = False,
    attention: str = "fused",
    adapt: Adapt | None = None,
) -> TrainingMemory:
    """Bytes of one training step of ``spec`` at (batch_size, seq_len), by part.

    ``adapt``: applied to the built model first (``zoo.training.lora`` wraps and freezes it);
    gradients and optimizer state are then counted for the parameters left trainable only.
    With ``checkpointing`` each block keeps only its input, and backward recomputes one block
    at a time, so the activations are the block inputs, the saves outside blocks, and the
    largest block's saves.
    """
    model = build(spec, device="meta")
    if adapt is not None:
        adapt(model)
    weights, grads, state = state_bytes_of(list(model.parameters()), optimizer, momentum)
    by_kind, per_layer, copies, inputs = activation_bytes(spec, batch_size, seq_len, precision, attention, adapt)
    activations = sum(by_kind.values())
    checkpointed = inputs + by_kind.get(OUTSIDE, 0) + max(per_layer, default=0)
    return TrainingMemory(
        weights, grads, state, 0, copies, activations, by_kind, per_layer, checkpointed, checkpointing
    )


def training_flops(spec: ModelSpec, batch_size: int, seq_len: int, checkpointing: bool = False) -> tuple[int, int]:
    """(model FLOPs, hardware FLOPs) of one step: backward costs twice the forward (a product's
    gradient for its input and for its weight), so model FLOPs are 3 forwards; hardware FLOPs
    add the forward recomputed under checkpointing. Forward FLOPs are the module graph's
    (matmul parameters and each mixer's declared score FLOPs), not 6N."""
    forward = forward_flops(spec, seq_len, seq_len, batch_size, memory_len=seq_len) + encoder_flops(
        spec, seq_len, batch_size
    )
    return 3 * forward, (4 if checkpointing else 3) * forward


@dataclass(frozen=True)
class TrainingRoofline:
    gpu: str
    step_s: float
    tokens_per_s: float
    bound: str
    model_flops: int
    hardware_flops: int
    bytes_moved: int
    memory: TrainingMemory
    fits: bool
    capacity_bytes: int
    formula: str


def bytes_moved(memory: TrainingMemory, precision: str, checkpointing: bool) -> int:
    """Memory traffic of one step: the weights read twice (forward, backward) in the compute
    dtype, gradients written, the optimizer reading weights, gradients and state and writing
    weights and state, activations written once and read once."""
    params = memory.weights // 4
    compute_bytes = 2 if precision == "bf16-mixed" else 4
    activations = memory.checkpointed_activations if checkpointing else memory.activations
    return (
        2 * compute_bytes * params
        + memory.gradients
        + 2 * (memory.weights + memory.optimizer_state)
        + memory.gradients
        + 2 * activations
    )


def training_roofline(
    spec: ModelSpec,
    gpu_key: str,
    batch_size: int,
    seq_len: int,
    *,
    optimizer: str = "adamw",
    momentum: float = 0.0,
    precision: str = "bf16-mixed",
    checkpointing: bool = False,
    tokens_per_step: int | None = None,
) -> TrainingRoofline:
    """Lower bound on a step's time on a named GPU, and whether its memory fits.

    Compute: hardware FLOPs over the peak for the compute dtype. Memory traffic: the weights
    read twice (forward, backward) in the compute dtype, gradients written, the optimizer
    reading weights, gradients and state and writing weights and state, activations written
    once and read once.
    """
    board = gpu(gpu_key)
    memory = training_memory(
        spec,
        batch_size,
        seq_len,
        optimizer=optimizer,
        momentum=momentum,
        precision=precision,
        checkpointing=checkpointing,
    )
    model_flops, hardware_flops = training_flops(spec, batch_size, seq_len, checkpointing)
    compute_dtype = torch.bfloat16 if precision == "bf16-mixed" else torch.float32
    moved = bytes_moved(memory, precision, checkpointing)
    compute_s, memory_s = hardware_flops / board.peak_flops(compute_dtype), moved / board.bandwidth
    step = max(compute_s, memory_s)
    tokens = tokens_per_step or batch_size * seq_len
    capacity = int(board.memory_gib * 2**30)
    return TrainingRoofline(
        board.key,
        step,
        tokens / step,
        "compute" if compute_s >= memory_s else "memory",
        model_flops,
        hardware_flops,
        moved,
        memory,
        memory.total <= capacity,
        capacity,
        "step >= max(hardware FLOPs / peak FLOP/s, bytes moved / bandwidth)",
    )
