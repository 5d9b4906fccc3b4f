"""The C++ of ``int4_cpu``: zoo's int4 products on the CPU over its row-major block layout.

Layout (``int4_cpu.pack``): per output row, per block of 32 inputs, 16 bytes; byte ``j`` holds
value ``j`` in its low nibble and value ``j + 16`` in its high nibble (GGUF's Q4_0 / Q4_1
blocks); per (row, group) a scale and an offset, ``w = q * scale + offset``, in the scale
dtype (float32, bfloat16 or float16).

``int4_q8`` (few token rows: decode): llama.cpp's numerics. Each token row is quantized to
int8 per block of 32 (scale absmax / 127); per block, the integer dot product of the unsigned
nibbles with the signed bytes, scaled in float32 by the weight group's scale times the
block's; the offsets multiply each group's quantized sum. Four weight rows go through the
loop together (independent accumulators, the activation bytes loaded once for four rows);
each weight row is read from memory once and multiplied with every token row while in L1,
fetched ``PREFETCH`` bytes ahead (the hardware prefetcher alone left it 25% slower).

``int4_tiles`` (prefill, many token rows): a tile of ``TILE`` weight rows is widened once
(``tile`` x in values: stays in L2) and multiplied with every token row by ``at::mm``
(single-threaded inside ``at::parallel_for``): weights read from memory once per call, the
multiply at GEMM speed. Float32 and float16 activations: exact weight-only numerics (float32
activations times ``q * scale + offset``). bfloat16 activations: ``q * scale + offset``
computed in float32 and rounded to bfloat16, a bfloat16 GEMM accumulating in float32, as a
bfloat16 model's own weights would be (oneDNN's bfloat16 GEMM ran 2.0-2.1x float32's on these
shapes here: 128 token rows, 576-1536 inputs, one thread).

Instruction sets: AVX512-VNNI with VL (``vpdpbusd``), AVX2 (``vpmaddubsw``), else portable scalar
C++; ``-march=native`` picks what the host has.
"""

SOURCE = r"""
#include <torch/extension.h>
#include <ATen/Parallel.h>
#include <c10/util/BFloat16.h>
#include <c10/util/Half.h>
#include <cmath>
#include <algorithm>
#include <vector>
#if defined(__AVX2__) || defined(__AVX512F__)
#include <immintrin.h>
#endif

constexpr int64_t PREFETCH = 4096;  // bytes ahead of the read: measured best of 0.25-16 KiB (bench/int4_numerics.py)

static inline float f32(float v) { return v; }
static inline float f32(c10::BFloat16 v) { return static_cast<float>(v); }
static inline float f32(c10::Half v) { return static_cast<float>(v); }

// The integer dot of one block: 16 bytes of nibbles (u4) with 32 int8 activations (s8), as int32 lanes.
#if defined(__AVX2__)
static inline __m256i dot_block(const uint8_t* w, __m256i xv) {
  const __m128i m = _mm_set1_epi8(0x0F);
  const __m128i v = _mm_loadu_si128((const __m128i*)w);
  const __m256i u = _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(v, 4), m), _mm_and_si128(v, m));
#if defined(__AVX512VNNI__) && defined(__AVX512VL__)
  return _mm256_dpbusd_epi32(_mm256_setzero_si256(), u, xv);
#else
  return _mm256_madd_epi16(_mm256_maddubs_epi16(u, xv), _mm256_set1_epi16(1));
#endif
}

static inline float hsum(__m256 t) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(t), _mm256_extractf128_ps(t, 1));
  s = _mm_hadd_ps(s, s);
  s = _mm_hadd_ps(s, s);
  return _mm_cvtss_f32(s);
}
#endif

// out[m][n .. n + R) for every token row m. xq (M, K) int8, xd (M, K / 32) block scales, xg (M, G): per group
// the sum of the quantized activations times their scales (for the offsets).
template <int R, typename S, typename T>
static void rows_q8(const uint8_t* wq, const S* so, const int8_t* xq, const float* xd, const float* xg, T* out,
                    int64_t n, int64_t M, int64_t N, int64_t K, int64_t gs) {
  const int64_t G = K / gs, nb = gs / 32, B = K / 32;
  const uint8_t* w[R];
  for (int r = 0; r < R; ++r) w[r] = wq + (n + r) * (K / 2);
  for (int64_t m = 0; m < M; ++m) {
    float off[R], s[R];
    for (int r = 0; r < R; ++r) off[r] = 0.f;
#if defined(__AVX2__)
    __m256 acc[R];
    for (int r = 0; r < R; ++r) acc[r] = _mm256_setzero_ps();
#else
    float acc[R];
    for (int r = 0; r < R; ++r) acc[r] = 0.f;
#endif
    for (int64_t g = 0; g < G; ++g) {
      for (int r = 0; r < R; ++r) {
        const S* p = so + ((n + r) * G + g) * 2;
        s[r] = f32(p[0]);
        off[r] += f32(p[1]) * xg[m * G + g];
      }
      for (int64_t blk = g * nb; blk < (g + 1) * nb; ++blk) {
        const int8_t* x = xq + m * K + blk * 32;
        const float d = xd[m * B + blk];
#if defined(__AVX2__)
        const __m256i xv = _mm256_loadu_si256((const __m256i*)x);
        if (blk % 4 == 0) {  // a cache line holds 4 blocks; fetch the one PREFETCH bytes ahead
          for (int r = 0; r < R; ++r) _mm_prefetch((const char*)(w[r] + blk * 16 + PREFETCH), _MM_HINT_T0);
        }
        for (int r = 0; r < R; ++r) {
          const __m256 dot = _mm256_cvtepi32_ps(dot_block(w[r] + blk * 16, xv));
          acc[r] = _mm256_fmadd_ps(dot, _mm256_set1_ps(s[r] * d), acc[r]);
        }
#else
        for (int r = 0; r < R; ++r) {
          const uint8_t* v = w[r] + blk * 16;
          int32_t dot = 0;
          for (int j = 0; j < 16; ++j) dot += int32_t(v[j] & 15) * x[j] + int32_t(v[j] >> 4) * x[j + 16];
          acc[r] += float(dot) * (s[r] * d);
        }
#endif
      }
    }
#if defined(__AVX2__)
    for (int r = 0; r < R; ++r) out[m * N + n + r] = static_cast<T>(hsum(acc[r]) + off[r]);
#else
    for (int r = 0; r < R; ++r) out[m * N + n + r] = static_cast<T>(acc[r] + off[r]);
#endif
  }
}

// Token rows quantized per block of 32 as llama.cpp's Q8 blocks: int8 = round(x / d), d = absmax / 127.
template <typename T>
static void quantize_rows(const T* x, int8_t* xq, float* xd, float* xg, int64_t M, int64_t K, int64_t gs) {
  const int64_t nb = gs / 32;
  for (int64_t b = 0; b < M * K / 32; ++b) {
    float v[32], amax = 0.f;
    for (int j = 0; j < 32; ++j) {
      v[j] = f32(x[b * 32 + j]);
      amax = std::max(amax, std::fabs(v[j]));
    }
    const float d = amax / 127.f, inverse = d > 0.f ? 1.f / d : 0.f;
    int32_t sum = 0;
    for (int j = 0; j < 32; ++j) {
      xq[b * 32 + j] = static_cast<int8_t>(std::nearbyint(v[j] * inverse));
      sum += xq[b * 32 + j];
    }
    xd[b] = d;
    if (b % nb == 0) xg[b / nb] = 0.f;
    xg[b / nb] += d * float(sum);
  }
}

// x (M, K) float32 / bfloat16 / float16, packed (N, K / 2) uint8, so (N, G, 2) -> (M, N) in x's dtype, with
// llama.cpp's numerics. Each thread takes whole groups of 4 weight rows, at least `grain` groups.
torch::Tensor int4_q8(torch::Tensor x, torch::Tensor packed, torch::Tensor so, int64_t grain) {
  const int64_t M = x.size(0), K = x.size(1), N = packed.size(0), gs = K / so.size(1);
  auto out = torch::empty({M, N}, x.options());
  const uint8_t* wq = packed.data_ptr<uint8_t>();
  std::vector<int8_t> xq(M * K);
  std::vector<float> xd(M * K / 32), xg(M * (K / gs));
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kBFloat16, at::kHalf, so.scalar_type(), "int4_q8", [&] {
    using S = scalar_t;
    const S* s = so.data_ptr<S>();
    AT_DISPATCH_FLOATING_TYPES_AND2(at::kBFloat16, at::kHalf, x.scalar_type(), "int4_q8_x", [&] {
      using T = scalar_t;
      quantize_rows<T>(x.data_ptr<T>(), xq.data(), xd.data(), xg.data(), M, K, gs);
      T* op = out.data_ptr<T>();
      at::parallel_for(0, (N + 3) / 4, grain, [&](int64_t b, int64_t e) {
        int64_t n = b * 4;
        const int64_t end = std::min(e * 4, N);
        for (; n + 4 <= end; n += 4) rows_q8<4, S, T>(wq, s, xq.data(), xd.data(), xg.data(), op, n, M, N, K, gs);
        for (; n < end; ++n) rows_q8<1, S, T>(wq, s, xq.data(), xd.data(), xg.data(), op, n, M, N, K, gs);
      });
    });
  });
  return out;
}

// Rows [n0, n1) widened to float32 and stored as D (float32, or bfloat16 for a bfloat16 product) (n1 - n0, K).
template <typename S, typename D>
static void widen(const uint8_t* wq, const S* so, D* dst, int64_t n0, int64_t n1, int64_t K, int64_t gs) {
  const int64_t G = K / gs, nb = gs / 32;
  for (int64_t n = n0; n < n1; ++n) {
    const uint8_t* w = wq + n * (K / 2);
    D* d = dst + (n - n0) * K;
    for (int64_t g = 0; g < G; ++g) {
      const float s = f32(so[(n * G + g) * 2]), z = f32(so[(n * G + g) * 2 + 1]);
      for (int64_t b = g * nb; b < (g + 1) * nb; ++b) {
        for (int j = 0; j < 16; ++j) {
          d[b * 32 + j] = static_cast<D>(float(w[b * 16 + j] & 15) * s + z);
          d[b * 32 + j + 16] = static_cast<D>(float(w[b * 16 + j] >> 4) * s + z);
        }
      }
    }
  }
}

// Many token rows: x (M, K) float32 or bfloat16 -> (M, N) in x's dtype, the tiles in x's dtype.
torch::Tensor int4_tiles(torch::Tensor x, torch::Tensor packed, torch::Tensor so, int64_t tile) {
  const int64_t M = x.size(0), K = x.size(1), N = packed.size(0), gs = K / so.size(1);
  const bool half = x.scalar_type() == at::kBFloat16;
  auto out = torch::empty({M, N}, x.options());
  const uint8_t* wq = packed.data_ptr<uint8_t>();
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kBFloat16, at::kHalf, so.scalar_type(), "int4_tiles", [&] {
    const scalar_t* s = so.data_ptr<scalar_t>();
    at::parallel_for(0, (N + tile - 1) / tile, 1, [&](int64_t b, int64_t e) {
      auto w = torch::empty({tile, K}, x.options());
      auto part = torch::empty({M, tile}, x.options());
      for (int64_t t = b; t < e; ++t) {
        const int64_t n0 = t * tile, n1 = std::min(n0 + tile, N);
        if (half) {
          widen<scalar_t, at::BFloat16>(wq, s, w.data_ptr<at::BFloat16>(), n0, n1, K, gs);
        } else {
          widen<scalar_t, float>(wq, s, w.data_ptr<float>(), n0, n1, K, gs);
        }
        auto wt = w.narrow(0, 0, n1 - n0);
        auto o = part.narrow(1, 0, n1 - n0);
        at::mm_out(o, x, wt.t());
        out.narrow(1, n0, n1 - n0).copy_(o);
      }
    });
  });
  return out;
}

// The product for any number of token rows: x (M, K) in its dtype -> (M, N) in x's dtype; the int8 rows below
// `tile_from` token rows, else the widened tiles, at most `tile` rows each and one tile per thread at least.
torch::Tensor int4_mm(torch::Tensor x, torch::Tensor packed, torch::Tensor so, int64_t tile_from, int64_t tile,
                      int64_t grain) {
  x = x.contiguous();
  if (x.size(0) < tile_from) return int4_q8(x, packed, so, grain);
  const int64_t threads = at::get_num_threads(), share = (packed.size(0) + threads - 1) / threads;
  tile = std::max<int64_t>(32, std::min(tile, share));
  if (x.scalar_type() == at::kBFloat16) return int4_tiles(x, packed, so, tile);  // bfloat16 GEMM: twice float32's
  return int4_tiles(x.to(at::kFloat), packed, so, tile).to(x.scalar_type());
}

// A dispatcher op, so a compiled graph calls it without Python (a Python custom op cost 9 us a call).
TORCH_LIBRARY(zoo_int4, m) {
  m.def("mm(Tensor x, Tensor packed, Tensor scale_offsets, int tile_from, int tile, int grain) -> Tensor");
}
TORCH_LIBRARY_IMPL(zoo_int4, CPU, m) { m.impl("mm", &int4_mm); }
"""
