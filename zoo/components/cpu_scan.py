"""Mamba-1's selective scan as one fused CPU loop, compiled from C++ on first use.

The pure-PyTorch scan (``mamba_scan.selective_scan``) is a chain of whole-tensor elementwise
ops over (B, L, d, N) chunks: each op streams its tensors through memory, and a chunk of L
tokens takes log2(L) passes. Per token and channel the recurrence is only N multiply-adds and
N exponentials, so the fastest CPU form is the recurrence itself, with each channel's state
(N floats) held in registers across time and nothing materialised: this kernel. Channels run
in parallel (``at::parallel_for``, torch's threads) in blocks of 16, so each time step reads
contiguous slices of x and dt; the state is read once and written back once per call.

Built by ``cpu_extension`` (a C++ compiler and ninja; the build is cached in torch's
extensions folder, so later processes load it in a second). Where it cannot be built, ``cpu_extension``
logs why once, the kernel does not load, and the mixer runs the reference scan. The scan is the custom
op ``torch.ops.zoo.cpu_scan_scan`` (``cpu_ops``), so compiled graphs run it too. Inference
only: there is no backward (a scan under autograd takes the reference path).
"""

from __future__ import annotations

import torch

from zoo.components.cpu_ops import CppExtension, CppFunction

SOURCE = r"""
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <cmath>

// y (B, T, D) = C_t . h_t for h_t = exp(dt_t A) * h_{t-1} + dt_t x_t B_t; h (B, D, N) updated in place.
at::Tensor scan(at::Tensor x, at::Tensor dt, at::Tensor A, at::Tensor Bm, at::Tensor Cm,
                at::Tensor h) {
  const int64_t batch = x.size(0), T = x.size(1), D = x.size(2), N = A.size(1);
  const int64_t block = 16, blocks = (D + block - 1) / block;
  auto y = at::empty_like(x);
  const float *xp = x.data_ptr<float>(), *dtp = dt.data_ptr<float>(), *Ap = A.data_ptr<float>();
  const float *Bp = Bm.data_ptr<float>(), *Cp = Cm.data_ptr<float>();
  float *hp = h.data_ptr<float>(), *yp = y.data_ptr<float>();
  at::parallel_for(0, batch * blocks, 1, [&](int64_t begin, int64_t end) {
    for (int64_t job = begin; job < end; ++job) {
      const int64_t b = job / blocks, d0 = (job % blocks) * block, d1 = std::min(d0 + block, D);
      for (int64_t t = 0; t < T; ++t) {
        const int64_t row = b * T + t;
        const float *bv = Bp + row * N, *cv = Cp + row * N;
        for (int64_t d = d0; d < d1; ++d) {
          const float step = dtp[row * D + d], input = step * xp[row * D + d];
          const float *a = Ap + d * N;
          float *state = hp + (b * D + d) * N;
          float acc = 0.f;
          for (int64_t n = 0; n < N; ++n) {
            const float value = std::exp(step * a[n]) * state[n] + input * bv[n];
            state[n] = value;
            acc += cv[n] * value;
          }
          yp[row * D + d] = acc;
        }
      }
    }
  });
  return y;
}
"""

EXTENSION = CppExtension(
    "zoo_cpu_scan",
    SOURCE,
    [
        CppFunction(
            "scan",
            "(Tensor x, Tensor dt, Tensor A, Tensor Bm, Tensor Cm, Tensor(a!) h) -> Tensor",
            lambda x, **_: torch.empty_like(x),  # (B, T, d)
        )
    ],
)


def scan_into(
    x: torch.Tensor, dt: torch.Tensor, A: torch.Tensor, B: torch.Tensor, C: torch.Tensor, state: torch.Tensor | None
) -> torch.Tensor:
    """``mamba_scan.selective_scan``'s maths on the fused kernel: x, dt (B, T, d), A (d, N),
    B, C (B, T, N); ``state`` (B, d, N), the state before the first token, is overwritten in
    place with the state after the last (zeros and thrown away when None); returns y (B, T, d)
    float32 (no D skip)."""
    batch, _, d = x.shape
    if state is None:
        h = torch.zeros(batch, d, A.shape[-1])  # (B, d, N)
    elif state.dtype == torch.float32 and state.is_contiguous():
        h = state  # updated in place by the kernel
    else:
        h = state.float().contiguous()  # (B, d, N)
    y = EXTENSION.op("scan")(*(t.float().contiguous() for t in (x, dt, A, B, C)), h)  # (B, T, d)
    if state is not None and h is not state:
        state.copy_(h)
    return y
