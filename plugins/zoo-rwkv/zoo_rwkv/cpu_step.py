"""RWKV-4 time mixing's decode step in C++: the ``cpu-step`` kernel of ``TimeMix``.

A PyTorch decode step is the token shift's three mixes (about ten small ops), the three
projections, ``w = -exp(time_decay)`` and the WKV recurrence's step (``wkv._step``: some
twenty elementwise ops on (B, C) tensors, each a dispatch over a few kilobytes). Here the
mixes are one call (the shift state written in place) and the WKV step with the decay and
the receptance gate another (num, den and max updated in place), so only the projections
remain torch ops. The channel mix's token shift (its key and receptance mixes) is the same
``shift_mix`` call; its relu², sigmoid and gate stay three in-place torch ops between its
products. The maths is
``shift.mix`` and ``wkv._step`` operation for operation, in float32 (the max-trick kept).
Built with zoo's flags and registered as custom ops (``zoo.parts.CppExtension``:
``torch.ops.zoo.rwkv_cpu_step_shift_mix`` and ``..._wkv_step``, the state written in place), so
a compiled decode step runs them too; where it cannot be built the reference runs. Inference
only.
"""

from __future__ import annotations

import torch

from zoo.parts import CPP_FLOATS, CppExtension, CppFunction, Kernel

SOURCE = (
    r"""
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <algorithm>
#include <cmath>
#include <memory>
#include <vector>
"""
    + CPP_FLOATS
    + r"""

// The rows of shift_mix: last in float32 or the model's dtype, whose values x (widened) holds exactly.
template <typename L>
static void shift_rows(const float* xp, L* lp, const std::vector<const float*>& ratio, float* op, int64_t batch,
                       int64_t d) {
  const int64_t R = ratio.size();
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t i = 0; i < d; ++i) {
      const float now = xp[b * d + i], before = static_cast<float>(lp[b * d + i]);
      for (int64_t j = 0; j < R; ++j) op[(j * batch + b) * d + i] = now * ratio[j][i] + before * (1.f - ratio[j][i]);
      lp[b * d + i] = static_cast<L>(now);
    }
}

// x (B, d) this token; last (B, d) the previous one, overwritten with x; ratios R tensors of d each ->
// (R, B, d) in x's dtype: x * ratio + last * (1 - ratio) for each ratio, in float32 (time mixing: key,
// value, receptance; channel mixing: key, receptance). x and the ratios in the model's dtype (Floats).
at::Tensor shift_mix(at::Tensor x, at::Tensor last, std::vector<at::Tensor> ratios) {
  const int64_t batch = x.size(0), d = x.size(1), R = ratios.size();
  auto out = at::empty({R, batch, d}, x.options().dtype(at::kFloat));
  const Floats xf(x);
  std::vector<Floats> widened;
  std::vector<const float*> ratio(R);
  widened.reserve(R);
  for (int64_t j = 0; j < R; ++j) {
    TORCH_CHECK(ratios[j].numel() == d, "shift_mix: a ratio of ", ratios[j].numel(), " entries for width ", d);
    ratio[j] = widened.emplace_back(ratios[j]).p;
  }
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kBFloat16, at::kHalf, last.scalar_type(), "shift_mix", [&] {
    shift_rows(xf.p, last.data_ptr<scalar_t>(), ratio, out.data_ptr<float>(), batch, d);
  });
  return narrowed(out, x.scalar_type());  // rounded once, for the projections
}

// Channels [first, last) of one row: out = sigmoid(r) * wkv, and the state num, den, top updated. Branch-free
// and on unaliased pointers, so that the loop vectorises with its exponentials: an empty state's top is taken
// as -1e38, whose exponentials against the finite max are exactly 0.
static void wkv_rows(const float* __restrict__ decay, const float* __restrict__ u, const float* __restrict__ k,
                     const float* __restrict__ v, const float* __restrict__ r, float* __restrict__ num,
                     float* __restrict__ den, float* __restrict__ top, float* __restrict__ out, int64_t first,
                     int64_t last) {
  for (int64_t c = first; c < last; ++c) {
    const float t = den[c] > 0.f ? top[c] : -1e38f, kk = k[c], vv = v[c], bonus = u[c] + kk;
    float m = std::max(t, bonus);
    float e1 = std::exp(t - m), e2 = std::exp(bonus - m);
    const float wkv = (e1 * num[c] + e2 * vv) / (e1 * den[c] + e2);
    out[c] = wkv / (1.f + std::exp(-r[c]));
    const float w = -std::exp(decay[c]);
    m = std::max(t + w, kk);
    e1 = std::exp(t + w - m), e2 = std::exp(kk - m);
    num[c] = e1 * num[c] + e2 * vv;
    den[c] = e1 * den[c] + e2;
    top[c] = m;
  }
}

// decay, u (C): w = -exp(decay); k, v, r (B, C) -> sigmoid(r) * wkv (B, C) in k's dtype; num, den, top
// (B, C) the state, float32, in place (den == 0: empty, its top ignored). The rest in the model's dtype.
at::Tensor wkv_step(at::Tensor decay, at::Tensor u, at::Tensor k, at::Tensor v, at::Tensor r,
                    at::Tensor num, at::Tensor den, at::Tensor top) {
  const int64_t batch = k.size(0), C = k.size(1);
  auto out = at::empty({batch, C}, num.options());
  const Floats decayf(decay), uf(u), kf(k), vf(v), rf(r);
  const float *dcp = decayf.p, *up = uf.p, *kp = kf.p, *vp = vf.p, *rp = rf.p;
  float *np = num.data_ptr<float>(), *dp = den.data_ptr<float>(), *tp = top.data_ptr<float>();
  float *op = out.data_ptr<float>();
  at::parallel_for(0, batch * C, 256, [&](int64_t begin, int64_t end) {
    for (int64_t b = begin / C; b * C < end; ++b) {
      const int64_t first = std::max(begin - b * C, (int64_t)0), last = std::min(end - b * C, C), o = b * C;
      wkv_rows(dcp, up, kp + o, vp + o, rp + o, np + o, dp + o, tp + o, op + o, first, last);
    }
  });
  return narrowed(out, k.scalar_type());  // rounded once, for the output projection
}
"""
)


EXTENSION = CppExtension(
    "zoo_rwkv_cpu_step",
    SOURCE,
    [
        CppFunction(
            "shift_mix",
            "(Tensor x, Tensor(a!) last, Tensor[] ratios) -> Tensor",
            lambda x, ratios, **_: x.new_empty(len(ratios), *x.shape),  # (R, B, d)
        ),
        CppFunction(
            "wkv_step",
            "(Tensor decay, Tensor u, Tensor k, Tensor v, Tensor r, Tensor(a!) num, Tensor(b!) den, Tensor(c!) top) "
            "-> Tensor",
            lambda k, **_: torch.empty_like(k),  # (B, C)
        ),
    ],
)


KERNEL = Kernel("cpu-step", "cpu", EXTENSION.available, compiles=True)


def shift_fits(last: torch.Tensor, x: torch.Tensor) -> bool:
    """Whether ``shift_mix`` takes this token-shift state for input ``x``: contiguous, float32
    or ``x``'s dtype (a bfloat16 cache's state holds bfloat16 inputs, which it stores exactly;
    ``step_ready`` asks float32 of the WKV sums only)."""
    return last.is_contiguous() and last.dtype in (torch.float32, x.dtype)


def shift_mix(x: torch.Tensor, last: torch.Tensor, ratios: tuple[torch.Tensor, ...]) -> torch.Tensor:
    """x (B, d) one token, ``last`` (B, d) the previous token's input (set to x in place) ->
    one mix per ratio (1, 1, d) (R, B, d) in x's dtype: time mixing's key, value and receptance
    mixes, channel mixing's key and receptance mixes."""
    return EXTENSION.op("shift_mix")(x, last, list(ratios))


def wkv_step(
    decay: torch.Tensor, u: torch.Tensor, k: torch.Tensor, v: torch.Tensor, r: torch.Tensor, state: list[torch.Tensor]
) -> torch.Tensor:
    """sigmoid(r) · wkv for one token: ``decay`` (time_decay, w = -exp(decay) taken inside),
    u (C,); k, v, r (B, C) the projections' outputs; ``state`` num, den, max (B, C) float32,
    updated in place -> (B, C) in k's dtype."""
    return EXTENSION.op("wkv_step")(decay, u, k, v, r, *state)
