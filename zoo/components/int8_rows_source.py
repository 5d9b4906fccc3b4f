"""The C++ of zoo's one-row int8 products (``zoo/quant/int8_rows.py``): appended after the
one-row products' source (``zoo/components/row_product_source.py``: its headers, ``STREAMS``,
``rows_times`` and ``rows_shape``), in that extension.

``int8_rows`` over rows whose length is a multiple of 32 takes llama.cpp's numerics
(``int8_q8``): the row ``x`` quantized to int8 per block of 32 (scale absmax / 127, rounded
to nearest even), per block the integer dot product of those bytes with the weight's
(``vpdpbusd`` on AVX512-VNNI, ``vpmaddubsw`` on AVX2, scalar C++ elsewhere; the weight byte
takes the activation's sign so the unsigned operand is |x|), scaled by the block's scale in
float32, and the row's sum by the weight row's scale. Widening every int8 weight to float32
and multiplying left the loop compute-bound: a 49152 x 576 head streamed 9.8 GB/s where a
float32 matrix of the same shape streamed 17-19 GB/s (one thread, this project's Zen 4).
The integer loop reads it at 18-19 GB/s, and matrices that stay in the L3 cache at 30-48
GB/s (1.4-2.9x the widening loop in one process, one and two threads). Rows are read four
streams at once as the float rows are (four adjacent rows interleaved read 576-byte rows at 8 GB/s), with
two named accumulators a row: an array indexed by the block's parity was kept on the stack
and held the loop to ~17 GB/s even in cache. The streams took qwen3-0.6b's int8 decode 1.13x
(two threads, interleaved workers, same tokens: each row's arithmetic is unchanged). Each stream fetches its row
``Q8_AHEAD`` = 1 KiB ahead into L1 (prefetcht0): on a 2-core Sapphire Rapids Xeon qwen3-0.6b's 197 int8 matrices
(596 MB, the tied head's 156 among them) read at 19.5-20.1 GB/s against 17.4-18.1 without it at two threads (1.12x),
10.5 against 9.7 at one (interleaved builds; 2 and 4 KiB alike, prefetchnta 0.85x, prefetcht1 1.08x), and its int8
model decoded 1.07x as fast eager at one thread, 1.03x at two (gpt2: 1.07x, 1.01x). On a 2-core Zen 4 EPYC VM the
fetch lost instead: the same matrices took 0.84-0.91x the time without it at one thread, 0.91-0.94x at two, and an int8
qwen3-0.6b decoded 1.12x and 1.02x as fast (gpt2 1.04x at two). So the rows are fetched ahead only where the run
fetches a step's weights ahead (``fetch_ahead``: ``row_product.past_cache``, the host probe's measurement). The sign
trick needs weights in [-127, 127], which ``quantize_int8`` gives.
"""

from __future__ import annotations

SOURCE = r"""
constexpr int64_t QBLOCK = 32;       // inputs per activation block (llama.cpp's Q8)
constexpr int64_t Q8_AHEAD = 1024;   // bytes a row's fetch runs ahead of its read (module doc)

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
// AHEAD: each row fetched Q8_AHEAD bytes ahead of its read (the run's fetch_ahead, module doc).
template <int64_t NS, bool AHEAD>
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
      if constexpr (AHEAD) _mm_prefetch(reinterpret_cast<const char*>(row[s] + b * QBLOCK + Q8_AHEAD), _MM_HINT_T0);
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
template <bool AHEAD>
static void int8_q8(const int8_t* w, const float* x, const float* scales, float* out, int64_t rows, int64_t n) {
  std::vector<int8_t> xq(n);
  std::vector<float> xd(n / QBLOCK);
  quantize_q8(x, xq.data(), xd.data(), n);
  at::parallel_for(0, rows, 64, [&](int64_t begin, int64_t end) {
#if defined(__AVX2__)
    const int64_t part = (end - begin) / STREAMS;
    for (int64_t j = 0; j < part; ++j)
      rows_q8<STREAMS, AHEAD>(w, xq.data(), xd.data(), scales, out, begin + j, part, n);
    for (int64_t r = begin + STREAMS * part; r < end; ++r)
      rows_q8<1, AHEAD>(w, xq.data(), xd.data(), scales, out, r, 0, n);
#else
    for (int64_t r = begin; r < end; ++r) row_q8(w + r * n, xq.data(), xd.data(), scales[r], out + r, n);
#endif
  });
}

// qweight (out, in) int8, scales (out), one row x (..., in) -> (qweight * scales[:, None]) @ x (..., out) in x's
// dtype: in a multiple of 32 with llama.cpp's numerics (int8_q8), else exact (each weight widened to float32);
// fetch_ahead: each row fetched ahead of its read (module doc).
at::Tensor int8_rows(at::Tensor qweight, at::Tensor scales, at::Tensor x, bool fetch_ahead) {
  TORCH_CHECK(qweight.is_contiguous() && qweight.dim() == 2 && x.dim() >= 1 && qweight.size(1) == x.numel(),
              "int8_rows: shapes");
  TORCH_CHECK(qweight.scalar_type() == at::kChar, "int8_rows: qweight must be int8");
  const int64_t rows = qweight.size(0), n = qweight.size(1);
  auto xf = x.to(at::kFloat).contiguous();
  auto sf = scales.to(at::kFloat).contiguous();
  auto out = at::empty(rows_shape(x, rows), x.options().dtype(at::kFloat));
  if (n % QBLOCK == 0) {
    const auto q8 = fetch_ahead ? int8_q8<true> : int8_q8<false>;
    q8(qweight.data_ptr<int8_t>(), xf.data_ptr<float>(), sf.data_ptr<float>(), out.data_ptr<float>(), rows, n);
  } else {
    rows_times(qweight.data_ptr<int8_t>(), xf.data_ptr<float>(), out.data_ptr<float>(), rows, n);
    out.mul_(sf);
  }
  return x.scalar_type() == at::kFloat ? out : out.to(x.scalar_type());
}

// Many token rows: x (M, K) float32 or bfloat16, qweight (N, K) int8, scales (N) -> (M, N) in x's dtype. Tiles of
// at most `tile` weight rows, the same work for every thread (balanced_tile, tiles_source.py), are widened to x's
// dtype once (qweight * scale in float32, rounded: a bfloat16 model's weights for bfloat16 rows) and multiplied
// with every token row by at::mm, single-threaded inside the tiles' threads.
at::Tensor int8_tiles(at::Tensor x, at::Tensor qweight, at::Tensor scales, int64_t tile) {
  TORCH_CHECK(qweight.is_contiguous() && qweight.dim() == 2 && x.dim() == 2 && qweight.size(1) == x.size(1),
              "int8_tiles: shapes");
  x = x.contiguous();
  const int64_t M = x.size(0), K = x.size(1), N = qweight.size(0);
  auto sf = scales.to(at::kFloat).contiguous();
  auto out = at::empty({M, N}, x.options());
  const int8_t* wq = qweight.data_ptr<int8_t>();
  const float* sp = sf.data_ptr<float>();
  tile = balanced_tile(N, tile, 16);
  AT_DISPATCH_FLOATING_TYPES_AND(at::kBFloat16, x.scalar_type(), "int8_tiles", [&] {
    at::parallel_for(0, (N + tile - 1) / tile, 1, [&](int64_t b, int64_t e) {
      auto w = at::empty({tile, K}, x.options());
      auto part = at::empty({M, tile}, x.options());
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
