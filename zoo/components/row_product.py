"""One-row matrix products on the CPU as zoo's own C++ matrix-vector kernel.

At batch 1 a decode step is a chain of matrix-vector products, so its speed is how fast the
weights stream through the core. ``row_product`` (C++ in ``row_product_source.py``, built by
``cpu_extension`` and registered through ``cpu_ops.CppExtension``) widens each row to float32
in registers, multiplies and accumulates, rows split over torch's threads. Whether that beats
torch's own one-row path depends on the CPU, so it is chosen by measurement: the host probe
(``zoo.analysis.host_probe``, once per machine) times both on a decode-shaped weight per
dtype, and a ``zoo bench``/``compare`` run on the CPU takes the kernel for the dtypes it was
faster in (``measured_faster``). ``ZOO_ROW_KERNEL=1`` forces it on and ``0`` off (read at import); elsewhere
(no run, no probe) the one-row paths are ``torch.mv`` in float32 and ``F.linear`` in half
precision (``zoo/components/linear.py``, measured there).

Measured on this project's AMD EPYC (Zen 4, avx512_bf16), one thread, against the
inductor-generated kernel it replaced (``(w.float() * x.float()).sum(-1)`` under
``torch.compile``): 1.7-2.2x faster on gpt2's layer weights in float32 and 2.3-2.8x in
bfloat16 (a compiled call cost ~25 µs of guards and wrappers before any byte moved; this
one is a pybind call), 0.95x / 1.15x on a 50257 x 768 head (both at the bandwidth). It also
keeps inductor out of an eager run's memory (some 90 MB resident once it has compiled).
Earlier measurements of the inductor kernel against torch: ``torch.mv`` streamed float32 at
~15 GB/s and bfloat16 at 5-8 GB/s on the EPYC, and led on an Intel Xeon (Sapphire Rapids,
AMX), which is why the probe decides.

Accumulation is in float32 and the result is rounded once to the input's dtype, as
``F.linear`` does. Only tiny weights skip it (below ``MIN_WEIGHT_BYTES`` either call is its
dispatch): from 48 KiB up it was the faster here (one thread, weights cycled through memory,
µs per call kernel / ``F.linear``: float32 16 x 768 2.4 / 4.1, 512 x 512 50 / 119; bfloat16
16 x 768 4.3 / 20.5, 512 x 512 31 / 89; two threads alike), where a 1 MiB threshold had sent
t5-small's bfloat16 512 x 512 projections to ``F.linear`` at 5 GB/s. Where the extension
cannot be built, ``cpu_extension`` logs why once and ``F.linear`` runs. Inside a compiled
graph the kernel is the opaque op ``torch.ops.zoo.row_product_row_product``: traced inline
instead, the expression was fused with its neighbours into kernels that decoded 30 tokens/s
against the opaque op's 48 (bfloat16, qwen3-0.6b's widths, 2 layers, one thread). ``int8_rows`` is the same loop over
int8 rows, scaled per row (zoo/quant/int8_rows.py).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterable, Iterator

import torch
import torch.nn.functional as F

from zoo.components.cpu_attention_calls_source import SOURCE as ATTENTION_CALLS_SOURCE
from zoo.components.cpu_attention_source import SOURCE as ATTENTION_SOURCE
from zoo.components.cpu_layer_steps_source import SOURCE as LAYER_STEPS_SOURCE
from zoo.components.cpu_layer_steps_source import projection_call
from zoo.components.cpu_ops import CppExtension, CppFunction
from zoo.components.cpu_token_ops_source import SOURCE as TOKEN_OPS_SOURCE
from zoo.components.int8_rows_source import SOURCE as INT8_SOURCE
from zoo.components.row_product_source import FITS, SOURCE
from zoo.components.run_dtypes import RunDtypes
from zoo.components.tiles_source import SOURCE as TILES_SOURCE

ENV_SWITCH = "ZOO_ROW_KERNEL"
# the switch: True (1), False (0) or None (unset: the run's measurement decides), read once when
# this module imports, as cpu_token_ops' (every one-row product asks); a test sets ``FORCED``
FORCED: bool | None = {"1": True, "0": False}.get(os.environ.get(ENV_SWITCH, ""))
MIN_WEIGHT_BYTES = 1 << 14  # 16 KiB: smaller products are their call's cost whichever path takes them
DTYPES = (torch.float32, torch.bfloat16, torch.float16)

EXTENSION = CppExtension(  # also home to the decode step's other CPU loops (cpu_attention, cpu_token_ops)
    "zoo_row_product",
    SOURCE
    + TILES_SOURCE
    + INT8_SOURCE
    + TOKEN_OPS_SOURCE
    + ATTENTION_SOURCE
    + ATTENTION_CALLS_SOURCE
    + LAYER_STEPS_SOURCE,
    [
        CppFunction(
            "row_product",
            "(Tensor weight, Tensor x, Tensor? bias, bool past_cache) -> Tensor",
            lambda weight, x, **_: x.new_empty(*x.shape[:-1], weight.shape[0]),  # (..., out)
        ),
        CppFunction(
            "row_product_fitting",
            "(Tensor weight, Tensor x, Tensor? bias, bool past_cache, int min_weight_bytes) -> Tensor",
            lambda weight, x, **_: x.new_empty(*x.shape[:-1], weight.shape[0]),  # (..., out)
        ),
        CppFunction(
            "int8_rows",
            "(Tensor qweight, Tensor scales, Tensor x, bool fetch_ahead) -> Tensor",
            lambda qweight, x, **_: x.new_empty(*x.shape[:-1], qweight.shape[0]),  # (..., out)
        ),
        CppFunction(
            "int8_tiles",
            "(Tensor x, Tensor qweight, Tensor scales, int tile) -> Tensor",
            lambda x, qweight, **_: x.new_empty(x.shape[0], qweight.shape[0]),  # (M, out)
        ),
        CppFunction(
            "one_query_attention",
            "(Tensor q, Tensor k, Tensor v, Tensor? mask, float scale) -> Tensor",
            lambda q, **_: torch.empty_like(q, memory_format=torch.contiguous_format),  # (B, H, 1, D)
        ),
        CppFunction(
            "append_attention",
            "(Tensor q, Tensor k, Tensor v, Tensor(a!) k_cache, Tensor(b!) v_cache, int n, Tensor? cos, Tensor? sin,"
            " Tensor? mask, float scale)"
            " -> Tensor",
            lambda q, **_: torch.empty_like(q, memory_format=torch.contiguous_format),  # (B, H, 1, D)
        ),
        CppFunction(
            "attention_token",
            "(Tensor x, Tensor qkv_weight, Tensor? qkv_scales, Tensor? qkv_bias, Tensor? q_norm, Tensor? k_norm,"
            " float norm_eps, bool unit_offset, Tensor(a!) k_cache, Tensor(b!) v_cache, int n, Tensor? cos,"
            " Tensor? sin, Tensor? mask, float scale, Tensor o_weight, Tensor? o_scales, Tensor? o_bias,"
            " Tensor? pre_weight, Tensor? pre_bias, float pre_eps, int pre_kind, bool past_cache) -> Tensor",
            lambda x, o_weight, **_: x.new_empty(*x.shape[:-1], o_weight.shape[0]),  # (1, 1, C_out)
        ),
        CppFunction(
            "cross_attention_token",
            "(Tensor x, Tensor q_weight, Tensor? q_scales, Tensor? q_bias, Tensor k, Tensor v, Tensor? mask,"
            " float scale, Tensor o_weight, Tensor? o_scales, Tensor? o_bias, Tensor? pre_weight, Tensor? pre_bias,"
            " float pre_eps, int pre_kind, bool past_cache) -> Tensor",
            lambda x, o_weight, **_: x.new_empty(*x.shape[:-1], o_weight.shape[0]),  # (1, 1, C_out)
        ),
        CppFunction(
            "layer_row",
            "(Tensor weight, Tensor? scales, Tensor x, Tensor? bias, bool past_cache) -> Tensor",
            lambda weight, x, **_: x.new_empty(*x.shape[:-1], weight.shape[0]),  # (..., out)
        ),
        CppFunction(
            "mlp_token",
            "(Tensor x, Tensor up_weight, Tensor? up_scales, Tensor? up_bias, Tensor down_weight, Tensor? down_scales,"
            " Tensor? down_bias, int activation, Tensor? pre_weight, Tensor? pre_bias, float pre_eps, int pre_kind,"
            " bool past_cache) -> Tensor",
            lambda x, down_weight, **_: x.new_empty(*x.shape[:-1], down_weight.shape[0]),  # (1, 1, C_out)
        ),
        CppFunction(
            "rms_norm",
            "(Tensor x, Tensor weight, float eps, bool unit_offset) -> Tensor",
            lambda x, **_: torch.empty_like(x, memory_format=torch.contiguous_format),  # (..., n)
        ),
        CppFunction(
            "layer_norm",
            "(Tensor x, Tensor weight, Tensor? bias, float eps) -> Tensor",
            lambda x, **_: torch.empty_like(x, memory_format=torch.contiguous_format),  # (..., n)
        ),
        CppFunction(
            "gelu",
            "(Tensor x, bool tanh_form) -> Tensor",
            lambda x, **_: torch.empty_like(x, memory_format=torch.contiguous_format),  # (..., n)
        ),
        CppFunction(
            "silu_and_mul",
            "(Tensor joint) -> Tensor",
            lambda joint, **_: joint.new_empty(*joint.shape[:-1], joint.shape[-1] // 2),  # (..., F)
        ),
        CppFunction(
            "rope",
            "(Tensor x, Tensor cos, Tensor sin) -> Tensor",
            lambda x, **_: torch.empty_like(x, memory_format=torch.contiguous_format),  # (B, H, T, D)
        ),
        CppFunction(
            "greedy",
            "(Tensor logits) -> Tensor",
            lambda logits, **_: logits.new_empty(logits.shape[:-1], dtype=torch.long),  # (...)
        ),
    ],
)

# The C++ a mixer's own extension includes to make its one-call step's projections through this one
# (``layer_row``): Mamba's and Mamba2's ``*_token``, which then check what they take as the layer steps here do.
PROJECTIONS = FITS + projection_call(*(EXTENSION.op_name(name) for name in ("layer_row", "layer_norm", "rms_norm")))

_FASTER = RunDtypes()  # the dtypes the host probe measured the kernel faster in, during a run


class PastCache:
    """Whether the weights a step reads are larger than the host's last-level cache (``on``, read by
    every product: a plain attribute), set by a run around its phases (``past_cache``)."""

    on = False


def past_cache_on() -> bool:
    """Whether a step's products fetch their weights past the caches now (``past_cache``): the
    flag a one-call step built elsewhere passes to its projections (``PROJECTIONS``)."""
    return PastCache.on


@contextlib.contextmanager
def past_cache(on: bool) -> Iterator[None]:
    """Tell the kernel, while the block runs, whether a step's weights are larger than the
    last-level cache (``on``): each product then fetches its weight ahead without keeping it in
    the caches (the source's ``fetch_ahead``). Read once a step, such a weight cannot stay cached
    anyway, and left to the hardware's prefetchers it pushed out of L2 and L3 what the step runs
    between products. On a 2-core Sapphire Rapids Xeon (105 MB of L3), one process,
    interleaved rounds, bfloat16 decode ran 1.12x as fast eager and 1.03x compiled for gpt2
    (249 MB a step), 1.12x and 1.06x for qwen3-0.6b, 1.08x compiled for mamba2-130m; float32
    0.97-1.13x eager, 1.01-1.03x compiled; but t5-small's bfloat16 decoder (77 MB a step,
    cached from step to step) 0.70x eager and 0.58x compiled, and its float32 one (154 MB)
    0.95x compiled, which is why a run decides (``zoo.analysis.host_probe.past_cache``). On a
    2-core Zen 4 EPYC VM (32 MB of L3) the fetch lost instead: bfloat16 eager decode ran
    0.82-0.92x as fast with it for gpt2, mamba-130m, mamba2-130m, Gated DeltaNet, RWKV-4 and
    t5-small, float32 0.96-1.00x; so a run fetches this way only where the host probe measured
    it faster (``host_probe.fetches_past_cache``). The int8
    rows and int4 panels fetched past the caches (forced on) decoded slower on the Xeon:
    qwen3-0.6b 0.94x int8 and 0.95x int4, gpt2 0.80x both (eager, bfloat16 activations), so
    they keep their own fetch ahead into L1, taken by the same flag (their ops' ``fetch_ahead``):
    on the Zen 4 VM, whose probe chose no fetch, their models decoded 1.02-1.12x as fast
    without theirs."""
    previous, PastCache.on = PastCache.on, on
    try:
        yield
    finally:
        PastCache.on = previous


def reference(weight: torch.Tensor, x: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    """What the kernel computes, in PyTorch: ``weight @ x (+ bias)`` for one row ``x`` (..., in),
    accumulated in float32, rounded once to ``x``'s dtype."""
    out = x.float() @ weight.float().T  # (..., out)
    if bias is not None:
        out = out + bias.float()
    return out.to(x.dtype)  # (..., out)


def available() -> bool:
    """Whether the kernel builds here (``cpu_extension`` logs why once where it cannot)."""
    return EXTENSION.available()


def enabled(dtype: torch.dtype) -> bool:
    """Whether one-row products in ``dtype`` take the kernel: ``ZOO_ROW_KERNEL`` decides where it
    is 1 or 0, else whether the run measured it faster here (``measured_faster``); never where
    it cannot be built."""
    wanted = dtype in _FASTER.dtypes if FORCED is None else FORCED
    return wanted and available()


def measured_faster(dtypes: Iterable[torch.dtype]) -> contextlib.AbstractContextManager[None]:
    """Take the kernel for ``dtypes`` (those the host probe measured it faster in) while the
    block runs: a harness run on the CPU wraps its phases in it."""
    return _FASTER.during(dtypes)


def applies(x: torch.Tensor, weight: torch.Tensor) -> bool:
    """True when ``x`` is one row that fits ``weight`` (``fits``), on the CPU, outside autograd."""
    return (
        x.device.type == "cpu"
        and x.shape[-1] == x.numel()
        and fits(weight, x.shape[-1], x.dtype)
        and not torch.is_grad_enabled()
    )


def fits(weight: torch.Tensor, width: int, dtype: torch.dtype) -> bool:
    """Whether the kernel takes ``weight`` for rows of ``width`` values in ``dtype`` (one of
    ``DTYPES``, the weight's too): a large, contiguous CPU matrix of that many columns,
    where the run measured the kernel faster in that dtype (``enabled``)."""
    return (
        dtype in DTYPES
        and weight.dtype == dtype
        and weight.dim() == 2
        and weight.shape[1] == width
        and weight.is_contiguous()
        and weight.is_cpu
        and weight.numel() * weight.element_size() >= MIN_WEIGHT_BYTES
        and enabled(dtype)
    )


def eager_row_product(weight: torch.Tensor, x: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor | None:
    """``weight @ x (+ bias)`` for one row ``x`` (..., in) -> (..., out) through the kernel, or None
    where it does not take them: an eager call's checks (``applies``) made in C++, where they
    cost nothing (in Python ~4 µs a product, 7% of an RWKV-4 eager step on a 2-core Xeon); here
    only what C++ cannot know: gradients off and the kernel the run's choice in x's dtype."""
    if torch.is_grad_enabled() or not enabled(x.dtype):
        return None
    return EXTENSION.op("row_product_fitting")(weight, x, bias, PastCache.on, MIN_WEIGHT_BYTES)


def row_product(weight: torch.Tensor, x: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    """``weight @ x (+ bias)`` for one row ``x`` (..., in) through the kernel (an opaque op inside
    a compiled graph), or ``F.linear`` where it cannot be built -> (..., out) in ``x``'s dtype,
    x's leading dims kept."""
    if not available():
        return F.linear(x, weight, bias)
    return EXTENSION.op("row_product")(weight, x, bias, PastCache.on)  # (..., out)
