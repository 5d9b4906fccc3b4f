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

from zoo.parts import (
    CPP_FLOATS,
    CPP_PROJECTIONS,
    CppExtension,
    CppFunction,
    Kernel,
    StepTensors,
    past_cache_on,
    token_calls_run,
)

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
    + CPP_PROJECTIONS
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

// Whether last (1, d) and the ratios fit shift_mix for one token of width d in x's dtype (shift_fits).
static bool shift_of(const at::Tensor& last, const std::vector<at::Tensor>& ratios, int64_t d, at::ScalarType dtype) {
  if (last.dim() != 2 || last.size(0) != 1 || last.size(1) != d || !last.is_contiguous() || !last.is_cpu() ||
      (last.scalar_type() != at::kFloat && last.scalar_type() != dtype))
    return false;
  for (const auto& ratio : ratios)
    if (ratio.numel() != d) return false;
  return true;
}

// A float32 state (1, C) the WKV step updates in place.
static bool sums_of(const at::Tensor& t, int64_t C) {
  return t.dim() == 2 && t.size(0) == 1 && t.size(1) == C && t.scalar_type() == at::kFloat && t.is_contiguous();
}

// Time mixing for one token x (1, 1, d): shift_mix, the key, value and receptance projections, wkv_step and the
// output projection in one call, each projection made by zoo's one-row products (CPP_PROJECTIONS: projection_row),
// so the same bits as the module's own calls; an undefined tensor (None in Python), with nothing written, where x
// is not one token or a tensor does not fit (layer_fits, shift_of, sums_of).
at::Tensor time_mix_token(at::Tensor x, at::Tensor last, std::vector<at::Tensor> ratios, at::Tensor k_w,
                          MaybeTensor k_s, MaybeTensor k_b, at::Tensor v_w, MaybeTensor v_s, MaybeTensor v_b,
                          at::Tensor r_w, MaybeTensor r_s, MaybeTensor r_b, at::Tensor decay, at::Tensor u,
                          at::Tensor num, at::Tensor den, at::Tensor top, at::Tensor o_w, MaybeTensor o_s,
                          MaybeTensor o_b, bool past_cache) {
  const auto dtype = x.scalar_type();
  if (!one_token(x) || ratios.size() != 3 || k_w.dim() != 2) return {};
  const int64_t d = x.size(2), C = k_w.size(0);
  if (!shift_of(last, ratios, d, dtype) || !layer_fits(k_w, k_s, k_b, d, dtype) ||
      !layer_fits(v_w, v_s, v_b, d, dtype) || !layer_fits(r_w, r_s, r_b, d, dtype) || v_w.size(0) != C ||
      r_w.size(0) != C || decay.numel() != C || u.numel() != C || !sums_of(num, C) || !sums_of(den, C) ||
      !sums_of(top, C) || !layer_fits(o_w, o_s, o_b, C, dtype))
    return {};
  auto mixed = shift_mix(x.view({1, d}), last, ratios);  // (3, 1, d): key, value, receptance mixes
  auto k = projection_row(k_w, k_s, mixed[0], k_b, past_cache);  // (1, C)
  auto v = projection_row(v_w, v_s, mixed[1], v_b, past_cache);
  auto r = projection_row(r_w, r_s, mixed[2], r_b, past_cache);
  auto out = wkv_step(decay, u, k, v, r, num, den, top);  // (1, C): sigmoid(r) * wkv
  return projection_row(o_w, o_s, out.view({1, 1, C}), o_b, past_cache);  // (1, 1, d_out)
}

// Channel mixing for one token x (1, 1, d): shift_mix, relu(key)^2, sigmoid(receptance) and the gated value
// projection in one call, as time_mix_token; an undefined tensor where something does not fit.
at::Tensor channel_mix_token(at::Tensor x, at::Tensor last, std::vector<at::Tensor> ratios, at::Tensor k_w,
                             MaybeTensor k_s, MaybeTensor k_b, at::Tensor r_w, MaybeTensor r_s, MaybeTensor r_b,
                             at::Tensor v_w, MaybeTensor v_s, MaybeTensor v_b, bool past_cache) {
  const auto dtype = x.scalar_type();
  if (!one_token(x) || ratios.size() != 2 || k_w.dim() != 2) return {};
  const int64_t d = x.size(2), H = k_w.size(0);
  if (!shift_of(last, ratios, d, dtype) || !layer_fits(k_w, k_s, k_b, d, dtype) ||
      !layer_fits(r_w, r_s, r_b, d, dtype) || !layer_fits(v_w, v_s, v_b, H, dtype) || r_w.size(0) != v_w.size(0))
    return {};
  auto mixed = shift_mix(x.view({1, d}), last, ratios);  // (2, 1, d): key, receptance mixes
  auto k = projection_row(k_w, k_s, mixed[0], k_b, past_cache).relu_().square_();  // (1, H), as the module's
  auto r = projection_row(r_w, r_s, mixed[1], r_b, past_cache).sigmoid_();  // (1, d_out)
  return (r * projection_row(v_w, v_s, k, v_b, past_cache)).view({1, 1, -1});  // (1, 1, d_out)
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
        CppFunction(
            "time_mix_token",
            "(Tensor x, Tensor(a!) last, Tensor[] ratios, Tensor k_w, Tensor? k_s, Tensor? k_b, Tensor v_w, "
            "Tensor? v_s, Tensor? v_b, Tensor r_w, Tensor? r_s, Tensor? r_b, Tensor decay, Tensor u, Tensor(b!) num, "
            "Tensor(c!) den, Tensor(d!) top, Tensor o_w, Tensor? o_s, Tensor? o_b, bool past_cache) -> Tensor",
            lambda x, o_w, **_: x.new_empty(*x.shape[:-1], o_w.shape[0]),  # (1, 1, d_out)
        ),
        CppFunction(
            "channel_mix_token",
            "(Tensor x, Tensor(a!) last, Tensor[] ratios, Tensor k_w, Tensor? k_s, Tensor? k_b, Tensor r_w, "
            "Tensor? r_s, Tensor? r_b, Tensor v_w, Tensor? v_s, Tensor? v_b, bool past_cache) -> Tensor",
            lambda x, v_w, **_: x.new_empty(*x.shape[:-1], v_w.shape[0]),  # (1, 1, d_out)
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


def time_mix_token(
    x: torch.Tensor,
    tensors: list[torch.Tensor],
    ratios: tuple[torch.Tensor, ...],
    projections: list[StepTensors],
    decay: torch.Tensor,
    u: torch.Tensor,
) -> torch.Tensor | None:
    """One token x (1, 1, d) through time mixing in one C++ call: the shift's mixes, the key,
    value and receptance ``projections`` (then the output's; each as its layer's
    ``step_tensors`` give it), ``wkv_step`` with ``tensors`` att_x, num, den, max updated in
    place -> (1, 1, d_out); None where the call does not compute it (nothing written then).
    Eager calls only (``token_calls_run``)."""
    if not token_calls_run():
        return None
    (k, v, r, out), (last, *sums) = projections, tensors
    args = (*k, *v, *r, decay, u, *sums, *out, past_cache_on())
    return EXTENSION.op("time_mix_token")(x, last, list(ratios), *args)


def channel_mix_token(
    x: torch.Tensor, last: torch.Tensor, ratios: tuple[torch.Tensor, ...], projections: list[StepTensors]
) -> torch.Tensor | None:
    """One token x (1, 1, d) through channel mixing in one C++ call: the shift's key and
    receptance mixes (``last`` set to x in place), relu(key)², sigmoid(receptance) and the gated
    value ``projections`` -> (1, 1, d_out); None where the call does not compute it."""
    if not token_calls_run():
        return None
    k, r, v = projections
    return EXTENSION.op("channel_mix_token")(x, last, list(ratios), *k, *r, *v, past_cache_on())
