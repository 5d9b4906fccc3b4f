"""The C++ of one query's attention on the CPU (``zoo/components/cpu_attention.py``).

Appended to the one-row products' source (``row_product_source.py``: its headers and
``widen1``), so that it is one more function of that extension and costs no build of its own.

``one_query_attention``: softmax attention of one query per sequence over a K/V cache, the
step's other read of memory. Per (sequence, key/value head) the K and V rows are read once,
in their own dtype, for the head's whole group of query heads (GQA); scores, softmax and the
weighted sum of V are float32. torch's CPU kernel for half precision was slower than
upcasting the whole cache first (zoo/components/sdpa_kernels.py's ``sdpa``), and the upcast
itself read and wrote the cache again per layer.

On AVX-512 hosts, heads of 16, 32, 48, 64, 80, 96, 128, 192 or 256 take
``attend_part16``: a head's D floats are D/16 registers, so a block of query heads stays in
registers while each key row is loaded once for the block's dots, and the block's weighted
sums of V stay in registers over all the keys; the softmax's exponentials are 16 at a time
(Cephes' polynomial, relative error about 1e-7). The plain loops, which the compiler
vectorized by itself, took 2.2-2.9x as long on cached K/V (µs per call, one thread, this
project's Zen 4, interleaved, plain / blocked): SmolLM2-135M's shapes (9 query and 3 K/V heads
of 64, bfloat16, 135 keys) 14.2 / 6.6; gpt2's (12 of 64, float32) 35.6 / 12.7; Qwen3-0.6B's
(16 and 8 of 128, bfloat16) 44.3 / 19.6; T5's with its bias 30.8 / 14.1; 2,048 keys of 32 and 8
heads 823 / 280. Inside SmolLM2's real decode step (its K/V no longer cached) a call took 29.3
against 18.5 µs. Other head sizes, float64 and hosts without AVX-512 take
``attend_group_any``, the plain loops.

Threads take (sequence, key/value head) pairs (``cpu_attention_calls_source.py``). Where the
pairs do not share evenly over them (SmolLM2-135M's three K/V heads over two threads: one
thread did two, and two threads ran a call no faster than one), each pair's keys go in parts
(``key_parts``: enough that the parts share evenly, each of at least 64 keys), each part's
softmax stays unnormalised (its max, sum and weighted sum of V: ``attend_part16``) and the
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
#define ZOO_ATTEND16
static inline __m512 load16(const float* p) { return _mm512_loadu_ps(p); }
static inline __m512 load16(const at::BFloat16* p) {  // bfloat16 is float32's top half
  const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}
static inline __m512 load16(const at::Half* p) {
  return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
}

// e^x for 16 floats: x = n ln2 + r with |r| <= ln2 / 2, e^r by Cephes' expf polynomial, times 2^n (scalef). Below
// -100 (a masked key's -inf less the row's top, or NaN) exactly 0.
static inline __m512 exp16(__m512 x) {
  const __mmask16 live = _mm512_cmp_ps_mask(x, _mm512_set1_ps(-100.f), _CMP_GE_OQ);
  x = _mm512_min_ps(_mm512_max_ps(x, _mm512_set1_ps(-100.f)), _mm512_set1_ps(88.f));
  const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                                        _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), x);
  r = _mm512_fnmadd_ps(n, _mm512_set1_ps(-2.12194440e-4f), r);
  __m512 p = _mm512_set1_ps(1.9875691500e-4f);
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.3981999507e-3f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(8.3334519073e-3f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(4.1665795894e-2f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.6666665459e-1f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(5.0000001201e-1f));
  const __m512 e = _mm512_fmadd_ps(p, _mm512_mul_ps(r, r), _mm512_add_ps(r, _mm512_set1_ps(1.f)));
  return _mm512_maskz_mov_ps(live, _mm512_scalef_ps(e, n));
}

// A row of Sp scores (Sp a multiple of 16) into its softmax numerators e^(s - max); returns their sum, the max in *top.
static inline float exp_row16(float* row, int64_t Sp, float* top) {
  __m512 most = _mm512_set1_ps(-INFINITY), sum = _mm512_setzero_ps();
  for (int64_t i = 0; i < Sp; i += 16) most = _mm512_max_ps(most, _mm512_loadu_ps(row + i));
  *top = _mm512_reduce_max_ps(most);
  const __m512 t = _mm512_set1_ps(*top);
  for (int64_t i = 0; i < Sp; i += 16) {
    const __m512 e = exp16(_mm512_sub_ps(_mm512_loadu_ps(row + i), t));
    _mm512_storeu_ps(row + i, e);
    sum = _mm512_add_ps(sum, e);
  }
  return _mm512_reduce_add_ps(sum);
}

// Keys [0, S) of one (sequence, key/value head) for its G query heads, D = 16 * DC, before normalising: per head the
// scores' max (tops), the sum of e^(score - max) (sums) and the weighted sum of V by those (acc, G rows of D).
// Query heads go in blocks of GB (GB * DC <= 16 registers): each key row is loaded once per block for its GB dots,
// and the block's GB weighted sums of V stay in registers over S. scores: room for G rows of S rounded up to 16;
// bias: G rows of bias_row floats (a position bias, the keys' own slice of each row) or null.
template <typename T, int DC>
static void attend_part16(const T* q, int64_t q_head_stride, const T* k, const T* v, int64_t k_row, int64_t v_row,
                          const bool* m, const float* bias, int64_t bias_row, int64_t G, int64_t S, float scale,
                          float* scores, float* tops, float* sums, float* acc) {
  constexpr int64_t GB = DC >= 16 ? 1 : 16 / DC, D = 16 * DC;
  const int64_t Sp = (S + 15) / 16 * 16;  // score rows padded to whole registers with -inf
  for (int64_t g0 = 0; g0 < G; g0 += GB) {
    const int64_t gn = std::min(GB, G - g0);
    __m512 qr[GB][DC];
    for (int64_t g = 0; g < gn; ++g)
      for (int j = 0; j < DC; ++j)
        qr[g][j] = _mm512_mul_ps(load16(q + (g0 + g) * q_head_stride + 16 * j), _mm512_set1_ps(scale));
    for (int64_t s = 0; s < S; ++s) {
      float* col = scores + g0 * Sp + s;
      if (m != nullptr && !m[s]) {  // a masked key is not read (a static cache's unwritten slots)
        for (int64_t g = 0; g < gn; ++g) col[g * Sp] = -INFINITY;
        continue;
      }
      __m512 key[DC];
      for (int j = 0; j < DC; ++j) key[j] = load16(k + s * k_row + 16 * j);
      for (int64_t g = 0; g < gn; ++g) {
        __m512 dot = _mm512_mul_ps(qr[g][0], key[0]);
        for (int j = 1; j < DC; ++j) dot = _mm512_fmadd_ps(qr[g][j], key[j], dot);
        col[g * Sp] = _mm512_reduce_add_ps(dot) + (bias == nullptr ? 0.f : bias[(g0 + g) * bias_row + s]);
      }
    }
  }
  for (int64_t g = 0; g < G; ++g) {
    std::fill(scores + g * Sp + S, scores + (g + 1) * Sp, -INFINITY);
    sums[g] = exp_row16(scores + g * Sp, Sp, tops + g);  // a fully masked part: top -inf, sum 0, acc 0
  }
  for (int64_t g0 = 0; g0 < G; g0 += GB) {
    const int64_t gn = std::min(GB, G - g0);
    __m512 sum[GB][DC];
    for (int64_t g = 0; g < GB; ++g)
      for (int j = 0; j < DC; ++j) sum[g][j] = _mm512_setzero_ps();
    for (int64_t s = 0; s < S; ++s) {
      if (m != nullptr && !m[s]) continue;
      __m512 value[DC];
      for (int j = 0; j < DC; ++j) value[j] = load16(v + s * v_row + 16 * j);
      for (int64_t g = 0; g < gn; ++g) {
        const __m512 p = _mm512_set1_ps(scores[(g0 + g) * Sp + s]);
        for (int j = 0; j < DC; ++j) sum[g][j] = _mm512_fmadd_ps(p, value[j], sum[g][j]);
      }
    }
    for (int64_t g = 0; g < gn; ++g)
      for (int j = 0; j < DC; ++j) _mm512_storeu_ps(acc + (g0 + g) * D + 16 * j, sum[g][j]);
  }
}
#endif

// Whether heads of D take the register-blocked loops (attend_part16) for T.
template <typename T>
static bool attends16(int64_t D) {
#if defined(ZOO_ATTEND16)
  if constexpr (!std::is_same_v<T, double>) {  // float64 takes the plain loops
    if (D % 16 != 0) return false;
    switch (D / 16) {
      case 1: case 2: case 3: case 4: case 5: case 6: case 8: case 12: case 16: return true;
      default: return false;
    }
  }
#endif
  return false;
}

#if defined(ZOO_ATTEND16)
#define ZOO_ATTEND16_CASES(CALL) \
  CALL(1) CALL(2) CALL(3) CALL(4) CALL(5) CALL(6) CALL(8) CALL(12) CALL(16)
#endif

// attend_part16 for a D that attends16 takes.
template <typename T>
static void attend_part(const T* q, int64_t q_head_stride, const T* k, const T* v, int64_t k_row, int64_t v_row,
                        const bool* m, const float* bias, int64_t bias_row, int64_t G, int64_t S, int64_t D,
                        float scale, float* scores, float* tops, float* sums, float* acc) {
#if defined(ZOO_ATTEND16)
#define ZOO_PART16(DC)                                                                                             \
  case DC:                                                                                                         \
    return attend_part16<T, DC>(q, q_head_stride, k, v, k_row, v_row, m, bias, bias_row, G, S, scale, scores, tops, \
                                sums, acc);
  if constexpr (!std::is_same_v<T, double>) {
    switch (D / 16) { ZOO_ATTEND16_CASES(ZOO_PART16) default: break; }
  }
#undef ZOO_PART16
#endif
  TORCH_CHECK(false, "attend_part: head size ", D, " has no register-blocked loop");
}

// attend_group_any's result: for heads that attends16 takes, attend_part16 over all S keys, then each head's
// weighted sum times the inverse of its sum (its register loops' one division).
template <typename T>
static void attend_group(const T* q, int64_t q_head_stride, const T* k, const T* v, int64_t k_row, int64_t v_row,
                         const bool* m, const float* bias, T* out, int64_t out_head_stride, int64_t G, int64_t S,
                         int64_t D, float scale, std::vector<float>& buf) {
  if (!attends16<T>(D))
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
