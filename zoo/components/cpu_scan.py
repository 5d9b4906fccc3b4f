"""Mamba-1's prompt path between x_proj's split and out_proj as one fused CPU loop, compiled
from C++ on first use: softplus of dt, the selective scan, the D skip and the SiLU gate.

The pure-PyTorch scan (``mamba_scan.selective_scan``) is a chain of whole-tensor elementwise
ops over (B, L, d, N) chunks: each op streams its tensors through memory, and a chunk of L
tokens takes log2(L) passes. Per token and channel the recurrence is only N multiply-adds and
N exponentials, so the fastest CPU form is the recurrence itself, with each channel's state
(N floats) kept in the first-level cache across time and nothing materialised: this kernel.
The glue around it went the same way: as torch ops, dt's softplus, the float32 copies of x,
dt, z, B and C, the D skip, the gate and the cast back were some ten passes over (B, T, d_inner)
tensors, more time than the scan (Mamba-130m cut to 12 layers, bfloat16, 512 tokens, two
threads: 150 of 350 ms a prefill). Here each channel's dt, x and z are read once in the
model's dtype, widened in registers, and y is written once in it, for out_proj.

Channels run in parallel (``at::parallel_for``, torch's threads) in groups of four blocks of
16, so each time step reads whole cache lines of x, dt and z; a block's 16 state rows are
independent chains, their sums made by one tree (``cpu_mamba_channels_source``: the same
``state_block``, softplus and SiLU as the one-token step). The state is read once and written
back once per call.

Built by ``cpu_extension`` (a C++ compiler and ninja; the build is cached in torch's
extensions folder, so later processes load it in a second). Where it cannot be built, ``cpu_extension``
logs why once, the kernel does not load, and the mixer runs the reference scan. The scan is the custom
op ``torch.ops.zoo.cpu_scan_scan`` (``cpu_ops``), so compiled graphs run it too. Inference
only: there is no backward (a scan under autograd takes the reference path).
"""

from __future__ import annotations

import torch

from zoo.components.cpu_mamba_channels_source import CHANNELS
from zoo.components.cpu_ops import CppExtension, CppFunction, on_float32_state, rows_of
from zoo.components.row_product_source import LOOPS

SOURCE = (
    LOOPS
    + CHANNELS
    + r"""
// A (B, T, D) or (B, T, N) tensor whose rows may be strided (a split's view), its last dimension contiguous.
template <typename T>
struct Rows {
  const T* p;
  int64_t batch_stride, row_stride;
  explicit Rows(const at::Tensor& t) : p(t.data_ptr<T>()), batch_stride(t.stride(0)), row_stride(t.stride(1)) {}
  const T* at(int64_t b, int64_t t) const { return p + b * batch_stride + t * row_stride; }
};

// Channels [d0, d1) of batch row b over all T tokens: dt = softplus(dt_raw) * valid, h <- exp(dt A) h + dt x B,
// y = (C . h + Dskip x) * silu(z), written in the model's dtype.
template <typename T>
static void scan_group(const Rows<T>& x, const Rows<T>& dt, const Rows<T>& z, const Rows<T>& Bm, const Rows<T>& Cm,
                       const float* valid, const float* A, const float* skip, float* h, T* y, int64_t b, int64_t d0,
                       int64_t d1, int64_t steps, int64_t D, int64_t N) {
  alignas(64) float step[BLOCK], input[BLOCK], xv[BLOCK], gate[BLOCK], sums[BLOCK];
  std::vector<float> bc(2 * N);
  float *Bv = bc.data(), *Cv = Bv + N;
  for (int64_t t = 0; t < steps; ++t) {
    const T *bt = Bm.at(b, t), *ct = Cm.at(b, t);
    for (int64_t n = 0; n < N; ++n) {
      Bv[n] = static_cast<float>(bt[n]);
      Cv[n] = static_cast<float>(ct[n]);
    }
    const fVec keep(valid == nullptr ? 1.f : valid[b * steps + t]);  // a padding token's step is zero
    T* yt = y + (b * steps + t) * D;
    for (int64_t d = d0; d < d1; d += BLOCK) {
      const int64_t m = std::min(BLOCK, d1 - d);
      block_of(dt.at(b, t) + d, m, step);
      block_of(x.at(b, t) + d, m, xv);
      block_of(z.at(b, t) + d, m, gate);
      for (int64_t i = 0; i < BLOCK; i += S) {
        const fVec s = softplus_of(fVec::loadu(step + i)) * keep;
        s.store(step + i);
        (s * fVec::loadu(xv + i)).store(input + i);
        silu_of(fVec::loadu(gate + i)).store(gate + i);
      }
      if (m == BLOCK && N % S == 0) {
        state_block(h + d * N, A + d * N, Bv, Cv, step, input, sums, N);
      } else {
        for (int64_t i = 0; i < m; ++i)
          sums[i] = state_row(h + (d + i) * N, A + (d + i) * N, Bv, Cv, step[i], input[i], N);
      }
      for (int64_t i = 0; i < m; ++i) yt[d + i] = static_cast<T>((sums[i] + xv[i] * skip[d + i]) * gate[i]);
    }
  }
}

// x, dt (dt_proj's output, before softplus), z (B, T, D) and Bm, Cm (B, T, N) in one floating dtype, rows possibly
// strided; A (D, N), Dskip (D), valid (B, T) or none, h (B, D, N) float32 contiguous, h updated in place
// -> y (B, T, D) in x's dtype.
at::Tensor scan(at::Tensor x, at::Tensor dt, at::Tensor A, at::Tensor Bm, at::Tensor Cm, at::Tensor Dskip,
                at::Tensor z, c10::optional<at::Tensor> valid, at::Tensor h) {
  const int64_t batch = x.size(0), steps = x.size(1), D = x.size(2), N = A.size(1);
  TORCH_CHECK(A.scalar_type() == at::kFloat && A.is_contiguous() && Dskip.scalar_type() == at::kFloat &&
                  Dskip.is_contiguous() && h.scalar_type() == at::kFloat && h.is_contiguous(),
              "scan: A, Dskip and h float32 and contiguous");
  for (const auto& t : {dt, z, Bm, Cm})
    TORCH_CHECK(t.scalar_type() == x.scalar_type() && t.stride(2) == 1 && t.size(0) == batch && t.size(1) == steps,
                "scan: x, dt, z, B and C in one dtype, (B, T, ...) with their last dimension contiguous");
  TORCH_CHECK(x.stride(2) == 1 && dt.size(2) == D && z.size(2) == D && Bm.size(2) == N && Cm.size(2) == N,
              "scan: x, dt, z (B, T, D), B, C (B, T, N)");
  const at::Tensor keep = valid.has_value() ? valid->to(at::kFloat).contiguous() : at::Tensor();
  auto y = at::empty({batch, steps, D}, x.options());
  const int64_t groups = (D + GROUP - 1) / GROUP;
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kBFloat16, at::kHalf, x.scalar_type(), "scan", [&] {
    const Rows<scalar_t> xs(x), dts(dt), zs(z), Bs(Bm), Cs(Cm);
    const float* kp = keep.defined() ? keep.data_ptr<float>() : nullptr;
    scalar_t* yp = y.data_ptr<scalar_t>();
    at::parallel_for(0, batch * groups, 1, [&](int64_t begin, int64_t end) {
      for (int64_t job = begin; job < end; ++job) {
        const int64_t b = job / groups, d0 = (job % groups) * GROUP, d1 = std::min(d0 + GROUP, D);
        scan_group(xs, dts, zs, Bs, Cs, kp, A.data_ptr<float>(), Dskip.data_ptr<float>(),
                   h.data_ptr<float>() + b * D * N, yp, b, d0, d1, steps, D, N);
      }
    });
  });
  return y;
}
"""
)

EXTENSION = CppExtension(
    "zoo_cpu_scan",
    SOURCE,
    [
        CppFunction(
            "scan",
            "(Tensor x, Tensor dt, Tensor A, Tensor Bm, Tensor Cm, Tensor Dskip, Tensor z, Tensor? valid, "
            "Tensor(a!) h) -> Tensor",
            lambda x, **_: x.new_empty(x.shape),  # (B, T, d)
        )
    ],
)


def scan_into(
    x: torch.Tensor,
    dt: torch.Tensor,
    A: torch.Tensor,
    B: torch.Tensor,
    C: torch.Tensor,
    D: torch.Tensor,
    z: torch.Tensor,
    valid: torch.Tensor | None,
    state: torch.Tensor | None,
) -> torch.Tensor:
    """Mamba-1 from x_proj's split to out_proj's input: x, ``dt`` (dt_proj's output, before its
    softplus), z (B, T, d), A (d, N), B, C (B, T, N), the skip D (d,), ``valid`` (B, T) bool
    (False: a padding token, whose step is zero) or None; ``state`` (B, d, N), the state before
    the first token, is overwritten in place with the state after the last (zeros and thrown
    away when None) -> y = (C·h + D x) * silu(z) (B, T, d) in x's dtype, computed in float32
    as ``mamba_scan.selective_scan`` and the mixer's glue compute it."""
    batch, _, d = x.shape
    x, dt, B, C, z = [rows_of(t, x.dtype) for t in (x, dt, B, C, z)]
    A, D = A.float().contiguous(), D.float().contiguous()
    scan = EXTENSION.op("scan")
    return on_float32_state(state, (batch, d, A.shape[-1]), lambda h: scan(x, dt, A, B, C, D, z, valid, h))  # (B, T, d)
