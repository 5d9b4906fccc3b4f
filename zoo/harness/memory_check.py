"""Will a run fit? The bytes a bench run needs, from the analysis, against what is free.

A spec with ``d_model`` 10**12 or a batch of 10**9 used to reach the allocator and die with a
traceback (or the kernel's OOM killer). Before building anything, ``check_fits`` adds the
weights (exact, from the meta-device count), the KV cache (exact, from each attention's
``cache_layout``) and an estimate of prefill's activations, and refuses a run whose total is
more than the device has free, naming each figure.
"""

from __future__ import annotations

import torch

from zoo.errors import BenchError
from zoo.model_spec import ModelSpec


def gib(n: int | float) -> str:
    return f"{n / 2**30:,.1f} GiB"


def needed_bytes(spec: ModelSpec, batch_size: int, prompt_len: int, context: int, dtype: torch.dtype) -> dict[str, int]:
    """Weights, KV cache and a prefill activation estimate, in bytes."""
    from zoo.analysis import count_params, kv_cache_bytes

    item = dtype.itemsize
    weights = count_params(spec).total * item
    kv = kv_cache_bytes(spec, batch_size, context, dtype)
    layers = spec.layer_specs()  # at most MAX_LAYERS
    widest = max(spec.d_model, *(int(getattr(layer.ffn.options, "hidden", 0) or 0) for layer in layers))
    heads = max(int(getattr(layer.attention.options, "n_heads", 1) or 1) for layer in layers)
    tokens = batch_size * prompt_len
    # a few (B, T, widest) buffers at once, one (B, H, T, T) score matrix (when SDPA falls back
    # to its maths kernel), the prompt ids (int64) and the last logits in float32
    activations = tokens * widest * item * 4 + batch_size * heads * prompt_len * prompt_len * item
    activations += tokens * 8 + batch_size * spec.vocab_size * 4
    return {"weights": weights, "kv": kv, "activations": activations}


def free_bytes(device: torch.device) -> int | None:
    """Bytes free on the device now (None when it cannot be told)."""
    if device.type == "cuda":
        free, _ = torch.cuda.mem_get_info(device)
        return int(free)
    if device.type in ("cpu", "mps"):
        import psutil

        return int(psutil.virtual_memory().available)
    return None


def check_fits(spec: ModelSpec, batch_size: int, prompt_len: int, context: int, dtype: torch.dtype, device: torch.device) -> None:
    """Raise a one-line BenchError when the run needs more memory than is free."""
    parts = needed_bytes(spec, batch_size, prompt_len, context, dtype)
    total = sum(parts.values())
    free = free_bytes(device)
    if free is None or total <= free:
        return
    raise BenchError(
        f"{spec.name or 'this model'} needs about {gib(total)} on {device} (weights {gib(parts['weights'])}, "
        f"KV cache {gib(parts['kv'])} at batch {batch_size:,} x {context:,} tokens, activations about "
        f"{gib(parts['activations'])}) but {gib(free)} is free; lower --batch-size or --prompt-len, or the model's size"
    )
