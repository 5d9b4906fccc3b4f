"""The C++ of ``int4_cpu``'s few-row product (decode): ``int4_q8`` over the panel layout.

Layout (``int4_cpu.pack``): rows in panels of 16 (the last may hold fewer, R); per block of 32
inputs, four chunks of R dwords, lane r of chunk c holding row r's inputs 8c .. 8c + 3 (low
nibbles) and 8c + 4 .. 8c + 7 (high); per (panel, group) R scales then R offsets, ``w = q *
scale + offset``, in the scale dtype (float32, bfloat16 or float16).

``int4_q8`` (few token rows: decode): llama.cpp's numerics. Each token row is quantized to
int8 per block of 32 (scale absmax / 127); per block and row, the integer dot product of the
unsigned nibbles with the signed bytes, in float32 times the block's scale, summed over the
group and times the row's weight scale; the offsets multiply each group's quantized sum. A
panel's 16 rows are the 16 lanes of one vector (AVX512-VNNI: eight ``vpdpbusd`` a block, in
four independent chains); each panel is read from memory once and multiplied with every token
row while in L1, fetched ``PREFETCH`` bytes ahead (the hardware prefetcher alone left the
row-major kernel 25% slower; over panels, distances of 0 to 8 KiB measured alike: 14.9-15.8
GB/s on 12 Qwen3-0.6B layers at one thread). One token row (decode) reads four whole panels at once
(``PANEL_STREAMS``), block by block, each from its own quarter of the thread's share, as the row kernel reads four
rows: one panel after another is one stream from memory, and on a 2-core Sapphire Rapids Xeon that stream, not the
arithmetic (20 GB/s a core on a panel in cache), held the loop to 15.7 GB/s at two threads over Qwen3-0.6B's 28
layers (group 128, 234 MB packed); four streams read 19.2 (1.22x; 1.21x at one thread, 9.1 -> 11.0), two 17.7,
eight 18.0; an int4 Qwen3-0.6B decoded 1.14x as fast at one thread, 1.17x at two (eager, interleaved in one
process). No prefetch hint or distance moved the one stream (T0/T1/T2/NTA, 1-8 KiB: 14.5-16.1). Each panel's sums
are the same operations in the same order, so a row's outputs are the bits the panel-by-panel path gives. On a
2-core Zen 4 EPYC VM the fetch ahead lost: 28 Qwen3-0.6B layers' panels took 0.80-0.84x the time without it at one
thread and 0.87-0.93x at two (the op called each way in turn, two runs), and an int4 qwen3-0.6b decoded 1.10x as
fast at one thread and 1.08x at two (gpt2 1.08x); so a panel is fetched ahead only where the run fetches a step's
weights ahead (``fetch_ahead``: ``row_product.past_cache``, the host probe's measurement), as the row kernel's own
weights are.
AVX2: two halves of eight lanes, both in one pass over a
block, eight ``vpmaddubsw`` summed in int16 before one ``vpmaddwd``, and the group's scales read as vectors: on an
AVX2-only AMD EPYC, one bfloat16 row through 30 SmolLM2-135M layers' matrices (group 32) 2.03x (13.5 against 6.6
GB/s) and through 12 Qwen3-0.6B layers' (group 128) 1.79x over the halves in turn with their scales gathered lane
by lane, 1.75x and 1.59x at two threads; the same outputs, bit for bit (interleaved builds in one process).

Instruction sets: AVX512-VNNI with VL (``vpdpbusd``), AVX2 (``vpmaddubsw``), else portable scalar
C++; ``-march=native`` picks what the host has. The includes of the whole extension open this
source; ``int4_cpu_source.py`` (the tiles and the op) follows it.
"""

SOURCE = r"""
#include <ATen/ATen.h>
#include <torch/library.h>
#include <ATen/Parallel.h>
#include <c10/util/BFloat16.h>
#include <c10/util/Half.h>
#include <cmath>
#include <algorithm>
#include <type_traits>
#include <vector>
#if defined(__AVX2__) || defined(__AVX512F__)
#include <immintrin.h>
#endif

constexpr int64_t PREFETCH = 4096;  // bytes ahead of the read (module doc)

static inline float f32(float v) { return v; }
static inline float f32(c10::BFloat16 v) { return static_cast<float>(v); }
static inline float f32(c10::Half v) { return static_cast<float>(v); }

// Weight rows come in panels of PANEL (the last one may hold fewer, R): per block of 32 inputs R * 16 bytes, four
// chunks of R dwords; chunk c, lane r, byte i holds q[n0 + r][32 b + 8 c + i] low and q[n0 + r][32 b + 8 c + 4 + i]
// high, so one dword load per lane feeds one row's 4-input integer dot with 4 broadcast activation bytes.
// Per group, the panel's R scales, then its R offsets.
constexpr int64_t PANEL = 16;

// One token row through one panel: per block the R integer dots, in float32 times the block's activation scale,
// summed over the group's blocks, times the weight scales; the offsets times the group's activation sum. Writes
// R floats to `dst`.
#if defined(__AVX512VNNI__) && defined(__AVX512BW__) && defined(__AVX512VL__)
template <typename S>
static inline __m512 lanes_f32(const S* p, __mmask16 lanes) {
  float t[PANEL] = {};
  for (int r = 0; r < PANEL; ++r) if (lanes >> r & 1) t[r] = f32(p[r]);
  return _mm512_loadu_ps(t);
}
template <> inline __m512 lanes_f32(const float* p, __mmask16 lanes) { return _mm512_maskz_loadu_ps(lanes, p); }
template <> inline __m512 lanes_f32(const c10::BFloat16* p, __mmask16 lanes) {
  const __m512i wide = _mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(lanes, p));
  return _mm512_castsi512_ps(_mm512_slli_epi32(wide, 16));
}
template <> inline __m512 lanes_f32(const c10::Half* p, __mmask16 lanes) {
  return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(lanes, p));
}

// NS panels at once, block by block, each panel's sums as panel_row's (the same operations in the same order): NS
// streams from memory in flight where one panel after another is one (module doc). w, s, dst: each panel's.
template <int NS, bool FULL, typename S>
static void panels_at(const uint8_t* const* w, const S* const* s, const int32_t* x4, const float* xd, const float* xg,
                      float* const* dst, int64_t R, int64_t K, int64_t gs, int64_t ahead) {
  const int64_t G = K / gs, nb = gs / 32, chunk = 4 * R;
  const __mmask16 lanes = FULL ? 0xFFFF : (__mmask16)((1u << R) - 1);
  const __mmask64 bytes = FULL ? ~0ull : (1ull << (4 * R)) - 1;
  const __m512i low = _mm512_set1_epi8(0x0F);
  __m512 acc[NS], off[NS];
  for (int i = 0; i < NS; ++i) acc[i] = off[i] = _mm512_setzero_ps();
  for (int64_t g = 0; g < G; ++g) {
    __m512 group[NS];
    for (int i = 0; i < NS; ++i) group[i] = _mm512_setzero_ps();
    for (int64_t blk = g * nb; blk < (g + 1) * nb; ++blk) {
      __m512i xb[8];  // the block's activation bytes, four a dword, broadcast once for every panel
      for (int j = 0; j < 8; ++j) xb[j] = _mm512_set1_epi32(x4[blk * 8 + j]);
      const __m512 scale = _mm512_set1_ps(xd[blk]);
      for (int i = 0; i < NS; ++i) {
        const uint8_t* wb = w[i] + blk * 4 * chunk;
        if (ahead)
          for (int l = 0; l < 4; ++l) _mm_prefetch((const char*)(wb + ahead + 64 * l), _MM_HINT_T0);
        __m512i d[4];  // independent chains: one per chunk
        for (int c = 0; c < 4; ++c) {
          const __m512i p = FULL ? _mm512_loadu_si512(wb + c * chunk) : _mm512_maskz_loadu_epi8(bytes, wb + c * chunk);
          const __m512i lo = _mm512_and_si512(p, low), hi = _mm512_and_si512(_mm512_srli_epi16(p, 4), low);
          d[c] = _mm512_dpbusd_epi32(_mm512_setzero_si512(), lo, xb[2 * c]);
          d[c] = _mm512_dpbusd_epi32(d[c], hi, xb[2 * c + 1]);
        }
        const __m512i dot = _mm512_add_epi32(_mm512_add_epi32(d[0], d[1]), _mm512_add_epi32(d[2], d[3]));
        group[i] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dot), scale, group[i]);
      }
    }
    const __m512 xgg = _mm512_set1_ps(xg[g]);
    for (int i = 0; i < NS; ++i) {
      acc[i] = _mm512_fmadd_ps(group[i], lanes_f32(s[i] + g * 2 * R, lanes), acc[i]);
      off[i] = _mm512_fmadd_ps(lanes_f32(s[i] + g * 2 * R + R, lanes), xgg, off[i]);
    }
  }
  for (int i = 0; i < NS; ++i) _mm512_mask_storeu_ps(dst[i], lanes, _mm512_add_ps(acc[i], off[i]));
}

template <bool FULL, typename S>
static void panel_row(const uint8_t* w, const S* s, const int32_t* x4, const float* xd, const float* xg, float* dst,
                      int64_t R, int64_t K, int64_t gs, int64_t ahead) {
  panels_at<1, FULL, S>(&w, &s, x4, xd, xg, &dst, R, K, gs, ahead);
}
constexpr int PANEL_STREAMS = 4;  // whole panels read at once for one token row (module doc)
#elif defined(__AVX2__)
// Eight consecutive scales (or offsets) as float32: vector loads, since filling a stack array lane by lane and
// loading it as a vector stalls on store forwarding once per group (a group is one block for Q4 files).
template <typename S>
static inline __m256 lanes8(const S* p) {  // double scales: converted one by one
  float t[8];
  for (int i = 0; i < 8; ++i) t[i] = f32(p[i]);
  return _mm256_loadu_ps(t);
}
static inline __m256 lanes8(const float* p) { return _mm256_loadu_ps(p); }
static inline __m256 lanes8(const c10::BFloat16* p) {
  const __m256i wide = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  return _mm256_castsi256_ps(_mm256_slli_epi32(wide, 16));
}
static inline __m256 lanes8(const c10::Half* p) {
#if defined(__F16C__)
  return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
#else
  float t[8];
  for (int i = 0; i < 8; ++i) t[i] = static_cast<float>(p[i]);
  return _mm256_loadu_ps(t);
#endif
}

// A whole panel: both halves of eight lanes in one pass, the activation bytes broadcast once a block. A block's
// eight ``vpmaddubsw`` results add up in int16 before one ``vpmaddwd``: each is at most 2 x 15 x 127 = 3810 in
// magnitude (the bytes are round(x / d) with d = absmax / 127), so eight sum to at most 30480, exact in int16.
template <typename S>
static void panel_row_full(const uint8_t* w, const S* s, const int32_t* x4, const float* xd, const float* xg,
                           float* dst, int64_t K, int64_t gs, int64_t ahead) {
  const int64_t G = K / gs, nb = gs / 32, chunk = 4 * PANEL;
  const __m256i low = _mm256_set1_epi8(0x0F), ones = _mm256_set1_epi16(1);
  __m256 acc[2] = {_mm256_setzero_ps(), _mm256_setzero_ps()}, off[2] = {_mm256_setzero_ps(), _mm256_setzero_ps()};
  for (int64_t g = 0; g < G; ++g) {
    __m256 group[2] = {_mm256_setzero_ps(), _mm256_setzero_ps()};
    for (int64_t blk = g * nb; blk < (g + 1) * nb; ++blk) {
      const uint8_t* wb = w + blk * 4 * chunk;
      if (ahead)
        for (int l = 0; l < 4; ++l) _mm_prefetch((const char*)(wb + ahead + 64 * l), _MM_HINT_T0);
      const int32_t* xb = x4 + blk * 8;
      __m256i sum[2] = {_mm256_setzero_si256(), _mm256_setzero_si256()};
      for (int c = 0; c < 4; ++c) {
        const __m256i xl = _mm256_set1_epi32(xb[2 * c]), xh = _mm256_set1_epi32(xb[2 * c + 1]);
        for (int h = 0; h < 2; ++h) {
          const __m256i p = _mm256_loadu_si256((const __m256i*)(wb + c * chunk + 32 * h));
          const __m256i ql = _mm256_and_si256(p, low), qh = _mm256_and_si256(_mm256_srli_epi16(p, 4), low);
          const __m256i pairs = _mm256_add_epi16(_mm256_maddubs_epi16(ql, xl), _mm256_maddubs_epi16(qh, xh));
          sum[h] = _mm256_add_epi16(sum[h], pairs);
        }
      }
      const __m256 d = _mm256_set1_ps(xd[blk]);
      for (int h = 0; h < 2; ++h) {
        group[h] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_madd_epi16(sum[h], ones)), d, group[h]);
      }
    }
    const S* sg = s + g * 2 * PANEL;
    const __m256 xgg = _mm256_set1_ps(xg[g]);
    for (int h = 0; h < 2; ++h) {
      acc[h] = _mm256_fmadd_ps(group[h], lanes8(sg + 8 * h), acc[h]);
      off[h] = _mm256_fmadd_ps(lanes8(sg + PANEL + 8 * h), xgg, off[h]);
    }
  }
  _mm256_storeu_ps(dst, _mm256_add_ps(acc[0], off[0]));
  _mm256_storeu_ps(dst + 8, _mm256_add_ps(acc[1], off[1]));
}

// A whole panel through panel_row_full; the last, shorter one (R < 16 rows) eight lanes a vector (``vpmaddubsw``
// pairs, ``vpmaddwd`` to int32), its halves in turn, the missing lanes masked.
template <bool FULL, typename S>
static void panel_row(const uint8_t* w, const S* s, const int32_t* x4, const float* xd, const float* xg, float* dst,
                      int64_t R, int64_t K, int64_t gs, int64_t ahead) {
  if constexpr (FULL) {
    panel_row_full<S>(w, s, x4, xd, xg, dst, K, gs, ahead);
    return;
  }
  const int64_t G = K / gs, nb = gs / 32, chunk = 4 * R;
  const __m256i low = _mm256_set1_epi8(0x0F), ones = _mm256_set1_epi16(1);
  for (int64_t h = 0; h * 8 < R; ++h) {
    const int64_t n = std::min<int64_t>(8, R - 8 * h);
    const __m256i mask = _mm256_cmpgt_epi32(_mm256_set1_epi32(int(n)), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
    __m256 acc = _mm256_setzero_ps(), off = _mm256_setzero_ps();
    for (int64_t g = 0; g < G; ++g) {
      __m256 group = _mm256_setzero_ps();
      for (int64_t blk = g * nb; blk < (g + 1) * nb; ++blk) {
        const uint8_t* wb = w + blk * 4 * chunk + 32 * h;
        if (ahead)
          for (int l = 0; l < 2; ++l) _mm_prefetch((const char*)(wb + ahead + 64 * l), _MM_HINT_T0);
        const int32_t* xb = x4 + blk * 8;
        __m256i dot = _mm256_setzero_si256();
        for (int c = 0; c < 4; ++c) {
          const __m256i p = _mm256_maskload_epi32((const int*)(wb + c * chunk), mask);
          const __m256i ql = _mm256_and_si256(p, low), qh = _mm256_and_si256(_mm256_srli_epi16(p, 4), low);
          const __m256i lo = _mm256_maddubs_epi16(ql, _mm256_set1_epi32(xb[2 * c]));
          const __m256i hi = _mm256_maddubs_epi16(qh, _mm256_set1_epi32(xb[2 * c + 1]));
          dot = _mm256_add_epi32(dot, _mm256_madd_epi16(_mm256_add_epi16(lo, hi), ones));
        }
        group = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot), _mm256_set1_ps(xd[blk]), group);
      }
      float sc[8] = {}, of[8] = {};
      for (int64_t i = 0; i < n; ++i) {
        sc[i] = f32(s[g * 2 * R + 8 * h + i]);
        of[i] = f32(s[g * 2 * R + R + 8 * h + i]);
      }
      acc = _mm256_fmadd_ps(group, _mm256_loadu_ps(sc), acc);
      off = _mm256_fmadd_ps(_mm256_loadu_ps(of), _mm256_set1_ps(xg[g]), off);
    }
    float t[8];
    _mm256_storeu_ps(t, _mm256_add_ps(acc, off));
    for (int64_t i = 0; i < n; ++i) dst[8 * h + i] = t[i];
  }
}
#else
// Portable C++ of the same sums (no fetch ahead: `ahead` unused).
template <bool FULL, typename S>
static void panel_row(const uint8_t* w, const S* s, const int32_t* x4, const float* xd, const float* xg, float* dst,
                      int64_t R, int64_t K, int64_t gs, int64_t) {
  const int64_t G = K / gs, nb = gs / 32, chunk = 4 * R;
  const int8_t* x = reinterpret_cast<const int8_t*>(x4);
  float acc[PANEL] = {}, off[PANEL] = {};
  for (int64_t g = 0; g < G; ++g) {
    float group[PANEL] = {};
    for (int64_t blk = g * nb; blk < (g + 1) * nb; ++blk) {
      int32_t dot[PANEL] = {};
      for (int c = 0; c < 4; ++c) {
        const uint8_t* q = w + blk * 4 * chunk + c * chunk;
        const int8_t* xc = x + blk * 32 + 8 * c;
        for (int64_t r = 0; r < R; ++r) {
          for (int i = 0; i < 4; ++i) {
            dot[r] += int32_t(q[4 * r + i] & 15) * xc[i] + int32_t(q[4 * r + i] >> 4) * xc[4 + i];
          }
        }
      }
      for (int64_t r = 0; r < R; ++r) group[r] += float(dot[r]) * xd[blk];
    }
    for (int64_t r = 0; r < R; ++r) {
      acc[r] += group[r] * f32(s[g * 2 * R + r]);
      off[r] += f32(s[g * 2 * R + R + r]) * xg[g];
    }
  }
  for (int64_t r = 0; r < R; ++r) dst[r] = acc[r] + off[r];
}
#endif

// out[m][n0 .. n0 + R) for every token row m. xq (M, K) int8, xd (M, K / 32) block scales, xg (M, G): per group
// the sum of the quantized activations times their scales (for the offsets).
template <typename S, typename T>
static void panel_q8(const uint8_t* wq, const S* so, const int8_t* xq, const float* xd, const float* xg, T* out,
                     int64_t n0, int64_t M, int64_t N, int64_t K, int64_t gs, int64_t ahead) {
  const int64_t R = std::min(PANEL, N - n0), G = K / gs;
  const uint8_t* w = wq + n0 * (K / 2);
  const S* s = so + n0 * G * 2;
  float dst[PANEL];
  for (int64_t m = 0; m < M; ++m) {
    const int32_t* x4 = reinterpret_cast<const int32_t*>(xq + m * K);
    if (R == PANEL) {
      panel_row<true, S>(w, s, x4, xd + m * (K / 32), xg + m * G, dst, R, K, gs, ahead);
    } else {
      panel_row<false, S>(w, s, x4, xd + m * (K / 32), xg + m * G, dst, R, K, gs, ahead);
    }
    for (int64_t r = 0; r < R; ++r) out[m * N + n0 + r] = static_cast<T>(dst[r]);
  }
}

// One token row (decode) through the panels [b, e) of one thread's share, into out (N). Where the instruction set
// reads several panels at once (PANEL_STREAMS), the share's whole panels go in that many streams, each from its own
// part of the share, as the row kernel reads rows; the rest, and the last, shorter panel, one at a time.
template <typename S, typename T>
static void share_q8(const uint8_t* wq, const S* so, const int8_t* xq, const float* xd, const float* xg, T* out,
                     int64_t b, int64_t e, int64_t N, int64_t K, int64_t gs, int64_t ahead) {
  int64_t next = b;
#if defined(__AVX512VNNI__) && defined(__AVX512BW__) && defined(__AVX512VL__)
  const int64_t G = K / gs;
  const int64_t part = std::max<int64_t>(std::min(e, N / PANEL) - b, 0) / PANEL_STREAMS;  // whole panels a stream
  for (int64_t j = 0; j < part; ++j) {
    const uint8_t* w[PANEL_STREAMS];
    const S* s[PANEL_STREAMS];
    float sums[PANEL_STREAMS][PANEL];
    float* dst[PANEL_STREAMS];
    for (int i = 0; i < PANEL_STREAMS; ++i) {
      const int64_t n0 = (b + i * part + j) * PANEL;
      w[i] = wq + n0 * (K / 2);
      s[i] = so + n0 * G * 2;
      dst[i] = sums[i];
    }
    panels_at<PANEL_STREAMS, true, S>(w, s, reinterpret_cast<const int32_t*>(xq), xd, xg, dst, PANEL, K, gs, ahead);
    for (int i = 0; i < PANEL_STREAMS; ++i)
      for (int64_t r = 0; r < PANEL; ++r) out[(b + i * part + j) * PANEL + r] = static_cast<T>(sums[i][r]);
  }
  next = b + PANEL_STREAMS * part;
#endif
  for (int64_t p = next; p < e; ++p) panel_q8<S, T>(wq, so, xq, xd, xg, out, p * PANEL, 1, N, K, gs, ahead);
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

// int4_q8 of x's M rows of K (contiguous, any leading dims) into a new tensor of `shape` (x's dims, the last N);
// fetch_ahead: each panel fetched PREFETCH bytes ahead of its read (module doc).
static at::Tensor q8_product(const at::Tensor& x, int64_t M, int64_t K, const at::Tensor& packed,
                             const at::Tensor& so, int64_t grain, at::IntArrayRef shape, bool fetch_ahead) {
  const int64_t N = packed.size(0), gs = K / so.size(1), ahead = fetch_ahead ? PREFETCH : 0;
  auto out = at::empty(shape, x.options());
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
      at::parallel_for(0, (N + PANEL - 1) / PANEL, grain, [&](int64_t b, int64_t e) {
        if (M == 1) return share_q8<S, T>(wq, s, xq.data(), xd.data(), xg.data(), op, b, e, N, K, gs, ahead);
        for (int64_t p = b; p < e; ++p) {
          panel_q8<S, T>(wq, s, xq.data(), xd.data(), xg.data(), op, p * PANEL, M, N, K, gs, ahead);
        }
      });
    });
  });
  return out;
}

// x (M, K) float32 / bfloat16 / float16, packed (N, K / 2) uint8, so (N, G, 2) -> (M, N) in x's dtype, with
// llama.cpp's numerics. Each thread takes whole panels, at least `grain` of them; fetch_ahead: q8_product's.
at::Tensor int4_q8(at::Tensor x, at::Tensor packed, at::Tensor so, int64_t grain, bool fetch_ahead) {
  return q8_product(x.contiguous(), x.size(0), x.size(1), packed, so, grain, {x.size(0), packed.size(0)},
                    fetch_ahead);
}

"""
