"""The C++ of one query's attention on the CPU (``zoo/components/cpu_attention.py``).

Appended to the one-row products' source (``row_product_source.py``: its headers and
``widen1``), so that it is one more function of that extension and costs no build of its own.

``one_query_attention``: softmax attention of one query per sequence over a K/V cache, the
step's other read of memory. Per (sequence, key/value head) the K and V rows are read once,
in their own dtype, for the head's whole group of query heads (GQA); scores, softmax and the
weighted sum of V are float32. torch's CPU kernel for half precision was slower than
upcasting the whole cache first (zoo/components/sdpa_kernels.py's ``sdpa``), and the upcast
itself read and wrote the cache again per layer.

On AVX-512 hosts and AVX2 ones (with FMA and F16C), heads of 16, 32, 48, 64, 80, 96, 128,
192 or 256 take ``attend_part_blocked``: a head's D floats are D/16 registers (D/8 on AVX2),
so a block of query heads stays in registers while each key row is loaded once for the
block's dots, and the block's weighted sums of V stay in registers over all the keys; the
softmax's exponentials are a register at a time (Cephes' polynomial, relative error about
1e-7; the AVX2 one builds 2^n in the exponent's bits, so below e^-87 of the row's top it is
0). The register width is the only difference: ``vfloat`` and its few operations are defined
once per instruction set. The plain loops, which the compiler vectorized by itself, took
2.2-2.9x as long on cached K/V (µs per call, one thread, this project's Zen 4, interleaved,
plain / blocked): SmolLM2-135M's shapes (9 query and 3 K/V heads of 64, bfloat16, 135 keys)
14.2 / 6.6; gpt2's (12 of 64, float32) 35.6 / 12.7; Qwen3-0.6B's (16 and 8 of 128, bfloat16)
44.3 / 19.6; T5's with its bias 30.8 / 14.1; 2,048 keys of 32 and 8 heads 823 / 280. Inside
SmolLM2's real decode step (its K/V no longer cached) a call took 29.3 against 18.5 µs. On an
AVX2-only AMD EPYC (2 cores, both builds in one process, 144 keys, two threads, medians of
interleaved rounds, plain / blocked): T5's self-attention with its bias in bfloat16 31.9 /
28.7, its cross-attention 21.6 / 17.1 (float32 34.1 / 26.4), gpt2's 33.9 / 26.6 (float32
52.4 / 41.9), Qwen3-0.6B's float32 75.2 / 59.9. Other head sizes, float64 and hosts with
neither take ``attend_group_any``, the plain loops.

Threads take (sequence, key/value head) pairs (``cpu_attention_calls_source.py``). Where the
pairs do not share evenly over them (SmolLM2-135M's three K/V heads over two threads: one
thread did two, and two threads ran a call no faster than one), each pair's keys go in parts
(``key_parts``: enough that the parts share evenly, each of at least 64 keys), each part's
softmax stays unnormalised (its max, sum and weighted sum of V: ``attend_part_blocked``) and the
parts are merged rescaled to their common max (``attend_in_parts`` there, flash-decoding's
split). The same softmax with its sums added in another order: results depend on the thread
count in the last bits (2e-7 in float32).
"""

from __future__ import annotations

SOURCE = r"""
// One (sequence, key/value head): its G query heads over the S keys (mask row m, or all when null), each head's
// scores plus its row of the additive bias (G rows of S, or none when null).
template <typename T>
static void attend_group_any(const T* q, int64_t q_head_stride, const T* k, const T* v, int64_t k_row, int64_t v_row,
                             const bool* m, const float* bias, T* out, int64_t out_head_stride, int64_t G, int64_t S,
                             int64_t D, float scale, std::vector<float>& buf) {
  buf.resize(G * (S + 2 * D));
  float* scores = buf.data();              // (G, S)
  float* qf = scores + G * S;              // (G, D)
  float* acc = qf + G * D;                 // (G, D)
  for (int64_t g = 0; g < G; ++g)
    for (int64_t d = 0; d < D; ++d) qf[g * D + d] = widen1(q[g * q_head_stride + d]) * scale;
  for (int64_t s = 0; s < S; ++s) {
    const T* key = k + s * k_row;
    const bool seen = m == nullptr || m[s];  // a masked key is not read (a static cache's unwritten slots)
    for (int64_t g = 0; g < G; ++g) {
      float dot = 0.f;
      if (seen)
        for (int64_t d = 0; d < D; ++d) dot += qf[g * D + d] * widen1(key[d]);
      scores[g * S + s] = !seen ? -INFINITY : bias == nullptr ? dot : dot + bias[g * S + s];
    }
  }
  for (int64_t g = 0; g < G; ++g) {
    float* row = scores + g * S;
    float top = -INFINITY, sum = 0.f;
    for (int64_t s = 0; s < S; ++s) top = std::max(top, row[s]);
    for (int64_t s = 0; s < S; ++s) {
      row[s] = std::exp(row[s] - top);
      sum += row[s];
    }
    for (int64_t s = 0; s < S; ++s) row[s] /= sum;
  }
  std::fill(acc, acc + G * D, 0.f);
  for (int64_t s = 0; s < S; ++s) {
    if (m != nullptr && !m[s]) continue;
    const T* value = v + s * v_row;
    for (int64_t g = 0; g < G; ++g) {
      const float p = scores[g * S + s];
      for (int64_t d = 0; d < D; ++d) acc[g * D + d] += p * widen1(value[d]);
    }
  }
  for (int64_t g = 0; g < G; ++g)
    for (int64_t d = 0; d < D; ++d) out[g * out_head_stride + d] = static_cast<T>(acc[g * D + d]);
}

#if defined(__AVX512F__) && defined(__AVX512BW__)
#define ZOO_ATTEND_BLOCKED
using vfloat = __m512;
constexpr int64_t LANES = 16;           // floats a register holds
constexpr int64_t QUERY_REGISTERS = 16;  // registers a block of query heads holds (of 32)
static inline vfloat vload(const float* p) { return _mm512_loadu_ps(p); }
static inline vfloat vload(const at::BFloat16* p) {  // bfloat16 is float32's top half
  const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}
static inline vfloat vload(const at::Half* p) {
  return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
}
static inline vfloat vset(float a) { return _mm512_set1_ps(a); }
static inline vfloat vmul(vfloat a, vfloat b) { return _mm512_mul_ps(a, b); }
static inline vfloat vfma(vfloat a, vfloat b, vfloat c) { return _mm512_fmadd_ps(a, b, c); }
static inline vfloat vmax(vfloat a, vfloat b) { return _mm512_max_ps(a, b); }
static inline vfloat vadd(vfloat a, vfloat b) { return _mm512_add_ps(a, b); }
static inline vfloat vsub(vfloat a, vfloat b) { return _mm512_sub_ps(a, b); }
static inline void vstore(float* p, vfloat a) { _mm512_storeu_ps(p, a); }
static inline float vsum(vfloat a) { return _mm512_reduce_add_ps(a); }
static inline float vtop(vfloat a) { return _mm512_reduce_max_ps(a); }

// vexp's own steps: e^x is exactly 0 below EXP_LOW (a masked key's -inf less the row's top, or NaN); vtimes2n
// multiplies by 2^n (scalef).
constexpr float EXP_LOW = -100.f;
static inline vfloat vmin(vfloat a, vfloat b) { return _mm512_min_ps(a, b); }
static inline vfloat vround(vfloat a) { return _mm512_roundscale_ps(a, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC); }
static inline vfloat vfnma(vfloat a, vfloat b, vfloat c) { return _mm512_fnmadd_ps(a, b, c); }
static inline vfloat vtimes2n(vfloat e, vfloat n) { return _mm512_scalef_ps(e, n); }
static inline vfloat vzero_below(vfloat x, vfloat low, vfloat e) {
  return _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(x, low, _CMP_GE_OQ), e);
}
#elif defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)
#define ZOO_ATTEND_BLOCKED
using vfloat = __m256;
constexpr int64_t LANES = 8;
constexpr int64_t QUERY_REGISTERS = 8;  // of 16
static inline vfloat vload(const float* p) { return _mm256_loadu_ps(p); }
static inline vfloat vload(const at::BFloat16* p) {
  const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}
static inline vfloat vload(const at::Half* p) {
  return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
}
static inline vfloat vset(float a) { return _mm256_set1_ps(a); }
static inline vfloat vmul(vfloat a, vfloat b) { return _mm256_mul_ps(a, b); }
static inline vfloat vfma(vfloat a, vfloat b, vfloat c) { return _mm256_fmadd_ps(a, b, c); }
static inline vfloat vmax(vfloat a, vfloat b) { return _mm256_max_ps(a, b); }
static inline vfloat vadd(vfloat a, vfloat b) { return _mm256_add_ps(a, b); }
static inline vfloat vsub(vfloat a, vfloat b) { return _mm256_sub_ps(a, b); }
static inline void vstore(float* p, vfloat a) { _mm256_storeu_ps(p, a); }
static inline float vsum(vfloat a) {
  __m128 h = _mm_add_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
  h = _mm_add_ps(h, _mm_movehl_ps(h, h));
  return _mm_cvtss_f32(_mm_add_ss(h, _mm_movehdup_ps(h)));
}
static inline float vtop(vfloat a) {
  __m128 h = _mm_max_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
  h = _mm_max_ps(h, _mm_movehl_ps(h, h));
  return _mm_cvtss_f32(_mm_max_ss(h, _mm_movehdup_ps(h)));
}

// As the AVX-512 ones, but 2^n built in the exponent's bits (no scalef), so x is held to [-87, 88] (n in [-126,
// 127]): below -87 (e^-87 < 2e-38 of the row's top) exactly 0.
constexpr float EXP_LOW = -87.f;
static inline vfloat vmin(vfloat a, vfloat b) { return _mm256_min_ps(a, b); }
static inline vfloat vround(vfloat a) { return _mm256_round_ps(a, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC); }
static inline vfloat vfnma(vfloat a, vfloat b, vfloat c) { return _mm256_fnmadd_ps(a, b, c); }
static inline vfloat vtimes2n(vfloat e, vfloat n) {
  const __m256i two_n = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
  return _mm256_mul_ps(e, _mm256_castsi256_ps(two_n));
}
static inline vfloat vzero_below(vfloat x, vfloat low, vfloat e) {
  return _mm256_and_ps(e, _mm256_cmp_ps(x, low, _CMP_GE_OQ));
}
#endif

#if defined(ZOO_ATTEND_BLOCKED)
// e^x a register at a time: x = n ln2 + r with |r| <= ln2 / 2, e^r by Cephes' expf polynomial, times 2^n; exactly 0
// below EXP_LOW.
static inline vfloat vexp(vfloat x) {
  const vfloat low = vset(EXP_LOW), held = vmin(vmax(x, low), vset(88.f));
  const vfloat n = vround(vmul(held, vset(1.44269504088896341f)));
  vfloat r = vfnma(n, vset(0.693359375f), held);
  r = vfnma(n, vset(-2.12194440e-4f), r);
  vfloat p = vset(1.9875691500e-4f);
  p = vfma(p, r, vset(1.3981999507e-3f));
  p = vfma(p, r, vset(8.3334519073e-3f));
  p = vfma(p, r, vset(4.1665795894e-2f));
  p = vfma(p, r, vset(1.6666665459e-1f));
  p = vfma(p, r, vset(5.0000001201e-1f));
  const vfloat e = vfma(p, vmul(r, r), vadd(r, vset(1.f)));
  return vzero_below(x, low, vtimes2n(e, n));
}

// A row of Sp scores (Sp a multiple of 16) into its softmax numerators e^(s - max); returns their sum, the max in *top.
static inline float exp_row(float* row, int64_t Sp, float* top) {
  vfloat most = vset(-INFINITY), sum = vset(0.f);
  for (int64_t i = 0; i < Sp; i += LANES) most = vmax(most, vload(row + i));
  *top = vtop(most);
  const vfloat t = vset(*top);
  for (int64_t i = 0; i < Sp; i += LANES) {
    const vfloat e = vexp(vsub(vload(row + i), t));
    vstore(row + i, e);
    sum = vadd(sum, e);
  }
  return vsum(sum);
}

// Keys [0, S) of one (sequence, key/value head) for its G query heads of D = LANES * DC floats, before normalising:
// per head the scores' max (tops), the sum of e^(score - max) (sums) and the weighted sum of V by those (acc, G rows
// of D). Query heads go in blocks of GB (GB * DC <= QUERY_REGISTERS): each key row is loaded once per block for its
// GB dots, and the block's GB weighted sums of V stay in registers over S. scores: room for G rows of S rounded up
// to 16; bias: G rows of bias_row floats (a position bias, the keys' own slice of each row) or null.
template <typename T, int64_t D>
static void attend_part_blocked(const T* q, int64_t q_head_stride, const T* k, const T* v, int64_t k_row,
                                int64_t v_row, const bool* m, const float* bias, int64_t bias_row, int64_t G, int64_t S,
                                float scale, float* scores, float* tops, float* sums, float* acc) {
  constexpr int64_t DC = D / LANES, GB = DC >= QUERY_REGISTERS ? 1 : QUERY_REGISTERS / DC;
  const int64_t Sp = (S + 15) / 16 * 16;  // score rows padded to whole registers with -inf
  for (int64_t g0 = 0; g0 < G; g0 += GB) {
    const int64_t gn = std::min(GB, G - g0);
    vfloat qr[GB][DC];
    for (int64_t g = 0; g < gn; ++g)
      for (int64_t j = 0; j < DC; ++j) qr[g][j] = vmul(vload(q + (g0 + g) * q_head_stride + LANES * j), vset(scale));
    for (int64_t s = 0; s < S; ++s) {
      float* col = scores + g0 * Sp + s;
      if (m != nullptr && !m[s]) {  // a masked key is not read (a static cache's unwritten slots)
        for (int64_t g = 0; g < gn; ++g) col[g * Sp] = -INFINITY;
        continue;
      }
      vfloat key[DC];
      for (int64_t j = 0; j < DC; ++j) key[j] = vload(k + s * k_row + LANES * j);
      for (int64_t g = 0; g < gn; ++g) {
        vfloat dot = vmul(qr[g][0], key[0]);
        for (int64_t j = 1; j < DC; ++j) dot = vfma(qr[g][j], key[j], dot);
        col[g * Sp] = vsum(dot) + (bias == nullptr ? 0.f : bias[(g0 + g) * bias_row + s]);
      }
    }
  }
  for (int64_t g = 0; g < G; ++g) {
    std::fill(scores + g * Sp + S, scores + (g + 1) * Sp, -INFINITY);
    sums[g] = exp_row(scores + g * Sp, Sp, tops + g);  // a fully masked part: top -inf, sum 0, acc 0
  }
  for (int64_t g0 = 0; g0 < G; g0 += GB) {
    const int64_t gn = std::min(GB, G - g0);
    vfloat sum[GB][DC];
    for (int64_t g = 0; g < GB; ++g)
      for (int64_t j = 0; j < DC; ++j) sum[g][j] = vset(0.f);
    for (int64_t s = 0; s < S; ++s) {
      if (m != nullptr && !m[s]) continue;
      vfloat value[DC];
      for (int64_t j = 0; j < DC; ++j) value[j] = vload(v + s * v_row + LANES * j);
      for (int64_t g = 0; g < gn; ++g) {
        const vfloat p = vset(scores[(g0 + g) * Sp + s]);
        for (int64_t j = 0; j < DC; ++j) sum[g][j] = vfma(p, value[j], sum[g][j]);
      }
    }
    for (int64_t g = 0; g < gn; ++g)
      for (int64_t j = 0; j < DC; ++j) vstore(acc + (g0 + g) * D + LANES * j, sum[g][j]);
  }
}

#define ZOO_ATTEND_CASES(CALL) CALL(16) CALL(32) CALL(48) CALL(64) CALL(80) CALL(96) CALL(128) CALL(192) CALL(256)
#endif

// Whether heads of D take the register-blocked loops (attend_part_blocked) for T.
template <typename T>
static bool attends_blocked(int64_t D) {
#if defined(ZOO_ATTEND_BLOCKED)
  if constexpr (!std::is_same_v<T, double>) {  // float64 takes the plain loops
#define ZOO_BLOCKED_CASE(DIM) case DIM:
    switch (D) { ZOO_ATTEND_CASES(ZOO_BLOCKED_CASE) return true; default: return false; }
#undef ZOO_BLOCKED_CASE
  }
#endif
  return false;
}

// attend_part_blocked for a D that attends_blocked takes.
template <typename T>
static void attend_part(const T* q, int64_t q_head_stride, const T* k, const T* v, int64_t k_row, int64_t v_row,
                        const bool* m, const float* bias, int64_t bias_row, int64_t G, int64_t S, int64_t D,
                        float scale, float* scores, float* tops, float* sums, float* acc) {
#if defined(ZOO_ATTEND_BLOCKED)
#define ZOO_PART(DIM)                                                                                               \
  case DIM:                                                                                                         \
    return attend_part_blocked<T, DIM>(q, q_head_stride, k, v, k_row, v_row, m, bias, bias_row, G, S, scale, scores, \
                                       tops, sums, acc);
  if constexpr (!std::is_same_v<T, double>) {
    switch (D) { ZOO_ATTEND_CASES(ZOO_PART) default: break; }
  }
#undef ZOO_PART
#endif
  TORCH_CHECK(false, "attend_part: head size ", D, " has no register-blocked loop");
}

// attend_group_any's result: for heads that attends_blocked takes, attend_part_blocked over all S keys, then each
// head's weighted sum times the inverse of its sum (its register loops' one division).
template <typename T>
static void attend_group(const T* q, int64_t q_head_stride, const T* k, const T* v, int64_t k_row, int64_t v_row,
                         const bool* m, const float* bias, T* out, int64_t out_head_stride, int64_t G, int64_t S,
                         int64_t D, float scale, std::vector<float>& buf) {
  if (!attends_blocked<T>(D))
    return attend_group_any(q, q_head_stride, k, v, k_row, v_row, m, bias, out, out_head_stride, G, S, D, scale, buf);
  const int64_t Sp = (S + 15) / 16 * 16;
  buf.resize(G * (Sp + D + 2));
  float* scores = buf.data();     // (G, Sp)
  float* acc = scores + G * Sp;   // (G, D)
  float* sums = acc + G * D;      // (G)
  float* tops = sums + G;         // (G)
  attend_part<T>(q, q_head_stride, k, v, k_row, v_row, m, bias, S, G, S, D, scale, scores, tops, sums, acc);
  for (int64_t g = 0; g < G; ++g) {
    const float inverse = 1.f / sums[g];
    for (int64_t d = 0; d < D; ++d) out[g * out_head_stride + d] = static_cast<T>(acc[g * D + d] * inverse);
  }
}
"""
