"""RWKV-4's WKV over a prompt as one fused C++ loop: the time mix's ``cpu-scan`` kernel.

The reference prompt path (``wkv._scan``) is a parallel scan: float64 ``logcumsumexp`` over
chunks of 64 tokens, two scans per chunk and some twenty whole-tensor ops around them. Per
token and channel the recurrence itself is a dozen operations on three numbers (num, den,
max), so on a CPU the cheapest form is the recurrence: the state of a block of channels is
held across time, each time step reads contiguous slices of k and v, and nothing is
materialised but the output. This is transformers' CPU recurrence (``_step`` here, the
max-trick in float32) in C++, with ``_step``'s conventions: ``den == 0`` is an empty state,
and a padding token (``valid`` False) leaves the state as it was. Blocks of channels run in
parallel on torch's threads.

Inference only: ``scan_ready`` is False under autograd, off the CPU or where the time mix
does not run this kernel (``--impl reference``); one-token calls keep their own step. The
loop is a custom op (``zoo.parts.CppExtension``), so a compiled prefill runs it too.
"""

from __future__ import annotations

import torch

from zoo.parts import CppExtension, CppFunction, Kernel, KernelChoice

SOURCE = r"""
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <algorithm>
#include <cmath>

// k, v (B, T, C); w, u (C); valid (B, T) float 0/1 or empty (all real); num, den, top (B, C) in place -> (B, T, C).
at::Tensor wkv_scan(at::Tensor w, at::Tensor u, at::Tensor k, at::Tensor v, at::Tensor valid,
                    at::Tensor num, at::Tensor den, at::Tensor top) {
  const int64_t batch = k.size(0), T = k.size(1), C = k.size(2);
  const int64_t block = 64, blocks = (C + block - 1) / block;
  const bool masked = valid.numel() > 0;
  auto out = at::empty_like(k);
  const float *wp = w.data_ptr<float>(), *up = u.data_ptr<float>(), *kp = k.data_ptr<float>();
  const float *vp = v.data_ptr<float>(), *okp = masked ? valid.data_ptr<float>() : nullptr;
  float *np = num.data_ptr<float>(), *dp = den.data_ptr<float>(), *tp = top.data_ptr<float>();
  float *op = out.data_ptr<float>();
  at::parallel_for(0, batch * blocks, 1, [&](int64_t begin, int64_t end) {
    for (int64_t job = begin; job < end; ++job) {
      const int64_t b = job / blocks, c0 = (job % blocks) * block, c1 = std::min(c0 + block, C);
      float *n = np + b * C, *d = dp + b * C, *m = tp + b * C;
      for (int64_t t = 0; t < T; ++t) {
        const int64_t row = (b * T + t) * C;
        const bool real = !masked || okp[b * T + t] > 0.5f;
#pragma omp simd
        for (int64_t c = c0; c < c1; ++c) {
          const float key = kp[row + c], value = vp[row + c];
          const float has = d[c] > 0.f ? 1.f : 0.f, old = d[c] > 0.f ? m[c] : -1e38f;
          const float bonus = up[c] + key, hi = std::max(old, bonus);
          const float a1 = std::exp(old - hi) * has, a2 = std::exp(bonus - hi);
          op[row + c] = (a1 * n[c] + a2 * value) / (a1 * d[c] + a2);
          const float decayed = old + wp[c], hi2 = std::max(decayed, key);
          const float b1 = std::exp(decayed - hi2) * has, b2 = std::exp(key - hi2);
          if (real) {
            n[c] = b1 * n[c] + b2 * value;
            d[c] = b1 * d[c] + b2;
            m[c] = hi2;
          }
        }
      }
    }
  });
  return out;
}
"""


EXTENSION = CppExtension(
    "zoo_rwkv_cpu_wkv",
    SOURCE,
    [
        CppFunction(
            "wkv_scan",
            "(Tensor w, Tensor u, Tensor k, Tensor v, Tensor valid, Tensor(a!) num, Tensor(b!) den, Tensor(c!) top) "
            "-> Tensor",
            lambda k, **_: torch.empty_like(k),  # (B, T, C)
        )
    ],
)


KERNEL = Kernel("cpu-scan", "cpu", EXTENSION.available, compiles=True)

State = tuple[torch.Tensor, torch.Tensor, torch.Tensor]  # num, den, max: (B, C) float32 each


def scan_ready(mixer: KernelChoice, x: torch.Tensor) -> bool:
    """Whether this prompt call of ``mixer`` runs the fused loop (module doc)."""
    return mixer.uses(KERNEL, x.device, stateful=False)  # inference only: autograd refused


def wkv_scan(
    w: torch.Tensor, u: torch.Tensor, k: torch.Tensor, v: torch.Tensor, valid: torch.Tensor | None, state: State
) -> tuple[torch.Tensor, State]:
    """``wkv.wkv``'s maths on the fused loop: w, u (C,); k, v (B, T, C); valid (B, T) bool or
    None; state (num, den, max) (B, C) each, not modified. Returns wkv (B, T, C) float32 and
    the state after the last token."""
    after = tuple(t.float().contiguous().clone() for t in state)  # updated in place by the kernel
    mask = torch.empty(0) if valid is None else valid.float().contiguous()  # (B, T) or empty: all real
    f32 = (t.float().contiguous() for t in (w, u, k, v))
    out = EXTENSION.op("wkv_scan")(*f32, mask, *after)  # (B, T, C)
    return out, after  # type: ignore[return-value]
