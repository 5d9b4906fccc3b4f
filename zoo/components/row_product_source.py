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

``int8_rows`` over rows whose length is a multiple of 32 takes llama.cpp's numerics instead
(``int8_q8``): the row ``x`` quantized to int8 per block of 32 (scale absmax / 127, rounded
to nearest even), per block the integer dot product of those bytes with the weight's
(``vpdpbusd`` on AVX512-VNNI, ``vpmaddubsw`` on AVX2, scalar C++ elsewhere; the weight byte
takes the activation's sign so the unsigned operand is |x|), scaled by the block's scale in
float32, and the row's sum by the weight row's scale. Widening every int8 weight to float32
and multiplying left the loop compute-bound: a 49152 x 576 head streamed 9.8 GB/s where a
float32 matrix of the same shape streamed 17-19 GB/s (one thread, this project's Zen 4).
The integer loop reads it at 18-19 GB/s, and matrices that stay in the L3 cache at 30-48
GB/s (1.4-2.9x the widening loop in one process, one and two threads). Rows are read four
streams at once as above (four adjacent rows interleaved read 576-byte rows at 8 GB/s), with
two named accumulators a row: an array indexed by the block's parity was kept on the stack
and held the loop to ~17 GB/s even in cache. The streams took qwen3-0.6b's int8 decode 1.13x
(two threads, interleaved workers, same tokens: each row's arithmetic is unchanged). The sign
trick needs weights in [-127, 127], which ``quantize_int8`` gives.
"""

SOURCE = r"""
#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VL__) && defined(__AVX512DQ__)
#define CPU_CAPABILITY_AVX512
#elif defined(__AVX2__) && defined(__FMA__)
#define CPU_CAPABILITY_AVX2
#endif
#include <torch/extension.h>
#include <ATen/Parallel.h>
#include <ATen/cpu/vec/functional.h>
#include <ATen/cpu/vec/vec.h>
#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <vector>
#if defined(__AVX2__)
#include <immintrin.h>
#endif

using fVec = at::vec::Vectorized<float>;
constexpr int64_t S = fVec::size();  // floats a register holds

// 2 * S weights of row p widened to float32 into a (first S) and b (next S).
static inline void widen(const float* p, fVec& a, fVec& b) { a = fVec::loadu(p); b = fVec::loadu(p + S); }
static inline void widen(const at::BFloat16* p, fVec& a, fVec& b) {
  std::tie(a, b) = at::vec::convert_to_float<at::BFloat16>(at::vec::Vectorized<at::BFloat16>::loadu(p));
}
static inline void widen(const at::Half* p, fVec& a, fVec& b) {
  std::tie(a, b) = at::vec::convert_to_float<at::Half>(at::vec::Vectorized<at::Half>::loadu(p));
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

// Rows of one thread's share read at once, each from its own quarter of the share: four long
// streams in memory, where one row after another is one stream (module doc). A share's last rows,
// fewer than four, go through the same loop one at a time, so that every row is summed alike
// whatever the thread count.
constexpr int64_t STREAMS = 4;

// out[r] = sum_k w[r, k] * x[k] (+ bias[r]) for the NS rows r = first + s * stride: x read once for all of them,
// two accumulators a row, then the scalar tail.
template <int64_t NS, typename T>
static inline void rows_at(const T* w, const float* x, float* out, int64_t first, int64_t stride, int64_t n,
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
      widen(row[s] + k, w0, w1);
      lo[s] = at::vec::fmadd(w0, x0, lo[s]);
      hi[s] = at::vec::fmadd(w1, x1, hi[s]);
    }
  }
  for (int64_t s = 0; s < NS; ++s) {
    const int64_t r = first + s * stride;
    float sum = at::vec::vec_reduce_all<float>([](fVec& p, fVec& q) { return p + q; }, lo[s] + hi[s]);
    for (int64_t k = full; k < n; ++k) sum += static_cast<float>(row[s][k]) * x[k];
    out[r] = bias == nullptr ? sum : sum + bias[r];
  }
}

// out[r] = sum_k w[r, k] * x[k] (+ bias[r] where given) for rows r of w (rows, n); x float32.
template <typename T>
static void rows_times(const T* w, const float* x, float* out, int64_t rows, int64_t n, const float* bias = nullptr) {
  at::parallel_for(0, rows, 64, [&](int64_t begin, int64_t end) {
    const int64_t part = (end - begin) / STREAMS;  // rows of each stream
    for (int64_t j = 0; j < part; ++j) rows_at<STREAMS>(w, x, out, begin + j, part, n, bias);
    for (int64_t r = begin + STREAMS * part; r < end; ++r) rows_at<1>(w, x, out, r, 0, n, bias);
  });
}

#if defined(__AVX512BF16__) && defined(__AVX512F__)
// out[r] = sum_k w[r, k] * x[k], both bfloat16, for the NS rows r = first + s * stride: vdpbf16ps multiplies 32
// pairs exactly (a bfloat16 product fits a float32) and adds them to 16 float32 lanes, where widening each weight
// and an FMA took three instructions per 16. The sum plus bias[r] (where given), rounded once to bfloat16 into
// out, as ``F.linear`` rounds it.
template <int64_t NS>
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
    for (int64_t s = 0; s < NS; ++s) a[s] = _mm512_dpbf16_ps(a[s], (__m512bh)_mm512_loadu_si512(row[s] + k), xv);
  }
  for (int64_t s = 0; s < NS; ++s) {
    const int64_t r = first + s * stride;
    float sum = _mm512_reduce_add_ps(a[s]);
    for (int64_t k = full; k < n; ++k) sum += static_cast<float>(row[s][k]) * static_cast<float>(x[k]);
    out[r] = static_cast<at::BFloat16>(bias ? sum + static_cast<float>(bias[r]) : sum);
  }
}

static void bf16_rows_times(const at::BFloat16* w, const at::BFloat16* x, const at::BFloat16* bias, at::BFloat16* out,
                            int64_t rows, int64_t n) {
  at::parallel_for(0, rows, 64, [&](int64_t begin, int64_t end) {
    const int64_t part = (end - begin) / STREAMS;  // four streams, as rows_times reads them
    for (int64_t j = 0; j < part; ++j) bf16_rows_at<STREAMS>(w, x, bias, out, begin + j, part, n);
    for (int64_t r = begin + STREAMS * part; r < end; ++r) bf16_rows_at<1>(w, x, bias, out, r, 0, n);
  });
}
#endif

// x's shape with its last size `rows`: a one-row product's output keeps x's leading dims (all 1), so a layer's
// forward reshapes nothing.
static std::vector<int64_t> rows_shape(const torch::Tensor& x, int64_t rows) {
  auto shape = x.sizes().vec();
  shape.back() = rows;
  return shape;
}

// weight (out, in) float32 / bfloat16 / float16, one row x (..., in) -> weight @ x (+ bias) (..., out) in x's dtype.
torch::Tensor row_product(torch::Tensor weight, torch::Tensor x, c10::optional<torch::Tensor> bias) {
  TORCH_CHECK(weight.is_contiguous() && weight.dim() == 2 && x.dim() >= 1 && weight.size(1) == x.numel(),
              "row_product: shapes");
  const int64_t rows = weight.size(0), n = weight.size(1);
  const auto shape = rows_shape(x, rows);
#if defined(__AVX512BF16__) && defined(__AVX512F__)
  const bool bf16_bias = !bias.has_value() || (bias->scalar_type() == torch::kBFloat16 && bias->is_contiguous() &&
                                               bias->numel() == rows);
  if (weight.scalar_type() == torch::kBFloat16 && x.scalar_type() == torch::kBFloat16 && bf16_bias) {
    auto xc = x.contiguous();
    auto result = torch::empty(shape, x.options());  // written in bfloat16: no float32 copy to convert after
    const at::BFloat16* b = bias.has_value() ? bias->data_ptr<at::BFloat16>() : nullptr;
    bf16_rows_times(weight.data_ptr<at::BFloat16>(), xc.data_ptr<at::BFloat16>(), b, result.data_ptr<at::BFloat16>(),
                    rows, n);
    return result;
  }
#endif
  auto out = torch::empty(shape, x.options().dtype(torch::kFloat));
  auto xf = x.to(torch::kFloat).contiguous();
  const float* xp = xf.data_ptr<float>();
  float* op = out.data_ptr<float>();
  torch::Tensor bf;  // the bias in float32 (a float32 bias as it is: no copy), added as each row's sum is stored
  if (bias.has_value()) {
    TORCH_CHECK(bias->numel() == rows, "row_product: bias of ", bias->numel(), " values for ", rows, " rows");
    bf = bias->to(torch::kFloat).contiguous();
  }
  const float* bp = bias.has_value() ? bf.data_ptr<float>() : nullptr;
  if (weight.scalar_type() == torch::kFloat) rows_times(weight.data_ptr<float>(), xp, op, rows, n, bp);
  else if (weight.scalar_type() == torch::kBFloat16) rows_times(weight.data_ptr<at::BFloat16>(), xp, op, rows, n, bp);
  else if (weight.scalar_type() == torch::kHalf) rows_times(weight.data_ptr<at::Half>(), xp, op, rows, n, bp);
  else TORCH_CHECK(false, "row_product: weight dtype ", weight.scalar_type(), "; allowed: float32, bfloat16, float16");
  return x.scalar_type() == torch::kFloat ? out : out.to(x.scalar_type());
}

constexpr int64_t QBLOCK = 32;       // inputs per activation block (llama.cpp's Q8)

// x (n) as int8 blocks of 32: xq = round(x / d), d = absmax / 127 per block (llama.cpp's Q8 numerics).
static void quantize_q8(const float* x, int8_t* xq, float* xd, int64_t n) {
  for (int64_t b = 0; b < n / QBLOCK; ++b) {
    const float* v = x + b * QBLOCK;
    float amax = 0.f;
    for (int64_t j = 0; j < QBLOCK; ++j) amax = std::max(amax, std::fabs(v[j]));
    const float d = amax / 127.f, inverse = d > 0.f ? 1.f / d : 0.f;
    for (int64_t j = 0; j < QBLOCK; ++j) xq[b * QBLOCK + j] = static_cast<int8_t>(std::nearbyint(v[j] * inverse));
    xd[b] = d;
  }
}

#if defined(__AVX2__)
// The integer dot of 32 weight bytes with 32 activation bytes as int32 lanes: |x| (unsigned) times w with x's sign.
static inline __m256i dot_q8(__m256i w, __m256i ax, __m256i x) {
  const __m256i signed_w = _mm256_sign_epi8(w, x);
#if defined(__AVX512VNNI__) && defined(__AVX512VL__)
  return _mm256_dpbusd_epi32(_mm256_setzero_si256(), ax, signed_w);
#else
  return _mm256_madd_epi16(_mm256_maddubs_epi16(ax, signed_w), _mm256_set1_epi16(1));
#endif
}

// Block b of a row: its integer dot with the activation block, as 8 float32 lanes.
static inline __m256 block_q8(const int8_t* row, const int8_t* xq, int64_t b) {
  const __m256i x = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xq + b * QBLOCK));
  const __m256i w = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(row + b * QBLOCK));
  return _mm256_cvtepi32_ps(dot_q8(w, _mm256_sign_epi8(x, x), x));
}

static inline float hsum(__m256 t) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(t), _mm256_extractf128_ps(t, 1));
  s = _mm_hadd_ps(s, s);
  s = _mm_hadd_ps(s, s);
  return _mm_cvtss_f32(s);
}
#endif

#if defined(__AVX2__)
// out[r] = scales[r] * sum over blocks of d_block * (w_block . xq_block) for the NS rows r = first + s * stride,
// each activation block read once for all of them; two accumulators a row (even and odd blocks) so consecutive
// blocks do not wait on each other's add, named, not indexed by parity (kept in registers).
template <int64_t NS>
static inline void rows_q8(const int8_t* w, const int8_t* xq, const float* xd, const float* scales, float* out,
                           int64_t first, int64_t stride, int64_t n) {
  const int64_t blocks = n / QBLOCK;
  const int8_t* row[NS];
  __m256 even[NS], odd[NS];
  for (int64_t s = 0; s < NS; ++s) {
    row[s] = w + (first + s * stride) * n;
    even[s] = odd[s] = _mm256_setzero_ps();
  }
  int64_t b = 0;
  for (; b + 2 <= blocks; b += 2) {
    const __m256 d0 = _mm256_set1_ps(xd[b]), d1 = _mm256_set1_ps(xd[b + 1]);
    for (int64_t s = 0; s < NS; ++s) {
      even[s] = _mm256_fmadd_ps(block_q8(row[s], xq, b), d0, even[s]);
      odd[s] = _mm256_fmadd_ps(block_q8(row[s], xq, b + 1), d1, odd[s]);
    }
  }
  if (b < blocks) {
    const __m256 d = _mm256_set1_ps(xd[b]);
    for (int64_t s = 0; s < NS; ++s) even[s] = _mm256_fmadd_ps(block_q8(row[s], xq, b), d, even[s]);
  }
  for (int64_t s = 0; s < NS; ++s) {
    const int64_t r = first + s * stride;
    out[r] = hsum(_mm256_add_ps(even[s], odd[s])) * scales[r];
  }
}
#else
// The same sums in portable C++, one row.
static void row_q8(const int8_t* row, const int8_t* xq, const float* xd, float scale, float* out, int64_t n) {
  float sum = 0.f;
  for (int64_t b = 0; b < n / QBLOCK; ++b) {
    int32_t dot = 0;
    for (int64_t j = 0; j < QBLOCK; ++j) dot += int32_t(row[b * QBLOCK + j]) * xq[b * QBLOCK + j];
    sum += float(dot) * xd[b];
  }
  *out = sum * scale;
}
#endif

// qweight (rows, n) int8 in [-127, 127], n a multiple of 32: llama.cpp's numerics, rows split over threads, each
// thread's share read four streams at once (``STREAMS``) where AVX2 is there, its last rows one at a time.
static void int8_q8(const int8_t* w, const float* x, const float* scales, float* out, int64_t rows, int64_t n) {
  std::vector<int8_t> xq(n);
  std::vector<float> xd(n / QBLOCK);
  quantize_q8(x, xq.data(), xd.data(), n);
  at::parallel_for(0, rows, 64, [&](int64_t begin, int64_t end) {
#if defined(__AVX2__)
    const int64_t part = (end - begin) / STREAMS;
    for (int64_t j = 0; j < part; ++j) rows_q8<STREAMS>(w, xq.data(), xd.data(), scales, out, begin + j, part, n);
    for (int64_t r = begin + STREAMS * part; r < end; ++r) rows_q8<1>(w, xq.data(), xd.data(), scales, out, r, 0, n);
#else
    for (int64_t r = begin; r < end; ++r) row_q8(w + r * n, xq.data(), xd.data(), scales[r], out + r, n);
#endif
  });
}

static inline float widen1(float v) { return v; }
static inline float widen1(at::BFloat16 v) { return static_cast<float>(v); }
static inline float widen1(at::Half v) { return static_cast<float>(v); }

// qweight (out, in) int8, scales (out), one row x (..., in) -> (qweight * scales[:, None]) @ x (..., out) in x's
// dtype: in a multiple of 32 with llama.cpp's numerics (int8_q8), else exact (each weight widened to float32).
torch::Tensor int8_rows(torch::Tensor qweight, torch::Tensor scales, torch::Tensor x) {
  TORCH_CHECK(qweight.is_contiguous() && qweight.dim() == 2 && x.dim() >= 1 && qweight.size(1) == x.numel(),
              "int8_rows: shapes");
  TORCH_CHECK(qweight.scalar_type() == torch::kChar, "int8_rows: qweight must be int8");
  const int64_t rows = qweight.size(0), n = qweight.size(1);
  auto xf = x.to(torch::kFloat).contiguous();
  auto sf = scales.to(torch::kFloat).contiguous();
  auto out = torch::empty(rows_shape(x, rows), x.options().dtype(torch::kFloat));
  if (n % QBLOCK == 0) {
    int8_q8(qweight.data_ptr<int8_t>(), xf.data_ptr<float>(), sf.data_ptr<float>(), out.data_ptr<float>(), rows, n);
  } else {
    rows_times(qweight.data_ptr<int8_t>(), xf.data_ptr<float>(), out.data_ptr<float>(), rows, n);
    out.mul_(sf);
  }
  return x.scalar_type() == torch::kFloat ? out : out.to(x.scalar_type());
}

// Many token rows: x (M, K) float32 or bfloat16, qweight (N, K) int8, scales (N) -> (M, N) in x's dtype. Tiles of
// `tile` weight rows are widened to x's dtype once (qweight * scale in float32, rounded: a bfloat16 model's weights
// for bfloat16 rows) and multiplied with every token row by at::mm, single-threaded inside the tiles' threads.
torch::Tensor int8_tiles(torch::Tensor x, torch::Tensor qweight, torch::Tensor scales, int64_t tile) {
  TORCH_CHECK(qweight.is_contiguous() && qweight.dim() == 2 && x.dim() == 2 && qweight.size(1) == x.size(1),
              "int8_tiles: shapes");
  x = x.contiguous();
  const int64_t M = x.size(0), K = x.size(1), N = qweight.size(0);
  auto sf = scales.to(torch::kFloat).contiguous();
  auto out = torch::empty({M, N}, x.options());
  const int8_t* wq = qweight.data_ptr<int8_t>();
  const float* sp = sf.data_ptr<float>();
  AT_DISPATCH_FLOATING_TYPES_AND(at::kBFloat16, x.scalar_type(), "int8_tiles", [&] {
    at::parallel_for(0, (N + tile - 1) / tile, 1, [&](int64_t b, int64_t e) {
      auto w = torch::empty({tile, K}, x.options());
      auto part = torch::empty({M, tile}, x.options());
      scalar_t* wp = w.data_ptr<scalar_t>();
      for (int64_t t = b; t < e; ++t) {
        const int64_t n0 = t * tile, n1 = std::min(n0 + tile, N);
        for (int64_t n = n0; n < n1; ++n)
          for (int64_t k = 0; k < K; ++k) wp[(n - n0) * K + k] = static_cast<scalar_t>(float(wq[n * K + k]) * sp[n]);
        auto o = part.narrow(1, 0, n1 - n0);
        at::mm_out(o, x, w.narrow(0, 0, n1 - n0).t());
        out.narrow(1, n0, n1 - n0).copy_(o);
      }
    });
  });
  return out;
}
"""
