"""Half-precision products and convolutions computed in float32 on a CPU without native kernels.

Where the host probe's bfloat16 (float16) matmul ran at under half float32's (an AVX2-only
CPU: torch's bfloat16 GEMM 1.2 against float32's 120-172 GFLOP/s on a square product, ``zoo
hardware``), a ``zoo bench``/``compare`` run (``widened_products``, around its phases)
computes that dtype's several-row work in float32 and rounds each result once to the dtype:
the same float32 accumulation torch's half-precision kernels do, in another order.

- ``linear``: several-row products (``zoo.components.linear.Linear``), the weight widened per
  call in chunks of ``WIDEN_CHUNK_BYTES`` (no float32 copy of a large head held at once). On
  an AVX2-only AMD EPYC (two threads) a 128 x 768 by 3072 x 768 bfloat16 product took 53.7 ms
  through ``F.linear`` and 10.6 widened (float32: 8.4); gpt2's bfloat16 prefill (4 layers, 128
  tokens) ran 4.2x as fast, 5.2x at 512.
- ``depthwise_conv``: the recurrent mixers' short causal convolution over a prompt, which torch
  runs in half precision channel by channel through its slow reference convolution there
  (18,432 calls of ``_slow_conv2d_forward`` in three prefills of a 4-layer Mamba, 97 ms a
  prefill).
- the quantized layers' prompt rows (``zoo.quant``: int4 from ``TILE_FROM`` rows, int8 tiles):
  their weight tiles widened to float32 instead of to the dtype, the GEMM in float32. A packed
  SmolLM2-135M GGUF (int4 layers, bfloat16 activations) prefilled 128 tokens at 8.0 tokens/s
  there at two threads (5.3 at one), 403-428 widened: 0.03x llama.cpp's to 1.49-1.51x
  (``bench/vs_llamacpp.py``).

One-row products keep their own paths (zoo's row kernel reads half precision as it is), and
off the CPU nothing is widened.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable

import torch
import torch.nn.functional as F

from zoo.components.run_dtypes import RunDtypes

WIDEN_CHUNK_BYTES = 64 << 20  # float32 weight rows widened at once by a widened product
_WIDENED = RunDtypes()  # the dtypes whose several-row work runs widened, during a run


def widened_products(dtypes: Iterable[torch.dtype]) -> contextlib.AbstractContextManager[None]:
    """Widen the CPU work of ``dtypes`` while the block runs (module doc): a harness run on the
    CPU wraps its phases in it with the dtypes whose matmul the host probe measured slow."""
    return _WIDENED.during(dtypes)


def widens(x: torch.Tensor) -> bool:
    """Whether work on ``x`` runs widened: x on the CPU in a dtype of the current run's set."""
    return x.dtype in _WIDENED.dtypes and x.device.type == "cpu"


def linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    """``F.linear(x, weight, bias)`` in float32, the weight widened a chunk of rows at a time,
    rounded once to x's dtype -> (..., out)."""
    xf = x.float()  # (..., in)
    step = max(1, WIDEN_CHUNK_BYTES // (4 * weight.shape[1]))
    parts = [
        F.linear(xf, weight[r : r + step].float(), None if bias is None else bias[r : r + step].float())
        for r in range(0, weight.shape[0], step)
    ]  # each (..., rows of the chunk)
    return (parts[0] if len(parts) == 1 else torch.cat(parts, dim=-1)).to(x.dtype)  # (..., out)


def depthwise_conv(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    """``F.conv1d(x, weight, bias, groups=C)`` for x (B, C, T) and weight (C, 1, K), in float32
    and rounded once to x's dtype -> (B, C, T - K + 1)."""
    wide_bias = None if bias is None else bias.float()
    return F.conv1d(x.float(), weight.float(), wide_bias, groups=x.shape[1]).to(x.dtype)  # (B, C, T-K+1)
