"""Multi-token (prefill) scans of Mamba2 and Gated DeltaNet as fused C++ loops: ``cpu-scan``.

The chunked forms (``ssd.chunk_scan``, ``delta_rule.chunk_gated_delta_rule``) turn the
recurrence into matrix products so that autograd and accelerators see large operations, at
the price of (L, L) tensors per chunk and head (decays, scores) and more arithmetic than the
recurrence itself. On a CPU core in inference the recurrence is cheaper: per token and head
it reads and writes the (P, N) or (d_k, d_v) state once or twice (32 KiB at Mamba2-130m's
head size, 64 KiB at Qwen3-Next's, so it stays in the core's cache) and does the minimum
arithmetic (``score_flops``), nothing materialised but the output. Here it is one C++ loop
per (batch, head) job, jobs spread over torch's threads (``at::parallel_for``); each token
sweeps the state along its contiguous last dimension in blocks of columns with one
accumulator per column held in registers (the SSD state is held transposed, (N, P), while
its job runs; the gated delta rule's token is ``delta_columns`` of ``cpu_columns_source``,
which the decode step takes too), so the compiler vectorises the sweep and the reductions
do not wait on each other.

Inference only (no backward): a mixer asks ``scan_ready`` first, which is False under
autograd, off the CPU, or where the mixer does not run this kernel (``--impl reference``);
those calls take the chunked reference. Both scans are custom ops (``cpu_ops``), so a compiled
prefill runs them too. One-token decode calls keep their own path (``cpu_steps``).
"""

from __future__ import annotations

import torch

from zoo.components import cpu_conv
from zoo.components.cpu_columns_source import COLUMNS
from zoo.components.cpu_ops import CppExtension, CppFunction
from zoo.components.kernels import Kernel, KernelChoice

SOURCE = (
    r"""
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <cmath>
#include <vector>
"""
    + COLUMNS
    + r"""

// One token of the SSD recurrence on columns p0 .. p0 + W of the transposed state St (N, P):
// St[n] <- decay St[n] + B_n (dt x), y = sum_n C_n St[n], W accumulators in registers across n. Plain float arrays
// of 64 columns, not cpu_columns_source's chunks: on those (32 or 64 columns) Mamba2-130m's scan ran 0.62-0.80x.
template <int W>
static inline void ssd_columns(float *St, int64_t N, int64_t P, int64_t p0, const float *xv, float step, float decay,
                               const float *bv, const float *cv, float *out) {
  float input[W], acc[W];
  for (int w = 0; w < W; ++w) {
    input[w] = step * xv[p0 + w];
    acc[w] = 0.f;
  }
  for (int64_t n = 0; n < N; ++n) {
    float *s = St + n * P + p0;
    const float bn = bv[n], cn = cv[n];
    for (int w = 0; w < W; ++w) {
      s[w] = decay * s[w] + bn * input[w];
      acc[w] += cn * s[w];
    }
  }
  for (int w = 0; w < W; ++w) out[p0 + w] = acc[w];
}

// Mamba2's SSD recurrence, one (batch, head) per job: S (P, N) <- exp(dt A) S + dt x B^T; y = S C. The job's
// state is held transposed (N, P) while it runs, so each step runs along P with one accumulator per channel.
// x (Bt, T, H, P), dt (Bt, T, H), A (H), Bm, Cm (Bt, T, G, N), state (Bt, H, P, N) in place -> y (Bt, T, H, P).
at::Tensor ssd_scan(at::Tensor x, at::Tensor dt, at::Tensor A, at::Tensor Bm, at::Tensor Cm,
                    at::Tensor state) {
  const int64_t batch = x.size(0), T = x.size(1), H = x.size(2), P = x.size(3), G = Bm.size(2), N = Bm.size(3);
  const int64_t per_group = H / G;
  auto y = at::empty_like(x);
  const float *xp = x.data_ptr<float>(), *dtp = dt.data_ptr<float>(), *Ap = A.data_ptr<float>();
  const float *Bp = Bm.data_ptr<float>(), *Cp = Cm.data_ptr<float>();
  float *sp = state.data_ptr<float>(), *yp = y.data_ptr<float>();
  at::parallel_for(0, batch * H, 1, [&](int64_t begin, int64_t end) {
    std::vector<float> St(N * P);
    for (int64_t job = begin; job < end; ++job) {
      const int64_t b = job / H, h = job % H, g = h / per_group;
      float *S = sp + job * P * N;
      for (int64_t p = 0; p < P; ++p)
        for (int64_t n = 0; n < N; ++n) St[n * P + p] = S[p * N + n];
      for (int64_t t = 0; t < T; ++t) {
        const int64_t row = b * T + t;
        const float step = dtp[row * H + h], decay = std::exp(step * Ap[h]);
        const float *xv = xp + (row * H + h) * P, *bv = Bp + (row * G + g) * N, *cv = Cp + (row * G + g) * N;
        float *out = yp + (row * H + h) * P;
        int64_t p = 0;
        for (; p + 64 <= P; p += 64) ssd_columns<64>(St.data(), N, P, p, xv, step, decay, bv, cv, out);
        for (; p + 16 <= P; p += 16) ssd_columns<16>(St.data(), N, P, p, xv, step, decay, bv, cv, out);
        for (; p < P; ++p) ssd_columns<1>(St.data(), N, P, p, xv, step, decay, bv, cv, out);
      }
      for (int64_t p = 0; p < P; ++p)
        for (int64_t n = 0; n < N; ++n) S[p * N + n] = St[n * P + p];
    }
  });
  return y;
}

// The gated delta rule, one (batch, value head) per job: S <- exp(g) S; S <- S + k (beta (v - k^T S))^T; o = S^T q.
// q, k (Bt, T, Hk, K) shared by H / Hk consecutive value heads each, v (Bt, T, H, V), g, beta (Bt, T, H),
// state (Bt, H, K, V) in place -> o (Bt, T, H, V).
at::Tensor gated_delta_scan(at::Tensor q, at::Tensor k, at::Tensor v, at::Tensor g, at::Tensor beta,
                            at::Tensor state) {
  const int64_t batch = q.size(0), T = q.size(1), Hk = q.size(2), K = q.size(3), H = v.size(2), V = v.size(3);
  const int64_t per_key = H / Hk;
  auto o = at::empty_like(v);
  const float *qp = q.data_ptr<float>(), *kp = k.data_ptr<float>(), *vp = v.data_ptr<float>();
  const float *gp = g.data_ptr<float>(), *bp = beta.data_ptr<float>();
  float *sp = state.data_ptr<float>(), *op = o.data_ptr<float>();
  at::parallel_for(0, batch * H, 1, [&](int64_t begin, int64_t end) {
    for (int64_t job = begin; job < end; ++job) {
      const int64_t b = job / H, h = job % H, hk = h / per_key;
      float *S = sp + job * K * V;
      for (int64_t t = 0; t < T; ++t) {
        const int64_t head = (b * T + t) * H + h, key_head = (b * T + t) * Hk + hk;
        const float decay = std::exp(gp[head]), strength = bp[head];
        const float *qv = qp + key_head * K, *kv = kp + key_head * K, *vv = vp + head * V;
        float *out = op + head * V;
        by_columns(V, [&](int64_t j, auto cols) {
          delta_columns<decltype(cols)>(S, kv, qv, vv, decay, strength, out, K, V, j);
        });
      }
    }
  });
  return o;
}
"""
)

EXTENSION = CppExtension(
    "zoo_cpu_prefill",
    SOURCE,
    [
        CppFunction(
            "ssd_scan",
            "(Tensor x, Tensor dt, Tensor A, Tensor Bm, Tensor Cm, Tensor(a!) state) -> Tensor",
            lambda x, **_: torch.empty_like(x),  # (B, T, H, P)
        ),
        CppFunction(
            "gated_delta_scan",
            "(Tensor q, Tensor k, Tensor v, Tensor g, Tensor beta, Tensor(a!) state) -> Tensor",
            lambda v, **_: torch.empty_like(v),  # (B, T, H, d_v)
        ),
    ],
)


KERNEL = Kernel(  # the mixers' prompt convolution (cpu_conv) runs with the scans
    "cpu-scan", "cpu", lambda: EXTENSION.available() and cpu_conv.EXTENSION.available(), compiles=True
)


def scan_ready(mixer: KernelChoice, x: torch.Tensor) -> bool:
    """Whether this multi-token call of ``mixer`` runs the fused scan (module doc), resolving
    the mixer's kernels the first time it could."""
    return mixer.uses(KERNEL, x.device, stateful=False)  # inference only: autograd refused


def _f32(t: torch.Tensor) -> torch.Tensor:
    return t.float().contiguous()


def ssd_scan(
    x: torch.Tensor, dt: torch.Tensor, A: torch.Tensor, B: torch.Tensor, C: torch.Tensor, state: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """``ssd.chunk_scan``'s maths on the fused loop: x (B, T, H, P), dt (B, T, H), A (H,), B, C
    (B, T, G, N), state (B, H, P, N) before the first token (not modified) -> y (B, T, H, P)
    without the D skip, and the state after the last token, float32."""
    after = _f32(state).clone()  # (B, H, P, N): the kernel updates it in place
    y = EXTENSION.op("ssd_scan")(*(_f32(t) for t in (x, dt, A, B, C)), after)  # (B, T, H, P)
    return y, after


def gated_delta_scan(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, g: torch.Tensor, beta: torch.Tensor, state: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """``delta_rule.chunk_gated_delta_rule``'s maths on the fused loop, tokens before heads: q, k
    (B, T, H_k, d_k), each key head shared by H / H_k consecutive value heads (not repeated),
    v (B, T, H, d_v), g, beta (B, T, H), state (B, H, d_k, d_v) before the first token (not
    modified) -> outputs (B, T, H, d_v) and the state after the last token, float32."""
    after = _f32(state).clone()  # (B, H, d_k, d_v): the kernel updates it in place
    out = EXTENSION.op("gated_delta_scan")(*(_f32(t) for t in (q, k, v, g, beta)), after)  # (B, T, H, d_v)
    return out, after
