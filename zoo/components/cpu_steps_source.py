"""The C++ of ``cpu_steps``: one-token decode steps of the recurrent mixers, one call each.

Each function takes what the mixer's input projection(s) gave for one token and the mixer's
parameters, in the model's dtype (widened to float32 inside: ``Floats``), and its state tensors
(float32, contiguous, updated in place), and returns what goes into the output projection, in
the dtype of its input (computed in float32, rounded once). Per (row, head) the state is read once and written once;
the loops run over torch's threads with ``at::parallel_for``. The maths is the reference's
(``ssd.ssd_step``, ``delta_rule.gated_delta_step``, ``linear_attention``,
``infini_attention``), operation for operation, in float32.

The causal convolution's window keeps transformers' layout (B, C, K), oldest input first:
its step shifts each channel's K - 1 older inputs down in place while it reads them for the
dot product, so the window is read and written once in the same cache lines, with no copy or
concatenation of the whole window as the reference's ``torch.cat`` + ``copy_`` does.
"""

from zoo.components.cpu_columns_source import COLUMNS
from zoo.components.cpu_infini_source import INFINI

# A step kernel's inputs as float32 and its result back in the model's dtype, shared with plugins
# (``zoo.parts.CPP_FLOATS``; after <ATen/ATen.h> and <memory>).
FLOATS = r"""
// A tensor's values as float32 (null when it is empty): its own data when it is float32 and contiguous, else
// widened here, in a loop (a cast through ATen, allocation and dispatch, cost 2-3 us a tensor on a cold cache).
// The inputs and parameters come in the model's dtype; a cast of each in Python was a dispatched op of several
// microseconds, the most of a half-precision step's time outside its kernels.
struct Floats {
  std::unique_ptr<float[]> own;  // not a std::vector: its resize zero-filled what the widening overwrites
  at::Tensor held;  // a contiguous copy of a strided tensor, or another dtype cast
  const float* p = nullptr;
  explicit Floats(const at::Tensor& t) {
    if (!t.numel()) return;
    const at::Tensor& c = t.is_contiguous() ? t : (held = t.contiguous());
    switch (c.scalar_type()) {
      case at::kFloat: p = c.data_ptr<float>(); break;
      case at::kBFloat16: widen(c.data_ptr<at::BFloat16>(), c.numel()); break;
      case at::kHalf: widen(c.data_ptr<at::Half>(), c.numel()); break;
      default: held = c.to(at::kFloat), p = held.data_ptr<float>();
    }
  }
  template <typename T>
  void widen(const T* v, int64_t n) {
    own.reset(new float[n]);
    for (int64_t i = 0; i < n; ++i) own[i] = static_cast<float>(v[i]);
    p = own.get();
  }
};

// A float32 result in the model's dtype: itself when that is float32, else rounded here, in a loop (an ATen
// cast cost ~10 us a call on a cold cache, as much as some steps' maths).
template <typename T>
static void narrow_into(const float* v, T* out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i] = static_cast<T>(v[i]);
}
static at::Tensor narrowed(const at::Tensor& y, at::ScalarType dtype) {
  if (dtype == at::kFloat) return y;
  if (dtype != at::kBFloat16 && dtype != at::kHalf) return y.to(dtype);
  auto out = at::empty(y.sizes(), y.options().dtype(dtype));
  const float* v = y.data_ptr<float>();
  if (dtype == at::kBFloat16) narrow_into(v, out.data_ptr<at::BFloat16>(), y.numel());
  else narrow_into(v, out.data_ptr<at::Half>(), y.numel());
  return out;
}
"""

PRELUDE = r"""
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <cmath>
#include <algorithm>
#include <memory>
#include <vector>

static inline float silu(float x) { return x / (1.f + std::exp(-x)); }
static inline float sigmoid(float x) { return 1.f / (1.f + std::exp(-x)); }
// the exponential clamped so that a vectorised loop, which computes both sides, never overflows
static inline float softplus(float x) { return x > 20.f ? x : std::log1p(std::exp(std::min(x, 20.f))); }
static inline float feature(float x) { return x > 0.f ? x + 1.f : std::exp(x); }  // elu(x) + 1
"""


# The convolution window of a one-token step, shared with Mamba-1's step (cpu_mamba_step.py).
CONV_ROW = r"""
// One row: window (C, K) <- [window[1:], x]; out = SiLU(sum_j w_j window_j + bias). The window is float32
// or the model's dtype, whose values x (the projection's output, widened) holds exactly. With the width a
// constant (KF, 4 in every checkpoint zoo loads) GCC vectorises over the channels; with K read at run time
// (KF = 0) each channel's taps are a scalar loop.
template <int64_t KF, typename W>
static void conv_taps(const float* __restrict x, const float* __restrict w, const float* __restrict bias,
                      W* __restrict win, float* __restrict out, int64_t C, int64_t width) {
  const int64_t K = KF ? KF : width;
  for (int64_t c = 0; c < C; ++c) {
    W* wc = win + c * K;
    const float* kc = w + c * K;
    float acc = bias ? bias[c] : 0.f;
    for (int64_t j = 0; j + 1 < K; ++j) {
      const W older = wc[j + 1];
      wc[j] = older;
      acc += kc[j] * static_cast<float>(older);
    }
    wc[K - 1] = static_cast<W>(x[c]);
    out[c] = acc + kc[K - 1] * x[c];
  }
}
template <typename W>
static void conv_row(const float* x, const float* w, const float* bias, W* win, float* out, int64_t C, int64_t K) {
  if (K == 4) conv_taps<4>(x, w, bias, win, out, C, K);
  else conv_taps<0>(x, w, bias, win, out, C, K);
  for (int64_t c = 0; c < C; ++c) out[c] = silu(out[c]);  // its own loop: vectorised, exponentials included
}

// conv_row on batch row b of a window (B, C, K) in float32, bfloat16 or float16.
static void conv_window_row(const float* x, const float* w, const float* bias, at::Tensor& window, int64_t b,
                            float* out) {
  const int64_t C = window.size(1), K = window.size(2), offset = b * C * K;
  switch (window.scalar_type()) {
    case at::kFloat: conv_row(x, w, bias, window.data_ptr<float>() + offset, out, C, K); break;
    case at::kBFloat16: conv_row(x, w, bias, window.data_ptr<at::BFloat16>() + offset, out, C, K); break;
    case at::kHalf: conv_row(x, w, bias, window.data_ptr<at::Half>() + offset, out, C, K); break;
    default: TORCH_CHECK(false, "conv window dtype ", window.scalar_type(), "; allowed: float32, bfloat16, float16");
  }
}
"""

SOURCE = (
    PRELUDE
    + COLUMNS
    + FLOATS
    + CONV_ROW
    + r"""
// Mamba2: proj (B, d_inner + conv_dim + H) = [z, xBC, dt] -> gated, group-RMS-normed y (B, d_inner).
at::Tensor mamba2_step(at::Tensor proj, at::Tensor conv_w, at::Tensor conv_b, at::Tensor window,
                       at::Tensor dt_bias, at::Tensor A_log, at::Tensor Dskip, at::Tensor norm_w,
                       at::Tensor state, int64_t groups, double eps, double dt_min, double dt_max) {
  const int64_t batch = state.size(0), H = state.size(1), P = state.size(2), N = state.size(3);
  const int64_t inner = H * P, C = window.size(1), K = window.size(2), width = proj.size(1), per = H / groups;
  auto xbc = at::empty({batch, C}, state.options());
  auto y = at::empty({batch, inner}, state.options());
  const Floats projf(proj), cw(conv_w), cb(conv_b), dbf(dt_bias), alf(A_log), dpf(Dskip), nwf(norm_w);
  const float *pp = projf.p, *db = dbf.p, *al = alf.p, *dp = dpf.p, *nw = nwf.p;
  float *xp = xbc.data_ptr<float>(), *yp = y.data_ptr<float>(), *sp = state.data_ptr<float>();
  for (int64_t b = 0; b < batch; ++b) conv_window_row(pp + b * width + inner, cw.p, cb.p, window, b, xp + b * C);
  at::parallel_for(0, batch * H, 1, [&](int64_t begin, int64_t end) {
    for (int64_t job = begin; job < end; ++job) {
      const int64_t b = job / H, h = job % H, g = h / per;
      const float *x = xp + b * C + h * P, *Bv = xp + b * C + inner + g * N, *Cv = Bv + groups * N;
      float dt = softplus(pp[b * width + inner + C + h] + db[h]);
      dt = std::min(std::max(dt, (float)dt_min), (float)dt_max);
      const float decay = std::exp(-dt * std::exp(al[h]));
      for (int64_t p = 0; p < P; ++p) {
        float* S = sp + ((b * H + h) * P + p) * N;
        const float input = dt * x[p];
        float acc = 0.f;
        for (int64_t n = 0; n < N; ++n) {
          const float s = S[n] * decay + input * Bv[n];
          S[n] = s;
          acc += s * Cv[n];
        }
        yp[b * inner + h * P + p] = acc + dp[h] * x[p];
      }
    }
  });
  const int64_t span = inner / groups;
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t g = 0; g < groups; ++g) {
      float* v = yp + b * inner + g * span;
      const float* z = pp + b * width + g * span;
      float ms = 0.f;
      for (int64_t i = 0; i < span; ++i) {
        v[i] *= silu(z[i]);
        ms += v[i] * v[i];
      }
      const float scale = 1.f / std::sqrt(ms / span + (float)eps);
      for (int64_t i = 0; i < span; ++i) v[i] = nw[g * span + i] * (v[i] * scale);
    }
  return narrowed(y, proj.scalar_type());  // in the model's dtype, for the output projection
}

// Gated DeltaNet: the projections in the checkpoint's grouped layout, qkvz (B, Hk (2 dk + 2 r dv)) with
// per key head [q, k, its r value heads' v, their z] and ba (B, Hk 2 r) with per key head [b (r), a (r)] ->
// RMS-normed, SiLU(z)-gated output (B, Hv dv); state (B, Hv, dk, dv), r = Hv / Hk.
at::Tensor gdn_step(at::Tensor qkvz, at::Tensor ba, at::Tensor conv_w, at::Tensor window,
                    at::Tensor dt_bias, at::Tensor A_log, at::Tensor norm_w, at::Tensor state,
                    int64_t k_heads, double eps) {
  const int64_t batch = state.size(0), H = state.size(1), dk = state.size(2), dv = state.size(3);
  const int64_t C = window.size(1), K = window.size(2), key = k_heads * dk, per = H / k_heads;
  const int64_t W = 2 * dk + 2 * per * dv;  // one key head's slice of qkvz
  auto qkv = at::empty({batch, C}, state.options());
  auto act = at::empty({batch, C}, state.options());
  auto out = at::empty({batch, H * dv}, state.options());
  float *qp = qkv.data_ptr<float>(), *ap = act.data_ptr<float>(), *op = out.data_ptr<float>();
  float* sp = state.data_ptr<float>();
  const Floats qkvzf(qkvz), baf(ba), cw(conv_w), dbf(dt_bias), alf(A_log), nwf(norm_w);
  const float *src = qkvzf.p, *bap = baf.p, *db = dbf.p, *al = alf.p, *nw = nwf.p;
  for (int64_t b = 0; b < batch; ++b) {
    for (int64_t kh = 0; kh < k_heads; ++kh) {  // the convolution's channel order: all q, all k, all v
      const float* head = src + (b * k_heads + kh) * W;
      float* row = qp + b * C;
      std::copy(head, head + dk, row + kh * dk);
      std::copy(head + dk, head + 2 * dk, row + key + kh * dk);
      std::copy(head + 2 * dk, head + 2 * dk + per * dv, row + 2 * key + kh * per * dv);
    }
    conv_window_row(qp + b * C, cw.p, nullptr, window, b, ap + b * C);
    for (int64_t head = 0; head < 2 * k_heads; ++head) {  // L2-normalise q and k heads; q also by dk^-1/2
      float* v = ap + b * C + head * dk;
      float ss = 0.f;
      for (int64_t i = 0; i < dk; ++i) ss += v[i] * v[i];
      const float scale = 1.f / std::sqrt(ss + 1e-6f) * (head < k_heads ? 1.f / std::sqrt((float)dk) : 1.f);
      for (int64_t i = 0; i < dk; ++i) v[i] *= scale;
    }
  }
  at::parallel_for(0, batch * H, 1, [&](int64_t begin, int64_t end) {
    for (int64_t job = begin; job < end; ++job) {
      const int64_t b = job / H, h = job % H, kh = h / per;
      const float *q = ap + b * C + kh * dk, *k = ap + b * C + key + kh * dk, *v = ap + b * C + 2 * key + h * dv;
      const float *gates = bap + (b * k_heads + kh) * 2 * per, *zh = src + (b * k_heads + kh) * W + 2 * dk + per * dv;
      const float beta = sigmoid(gates[h % per]);
      const float decay = std::exp(-std::exp(al[h]) * softplus(gates[per + h % per] + db[h]));
      float* S = sp + (b * H + h) * dk * dv;
      float* o = op + (b * H + h) * dv;
      by_columns(dv, [&](int64_t j, auto cols) {
        delta_columns<decltype(cols)>(S, k, q, v, decay, beta, o, dk, dv, j);
      });
      float ms = 0.f;
      for (int64_t j = 0; j < dv; ++j) ms += o[j] * o[j];
      const float scale = 1.f / std::sqrt(ms / dv + (float)eps);
      const float* gate = zh + (h % per) * dv;
      for (int64_t j = 0; j < dv; ++j) o[j] = nw[j] * (o[j] * scale) * silu(gate[j]);
    }
  });
  return narrowed(out, qkvz.scalar_type());  // in the model's dtype, for the output projection
}

// Linear attention: q, k, v (B, H, D) -> phi(q) S / (phi(q) z + eps) after S += phi(k) v^T, z += phi(k).
at::Tensor linear_step(at::Tensor q, at::Tensor k, at::Tensor v, at::Tensor kv, at::Tensor z,
                       double eps) {
  const int64_t batch = kv.size(0), H = kv.size(1), D = kv.size(2), E = kv.size(3);
  auto y = at::empty({batch, H, E}, kv.options());
  const Floats qf(q), kf(k), vf(v);
  const float *qp = qf.p, *kp = kf.p, *vp = vf.p;
  float *sp = kv.data_ptr<float>(), *zp = z.data_ptr<float>(), *yp = y.data_ptr<float>();
  at::parallel_for(0, batch * H, 1, [&](int64_t begin, int64_t end) {
    std::vector<float> fk(D), fq(D);
    for (int64_t job = begin; job < end; ++job) {
      const float *qh = qp + job * D, *kh = kp + job * D, *vh = vp + job * E;
      float *S = sp + job * D * E, *zh = zp + job * D, *o = yp + job * E;
      float den = 0.f;
      for (int64_t i = 0; i < D; ++i) {
        fk[i] = feature(kh[i]), fq[i] = feature(qh[i]);
        zh[i] += fk[i];
        den += fq[i] * zh[i];
      }
      by_columns(E, [&](int64_t j, auto cols) {  // S += phi(k) v^T, o = phi(q) S: one sweep, sums in registers
        using C = decltype(cols);
        typename C::V value[C::U], out[C::U] = {};
        for (int u = 0; u < C::U; ++u) value[u] = load<typename C::V>(vh + j + u * C::W);
        for (int64_t i = 0; i < D; ++i)
          for (int u = 0; u < C::U; ++u) {
            float* p = S + i * E + j + u * C::W;
            const auto s = load<typename C::V>(p) + fk[i] * value[u];
            store(p, s);
            out[u] += fq[i] * s;
          }
        for (int u = 0; u < C::U; ++u) store(o + j + u * C::W, out[u] / (den + (float)eps));
      });
    }
  });
  return narrowed(y, q.scalar_type());  // in the model's dtype, for the output projection
}
"""
    + INFINI
)
