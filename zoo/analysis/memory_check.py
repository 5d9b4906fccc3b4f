"""Will a run fit? The bytes a bench run needs, from the analysis, against what is free.

A spec with ``d_model`` 10**12 or a batch of 10**9 used to reach the allocator and die with a
traceback (or the kernel's OOM killer). Before building anything, ``check_fits`` adds the
weights (exact, from the meta-device count), the cache (exact, from each module's
``state_layout``) and an estimate of the activations of the run's forward, and refuses a run
whose total is more than the device has free, naming each figure. What the cache and the
forward are depends on the model's topology (``NEEDS``): a decoder's K/V at prompt + gen tokens
and its prefill; no cache and one forward of the batch for an encoder; self K/V at gen_len
plus cross K/V at prompt_len, and the encoder's forward, for an encoder-decoder.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from zoo.analysis.counts import Topology, cache_bytes, count_params, kv_cache_bytes, meta_model, topology
from zoo.errors import BenchError
from zoo.specs.model import ModelSpec


def gib(n: int | float) -> str:
    return f"{n / 2**30:,.1f} GiB"


@dataclass(frozen=True)
class Need:
    """Cache and activation bytes of one run, and how the cache figure was reached (for the
    refusal's message)."""

    kv: int
    activations: int
    cache_note: str


def _buffers(spec: ModelSpec, batch_size: int, tokens: int, dtype: torch.dtype) -> int:
    """The activations of one forward over ``tokens``: a few (B, T, widest) buffers at once,
    one (B, H, T, T) score matrix (when SDPA falls back to its maths kernel) and the ids (int64)."""
    layers = spec.layer_specs()  # at most MAX_LAYERS
    widest = max(spec.d_model, *(int(getattr(layer.ffn.options, "hidden", 0) or 0) for layer in layers))
    heads = max(int(getattr(layer.attention.options, "n_heads", 1) or 1) for layer in layers)
    item = dtype.itemsize
    return batch_size * tokens * (widest * item * 4 + 8) + batch_size * heads * tokens * tokens * item


def _decoder(spec: ModelSpec, batch_size: int, prompt_len: int, gen_len: int, dtype: torch.dtype) -> Need:
    """K/V at prompt + gen tokens; prefill's buffers and the last logits in float32."""

    context = prompt_len + gen_len
    kv = kv_cache_bytes(spec, batch_size, context, dtype)
    activations = _buffers(spec, batch_size, prompt_len, dtype) + batch_size * spec.vocab_size * 4
    return Need(kv, activations, f"KV cache {gib(kv)} at batch {batch_size:,} x {context:,} tokens")


def _encoder(spec: ModelSpec, batch_size: int, prompt_len: int, gen_len: int, dtype: torch.dtype) -> Need:
    """No cache; one forward of the batch and the head's output for every token: logits
    (B, T, vocab), or hidden states (B, T, d) without an LM head."""

    width = spec.vocab_size if meta_model(spec).lm_head.logits else spec.d_model
    activations = _buffers(spec, batch_size, prompt_len, dtype) + batch_size * prompt_len * width * dtype.itemsize
    return Need(0, activations, f"no cache (an encoder) at batch {batch_size:,} x {prompt_len:,} tokens")


def _encoder_decoder(spec: ModelSpec, batch_size: int, prompt_len: int, gen_len: int, dtype: torch.dtype) -> Need:
    """Self K/V at gen_len and cross K/V at prompt_len; the encoder's forward, its output
    (the memory, (B, S, d)) and the decoder's last logits in float32."""

    kv = cache_bytes(spec, batch_size, gen_len, prompt_len, dtype).total
    activations = (
        _buffers(spec, batch_size, prompt_len, dtype) + batch_size * prompt_len * spec.d_model * dtype.itemsize
    )
    activations += batch_size * spec.vocab_size * 4
    note = f"KV cache {gib(kv)} at batch {batch_size:,} x {gen_len:,} decoder + {prompt_len:,} encoder tokens"
    return Need(kv, activations, note)


NEEDS: dict[Topology, Callable[[ModelSpec, int, int, int, torch.dtype], Need]] = {
    "decoder": _decoder,
    "encoder": _encoder,
    "encoder-decoder": _encoder_decoder,
}


def _need(spec: ModelSpec, batch_size: int, prompt_len: int, gen_len: int, dtype: torch.dtype) -> tuple[int, Need]:
    weights = count_params(spec).total * dtype.itemsize
    return weights, NEEDS[topology(spec)](spec, batch_size, prompt_len, gen_len, dtype)


def needed_bytes(spec: ModelSpec, batch_size: int, prompt_len: int, gen_len: int, dtype: torch.dtype) -> dict[str, int]:
    """Weights, cache and an activation estimate of the spec's topology's run, in bytes."""
    weights, need = _need(spec, batch_size, prompt_len, gen_len, dtype)
    return {"weights": weights, "kv": need.kv, "activations": need.activations}


def free_bytes(device: torch.device) -> int | None:
    """Bytes free on the device now (None when it cannot be told)."""
    if device.type == "cuda":
        free, _ = torch.cuda.mem_get_info(device)
        return int(free)
    if device.type in ("cpu", "mps"):
        import psutil

        return int(psutil.virtual_memory().available)
    return None


def check_fits(
    spec: ModelSpec, batch_size: int, prompt_len: int, gen_len: int, dtype: torch.dtype, device: torch.device
) -> None:
    """Raise a one-line BenchError when the run (of the spec's topology: ``NEEDS``) needs more
    memory than is free."""
    weights, need = _need(spec, batch_size, prompt_len, gen_len, dtype)
    total = weights + need.kv + need.activations
    free = free_bytes(device)
    if free is None or total <= free:
        return
    raise BenchError(
        f"{spec.name or 'this model'} needs about {gib(total)} on {device} (weights {gib(weights)}, "
        f"{need.cache_note}, activations about {gib(need.activations)}) but {gib(free)} is free; "
        "lower --batch-size or --prompt-len, or the model's size"
    )
