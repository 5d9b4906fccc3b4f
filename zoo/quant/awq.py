"""Activation-aware weight quantization (AWQ; Lin et al. 2023, arXiv:2306.00978) and plain
round-to-nearest (RTN), both to 4-bit integers with integer zero points per group.

AWQ's observation: a few input channels carry large activations, and the error of rounding
the weights that multiply them dominates the output error. Scaling input channel ``j`` of a
weight by ``s_j`` before rounding (and the activation by ``1 / s_j``) shrinks its relative
rounding error. Per group of linears that read the same input, the scales are
``s = mean|x|^alpha`` (normalised by ``sqrt(max s * min s)``, as llm-awq's ``auto_scale``
does), ``alpha`` chosen on a grid over [0, 1] to minimise ``sum ||X W^T - (X / s) Q(W s)^T||^2``
on the calibration activations. ``alpha = 0`` gives ``s = 1``, which is RTN, so AWQ's error
is never above RTN's on those activations.

The ``1 / s`` is folded into the operation producing the input, as AWQ does: a norm's weight
(and bias), so the saved model computes the same without a new op. Groups are found by
tracing one forward: linears whose input is the very tensor a module with a per-channel
``weight`` returned are grouped under it, and the fold is kept only if that module, run
again on its recorded input, returns its old output divided by ``s`` (so an RMSNorm with
``(1 + w)``, or any module the fold does not commute with, falls back to RTN). Linears fed
by anything else (attention output, the FFN's gated product) are rounded to nearest: the
previous-linear folds of llm-awq (v -> o, up -> down) depend on the block's wiring and are
not done. Clipping search (llm-awq's ``auto_clip``) is not done either. The head stays float.

Quantizer (llm-awq ``pseudo_quantize_tensor``, zero-point form): per group of ``group_size``
inputs, ``scale = (max - min) / 15`` rounded to float16 (what the checkpoint stores),
``zero = round(-min / scale)`` clamped to 0..15, ``q = clamp(round(w / scale) + zero, 0, 15)``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
from torch import nn

from zoo.errors import BenchError

GRID = 20  # alpha in {0, 1/20, ..., 1}, llm-awq's n_grid
SAMPLE_ROWS = 512  # activation rows kept per group to measure output error
BITS = 4


@dataclass
class Quantized:
    """One linear's integers in transformers' (out, in) orientation."""

    values: torch.Tensor  # (out, in) int64 in 0..15
    zeros: torch.Tensor  # (out, G) int64 in 0..15
    scales: torch.Tensor  # (out, G) float16

    def dequantize(self) -> torch.Tensor:
        group = self.values.shape[1] // self.zeros.shape[1]
        zeros = self.zeros.repeat_interleave(group, dim=1)  # (out, in)
        scales = self.scales.float().repeat_interleave(group, dim=1)  # (out, in)
        return (self.values - zeros).float() * scales  # (out, in)


@dataclass
class Result:
    """What a quantization did: the layers' integers and, per group, the search's outcome."""

    layers: dict[str, Quantized] = field(default_factory=dict)  # zoo module name -> integers
    alphas: dict[str, float] = field(default_factory=dict)  # input producer -> chosen alpha
    errors: dict[str, tuple[float, float]] = field(default_factory=dict)  # producer -> (chosen, RTN) output error


def quantize_weight(weight: torch.Tensor, group_size: int) -> Quantized:
    """Round-to-nearest 4-bit with an integer zero point per group of inputs."""
    out_features, in_features = weight.shape
    w = weight.float().reshape(out_features, in_features // group_size, group_size)  # (out, G, g)
    low, high = w.amin(-1), w.amax(-1)  # (out, G)
    scales = ((high - low).clamp(min=1e-5) / (2**BITS - 1)).half()  # (out, G) as stored
    s = scales.float()
    zeros = torch.round(-low / s).clamp(0, 2**BITS - 1)  # (out, G)
    values = (torch.round(w / s[..., None]) + zeros[..., None]).clamp(0, 2**BITS - 1)  # (out, G, g)
    return Quantized(values.long().reshape(out_features, in_features), zeros.long(), scales)


def output_error(weights: list[torch.Tensor], x: torch.Tensor, scales: torch.Tensor, group_size: int) -> float:
    """``sum ||x W^T - (x / s) Q(W s)^T||^2`` over the group's weights; x (N, in), s (in,)."""
    total = 0.0
    for w in weights:
        rounded = quantize_weight(w * scales, group_size).dequantize()  # (out, in)
        total += float(((x @ w.T) - (x / scales) @ rounded.T).pow(2).sum())
    return total


def search_scales(
    weights: list[torch.Tensor], x_mean: torch.Tensor, x: torch.Tensor, group_size: int
) -> tuple[float, torch.Tensor, float, float]:
    """(alpha, scales (in,), error at alpha, RTN error): the grid search of AWQ's ``auto_scale``."""
    best = (0.0, torch.ones_like(x_mean), output_error(weights, x, torch.ones_like(x_mean), group_size))
    rtn = best[2]
    for step in range(1, GRID + 1):
        alpha = step / GRID
        s = x_mean.pow(alpha).clamp(min=1e-4)  # (in,)
        s = s / (s.max() * s.min()).sqrt()
        err = output_error(weights, x, s, group_size)
        if err < best[2]:
            best = (alpha, s, err)
    return best[0], best[1], best[2], rtn


@dataclass
class Trace:
    """One forward's wiring and the calibration statistics of each linear's input."""

    producers: dict[str, str] = field(default_factory=dict)  # linear -> module whose output it reads
    abs_sum: dict[str, torch.Tensor] = field(default_factory=dict)  # linear -> sum |x| per channel
    rows: dict[str, list[torch.Tensor]] = field(default_factory=dict)  # linear -> sampled input rows
    norm_io: dict[str, tuple[torch.Tensor, torch.Tensor]] = field(default_factory=dict)  # producer -> (in, out)
    count: int = 0


@torch.no_grad()
def trace(model: nn.Module, tokens: torch.Tensor, targets: dict[str, nn.Linear], window: int) -> Trace:
    """Run the calibration tokens (N,) through the model in windows, recording for each
    target linear its input statistics and which per-channel-weighted module produced it."""
    t = Trace()
    # id of a tensor -> (the module that returned it, the tensor: held so no id is reused this window)
    outputs: dict[int, tuple[str, torch.Tensor]] = {}
    scalable = {
        n: m
        for n, m in model.named_modules()
        if isinstance(getattr(m, "weight", None), nn.Parameter) and m.weight.dim() == 1
    }

    def after(name: str):  # type: ignore[no-untyped-def]
        def hook(module: nn.Module, args: tuple, out: torch.Tensor) -> None:
            outputs[id(out)] = (name, out)
            if name not in t.norm_io:
                t.norm_io[name] = (
                    args[0].reshape(-1, args[0].shape[-1])[:64].clone(),
                    out.reshape(-1, out.shape[-1])[:64].clone(),
                )

        return hook

    def before(name: str):  # type: ignore[no-untyped-def]
        def hook(module: nn.Module, args: tuple) -> None:
            x = args[0].reshape(-1, args[0].shape[-1]).float()  # (M, in)
            t.producers.setdefault(name, outputs.get(id(args[0]), ("", None))[0])
            t.abs_sum[name] = t.abs_sum.get(name, 0) + x.abs().sum(0)
            kept = sum(r.shape[0] for r in t.rows.setdefault(name, []))
            t.rows[name].append(x[: max(SAMPLE_ROWS - kept, 0)].clone())

        return hook

    handles = [m.register_forward_hook(after(n)) for n, m in scalable.items()]
    handles += [m.register_forward_pre_hook(before(n)) for n, m in targets.items()]
    try:
        for start in range(0, tokens.numel(), window):
            chunk = tokens[start : start + window]
            outputs.clear()
            model(chunk[None])
            t.count += chunk.numel()
    finally:
        for handle in handles:
            handle.remove()
    return t


@torch.no_grad()
def fold_into(producer: nn.Module, io: tuple[torch.Tensor, torch.Tensor], scales: torch.Tensor) -> bool:
    """Divide the producer's per-channel weight (and bias) by ``scales``; kept only if it then
    returns its recorded output divided by them (a module the fold commutes with)."""
    weight, bias = producer.weight, getattr(producer, "bias", None)
    saved = (weight.detach().clone(), None if bias is None else bias.detach().clone())
    weight.div_(scales.to(weight.dtype))
    if isinstance(bias, nn.Parameter):
        bias.div_(scales.to(bias.dtype))
    x, y = io
    if torch.allclose(producer(x).float(), y.float() / scales, rtol=1e-4, atol=1e-5):
        return True
    weight.copy_(saved[0])
    if saved[1] is not None:
        bias.copy_(saved[1])  # type: ignore[union-attr]
    return False


def quantize_model(model: nn.Module, tokens: torch.Tensor, method: str, group_size: int, window: int = 256) -> Result:
    """AWQ or RTN on every plain linear but the head, in place on the producers' weights
    (folded scales); returns the integers of each linear, for saving."""
    targets = {
        n: m
        for n, m in model.named_modules()
        if isinstance(m, nn.Linear) and not any(m.children()) and m is not getattr(model, "lm_head", None)
    }
    for name, linear in targets.items():
        if linear.in_features % group_size:
            raise BenchError(f"group_size: {group_size} does not divide in_features={linear.in_features} of {name}")
    t = trace(model, tokens, targets, window)
    modules = dict(model.named_modules())
    result = Result()
    by_producer: dict[str, list[str]] = {}
    for name in targets:  # a linear no recorded module feeds is a group of its own
        by_producer.setdefault(t.producers.get(name) or f"#{name}", []).append(name)
    for key, names in by_producer.items():
        producer = "" if key.startswith("#") else key
        weights = [targets[n].weight.detach().float() for n in names]
        x = torch.cat(t.rows[names[0]])  # (N, in): the group's shared input
        alpha, scales, err, rtn = 0.0, torch.ones(x.shape[1]), 0.0, 0.0
        if method == "awq" and producer:
            alpha, scales, err, rtn = search_scales(weights, t.abs_sum[names[0]] / t.count, x, group_size)
            if alpha and not fold_into(modules[producer], t.norm_io[producer], scales):
                alpha, scales, err = 0.0, torch.ones_like(scales), rtn
        else:
            rtn = err = output_error(weights, x, scales, group_size)
        for n, w in zip(names, weights):
            scaled = w * scales  # (out, in)
            result.layers[n] = quantize_weight(scaled, group_size)
            with torch.no_grad():
                targets[n].weight.copy_(scaled.to(targets[n].weight.dtype))
        result.alphas[key], result.errors[key] = alpha, (err, rtn)
    return result
