"""Weight-only quantization of a built or loaded model: ``weights_dtype`` and its bytes.

``weights_dtype`` is a property of a *run*, not of the spec: the spec says what the model
computes, the weights' storage says how its trained (or random) weights are held. The same
checkpoint is benchmarked at bf16, int8 and int4, and fidelity is measured against the
unquantized model on the same weights, which only a post-build step allows. It lives in
``BenchConfig`` (so ``zoo compare --vary weights_dtype=...`` takes it like any run option)
and in ``zoo.analysis.counts.weight_bytes(..., weights_dtype=)``.

- ``bf16`` / ``float32``: no quantization; the whole model in that dtype.
- ``int8`` / ``int4``: every ``nn.Linear`` (attention and FFN projections, MoE routers, the
  LM head) becomes an ``Int8Linear`` / ``Int4Linear`` (zoo/quant/linear.py); embeddings,
  norms and stacked MoE experts stay in the run's dtype, which defaults to bfloat16 (the
  kernels' fast activation dtype). With tied embeddings the input table becomes int8 rows
  (``Int8Embedding``): with int8 the head's own buffers (stored once); with int4, whose
  packed layout cannot be read by rows, an int8 copy of the table beside the int4 head
  (both stored and counted). An untied input table stays in the run's dtype.
"""

from __future__ import annotations

from torch import nn

from zoo.errors import BenchError, allowed
from zoo.files.host_memory import rehome
from zoo.model.build import ZooModel, resolve_dtype
from zoo.quant.linear import INT4_GROUP_SIZES, Int4Linear, Int8Embedding, Int8Linear, QuantizedLinear

WEIGHTS_DTYPES = ("bf16", "float32", "int8", "int4")
QUANTIZED = ("int8", "int4")
ALIASES = {"bfloat16": "bf16", "fp32": "float32", "f32": "float32"}
DEFAULT_GROUP_SIZE = 32  # int4; chosen by measurement (docs/architecture.md, "Quantized weights")
FLOAT_DTYPE = {"bf16": "bfloat16", "float32": "float32"}


def normalize(weights_dtype: str | None) -> str | None:
    """The canonical name (``bfloat16`` -> ``bf16``), or a BenchError naming what is allowed."""
    if weights_dtype is None:
        return None
    name = ALIASES.get(str(weights_dtype).lower(), str(weights_dtype).lower())
    if name not in WEIGHTS_DTYPES:
        raise BenchError(f"weights_dtype: {weights_dtype!r} is not a weights dtype; {allowed(WEIGHTS_DTYPES)}")
    return name


def check_group_size(group_size: int | None) -> int:
    """The int4 group size (default ``DEFAULT_GROUP_SIZE``), or a BenchError."""

    size = DEFAULT_GROUP_SIZE if group_size is None else group_size
    if size not in INT4_GROUP_SIZES:
        raise BenchError(
            f"weights_group_size: {group_size} is not supported; {allowed(str(s) for s in INT4_GROUP_SIZES)}"
        )
    return size


def run_dtype(weights_dtype: str | None, dtype: str | None, default: str) -> str:
    """The model's dtype for a run: ``dtype`` if given, else the float weights dtype, else
    bfloat16 for quantized weights, else ``default``. A float weights dtype that contradicts
    ``dtype`` is a BenchError."""
    name = normalize(weights_dtype)
    if name in FLOAT_DTYPE:
        if dtype is not None and resolve_dtype(dtype) != resolve_dtype(FLOAT_DTYPE[name]):
            raise BenchError(f"weights_dtype: {name} contradicts dtype={dtype}; give one of them, or the same dtype")
        return FLOAT_DTYPE[name]
    if name in QUANTIZED:
        return dtype or "bfloat16"
    return dtype or default


def quantize(model: ZooModel, weights_dtype: str | None, group_size: int | None = None) -> ZooModel:
    """Replace the model's linear layers by quantized ones, in place; returns the model.

    Float ``weights_dtype`` (or None) leaves it unchanged: the run builds it in that dtype.
    Works on the meta device too (shapes only), which is how the analysis counts bytes.
    """

    name = normalize(weights_dtype)
    if name not in QUANTIZED:
        return model
    size = check_group_size(group_size)
    head, embed = model.lm_head, model.embed
    tied = (
        model.head_tied
        and isinstance(head, nn.Linear)
        and isinstance(embed, nn.Embedding)
        and head.weight is embed.weight
    )
    targets = [
        (parent, child_name, child)
        for parent in model.modules()
        for child_name, child in parent.named_children()
        # a Linear with sub-modules (BERT's masked-LM head: dense, norm, then the decoder)
        # computes more than x W^T + b, so it stays in float; its plain parts are quantized
        if isinstance(child, nn.Linear) and not isinstance(child, QuantizedLinear) and not any(child.children())
    ]
    for parent, child_name, linear in targets:
        weight, bias = linear.weight.detach(), None if linear.bias is None else linear.bias.detach()
        if name == "int8":
            quantized: nn.Module = Int8Linear(weight, bias, weight.dtype)
        else:
            if linear.in_features % size:
                raise BenchError(
                    f"weights_group_size: {size} does not divide in_features={linear.in_features} of {child_name}; "
                    "choose a group size that divides every layer's input width"
                )
            quantized = Int4Linear(weight, bias, weight.dtype, size)
        replace_linear(parent, child_name, quantized)
    if tied and isinstance(model.lm_head, QuantizedLinear):
        head = model.lm_head
        table = embed.weight.detach()
        use_int8_rows(
            embed, Int8Embedding(head.qweight, head.scales) if name == "int8" else Int8Embedding.from_table(table)
        )
    rehome(model)  # the packed weights streamed 13% faster copied once (zoo.files.host_memory.rehome)
    return model


def use_int8_rows(embed: nn.Module, rows: nn.Module) -> None:
    """Make the token table ``embed`` read its rows from ``rows`` (an ``Int8Embedding``) and
    drop its float table. A tied int8 head passes its own buffers, so the matrix is held once;
    ``quantize`` and a GGUF's 8-bit token table (zoo/hub/gguf/quantized.py) both come here."""
    embed.quantized_rows = rows  # type: ignore[assignment]
    embed.weight = None  # type: ignore[assignment]  # the int8 rows replace the float table


def replace_linear(parent: nn.Module, name: str, quantized: nn.Module) -> None:
    """Put ``quantized`` where the linear ``parent.name`` was. What the build declared of
    that place (its family, a head's logits and tying) lives on the model by path
    (``ZooModel.part_families``, ``head_gives_logits``, ``head_tied``), so nothing moves."""
    setattr(parent, name, quantized)


def stored_bytes(model: nn.Module) -> int:
    """Bytes the model's weights occupy as laid out: unique parameters (tied ones once) plus
    the packed weights and scales of quantized layers. The one count the analysis, the
    harness and the roofline share."""

    unique = {id(p): p for p in model.parameters()}
    for module in model.modules():
        if isinstance(module, (QuantizedLinear, Int8Embedding)):
            unique.update({id(b): b for b in module.buffers(recurse=False)})  # shared buffers once
    return sum(t.numel() * t.element_size() for t in unique.values())
