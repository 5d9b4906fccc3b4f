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
do not wait on each other. Each op takes the mixer from its convolution's output to out_proj's
input (``ssd_rows``, ``delta_rows``): it reads the rows in the model's dtype where they lie,
computes the gates and norms around the recurrence in float32 as the reference does, rounds
where the reference rounds, and writes the gated norm's output: a second pass over the tokens,
as Mamba2's norm spans the heads of a group.

Inference only (no backward): a mixer asks ``scan_ready`` first, which is False under
autograd, off the CPU, or where the mixer does not run this kernel (``--impl reference``);
those calls take the chunked reference. Both ops are custom ops (``cpu_ops``), so a compiled
prefill runs them too. One-token decode calls keep their own path (``cpu_steps``).
"""

from __future__ import annotations

import torch

from zoo.components import cpu_conv
from zoo.components.cpu_columns_source import COLUMNS
from zoo.components.cpu_ops import CppExtension, CppFunction, on_float32_state, rows_of
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

// dt as Mamba2 steps with it: softplus(raw + bias) (torch's, threshold 20) clamped to [lo, hi].
static inline float mamba2_step_of(float raw, float bias, float lo, float hi) {
  const float v = raw + bias;
  return std::min(std::max(v > 20.f ? v : std::log1p(std::exp(v)), lo), hi);
}

// One (batch row b, head h) of Mamba2's SSD recurrence over T tokens, from the convolution's output rows xbc
// (x | B | C) and in_proj's raw dt: S (P, N) <- exp(dt A) S + dt x B^T, y = S C + D x, written to y in T's dtype.
// The state is held transposed (N, P) while the job runs, so each step runs along P with one accumulator a channel.
template <typename T>
static void ssd_job(const at::Tensor& xbc, const at::Tensor& dt, const float* keep, const float* dt_bias,
                    const float* A_log, const float* skip, float lo, float hi, float* S, T* y, int64_t b, int64_t h,
                    int64_t G, int64_t P, int64_t N) {
  const int64_t T_ = xbc.size(1), H = dt.size(2), d_inner = H * P, g = h / (H / G);
  const T *xp = xbc.data_ptr<T>() + b * xbc.stride(0), *dp = dt.data_ptr<T>() + b * dt.stride(0) + h;
  const int64_t x_at = h * P, b_at = d_inner + g * N, c_at = d_inner + (G + g) * N;
  const float A = -std::exp(A_log[h]), Dh = skip[h];
  std::vector<float> St(N * P), xv(P), bv(N), cv(N), out(P);
  for (int64_t p = 0; p < P; ++p)
    for (int64_t n = 0; n < N; ++n) St[n * P + p] = S[p * N + n];
  for (int64_t t = 0; t < T_; ++t) {
    const T* row = xp + t * xbc.stride(1);
    const float keep_t = keep == nullptr ? 1.f : keep[b * T_ + t];  // a padding token's step is zero
    const float step = mamba2_step_of(static_cast<float>(dp[t * dt.stride(1)]), dt_bias[h], lo, hi) * keep_t;
    const float decay = std::exp(step * A);
    for (int64_t p = 0; p < P; ++p) xv[p] = static_cast<float>(row[x_at + p]);
    for (int64_t n = 0; n < N; ++n) {
      bv[n] = static_cast<float>(row[b_at + n]);
      cv[n] = static_cast<float>(row[c_at + n]);
    }
    float *state = St.data(), *x = xv.data(), *o = out.data();
    int64_t p = 0;
    for (; p + 64 <= P; p += 64) ssd_columns<64>(state, N, P, p, x, step, decay, bv.data(), cv.data(), o);
    for (; p + 16 <= P; p += 16) ssd_columns<16>(state, N, P, p, x, step, decay, bv.data(), cv.data(), o);
    for (; p < P; ++p) ssd_columns<1>(state, N, P, p, x, step, decay, bv.data(), cv.data(), o);
    T* yt = y + (b * T_ + t) * d_inner + x_at;
    for (int64_t q = 0; q < P; ++q) yt[q] = static_cast<T>(out[q] + xv[q] * Dh);
  }
  for (int64_t p = 0; p < P; ++p)
    for (int64_t n = 0; n < N; ++n) S[p * N + n] = St[n * P + p];
}

// Mamba2's gated norm over one token's y (d_inner, in T's dtype, overwritten): per group of d_inner / G channels,
// h = y silu(z), y <- weight * T(h / sqrt(mean(h^2) + eps)), as GroupedGatedRMSNorm rounds it.
template <typename T>
static void gated_norm_row(T* y, const T* z, const T* weight, int64_t d_inner, int64_t G, float eps) {
  const int64_t width = d_inner / G;
  std::vector<float> gated(width);
  for (int64_t g = 0; g < G; ++g) {
    float squares = 0.f;
    for (int64_t i = 0; i < width; ++i) {
      const float zi = static_cast<float>(z[g * width + i]);
      gated[i] = static_cast<float>(y[g * width + i]) * (zi / (1.f + std::exp(-zi)));
      squares += gated[i] * gated[i];
    }
    const float scale = 1.f / std::sqrt(squares / width + eps);
    for (int64_t i = 0; i < width; ++i)
      y[g * width + i] = static_cast<T>(static_cast<float>(weight[g * width + i]) *
                                        static_cast<float>(static_cast<T>(gated[i] * scale)));
  }
}

// Mamba2 from its convolution's output to out_proj's input: xbc (Bt, T, d_inner + 2 G N) SiLU'd, dt (Bt, T, H) and
// z (Bt, T, d_inner) in_proj's outputs (rows possibly strided, last dimension contiguous), all in one floating dtype;
// dt_bias, A_log, D (H) float32, norm_weight (d_inner) in that dtype, valid (Bt, T) or none, state (Bt, H, P, N)
// float32 contiguous, updated in place -> the gated norm's output (Bt, T, d_inner) in that dtype. The scan runs one
// (batch, head) a job, then the norm one token a job.
at::Tensor ssd_rows(at::Tensor xbc, at::Tensor dt, at::Tensor z, at::Tensor dt_bias, at::Tensor A_log,
                    at::Tensor D, at::Tensor norm_weight, c10::optional<at::Tensor> valid, at::Tensor state,
                    int64_t groups, double eps, double dt_min, double dt_max) {
  const int64_t batch = xbc.size(0), T_ = xbc.size(1), H = dt.size(2), d_inner = z.size(2);
  const int64_t P = d_inner / H, N = state.size(3);
  for (const auto& t : {dt_bias, A_log, D, state})
    TORCH_CHECK(t.scalar_type() == at::kFloat && t.is_contiguous(),
                "ssd_rows: dt_bias, A_log, D and state float32, contiguous");
  for (const auto& t : {dt, z, norm_weight})
    TORCH_CHECK(t.scalar_type() == xbc.scalar_type() && t.stride(-1) == 1,
                "ssd_rows: xbc, dt, z and norm_weight in one dtype, last dimension contiguous");
  TORCH_CHECK(xbc.stride(2) == 1 && xbc.size(2) == d_inner + 2 * groups * N && H % groups == 0 && d_inner % H == 0 &&
                  d_inner % groups == 0 && state.size(0) == batch && state.size(1) == H && state.size(2) == P &&
                  norm_weight.numel() == d_inner,
              "ssd_rows: xbc (B, T, d_inner + 2 G N), dt (B, T, H), z (B, T, d_inner), state (B, H, P, N)");
  const at::Tensor keep = valid.has_value() ? valid->to(at::kFloat).contiguous() : at::Tensor();
  auto y = at::empty({batch, T_, d_inner}, xbc.options());
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kBFloat16, at::kHalf, xbc.scalar_type(), "ssd_rows", [&] {
    const float* kp = keep.defined() ? keep.data_ptr<float>() : nullptr;
    scalar_t* yp = y.data_ptr<scalar_t>();
    at::parallel_for(0, batch * H, 1, [&](int64_t begin, int64_t end) {
      for (int64_t job = begin; job < end; ++job)
        ssd_job<scalar_t>(xbc, dt, kp, dt_bias.data_ptr<float>(), A_log.data_ptr<float>(), D.data_ptr<float>(),
                          static_cast<float>(dt_min), static_cast<float>(dt_max), state.data_ptr<float>() + job * P * N,
                          yp, job / H, job % H, groups, P, N);
    });
    const scalar_t *zp = z.data_ptr<scalar_t>(), *wp = norm_weight.data_ptr<scalar_t>();
    at::parallel_for(0, batch * T_, 16, [&](int64_t begin, int64_t end) {
      for (int64_t row = begin; row < end; ++row)
        gated_norm_row<scalar_t>(yp + row * d_inner, zp + (row / T_) * z.stride(0) + (row % T_) * z.stride(1), wp,
                                 d_inner, groups, static_cast<float>(eps));
    });
  });
  return y;
}

// x / sqrt(sum(x^2) + 1e-6) times `scale`, in place over n floats, as delta_rule.l2_normalize (then the scale).
static inline void l2_normalized(float* x, int64_t n, float scale) {
  float squares = 0.f;
  for (int64_t i = 0; i < n; ++i) squares += x[i] * x[i];
  const float r = 1.f / std::sqrt(squares + 1e-6f);
  for (int64_t i = 0; i < n; ++i) x[i] = x[i] * r * scale;
}

// One (batch row b, value head h) of the gated delta rule over T tokens, from the convolution's output rows qkv
// (q | k | v, the key heads' q and k shared by H / Hk consecutive value heads) and in_proj_ba's raw b and a:
// q, k L2-normalised (q times dk^-1/2), beta = sigmoid(b), decay = exp(-exp(A_log) softplus(a + dt_bias)),
// S <- decay S + k (beta (v - k^T decay S))^T in place, o = S^T q, written to o in T's dtype.
template <typename T>
static void delta_job(const T* qkv, const T* bp, const T* ap, const float* keep, const float* A_log,
                      const float* dt_bias, float* S, T* o, int64_t b, int64_t h, int64_t T_, int64_t Hk, int64_t H,
                      int64_t K, int64_t V) {
  const int64_t hk = h / (H / Hk), width = 2 * Hk * K + H * V;
  const float A = -std::exp(A_log[h]);
  std::vector<float> qv(K), kv(K), vv(V), out(V);
  for (int64_t t = 0; t < T_; ++t) {
    const int64_t row = b * T_ + t;
    const T* r = qkv + row * width;
    for (int64_t i = 0; i < K; ++i) {
      qv[i] = static_cast<float>(r[hk * K + i]);
      kv[i] = static_cast<float>(r[Hk * K + hk * K + i]);
    }
    for (int64_t j = 0; j < V; ++j) vv[j] = static_cast<float>(r[2 * Hk * K + h * V + j]);
    l2_normalized(qv.data(), K, 1.f / std::sqrt(static_cast<float>(K)));
    l2_normalized(kv.data(), K, 1.f);
    const float keep_t = keep == nullptr ? 1.f : keep[row];  // a padding token: decay 1, beta 0
    const float raw_a = static_cast<float>(ap[row * H + h]) + dt_bias[h];
    const float g = A * (raw_a > 20.f ? raw_a : std::log1p(std::exp(raw_a))) * keep_t;
    const float beta = 1.f / (1.f + std::exp(-static_cast<float>(bp[row * H + h]))) * keep_t;
    const float decay = std::exp(g);
    by_columns(V, [&](int64_t j, auto cols) {
      delta_columns<decltype(cols)>(S, kv.data(), qv.data(), vv.data(), decay, beta, out.data(), K, V, j);
    });
    T* ot = o + (row * H + h) * V;
    for (int64_t j = 0; j < V; ++j) ot[j] = static_cast<T>(out[j]);
  }
}

// Gated DeltaNet's gated norm over one head's output o (V, in T's dtype, overwritten), as GatedRMSNorm rounds it:
// n = T(o / sqrt(mean(o^2) + eps)), o <- T(float(T(weight n)) silu(z)).
template <typename T>
static void delta_norm_head(T* o, const T* z, const T* weight, int64_t V, float eps) {
  float squares = 0.f;
  for (int64_t j = 0; j < V; ++j) squares += static_cast<float>(o[j]) * static_cast<float>(o[j]);
  const float scale = 1.f / std::sqrt(squares / V + eps);
  for (int64_t j = 0; j < V; ++j) {
    const T normed = static_cast<T>(static_cast<float>(o[j]) * scale);
    const T scaled = static_cast<T>(static_cast<float>(weight[j]) * static_cast<float>(normed));
    const float zj = static_cast<float>(z[j]);
    o[j] = static_cast<T>(static_cast<float>(scaled) * (zj / (1.f + std::exp(-zj))));
  }
}

// Gated DeltaNet from its convolution's output to out_proj's input: qkv (Bt, T, 2 Hk K + H V) SiLU'd, b, a (Bt, T,
// H) and z (Bt, T, H, V), contiguous, and norm_weight (V) in one floating dtype; A_log, dt_bias (H) float32, valid
// (Bt, T) or none, state (Bt, H, K, V) float32 contiguous, updated in place -> the gated norm's output (Bt, T, H, V)
// in that dtype. The rule runs one (batch, value head) a job, then the norm one token a job.
at::Tensor delta_rows(at::Tensor qkv, at::Tensor b, at::Tensor a, at::Tensor z, at::Tensor A_log,
                      at::Tensor dt_bias, at::Tensor norm_weight, c10::optional<at::Tensor> valid, at::Tensor state,
                      int64_t key_heads, double eps) {
  const int64_t batch = qkv.size(0), T_ = qkv.size(1), H = state.size(1), K = state.size(2), V = state.size(3);
  for (const auto& t : {A_log, dt_bias, state})
    TORCH_CHECK(t.scalar_type() == at::kFloat && t.is_contiguous(),
                "delta_rows: A_log, dt_bias and state float32, contiguous");
  for (const auto& t : {qkv, b, a, z, norm_weight})
    TORCH_CHECK(t.scalar_type() == qkv.scalar_type() && t.is_contiguous(),
                "delta_rows: qkv, b, a, z and norm_weight in one dtype, contiguous");
  TORCH_CHECK(key_heads > 0 && H % key_heads == 0 && qkv.size(2) == 2 * key_heads * K + H * V && b.size(2) == H &&
                  a.size(2) == H && z.size(2) == H && z.size(3) == V && state.size(0) == batch &&
                  norm_weight.numel() == V,
              "delta_rows: qkv (B, T, 2 Hk K + H V), b, a (B, T, H), z (B, T, H, V), state (B, H, K, V)");
  const at::Tensor keep = valid.has_value() ? valid->to(at::kFloat).contiguous() : at::Tensor();
  auto o = at::empty({batch, T_, H, V}, qkv.options());
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kBFloat16, at::kHalf, qkv.scalar_type(), "delta_rows", [&] {
    const scalar_t *qp = qkv.data_ptr<scalar_t>(), *bp = b.data_ptr<scalar_t>(), *ap = a.data_ptr<scalar_t>();
    const float* kp = keep.defined() ? keep.data_ptr<float>() : nullptr;
    scalar_t* op = o.data_ptr<scalar_t>();
    at::parallel_for(0, batch * H, 1, [&](int64_t begin, int64_t end) {
      for (int64_t job = begin; job < end; ++job)
        delta_job<scalar_t>(qp, bp, ap, kp, A_log.data_ptr<float>(), dt_bias.data_ptr<float>(),
                            state.data_ptr<float>() + job * K * V, op, job / H, job % H, T_, key_heads, H, K, V);
    });
    const scalar_t *zp = z.data_ptr<scalar_t>(), *wp = norm_weight.data_ptr<scalar_t>();
    at::parallel_for(0, batch * T_ * H, 16, [&](int64_t begin, int64_t end) {
      for (int64_t head = begin; head < end; ++head)
        delta_norm_head<scalar_t>(op + head * V, zp + head * V, wp, V, static_cast<float>(eps));
    });
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
            "ssd_rows",
            "(Tensor xbc, Tensor dt, Tensor z, Tensor dt_bias, Tensor A_log, Tensor D, Tensor norm_weight, "
            "Tensor? valid, Tensor(a!) state, int groups, float eps, float dt_min, float dt_max) -> Tensor",
            lambda xbc, z, **_: xbc.new_empty((*xbc.shape[:2], z.shape[2])),  # (B, T, d_inner)
        ),
        CppFunction(
            "delta_rows",
            "(Tensor qkv, Tensor b, Tensor a, Tensor z, Tensor A_log, Tensor dt_bias, Tensor norm_weight, "
            "Tensor? valid, Tensor(a!) state, int key_heads, float eps) -> Tensor",
            lambda z, **_: z.new_empty(z.shape),  # (B, T, H, d_v)
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


def ssd_rows(
    xbc: torch.Tensor,
    dt: torch.Tensor,
    z: torch.Tensor,
    params: tuple[torch.Tensor, ...],
    valid: torch.Tensor | None,
    state: torch.Tensor | None,
    groups: int,
    eps: float,
    dt_limit: tuple[float, float],
) -> torch.Tensor:
    """Mamba2 from its convolution to out_proj's input, as ``Mamba2Mixer``'s reference computes
    it: xbc (B, T, d_inner + 2 G N) the convolution's SiLU'd output (x | B | C), dt (B, T, H)
    and z (B, T, d_inner) in_proj's outputs as split (views), all in the model's dtype;
    ``params`` (dt_bias, A_log, D, the gated norm's weight); ``valid`` (B, T) bool (False: a
    padding token, whose step is zero) or None; ``state`` (B, H, P, N), the state before the
    first token, overwritten in place with the state after the last (zeros and thrown away when
    None) -> the gated norm's output (B, T, d_inner) in the model's dtype. dt's softplus and
    clamp, the SSD recurrence, the D skip and the gated norm in one op: the reference's float32
    copies of x, B and C, its dt chain and its skip were most of a bfloat16 prompt's time
    around the scan."""
    dt_bias, A_log, D, weight = params
    batch, _, d_inner = z.shape
    H = dt.shape[-1]
    shape = (batch, H, d_inner // H, (xbc.shape[-1] - d_inner) // (2 * groups))  # (B, H, P, N)
    xbc, dt, z, weight = [rows_of(t, xbc.dtype) for t in (xbc, dt, z, weight)]
    dt_bias, A_log, D = (t.float().contiguous() for t in (dt_bias, A_log, D))
    ssd = EXTENSION.op("ssd_rows")
    return on_float32_state(
        state, shape, lambda h: ssd(xbc, dt, z, dt_bias, A_log, D, weight, valid, h, groups, eps, *dt_limit)
    )  # (B, T, d_inner)


def delta_rows(
    qkv: torch.Tensor,
    b: torch.Tensor,
    a: torch.Tensor,
    z: torch.Tensor,
    params: tuple[torch.Tensor, torch.Tensor, torch.Tensor],
    valid: torch.Tensor | None,
    state: torch.Tensor | None,
    key_heads: int,
    eps: float,
) -> torch.Tensor:
    """Gated DeltaNet from its convolution to out_proj's input, as ``GatedDeltaNet``'s reference
    computes it: qkv (B, T, 2 H_k d_k + H d_v) the convolution's SiLU'd output (q | k | v), b, a
    (B, T, H) and z (B, T, H, d_v) as ``_split`` gives them, all in the model's dtype;
    ``params`` (A_log, dt_bias, the gated norm's weight); ``valid`` (B, T) bool (False: a
    padding token, whose decay is 1 and write strength 0) or None; ``state`` (B, H, d_k, d_v),
    the state before the first token, overwritten in place with the state after the last (zeros
    and thrown away when None) -> the gated norm's output (B, T, H, d_v) in the model's dtype.
    q and k's L2 norms, the gates, the delta rule and the gated norm in one op: the reference's
    float32 copies and elementwise ops around the fused rule took most of a bfloat16 prompt's time
    beside the projections."""
    A_log, dt_bias, weight = params
    batch, _, heads, width = z.shape
    key_width = (qkv.shape[-1] - heads * width) // (2 * key_heads)
    qkv, b, a, z, weight = (t.to(qkv.dtype).contiguous() for t in (qkv, b, a, z, weight))
    A_log, dt_bias = A_log.float().contiguous(), dt_bias.float().contiguous()
    delta = EXTENSION.op("delta_rows")
    return on_float32_state(
        state,
        (batch, heads, key_width, width),
        lambda h: delta(qkv, b, a, z, A_log, dt_bias, weight, valid, h, key_heads, eps),
    )  # (B, T, H, d_v)
