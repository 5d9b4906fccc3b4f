"""A token's RMS and layer norms, rotary rotation, GELU, SwiGLU and greedy pick on the CPU as one C++ call each.

At batch 1 a decode step's norms and rotations are tiny, and PyTorch spends its time
dispatching them: ``F.rms_norm`` on a float32 copy, the cast back and the weight's product
are five to seven operator calls, 16 µs for one 576-wide bfloat16 row (the C++ loop: under
2 µs); a rotation of q or k (slices, two products, ``roll``, a sum) took 26 µs. A 30-layer
llama makes 61 norms and 60 rotations a step: some 2.5 ms of SmolLM2-135M's ~20 ms eager
step on this project's Zen 4, one thread. The loops (``cpu_token_ops_source.py``, built in
the one-row products' extension) keep the PyTorch expressions' float32 arithmetic and their
roundings to the tensor's dtype, so prefill (many rows) and decode (one) take the same code.
A fused gate|up product's SwiGLU (a split, ``F.silu`` and a product: 10 µs of a step's layer
in py-spy's samples of SmolLM2-135M's eager decode) is one call too, as is the greedy pick
of the next token (``greedy``: ATen's CPU argmax does not vectorise; see there). So are
LayerNorm (``F.layer_norm`` through ``nn.LayerNorm``: 6.5-8.5 µs a 768-wide row, the call
2.1) and GELU (``gelu``: torch's tanh form is its arithmetic, 12.6 µs a 3,072-wide row; see
there), 37 calls of a 12-layer GPT-2 step.

They run on the CPU with gradients off and outside compiled graphs (inductor fuses the
expressions itself); ``ZOO_TOKEN_KERNELS=0`` turns them off.
"""

from __future__ import annotations

import os

import torch

from zoo.components import row_product
from zoo.components.linear import StepTensors
from zoo.specs import host_functions
from zoo.specs.interfaces import TokenNorm

ENV_SWITCH = "ZOO_TOKEN_KERNELS"
# the switch, read once when this module imports: an eager decode step asks before every
# call, and ``os.environ.get`` costs 0.7 µs (1.4% of SmolLM2-135M's step at two threads);
# a test or benchmark sets ``ENABLED`` itself
ENABLED = os.environ.get(ENV_SWITCH, "1") != "0"
DTYPES = (torch.float32, torch.bfloat16, torch.float16)


def _eager_cpu(x: torch.Tensor, *others: torch.Tensor) -> bool:
    """x a plain tensor (not a fake one of an analysis trace) and ``others`` on the CPU in one
    of ``DTYPES``, gradients off (a training forward keeps PyTorch's arithmetic throughout,
    whichever of its tensors want gradients), not being compiled, the switch not off and the
    extension built."""
    dtype = x.dtype
    for other in others:  # a loop, not any(...): its generator was a third of a norm's check (0.6 of 1.6 µs)
        if other.dtype != dtype:
            return False
    return not torch.is_grad_enabled() and _plain_cpu(x)


def _plain_cpu(x: torch.Tensor) -> bool:
    """x a plain CPU tensor in one of ``DTYPES``, not being compiled, the switch not off and
    the extension built."""
    return (
        type(x) is torch.Tensor
        and x.is_cpu
        and x.dtype in DTYPES
        and not torch.compiler.is_compiling()
        and ENABLED
        and row_product.available()
    )


def rms_norm_applies(x: torch.Tensor, weight: torch.Tensor) -> bool:
    """Whether ``rms_norm`` computes this norm: a weight of x's last size in x's dtype."""
    return weight.dim() == 1 and weight.shape[0] == x.shape[-1] and _eager_cpu(x, weight)


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float, unit_offset: bool) -> torch.Tensor:
    """RMSNorm of x (..., n) -> (..., n) in x's dtype, as ``norms.RMSNorm`` computes it."""
    return row_product.EXTENSION.op("rms_norm")(x, weight, eps, unit_offset)


def layer_norm_applies(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> bool:
    """Whether ``layer_norm`` computes this norm: a weight (and bias, if any) of x's last size in x's dtype."""
    if bias is not None and (bias.dim() != 1 or bias.shape[0] != x.shape[-1]):
        return False
    others = (weight,) if bias is None else (weight, bias)
    return weight.dim() == 1 and weight.shape[0] == x.shape[-1] and _eager_cpu(x, *others)


def layer_norm(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, eps: float) -> torch.Tensor:
    """LayerNorm of x (..., n) over its last dimension -> (..., n) in x's dtype, as ``F.layer_norm``
    computes it (float32 moments; ``(x * rstd - mean * rstd) * weight + bias``, rounded once)."""
    return row_product.EXTENSION.op("layer_norm")(x, weight, bias, eps)


def gelu_applies(x: torch.Tensor) -> bool:
    """Whether ``gelu`` takes x: a non-empty plain CPU tensor in one of ``DTYPES``, eager and outside autograd."""
    return x.dim() >= 1 and x.shape[-1] > 0 and _eager_cpu(x)


def gelu(x: torch.Tensor, tanh_form: bool) -> torch.Tensor:
    """GELU of x (...) -> (...) in x's dtype, computed in float32 and rounded once: the exact
    form as ``F.gelu``; the tanh form (``approximate="tanh"``) as ``x * sigmoid(2u)``, the same
    function as ``F.gelu``'s ``x/2 (1 + tanh(u))`` without its cancellation for negative x
    (within a float32 ulp of the float64 value, where torch's relative error reaches 30% near
    x = -5, about 1e-7 in absolute terms), at a third of its time: torch's vectorised tanh
    made its GELU 12.6 µs for a 3,072-wide row here (AVX2 EPYC), this 3.9-4.8."""
    return row_product.EXTENSION.op("gelu")(x, tanh_form)


def rope_applies(x: torch.Tensor, cos: torch.Tensor) -> bool:
    """Whether ``rope`` rotates x (B, H, T, D) by tables (B|1, 1, T, R) in x's dtype."""
    return (
        x.dim() == cos.dim() == 4
        and x.stride(-1) == 1
        and cos.shape[1] == 1
        and cos.shape[2] == x.shape[2]
        and cos.shape[0] in (1, x.shape[0])
        and cos.shape[3] % 2 == 0
        and cos.shape[3] <= x.shape[3]
        and _eager_cpu(x, cos)
    )


def rope(x: torch.Tensor, cos: torch.Tensor, signed_sin: torch.Tensor) -> torch.Tensor:
    """x (B, H, T, D) with its first R channels rotated half against half -> (B, H, T, D)."""
    return row_product.EXTENSION.op("rope")(x, cos, signed_sin)


def silu_and_mul_applies(x: torch.Tensor) -> bool:
    """Whether ``silu_and_mul`` takes the fused gate|up product of x: x on the CPU in one of
    ``DTYPES``, eager and outside autograd (the product keeps x's device and dtype)."""
    return _eager_cpu(x)


# mlp_token's activations (the C++'s MLP_* constants): a plain MLP's by name, and a fused gate|up product's SwiGLU
MLP_ACTIVATIONS = {"gelu": 0, "gelu_tanh": 1, "relu": 3}
SILU_AND_MUL = 2


# a layer step's pre-norm as the C++ takes it (cpu_layer_steps_source's PRE_* constants)
PRE_NONE, PRE_LAYER, PRE_RMS, PRE_RMS_UNIT = 0, 1, 2, 3
NO_PRE_NORM = (None, None, 0.0, PRE_NONE)  # the step alone: no norm before it, no residual after it


def pre_norm_args(norm: TokenNorm | None) -> tuple[torch.Tensor | None, torch.Tensor | None, float, int]:
    """``norm`` as a layer step's C++ takes it: (weight, bias, eps, kind), the step then returning
    ``x + step(norm(x))`` (a pre-norm block's branch); ``NO_PRE_NORM`` for None."""
    if norm is None:
        return NO_PRE_NORM
    kind = (PRE_RMS_UNIT if norm.unit_offset else PRE_RMS) if norm.rms else PRE_LAYER
    return norm.weight, norm.bias, norm.eps, kind


def token_calls_run() -> bool:
    """Whether a one-call token step may run: eager, no autograd, the switch on (``ENABLED``)
    and the one-row products built (every such step makes its products through them): the
    feed-forwards' ``mlp_token``, the recurrent mixers' (``cpu_steps``, ``cpu_mamba_step``) and
    plugins' (``zoo.parts``)."""
    if torch.is_grad_enabled() or not ENABLED or torch.compiler.is_compiling():
        return False
    return row_product.available()


def mlp_token(
    x: torch.Tensor, up: StepTensors, down: StepTensors, activation: int, norm: TokenNorm | None = None
) -> torch.Tensor | None:
    """One token x (1, 1, C) through a feed-forward's up product, its ``activation``
    (``MLP_ACTIVATIONS`` or ``SILU_AND_MUL``) and down product -> (1, 1, C_out) in one C++ call
    (``cpu_layer_steps_source.py``: the products each projection's kernel makes, as its layer's
    ``step_tensors`` give them, and ``gelu``, ``relu`` or ``silu_and_mul`` between, so the
    result is theirs bit for bit), or None where that call does not compute it: there every
    shape, dtype and layout is checked in C++; here what it cannot know (eager, gradients off,
    the switch on). With ``norm``: ``x + ffn(norm(x))`` (``pre_norm_args``), the norm's and
    the add's kernels the ones the block's own calls make."""
    if not token_calls_run():
        return None
    pre = pre_norm_args(norm)
    return row_product.EXTENSION.op("mlp_token")(x, *up, *down, activation, *pre, row_product.PastCache.on)


def silu_and_mul(joint: torch.Tensor) -> torch.Tensor:
    """[gate | up] (..., 2F) -> silu(gate) * up (..., F) in one C++ call, as ``F.silu(gate) *
    up`` rounds it: one call for a split, an activation and a product (vLLM's ``silu_and_mul``)."""
    return row_product.EXTENSION.op("silu_and_mul")(joint)


def greedy_applies(logits: torch.Tensor) -> bool:
    """Whether ``greedy`` picks from these logits (..., V): rows contiguous, V at least one, on
    the CPU in one of ``DTYPES``, eager (an index has no gradient, so autograd does not matter)."""
    return logits.dim() >= 1 and logits.shape[-1] > 0 and logits.stride(-1) == 1 and _plain_cpu(logits)


def greedy(logits: torch.Tensor) -> torch.Tensor:
    """``logits.argmax(-1)`` (..., V) -> (...) int64 in one C++ call: the first index of each
    row's largest value, the first NaN where a row holds one. ATen's CPU argmax does not
    vectorise: a 151,936-logit row took 167-175 µs in float32 (bfloat16's ``max``: 163-172)
    where a sum over it took 13-16, about 1% of qwen3-0.6b's eager decode step (two threads,
    this project's AMD EPYC, AVX2). The loop compares integer keys of the values' bits
    (``order_key`` in cpu_token_ops_source.py) block by block, then scans the first block
    that holds the row's maximum."""
    return row_product.EXTENSION.op("greedy")(logits)


def _greedy_here(logits: torch.Tensor) -> torch.Tensor | None:
    """``greedy`` where it applies, else None (the model layer's own PyTorch then picks)."""
    return greedy(logits) if greedy_applies(logits) else None


host_functions.supply_greedy(_greedy_here)
