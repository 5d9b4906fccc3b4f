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
``attend_group16``: a head's D floats are D/16 registers, so a block of query heads stays in
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

// A row of Sp scores (Sp a multiple of 16) into its softmax numerators e^(s - max); returns their sum.
static inline float exp_row16(float* row, int64_t Sp) {
  __m512 top = _mm512_set1_ps(-INFINITY), sum = _mm512_setzero_ps();
  for (int64_t i = 0; i < Sp; i += 16) top = _mm512_max_ps(top, _mm512_loadu_ps(row + i));
  const __m512 t = _mm512_set1_ps(_mm512_reduce_max_ps(top));
  for (int64_t i = 0; i < Sp; i += 16) {
    const __m512 e = exp16(_mm512_sub_ps(_mm512_loadu_ps(row + i), t));
    _mm512_storeu_ps(row + i, e);
    sum = _mm512_add_ps(sum, e);
  }
  return _mm512_reduce_add_ps(sum);
}

// attend_group_any's result for D = 16 * DC. Query heads go in blocks of GB (GB * DC <= 16 registers): each key
// row is loaded once per block for its GB dots, and the block's GB weighted sums of V stay in registers over S.
template <typename T, int DC>
static void attend_group16(const T* q, int64_t q_head_stride, const T* k, const T* v, int64_t k_row, int64_t v_row,
                           const bool* m, const float* bias, T* out, int64_t out_head_stride, int64_t G, int64_t S,
                           float scale, std::vector<float>& buf) {
  constexpr int64_t GB = DC >= 16 ? 1 : 16 / DC, D = 16 * DC;
  const int64_t Sp = (S + 15) / 16 * 16;  // score rows padded to whole registers with -inf
  buf.resize(G * (Sp + 1));
  float* scores = buf.data();  // (G, Sp)
  float* sums = scores + G * Sp;  // (G)
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
        col[g * Sp] = _mm512_reduce_add_ps(dot) + (bias == nullptr ? 0.f : bias[(g0 + g) * S + s]);
      }
    }
  }
  for (int64_t g = 0; g < G; ++g) {
    std::fill(scores + g * Sp + S, scores + (g + 1) * Sp, -INFINITY);
    sums[g] = exp_row16(scores + g * Sp, Sp);
  }
  for (int64_t g0 = 0; g0 < G; g0 += GB) {
    const int64_t gn = std::min(GB, G - g0);
    __m512 acc[GB][DC];
    for (int64_t g = 0; g < GB; ++g)
      for (int j = 0; j < DC; ++j) acc[g][j] = _mm512_setzero_ps();
    for (int64_t s = 0; s < S; ++s) {
      if (m != nullptr && !m[s]) continue;
      __m512 value[DC];
      for (int j = 0; j < DC; ++j) value[j] = load16(v + s * v_row + 16 * j);
      for (int64_t g = 0; g < gn; ++g) {
        const __m512 p = _mm512_set1_ps(scores[(g0 + g) * Sp + s]);
        for (int j = 0; j < DC; ++j) acc[g][j] = _mm512_fmadd_ps(p, value[j], acc[g][j]);
      }
    }
    for (int64_t g = 0; g < gn; ++g) {
      alignas(64) float row[D];
      const __m512 inverse = _mm512_set1_ps(1.f / sums[g0 + g]);
      for (int j = 0; j < DC; ++j) _mm512_store_ps(row + 16 * j, _mm512_mul_ps(acc[g][j], inverse));
      T* o = out + (g0 + g) * out_head_stride;
      for (int64_t d = 0; d < D; ++d) o[d] = static_cast<T>(row[d]);
    }
  }
}
#endif

template <typename T>
static void attend_group(const T* q, int64_t q_head_stride, const T* k, const T* v, int64_t k_row, int64_t v_row,
                         const bool* m, const float* bias, T* out, int64_t out_head_stride, int64_t G, int64_t S,
                         int64_t D, float scale, std::vector<float>& buf) {
#if defined(ZOO_ATTEND16)
#define ZOO_ATTEND16_CASE(DC)                                                                                    \
  case DC:                                                                                                       \
    return attend_group16<T, DC>(q, q_head_stride, k, v, k_row, v_row, m, bias, out, out_head_stride, G, S, scale, \
                                 buf);
  if constexpr (!std::is_same_v<T, double>) {  // float64 takes the plain loops
    if (D % 16 == 0) switch (D / 16) {
        ZOO_ATTEND16_CASE(1)
        ZOO_ATTEND16_CASE(2)
        ZOO_ATTEND16_CASE(3)
        ZOO_ATTEND16_CASE(4)
        ZOO_ATTEND16_CASE(5)
        ZOO_ATTEND16_CASE(6)
        ZOO_ATTEND16_CASE(8)
        ZOO_ATTEND16_CASE(12)
        ZOO_ATTEND16_CASE(16)
        default: break;
      }
  }
#undef ZOO_ATTEND16_CASE
#endif
  attend_group_any(q, q_head_stride, k, v, k_row, v_row, m, bias, out, out_head_stride, G, S, D, scale, buf);
}

// q (B, H, 1, D), k and v (B, Hkv, S, D), each row contiguous; mask (B or 1, 1, 1, S) bool (True: attend), or
// (B or 1, H or 1, 1, S) floating (added to the scores: a position bias, -inf where masked), or absent ->
// (B, H, 1, D) in q's dtype, k and v in q's dtype. Sequences and key/value heads split over threads.
torch::Tensor one_query_attention(torch::Tensor q, torch::Tensor k, torch::Tensor v, c10::optional<torch::Tensor> mask,
                                  double scale) {
  const int64_t B = q.size(0), H = q.size(1), D = q.size(3), Hkv = k.size(1), S = k.size(2), G = H / Hkv;
  TORCH_CHECK(q.size(2) == 1 && H % Hkv == 0 && k.sizes() == v.sizes() && k.size(3) == D,
              "one_query_attention: shapes");
  TORCH_CHECK(k.scalar_type() == q.scalar_type() && v.scalar_type() == q.scalar_type(), "one_query_attention: dtypes");
  TORCH_CHECK(q.stride(3) == 1 && k.stride(3) == 1 && v.stride(3) == 1, "one_query_attention: rows not contiguous");
  auto out = torch::empty({B, H, 1, D}, q.options());
  torch::Tensor m, add;  // the boolean mask (B, S) or the additive one (B, H, S) in float32
  if (mask.has_value() && mask->scalar_type() == torch::kBool) {
    m = mask->expand({B, 1, 1, S}).reshape({B, S}).contiguous();
  } else if (mask.has_value()) {
    TORCH_CHECK(mask->size(2) == 1 && mask->size(3) == S, "one_query_attention: mask shape");
    add = mask->expand({B, H, 1, S}).reshape({B, H, S}).to(torch::kFloat).contiguous();
  }
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kBFloat16, at::kHalf, q.scalar_type(), "one_query_attention", [&] {
    const scalar_t* qp = q.data_ptr<scalar_t>();
    const scalar_t* kp = k.data_ptr<scalar_t>();
    const scalar_t* vp = v.data_ptr<scalar_t>();
    scalar_t* op = out.data_ptr<scalar_t>();
    const bool* mp = m.defined() ? m.data_ptr<bool>() : nullptr;
    const float* ap = add.defined() ? add.data_ptr<float>() : nullptr;
    at::parallel_for(0, B * Hkv, 1, [&](int64_t begin, int64_t end) {
      std::vector<float> buf;
      for (int64_t i = begin; i < end; ++i) {
        const int64_t b = i / Hkv, h = i % Hkv;
        attend_group<scalar_t>(qp + b * q.stride(0) + h * G * q.stride(1), q.stride(1),
                               kp + b * k.stride(0) + h * k.stride(1), vp + b * v.stride(0) + h * v.stride(1),
                               k.stride(2), v.stride(2), mp == nullptr ? nullptr : mp + b * S,
                               ap == nullptr ? nullptr : ap + (b * H + h * G) * S, op + (b * H + h * G) * D, D, G, S,
                               D, static_cast<float>(scale), buf);
      }
    });
  });
  return out;
}

// An eager decode step's attention: k and v (B, Hkv, 1, D), the new token's, are written to slot n - 1 of the
// caches (B, Hkv, L, D), then q (B, H, 1, D) attends over their first n slots (one_query_attention), in one call.
// With cos and signed_sin (B or 1, 1, 1, R), the step's rotary tables in k's dtype, q and k are rotated first
// (rotate_half_row, rope()'s arithmetic): k straight into its cache slot, q into a buffer of its own.
torch::Tensor append_attention(torch::Tensor q, torch::Tensor k, torch::Tensor v, torch::Tensor k_cache,
                               torch::Tensor v_cache, int64_t n, c10::optional<torch::Tensor> cos,
                               c10::optional<torch::Tensor> sin, c10::optional<torch::Tensor> mask, double scale) {
  const int64_t B = k.size(0), Hkv = k.size(1), D = k.size(3);
  TORCH_CHECK(k.sizes() == v.sizes() && k.size(2) == 1 && k_cache.sizes() == v_cache.sizes() && k_cache.size(0) == B &&
                  k_cache.size(1) == Hkv && k_cache.size(3) == D && n >= 1 && n <= k_cache.size(2),
              "append_attention: shapes");
  TORCH_CHECK(k.scalar_type() == k_cache.scalar_type() && v.scalar_type() == k_cache.scalar_type() &&
                  v_cache.scalar_type() == k_cache.scalar_type(),
              "append_attention: dtypes");
  TORCH_CHECK(k.stride(3) == 1 && v.stride(3) == 1 && k_cache.stride(3) == 1 && v_cache.stride(3) == 1,
              "append_attention: rows not contiguous");
  TORCH_CHECK(k.is_cpu() && v.is_cpu() && k_cache.is_cpu() && v_cache.is_cpu(),
              "append_attention: tensors not on the CPU");
  TORCH_CHECK(cos.has_value() == sin.has_value(), "append_attention: cos and sin go together");
  const bool rotates = cos.has_value();
  torch::Tensor cc, sc;
  int64_t R = 0, table_batch = 0;
  if (rotates) {
    cc = cos->contiguous();
    sc = sin->contiguous();
    R = cc.size(-1);
    TORCH_CHECK(cc.dim() == 4 && cc.sizes() == sc.sizes() && cc.size(1) == 1 && cc.size(2) == 1 &&
                    (cc.size(0) == 1 || cc.size(0) == B) && R % 2 == 0 && R <= D && q.size(3) == D && q.size(0) == B &&
                    q.stride(3) == 1,
                "append_attention: rotary tables' shapes");
    TORCH_CHECK(cc.scalar_type() == k.scalar_type() && sc.scalar_type() == k.scalar_type() &&
                    q.scalar_type() == k.scalar_type(),
                "append_attention: rotary tables' dtypes");
    table_batch = cc.size(0) == 1 ? 0 : R;
  }
  const int64_t H = q.size(1);
  auto rotated = rotates ? torch::empty({B, H, 1, D}, q.options()) : q;
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kBFloat16, at::kHalf, k.scalar_type(), "append_attention", [&] {
    using T_ = scalar_t;
    T_* kc = k_cache.data_ptr<T_>();
    T_* vc = v_cache.data_ptr<T_>();
    const T_* kn = k.data_ptr<T_>();
    const T_* vn = v.data_ptr<T_>();
    const T_* c = rotates ? cc.data_ptr<T_>() : nullptr;
    const T_* s = rotates ? sc.data_ptr<T_>() : nullptr;
    for (int64_t b = 0; b < B; ++b) {
      for (int64_t h = 0; h < Hkv; ++h) {
        const T_* key = kn + b * k.stride(0) + h * k.stride(1);
        T_* slot = kc + b * k_cache.stride(0) + h * k_cache.stride(1) + (n - 1) * k_cache.stride(2);
        if (rotates)
          rotate_half_row(key, c + b * table_batch, s + b * table_batch, slot, R, D);
        else
          std::memcpy(slot, key, D * sizeof(T_));
        std::memcpy(vc + b * v_cache.stride(0) + h * v_cache.stride(1) + (n - 1) * v_cache.stride(2),
                    vn + b * v.stride(0) + h * v.stride(1), D * sizeof(T_));
      }
      if (!rotates) continue;
      const T_* qn = q.data_ptr<T_>();
      T_* qr = rotated.data_ptr<T_>();
      for (int64_t h = 0; h < H; ++h)
        rotate_half_row(qn + b * q.stride(0) + h * q.stride(1), c + b * table_batch, s + b * table_batch,
                        qr + (b * H + h) * D, R, D);
    }
  });
  return one_query_attention(rotated, k_cache.narrow(2, 0, n), v_cache.narrow(2, 0, n), mask, scale);
}
"""
