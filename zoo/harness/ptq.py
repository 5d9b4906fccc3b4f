"""Post-training quantization of a checkpoint (``zoo quantize``): calibrate, quantize, save
an AWQ-format checkpoint, and measure it against round-to-nearest on the same weights.

The quantized folder is read back through ``zoo.from_pretrained`` (the AWQ loader of
zoo/hub/quantized_checkpoints.py), so what is measured is what was saved. Perplexity is on
held-out text (``eval_text``, else the last quarter of the calibration tokens, which are
then not used to calibrate); KL is mean KL(float || quantized) per position on that text.
"""

from __future__ import annotations

import tempfile
from dataclasses import dataclass
from pathlib import Path

import torch

from zoo.errors import BenchError
from zoo.files.safe_io import read_text
from zoo.hub.download import resolve_checkpoint
from zoo.hub.loading import from_pretrained
from zoo.hub.quantized_checkpoints import save_awq
from zoo.quant import fidelity
from zoo.quant.awq import quantize_model
from zoo.quant.linear import INT4_GROUP_SIZES

BYTE_VOCAB = 256  # a model whose vocabulary is the 256 bytes reads text without a tokenizer
METHODS = ("awq", "rtn")
HELD_OUT = 4  # without eval_text, 1 / HELD_OUT of the calibration tokens are held out


@dataclass(frozen=True)
class MethodFigures:
    method: str
    perplexity: float
    kl: float  # mean KL(float || quantized) per held-out position, nats
    output_error: float  # sum over linear groups of the calibration output error
    rtn_output_error: float


@dataclass(frozen=True)
class Report:
    out: Path
    float_perplexity: float
    figures: list[MethodFigures]  # the method asked, then RTN when the method is not RTN
    calibration_tokens: int
    eval_tokens: int


def text_ids(path: Path, folder: Path, vocab_size: int) -> torch.Tensor:
    """Token ids (N,) of a text file through the checkpoint's ``tokenizer.json``, or its bytes
    for a byte-vocabulary model; any other checkpoint without a tokenizer is refused."""

    text = read_text(path, BenchError, "calibration text")
    if (folder / "tokenizer.json").is_file():
        from tokenizers import Tokenizer

        ids = Tokenizer.from_file(str(folder / "tokenizer.json")).encode(text).ids
    elif vocab_size == BYTE_VOCAB:
        ids = list(text.encode("utf-8"))
    else:
        raise BenchError(
            f"{folder}: no tokenizer.json, and its vocabulary ({vocab_size}) is not bytes; calibration "
            "text must be tokenized by the checkpoint's own tokenizer"
        )
    if len(ids) < 8:
        raise BenchError(f"{path}: {len(ids)} tokens; calibration needs at least 8")
    return torch.tensor(ids, dtype=torch.long)


def quantize_checkpoint(
    weights: str | Path,
    calib: Path,
    out: Path,
    method: str = "awq",
    group_size: int = 128,
    eval_text: Path | None = None,
) -> Report:
    """Quantize a float checkpoint with ``method`` into ``out`` and measure it (and RTN)."""

    if method not in METHODS:
        raise BenchError(f"method: {method!r} is not a quantization method; allowed: {', '.join(METHODS)}")
    if group_size not in INT4_GROUP_SIZES:
        raise BenchError(f"group_size: {group_size} is not supported; allowed: {', '.join(map(str, INT4_GROUP_SIZES))}")
    folder = resolve_checkpoint(weights)
    reference = from_pretrained(folder, dtype="float32", progress=False)
    tokens = text_ids(calib, folder, reference.spec.vocab_size)
    if eval_text is not None:
        held_out = text_ids(eval_text, folder, reference.spec.vocab_size)
    else:
        cut = tokens.numel() - tokens.numel() // HELD_OUT
        tokens, held_out = tokens[:cut], tokens[cut:]
    held_out = held_out[: fidelity.EVAL_MAX_TOKENS]
    window = min(fidelity.EVAL_WINDOW, reference.spec.max_seq_len)
    reference_logits = _logits(reference, held_out, window)
    figures = []
    for name in [method] + (["rtn"] if method != "rtn" else []):
        model = from_pretrained(folder, dtype="float32", progress=False)
        result = quantize_model(model, tokens, name, group_size, window)
        target = out if name == method else Path(tempfile.mkdtemp(prefix="zoo-rtn-"))
        save_awq(model, result.layers, target, group_size, folder)
        quantized = from_pretrained(target, dtype="float32", progress=False)
        ppl = fidelity.perplexity(quantized, held_out, reference.spec.max_seq_len)
        kl = fidelity.compare_logits(reference_logits, _logits(quantized, held_out, window)).kl_divergence
        chosen, rtn = (sum(e[i] for e in result.errors.values()) for i in (0, 1))
        figures.append(MethodFigures(name, ppl, kl, chosen, rtn))
    return Report(
        out,
        fidelity.perplexity(reference, held_out, reference.spec.max_seq_len),
        figures,
        tokens.numel(),
        held_out.numel(),
    )


@torch.no_grad()
def _logits(model: torch.nn.Module, tokens: torch.Tensor, window: int) -> torch.Tensor:
    """Logits (1, N, vocab) of ``tokens`` (N,) scored in independent windows."""
    parts = [model(tokens[s : s + window][None]).float() for s in range(0, tokens.numel(), window)]
    return torch.cat(parts, dim=1)
