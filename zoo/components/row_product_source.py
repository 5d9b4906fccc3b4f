"""The C++ of zoo's one-row CPU products (``zoo/components/row_product.py``): one row times a
float32, bfloat16, float16 or int8 matrix, accumulated in float32.

ATen's vector types (``at::vec::Vectorized``) are real SIMD registers only where a
``CPU_CAPABILITY_*`` macro names the instruction set; in an extension nothing defines it,
and without one they are plain arrays looped over (a float32 product then streamed at 17
GB/s against 78 GB/s in cache). So the source defines the macro for what the compiler
targets (``-march=native``: AVX512 or AVX2), and leaves it undefined elsewhere, where the
arrays stay correct. Rows are split over torch's threads (``at::parallel_for``) in grains of
64, and each thread reads four rows at once, one from each quarter of its share (``STREAMS``),
the row ``x`` loaded once for the four: four long streams through memory where one row after
another is one. A single stream left the float32 loop at 70-80% of what torch's sum read
from memory; on this project's 2-core Zen 4 VM (interleaved, one process) a 32128 x 512
float32 matrix streamed 24.2 -> 34.9 GB/s at two threads (torch.sum 27.8) and 16.2 -> 24.5
at one (20.0), 151936 x 1024 38.9 -> 54.8, 50257 x 768 25.4 -> 31.3, and matrices in the
cache ran as before. Four adjacent rows at once, by contrast, read slower than one (17.4 GB/s):
each is a stream of 2 KB that the prefetchers never learn. A share's last rows, fewer than
four, go one at a time through the same loop, so every row is summed alike whatever the thread
count (a row's sum does not depend on where the threads split the rows).

A bfloat16 row times a bfloat16 matrix, where the compiler targets AVX512_BF16 (Zen 4,
Cooper Lake, Sapphire Rapids), takes ``vdpbf16ps`` instead (``bf16_rows_times``): 32 exact
products a call added into float32 lanes (pairwise, denormals flushed), where widening each
weight and an FMA left the loop compute-bound at 15-17 GB/s on a 256 MB matrix at two
threads while a plain sum read 24-32; the instruction read it at 23-26 GB/s, and decoded
gpt2 (4 layers, bfloat16) 1.15x and t5-small 1.17x as fast at two threads, 1.03x at one
(interleaved workers, same greedy tokens).

Elsewhere a bfloat16 weight is widened in registers, two operations for a register's pairs
of weights: shifted up 16 bits (the even weights) and masked (the odd ones), so a block of
2 * S weights widens to its even weights then its odd ones, and ``even_odd`` lays the row x
out in that order once per call. ATen's widening (a cross-lane extract, two zero-extensions
and two shifts) left the loop compute-bound on an AVX2-only AMD EPYC: 9.9 G weights/s at one
thread in cache, 19 GB/s from memory (32128 x 512) where float32 read 29; the two operations
read 15.2 G weights/s and 26.0 GB/s at one thread, 45.7 GB/s at two (float32 41.0), and
decoded gpt2 and t5-small in bfloat16 (4 layers, two threads) 1.11x and 1.11x as fast
(interleaved workers, same greedy tokens, with the casts below). The row x is widened and
the sums are rounded to x's dtype in the call itself, not by tensor casts around it (a
biased bfloat16 product made three: 10 µs of a 768 x 768 product's 57 at two threads).

The int8 rows (``int8_rows_source.py``) are appended after this source and use its loops;
``LOOPS``, the source up to ``rows_times``, is also the head of Mamba-1's fused step
(``cpu_mamba_step``), whose x_proj and dt_proj are one-row products too.
"""

from zoo.components.cpu_layer_steps_source import FITS

LOOPS = r"""
#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VL__) && defined(__AVX512DQ__)
#define CPU_CAPABILITY_AVX512
#elif defined(__AVX2__) && defined(__FMA__)
#define CPU_CAPABILITY_AVX2
#endif
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <ATen/cpu/vec/functional.h>
#include <ATen/cpu/vec/vec.h>
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <numeric>
#include <vector>
#if defined(__AVX2__)
#include <immintrin.h>
#endif

using fVec = at::vec::Vectorized<float>;
constexpr int64_t S = fVec::size();  // floats a register holds

// 2 * S weights of row p widened to float32 into a (first S) and b (next S); for bfloat16 where BF16_EVEN_ODD, into
// a the block's even weights and into b its odd ones, in the order of the row x that even_odd lays out.
static inline void widen(const float* p, fVec& a, fVec& b) { a = fVec::loadu(p); b = fVec::loadu(p + S); }
#if defined(CPU_CAPABILITY_AVX512) || defined(CPU_CAPABILITY_AVX2)
constexpr bool BF16_EVEN_ODD = true;
static inline void widen(const at::BFloat16* p, fVec& a, fVec& b) {  // bfloat16 is float32's top half
#if defined(CPU_CAPABILITY_AVX512)
  const __m512i v = _mm512_loadu_si512(p);  // pairs (even, odd) in 32-bit lanes, the even weight low
  a = _mm512_castsi512_ps(_mm512_slli_epi32(v, 16));
  b = _mm512_castsi512_ps(_mm512_and_si512(v, _mm512_set1_epi32(static_cast<int>(0xFFFF0000u))));
#else
  const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
  a = _mm256_castsi256_ps(_mm256_slli_epi32(v, 16));
  b = _mm256_castsi256_ps(_mm256_and_si256(v, _mm256_set1_epi32(static_cast<int>(0xFFFF0000u))));
#endif
}
#else
constexpr bool BF16_EVEN_ODD = false;
static inline void widen(const at::BFloat16* p, fVec& a, fVec& b) {
  std::tie(a, b) = at::vec::convert_to_float<at::BFloat16>(at::vec::Vectorized<at::BFloat16>::loadu(p));
}
#endif
static inline void widen(const at::Half* p, fVec& a, fVec& b) {
  std::tie(a, b) = at::vec::convert_to_float<at::Half>(at::vec::Vectorized<at::Half>::loadu(p));
}
// float64 weights (Mamba-1's fused step in a float64 model) narrowed to float32, as the float32 sums take them
static inline void widen(const double* p, fVec& a, fVec& b) {
  float narrow[2 * S];
  for (int64_t j = 0; j < 2 * S; ++j) narrow[j] = static_cast<float>(p[j]);
  a = fVec::loadu(narrow);
  b = fVec::loadu(narrow + S);
}
static inline void widen(const int8_t* p, fVec& a, fVec& b) {
#if defined(CPU_CAPABILITY_AVX512)
  a = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))));
  b = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p + S))));
#elif defined(CPU_CAPABILITY_AVX2)
  a = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p))));
  b = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p + S))));
#else
  float wide[2 * S];
  for (int64_t j = 0; j < 2 * S; ++j) wide[j] = static_cast<float>(p[j]);
  a = fVec::loadu(wide);
  b = fVec::loadu(wide + S);
#endif
}

// S weights in their order widened to float32: a row's tail past its last whole block of 2 * S (which even_odd
// leaves in place), where a row of 48 (Mamba-130m's dt_proj) on AVX512 had 16 weights to sum one at a time.
static inline fVec widen_one(const float* p) { return fVec::loadu(p); }
#if defined(CPU_CAPABILITY_AVX512)
static inline fVec widen_one(const at::BFloat16* p) {
  const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(v), 16));
}
#elif defined(CPU_CAPABILITY_AVX2)
static inline fVec widen_one(const at::BFloat16* p) {
  const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(v), 16));
}
#endif
template <typename T>  // float16, float64, and bfloat16 without AVX2: through a float32 array
static inline fVec widen_one(const T* p) {
  float wide[S];
  for (int64_t j = 0; j < S; ++j) wide[j] = static_cast<float>(p[j]);
  return fVec::loadu(wide);
}

// Rows of one thread's share read at once, each from its own quarter of the share: four long
// streams in memory, where one row after another is one stream (module doc). A share's last rows,
// fewer than four, go through the same loop one at a time, so that every row is summed alike
// whatever the thread count.
constexpr int64_t STREAMS = 4;

// Where a step's weights outgrow the last-level cache (a run decides: ``past_cache``), each product
// fetches the cache lines `AHEAD` bytes past the block it reads without keeping them (prefetchnta on x86: into L1,
// not left in L2 and L3 as a plain load's lines are). Read once a step, such a weight can only push out of the
// caches what the step runs between products (``row_product.past_cache``, measured there); a weight that fits stays
// cached from step to step.
constexpr int64_t AHEAD = 1024;
template <bool PAST_CACHE>
static inline void fetch_ahead(const void* p, int64_t bytes) {
  if constexpr (PAST_CACHE) {
    const char* c = static_cast<const char*>(p) + AHEAD;
    for (int64_t b = 0; b < bytes; b += 64) __builtin_prefetch(c + b, 0, 0);
  }
}

// out[r] = sum_k w[r, k] * x[k] (+ bias[r]) for the NS rows r = first + s * stride: x read once for all of them,
// two accumulators a row, a last register of S weights where S or more remain, then the scalar tail; the sum
// (plus the bias) rounded once to out's dtype O. PAST_CACHE: fetch_ahead.
template <int64_t NS, typename T, typename O, bool PAST_CACHE = false>
static inline void rows_at(const T* w, const float* x, O* out, int64_t first, int64_t stride, int64_t n,
                           const float* bias) {
  const int64_t full = n - n % (2 * S);
  const T* row[NS];
  fVec lo[NS], hi[NS];
  for (int64_t s = 0; s < NS; ++s) {
    row[s] = w + (first + s * stride) * n;
    lo[s] = fVec(0.f);
    hi[s] = fVec(0.f);
  }
  for (int64_t k = 0; k < full; k += 2 * S) {
    const fVec x0 = fVec::loadu(x + k), x1 = fVec::loadu(x + k + S);
    for (int64_t s = 0; s < NS; ++s) {
      fVec w0, w1;
      fetch_ahead<PAST_CACHE>(row[s] + k, 2 * S * sizeof(T));
      widen(row[s] + k, w0, w1);
      lo[s] = at::vec::fmadd(w0, x0, lo[s]);
      hi[s] = at::vec::fmadd(w1, x1, hi[s]);
    }
  }
  const int64_t tail = n - full >= S ? full + S : full;  // one register more: a tail of S or more weights
  if (tail > full) {
    const fVec x0 = fVec::loadu(x + full);
    for (int64_t s = 0; s < NS; ++s) lo[s] = at::vec::fmadd(widen_one(row[s] + full), x0, lo[s]);
  }
  for (int64_t s = 0; s < NS; ++s) {
    const int64_t r = first + s * stride;
    float sum = at::vec::vec_reduce_all<float>([](fVec& p, fVec& q) { return p + q; }, lo[s] + hi[s]);
    for (int64_t k = tail; k < n; ++k) sum += static_cast<float>(row[s][k]) * x[k];
    out[r] = static_cast<O>(bias == nullptr ? sum : sum + bias[r]);
  }
}

// x (n) with each whole block of 2 * S laid out as widen gives a bfloat16 block: its S even values, then its S odd
// ones (the tail past the last whole block in place) -> into `laid`.
static const float* even_odd(const float* x, int64_t n, std::vector<float>& laid) {
  laid.assign(x, x + n);
  for (int64_t k = 0; k + 2 * S <= n; k += 2 * S)
    for (int64_t j = 0; j < S; ++j) {
      laid[k + j] = x[k + 2 * j];
      laid[k + S + j] = x[k + 2 * j + 1];
    }
  return laid.data();
}

// Rows [begin, end) of one thread's share, in STREAMS streams (rows_at).
template <bool PAST_CACHE, typename T, typename O>
static void share_times(const T* w, const float* x, O* out, int64_t begin, int64_t end, int64_t n, const float* bias) {
  const int64_t part = (end - begin) / STREAMS;  // rows of each stream
  for (int64_t j = 0; j < part; ++j) rows_at<STREAMS, T, O, PAST_CACHE>(w, x, out, begin + j, part, n, bias);
  for (int64_t r = begin + STREAMS * part; r < end; ++r) rows_at<1, T, O, PAST_CACHE>(w, x, out, r, 0, n, bias);
}

// out[r] = sum_k w[r, k] * x[k] (+ bias[r] where given) for rows r of w (rows, n); x and bias float32, out in O.
template <typename T, typename O>
static void rows_times(const T* w, const float* x, O* out, int64_t rows, int64_t n, const float* bias = nullptr,
                       bool past_cache = false) {
  std::vector<float> laid;
  if constexpr (std::is_same_v<T, at::BFloat16> && BF16_EVEN_ODD) x = even_odd(x, n, laid);
  at::parallel_for(0, rows, 64, [&](int64_t begin, int64_t end) {
    if (past_cache) share_times<true>(w, x, out, begin, end, n, bias);
    else share_times<false>(w, x, out, begin, end, n, bias);
  });
}

"""


SOURCE = (
    LOOPS
    + FITS
    + r"""
#if defined(__AVX512BF16__) && defined(__AVX512F__)
// out[r] = sum_k w[r, k] * x[k], both bfloat16, for the NS rows r = first + s * stride: vdpbf16ps multiplies 32
// pairs exactly (a bfloat16 product fits a float32) and adds them to 16 float32 lanes, where widening each weight
// and an FMA took three instructions per 16. The sum plus bias[r] (where given), rounded once to bfloat16 into
// out, as ``F.linear`` rounds it. PAST_CACHE: fetch_ahead.
template <int64_t NS, bool PAST_CACHE>
static inline void bf16_rows_at(const at::BFloat16* w, const at::BFloat16* x, const at::BFloat16* bias,
                                at::BFloat16* out, int64_t first, int64_t stride, int64_t n) {
  const int64_t full = n - n % 32;
  const at::BFloat16* row[NS];
  __m512 a[NS];
  for (int64_t s = 0; s < NS; ++s) {
    row[s] = w + (first + s * stride) * n;
    a[s] = _mm512_setzero_ps();
  }
  for (int64_t k = 0; k < full; k += 32) {
    const __m512bh xv = (__m512bh)_mm512_loadu_si512(x + k);
    for (int64_t s = 0; s < NS; ++s) {
      fetch_ahead<PAST_CACHE>(row[s] + k, 64);
      a[s] = _mm512_dpbf16_ps(a[s], (__m512bh)_mm512_loadu_si512(row[s] + k), xv);
    }
  }
  for (int64_t s = 0; s < NS; ++s) {
    const int64_t r = first + s * stride;
    float sum = _mm512_reduce_add_ps(a[s]);
    for (int64_t k = full; k < n; ++k) sum += static_cast<float>(row[s][k]) * static_cast<float>(x[k]);
    out[r] = static_cast<at::BFloat16>(bias ? sum + static_cast<float>(bias[r]) : sum);
  }
}

template <bool PAST_CACHE>
static void bf16_share_times(const at::BFloat16* w, const at::BFloat16* x, const at::BFloat16* bias,
                             at::BFloat16* out, int64_t begin, int64_t end, int64_t n) {
  const int64_t part = (end - begin) / STREAMS;  // four streams, as rows_times reads them
  for (int64_t j = 0; j < part; ++j) bf16_rows_at<STREAMS, PAST_CACHE>(w, x, bias, out, begin + j, part, n);
  for (int64_t r = begin + STREAMS * part; r < end; ++r) bf16_rows_at<1, PAST_CACHE>(w, x, bias, out, r, 0, n);
}

static void bf16_rows_times(const at::BFloat16* w, const at::BFloat16* x, const at::BFloat16* bias, at::BFloat16* out,
                            int64_t rows, int64_t n, bool past_cache) {
  at::parallel_for(0, rows, 64, [&](int64_t begin, int64_t end) {
    if (past_cache) bf16_share_times<true>(w, x, bias, out, begin, end, n);
    else bf16_share_times<false>(w, x, bias, out, begin, end, n);
  });
}
#endif

template <typename T>
static void widen_into(const T* p, float* out, int64_t size) {
  for (int64_t i = 0; i < size; ++i) out[i] = static_cast<float>(p[i]);
}

// t's values as float32: t's own data where it is contiguous float32, else widened into `wide`.
static const float* widened(const at::Tensor& t, std::vector<float>& wide) {
  if (t.scalar_type() == at::kFloat && t.is_contiguous()) return t.data_ptr<float>();
  const auto tc = t.contiguous();
  wide.resize(tc.numel());
  const int64_t size = tc.numel();
  if (tc.scalar_type() == at::kBFloat16)
    widen_into(tc.data_ptr<at::BFloat16>(), wide.data(), size);
  else if (tc.scalar_type() == at::kHalf)
    widen_into(tc.data_ptr<at::Half>(), wide.data(), size);
  else  // float32 not contiguous, or another dtype: through aten
    std::memcpy(wide.data(), tc.to(at::kFloat).data_ptr<float>(), size * sizeof(float));
  return wide.data();
}

// x's shape with its last size `rows`: a one-row product's output keeps x's leading dims (all 1), so a layer's
// forward reshapes nothing.
static std::vector<int64_t> rows_shape(const at::Tensor& x, int64_t rows) {
  auto shape = x.sizes().vec();
  shape.back() = rows;
  return shape;
}

// rows_times for weight's dtype, into out of O.
template <typename O>
static void rows_of(const at::Tensor& weight, const float* x, O* out, int64_t rows, int64_t n, const float* bias,
                    bool past_cache) {
  if (weight.scalar_type() == at::kFloat) rows_times(weight.data_ptr<float>(), x, out, rows, n, bias, past_cache);
  else if (weight.scalar_type() == at::kBFloat16)
    rows_times(weight.data_ptr<at::BFloat16>(), x, out, rows, n, bias, past_cache);
  else if (weight.scalar_type() == at::kHalf)
    rows_times(weight.data_ptr<at::Half>(), x, out, rows, n, bias, past_cache);
  else TORCH_CHECK(false, "row_product: weight dtype ", weight.scalar_type(), "; allowed: float32, bfloat16, float16");
}

// weight (out, in) float32 / bfloat16 / float16, one row x (..., in) -> weight @ x (+ bias) (..., out) in x's dtype;
// past_cache: the step's weights are larger than the last-level cache (fetch_ahead).
at::Tensor row_product(at::Tensor weight, at::Tensor x, c10::optional<at::Tensor> bias, bool past_cache) {
  TORCH_CHECK(weight.is_contiguous() && weight.dim() == 2 && x.dim() >= 1 && weight.size(1) == x.numel(),
              "row_product: shapes");
  const int64_t rows = weight.size(0), n = weight.size(1);
  const auto shape = rows_shape(x, rows);
#if defined(__AVX512BF16__) && defined(__AVX512F__)
  const bool bf16_bias = !bias.has_value() || (bias->scalar_type() == at::kBFloat16 && bias->is_contiguous() &&
                                               bias->numel() == rows);
  if (weight.scalar_type() == at::kBFloat16 && x.scalar_type() == at::kBFloat16 && bf16_bias) {
    auto xc = x.contiguous();
    auto result = at::empty(shape, x.options());  // written in bfloat16: no float32 copy to convert after
    const at::BFloat16* b = bias.has_value() ? bias->data_ptr<at::BFloat16>() : nullptr;
    bf16_rows_times(weight.data_ptr<at::BFloat16>(), xc.data_ptr<at::BFloat16>(), b, result.data_ptr<at::BFloat16>(),
                    rows, n, past_cache);
    return result;
  }
#endif
  TORCH_CHECK(!bias.has_value() || bias->numel() == rows, "row_product: bias of ", bias->numel(), " values for ", rows,
              " rows");
  // x widened here and the sums rounded to x's dtype as they are stored: no tensors cast around the call (module doc)
  std::vector<float> wide, wide_bias;
  const float* xp = widened(x, wide);
  const float* bp = bias.has_value() ? widened(*bias, wide_bias) : nullptr;
  auto out = at::empty(shape, x.options());
  if (x.scalar_type() == at::kFloat) rows_of(weight, xp, out.data_ptr<float>(), rows, n, bp, past_cache);
  else if (x.scalar_type() == at::kBFloat16) rows_of(weight, xp, out.data_ptr<at::BFloat16>(), rows, n, bp, past_cache);
  else if (x.scalar_type() == at::kHalf) rows_of(weight, xp, out.data_ptr<at::Half>(), rows, n, bp, past_cache);
  else TORCH_CHECK(false, "row_product: x dtype ", x.scalar_type(), "; allowed: float32, bfloat16, float16");
  return out;
}

// An eager step's row_product where it takes these tensors: x one row on the CPU in float32, bfloat16 or float16 and
// row_fits; else an undefined tensor (None in Python), so the caller runs its other path. Checked here those
// conditions cost nothing; in Python (row_product.applies) they were ~4 µs a product, 7% of an RWKV-4 eager step.
at::Tensor row_product_fitting(at::Tensor weight, at::Tensor x, c10::optional<at::Tensor> bias, bool past_cache,
                               int64_t min_weight_bytes) {
  const auto dtype = x.scalar_type();
  if (!x.is_cpu() || x.dim() < 1 || x.numel() != x.size(-1) || x.numel() == 0) return at::Tensor();
  if (dtype != at::kFloat && dtype != at::kBFloat16 && dtype != at::kHalf) return at::Tensor();
  if (!row_fits(weight, bias, x.size(-1), dtype, min_weight_bytes)) return at::Tensor();
  return row_product(weight, x, bias, past_cache);
}

static inline float widen1(float v) { return v; }
static inline float widen1(at::BFloat16 v) { return static_cast<float>(v); }
static inline float widen1(at::Half v) { return static_cast<float>(v); }
"""
)
