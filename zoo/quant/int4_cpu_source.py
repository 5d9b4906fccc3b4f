"""The C++ of ``int4_cpu``: zoo's int4 products on the CPU over its row-major block layout.

Layout (``int4_cpu.pack``): per output row, per block of 32 inputs, 16 bytes; byte ``j`` holds
value ``j`` in its low nibble and value ``j + 16`` in its high nibble (GGUF's Q4_0 / Q4_1
blocks); per (row, group) a scale and an offset, ``w = q * scale + offset``, in the scale
dtype (float32, bfloat16 or float16).

``int4_rows`` (exact weight-only numerics): float32 activations times the nibbles widened to
float, with each group's scale and offset factored out of the inner loop:
``sum_k x_k (q_k s + z) = s sum_k x_k q_k + z sum_k x_k``; the per-group sums of x are made
once per call. Four weight rows go through the loop together (independent accumulators, each
x vector loaded once for four rows). One token row (decode) or a few: each weight row is
read from memory once and multiplied with every token row while it is in L1.

``int4_tiles`` (prefill, many token rows): a tile of ``TILE`` weight rows is widened to
float32 once (``tile`` x in floats: stays in L2) and multiplied with every token row by
``at::mm`` (single-threaded inside ``at::parallel_for``): weights read from memory once per
call, the multiply at GEMM speed. Same numerics as ``int4_rows`` up to float summation order.

``int4_rows_q8`` (llama.cpp's numerics, measured against the others in bench/int4_numerics.py):
each token row quantized to int8 per block of 32 (scale absmax / 127), an integer dot product
of the unsigned nibbles with the signed bytes per block, scaled per block in float.

Instruction sets: AVX-512 (F, BW, VL; VNNI for the int8 dot), AVX2 + FMA, else portable scalar
C++; ``-march=native`` picks what the host has.
"""

SOURCE = r"""
#include <torch/extension.h>
#include <ATen/Parallel.h>
#include <c10/util/BFloat16.h>
#include <c10/util/Half.h>
#include <cmath>
#include <algorithm>
#if defined(__AVX2__) || defined(__AVX512F__)
#include <immintrin.h>
#endif

static inline float f32(float v) { return v; }
static inline float f32(c10::BFloat16 v) { return static_cast<float>(v); }
static inline float f32(c10::Half v) { return static_cast<float>(v); }

// acc[r] += sum over the 32 inputs of block `blk` of x * q for R rows `w[r]` (16 bytes per block).
template <int R>
struct FloatRows {
#if defined(__AVX512F__)
  __m512 a[R], b[R];
  void zero() { for (int r = 0; r < R; ++r) { a[r] = _mm512_setzero_ps(); b[r] = _mm512_setzero_ps(); } }
  void block(const uint8_t* const* w, int64_t blk, const float* x) {
    const __m512 xa = _mm512_loadu_ps(x), xb = _mm512_loadu_ps(x + 16);
    const __m128i m = _mm_set1_epi8(0x0F);
    for (int r = 0; r < R; ++r) {
      const __m128i v = _mm_loadu_si128((const __m128i*)(w[r] + blk * 16));
      const __m512 lo = _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm_and_si128(v, m)));
      const __m512 hi = _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm_and_si128(_mm_srli_epi16(v, 4), m)));
      a[r] = _mm512_fmadd_ps(lo, xa, a[r]);
      b[r] = _mm512_fmadd_ps(hi, xb, b[r]);
    }
  }
  // total[r] += scale[r] * (group sum); the group accumulators restart.
  void close(__m512* total, const float* scale) {
    for (int r = 0; r < R; ++r) {
      total[r] = _mm512_fmadd_ps(_mm512_add_ps(a[r], b[r]), _mm512_set1_ps(scale[r]), total[r]);
    }
    zero();
  }
  using Total = __m512;
  static Total none() { return _mm512_setzero_ps(); }
  static float sum(Total t) { return _mm512_reduce_add_ps(t); }
#elif defined(__AVX2__)
  __m256 a[R][4];
  void zero() { for (int r = 0; r < R; ++r) for (int i = 0; i < 4; ++i) a[r][i] = _mm256_setzero_ps(); }
  void block(const uint8_t* const* w, int64_t blk, const float* x) {
    const __m128i m = _mm_set1_epi8(0x0F);
    for (int r = 0; r < R; ++r) {
      const __m128i v = _mm_loadu_si128((const __m128i*)(w[r] + blk * 16));
      const __m128i lo = _mm_and_si128(v, m), hi = _mm_and_si128(_mm_srli_epi16(v, 4), m);
      const __m128i parts[4] = {lo, _mm_srli_si128(lo, 8), hi, _mm_srli_si128(hi, 8)};
      for (int i = 0; i < 4; ++i) {
        const __m256 q = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(parts[i]));
        a[r][i] = _mm256_fmadd_ps(q, _mm256_loadu_ps(x + 8 * i), a[r][i]);
      }
    }
  }
  void close(__m256* total, const float* scale) {
    for (int r = 0; r < R; ++r) {
      const __m256 s = _mm256_add_ps(_mm256_add_ps(a[r][0], a[r][1]), _mm256_add_ps(a[r][2], a[r][3]));
      total[r] = _mm256_fmadd_ps(s, _mm256_set1_ps(scale[r]), total[r]);
    }
    zero();
  }
  using Total = __m256;
  static Total none() { return _mm256_setzero_ps(); }
  static float sum(Total t) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(t), _mm256_extractf128_ps(t, 1));
    s = _mm_hadd_ps(s, s);
    s = _mm_hadd_ps(s, s);
    return _mm_cvtss_f32(s);
  }
#else
  float a[R];
  void zero() { for (int r = 0; r < R; ++r) a[r] = 0.f; }
  void block(const uint8_t* const* w, int64_t blk, const float* x) {
    for (int r = 0; r < R; ++r) {
      const uint8_t* v = w[r] + blk * 16;
      float s = 0.f;
      for (int j = 0; j < 16; ++j) s += x[j] * float(v[j] & 15) + x[j + 16] * float(v[j] >> 4);
      a[r] += s;
    }
  }
  void close(float* total, const float* scale) { for (int r = 0; r < R; ++r) total[r] += a[r] * scale[r]; zero(); }
  using Total = float;
  static Total none() { return 0.f; }
  static float sum(Total t) { return t; }
#endif
};

// out[m][n] for R rows starting at n and every token row m; xsum (M, G): per-group sums of x.
template <int R, typename S>
static void rows_float(const uint8_t* wq, const S* so, const float* x, const float* xsum, float* out,
                       int64_t n, int64_t M, int64_t N, int64_t K, int64_t gs) {
  const int64_t G = K / gs, nb = gs / 32;
  const uint8_t* w[R];
  for (int r = 0; r < R; ++r) w[r] = wq + (n + r) * (K / 2);
  for (int64_t m = 0; m < M; ++m) {
    const float* xm = x + m * K;
    FloatRows<R> acc;
    acc.zero();
    typename FloatRows<R>::Total total[R];
    float offsets[R], scale[R];
    for (int r = 0; r < R; ++r) { total[r] = FloatRows<R>::none(); offsets[r] = 0.f; }
    for (int64_t g = 0; g < G; ++g) {
      for (int64_t b = 0; b < nb; ++b) acc.block(w, g * nb + b, xm + (g * nb + b) * 32);
      for (int r = 0; r < R; ++r) {
        const S* p = so + ((n + r) * G + g) * 2;
        scale[r] = f32(p[0]);
        offsets[r] += f32(p[1]) * xsum[m * G + g];
      }
      acc.close(total, scale);
    }
    for (int r = 0; r < R; ++r) out[m * N + n + r] = FloatRows<R>::sum(total[r]) + offsets[r];
  }
}

template <typename S>
static void rows_range(const uint8_t* wq, const S* so, const float* x, const float* xsum, float* out,
                       int64_t begin, int64_t end, int64_t M, int64_t N, int64_t K, int64_t gs) {
  int64_t n = begin;
  for (; n + 4 <= end; n += 4) rows_float<4, S>(wq, so, x, xsum, out, n, M, N, K, gs);
  for (; n < end; ++n) rows_float<1, S>(wq, so, x, xsum, out, n, M, N, K, gs);
}

static torch::Tensor group_sums(const torch::Tensor& x, int64_t gs) {
  return x.view({x.size(0), x.size(1) / gs, gs}).sum(-1).contiguous();  // (M, G)
}

// x (M, K) float32, packed (N, K / 2) uint8, so (N, G, 2) -> (M, N) float32.
torch::Tensor int4_rows(torch::Tensor x, torch::Tensor packed, torch::Tensor so, int64_t gs, int64_t grain) {
  const int64_t M = x.size(0), K = x.size(1), N = packed.size(0);
  auto out = torch::empty({M, N}, x.options());
  auto xsum = group_sums(x, gs);
  const uint8_t* wq = packed.data_ptr<uint8_t>();
  const float* xp = x.data_ptr<float>();
  const float* sp = xsum.data_ptr<float>();
  float* op = out.data_ptr<float>();
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kBFloat16, at::kHalf, so.scalar_type(), "int4_rows", [&] {
    const scalar_t* s = so.data_ptr<scalar_t>();
    at::parallel_for(0, (N + 3) / 4, grain, [&](int64_t b, int64_t e) {
      rows_range<scalar_t>(wq, s, xp, sp, op, b * 4, std::min(e * 4, N), M, N, K, gs);
    });
  });
  return out;
}

// Rows [n0, n1) widened to float32 (n1 - n0, K).
template <typename S>
static void widen(const uint8_t* wq, const S* so, float* dst, int64_t n0, int64_t n1, int64_t K, int64_t gs) {
  const int64_t G = K / gs, nb = gs / 32;
  for (int64_t n = n0; n < n1; ++n) {
    const uint8_t* w = wq + n * (K / 2);
    float* d = dst + (n - n0) * K;
    for (int64_t g = 0; g < G; ++g) {
      const float s = f32(so[(n * G + g) * 2]), z = f32(so[(n * G + g) * 2 + 1]);
      for (int64_t b = g * nb; b < (g + 1) * nb; ++b) {
        for (int j = 0; j < 16; ++j) {
          d[b * 32 + j] = float(w[b * 16 + j] & 15) * s + z;
          d[b * 32 + j + 16] = float(w[b * 16 + j] >> 4) * s + z;
        }
      }
    }
  }
}

torch::Tensor int4_tiles(torch::Tensor x, torch::Tensor packed, torch::Tensor so, int64_t gs, int64_t tile) {
  const int64_t M = x.size(0), K = x.size(1), N = packed.size(0);
  auto out = torch::empty({M, N}, x.options());
  const uint8_t* wq = packed.data_ptr<uint8_t>();
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kBFloat16, at::kHalf, so.scalar_type(), "int4_tiles", [&] {
    const scalar_t* s = so.data_ptr<scalar_t>();
    at::parallel_for(0, (N + tile - 1) / tile, 1, [&](int64_t b, int64_t e) {
      auto w = torch::empty({tile, K}, x.options());
      auto part = torch::empty({M, tile}, x.options());
      for (int64_t t = b; t < e; ++t) {
        const int64_t n0 = t * tile, n1 = std::min(n0 + tile, N);
        widen<scalar_t>(wq, s, w.data_ptr<float>(), n0, n1, K, gs);
        auto wt = w.narrow(0, 0, n1 - n0);
        auto o = part.narrow(1, 0, n1 - n0);
        at::mm_out(o, x, wt.t());
        out.narrow(1, n0, n1 - n0).copy_(o);
      }
    });
  });
  return out;
}

// llama.cpp's numerics: x quantized per 32-block to int8; xq (M, K) int8, xd (M, K/32) block scales,
// xs (M, K/32) = xd * sum(xq) per block.
template <typename S>
static float dot_q8(const uint8_t* w, const S* so, const int8_t* xq, const float* xd, const float* xs,
                    int64_t K, int64_t gs) {
  const int64_t G = K / gs, nb = gs / 32;
  float offsets = 0.f;
#if defined(__AVX512VNNI__) && defined(__AVX512VL__)
  __m256 acc = _mm256_setzero_ps();
  const __m128i m = _mm_set1_epi8(0x0F);
  for (int64_t g = 0; g < G; ++g) {
    const float s = f32(so[g * 2]), z = f32(so[g * 2 + 1]);
    for (int64_t blk = g * nb; blk < (g + 1) * nb; ++blk) {
      const __m128i v = _mm_loadu_si128((const __m128i*)(w + blk * 16));
      const __m256i u = _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(v, 4), m), _mm_and_si128(v, m));
      const __m256i dot = _mm256_dpbusd_epi32(_mm256_setzero_si256(), u, _mm256_loadu_si256((const __m256i*)(xq + blk * 32)));
      acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot), _mm256_set1_ps(s * xd[blk]), acc);
      offsets += z * xs[blk];
    }
  }
  __m128 t = _mm_add_ps(_mm256_castps256_ps128(acc), _mm256_extractf128_ps(acc, 1));
  t = _mm_hadd_ps(t, t);
  t = _mm_hadd_ps(t, t);
  return _mm_cvtss_f32(t) + offsets;
#elif defined(__AVX2__)
  __m256 acc = _mm256_setzero_ps();
  const __m128i m = _mm_set1_epi8(0x0F);
  const __m256i ones = _mm256_set1_epi16(1);
  for (int64_t g = 0; g < G; ++g) {
    const float s = f32(so[g * 2]), z = f32(so[g * 2 + 1]);
    for (int64_t blk = g * nb; blk < (g + 1) * nb; ++blk) {
      const __m128i v = _mm_loadu_si128((const __m128i*)(w + blk * 16));
      const __m256i u = _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(v, 4), m), _mm_and_si128(v, m));
      const __m256i pairs = _mm256_maddubs_epi16(u, _mm256_loadu_si256((const __m256i*)(xq + blk * 32)));
      const __m256i dot = _mm256_madd_epi16(pairs, ones);
      acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot), _mm256_set1_ps(s * xd[blk]), acc);
      offsets += z * xs[blk];
    }
  }
  __m128 t = _mm_add_ps(_mm256_castps256_ps128(acc), _mm256_extractf128_ps(acc, 1));
  t = _mm_hadd_ps(t, t);
  t = _mm_hadd_ps(t, t);
  return _mm_cvtss_f32(t) + offsets;
#else
  float total = 0.f;
  for (int64_t g = 0; g < G; ++g) {
    const float s = f32(so[g * 2]), z = f32(so[g * 2 + 1]);
    for (int64_t blk = g * nb; blk < (g + 1) * nb; ++blk) {
      int32_t dot = 0;
      for (int j = 0; j < 16; ++j) {
        dot += int32_t(w[blk * 16 + j] & 15) * xq[blk * 32 + j] + int32_t(w[blk * 16 + j] >> 4) * xq[blk * 32 + j + 16];
      }
      total += float(dot) * s * xd[blk];
      offsets += z * xs[blk];
    }
  }
  return total + offsets;
#endif
}

torch::Tensor int4_rows_q8(torch::Tensor xq, torch::Tensor xd, torch::Tensor xs, torch::Tensor packed,
                           torch::Tensor so, int64_t gs, int64_t grain) {
  const int64_t M = xq.size(0), K = xq.size(1), N = packed.size(0), G = K / gs;
  auto out = torch::empty({M, N}, xd.options());
  const uint8_t* wq = packed.data_ptr<uint8_t>();
  float* op = out.data_ptr<float>();
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kBFloat16, at::kHalf, so.scalar_type(), "int4_rows_q8", [&] {
    const scalar_t* s = so.data_ptr<scalar_t>();
    at::parallel_for(0, N, grain, [&](int64_t b, int64_t e) {
      for (int64_t n = b; n < e; ++n) {
        for (int64_t m = 0; m < M; ++m) {
          op[m * N + n] = dot_q8<scalar_t>(wq + n * (K / 2), s + n * G * 2, xq.data_ptr<int8_t>() + m * K,
                                           xd.data_ptr<float>() + m * (K / 32), xs.data_ptr<float>() + m * (K / 32), K, gs);
        }
      }
    });
  });
  return out;
}
"""
