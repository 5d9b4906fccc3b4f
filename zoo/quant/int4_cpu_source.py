"""The C++ of ``int4_cpu``'s many-row product (prefill) and of its product for any rows: ``int4_tiles`` and ``int4_mm``,
after ``int4_rows_source.py`` (its includes, ``PANEL``, ``f32`` and ``q8_product``).

``int4_tiles`` (prefill, many token rows): a tile of ``TILE`` weight rows (whole panels) is widened once,
transposed (in x ``tile`` values: stays in L2; a panel's 16 values of one input are one vector, so
widening costs 3% of the GEMM where row by row it cost 70%; AVX2 widens float32 tiles eight lanes at a time:
SmolLM2-135M's four matrices 1.40x / 1.11x at 24 / 128 rows over lane by lane, one thread, the same tiles) and
multiplied with every token row by ``at::mm``
(single-threaded inside ``at::parallel_for``): weights read from memory once per call, the
multiply at GEMM speed. Float32 and float16 activations: exact weight-only numerics (float32
activations times ``q * scale + offset``). bfloat16 activations: ``q * scale + offset``
computed in float32 and rounded to bfloat16, a bfloat16 GEMM accumulating in float32, as a
bfloat16 model's own weights would be (oneDNN's bfloat16 GEMM ran 2.0-2.1x float32's on these
shapes here: 128 token rows, 576-1536 inputs, one thread).

``int4_mm`` takes the int8 rows (``int4_rows_source.py``) below ``tile_from`` token rows, else the tiles.
"""

SOURCE = r"""
// One input's 16 values of a whole panel, q * scale + offset, stored as D: `lanes` holds 4 bytes of each row.
#if defined(__AVX512F__)
static inline __m512 panel_values(__m512i lanes, int at, __m512 sc, __m512 z) {
  const __m512i q = _mm512_and_si512(_mm512_srli_epi32(lanes, at), _mm512_set1_epi32(15));
  return _mm512_fmadd_ps(_mm512_cvtepi32_ps(q), sc, z);
}
static inline void store16(float* p, __m512 v) { _mm512_storeu_ps(p, v); }
static inline void store16(at::BFloat16* p, __m512 v) {
#if defined(__AVX512BF16__)
  _mm256_storeu_si256((__m256i*)p, (__m256i)_mm512_cvtneps_pbh(v));  // round to nearest even, as c10's cast
#else
  float t[PANEL];
  _mm512_storeu_ps(t, v);
  for (int r = 0; r < PANEL; ++r) p[r] = static_cast<at::BFloat16>(t[r]);
#endif
}
#endif

// Rows [n0, n1) (whole panels from n0) widened to float32 and stored transposed as D (float32, or bfloat16 for a
// bfloat16 product): dst (K, ld), column j holding row n0 + j. A panel's 16 rows are one dword lane each, so every
// input's 16 values are one vector: shifted, masked, scaled and stored whole.
template <typename S, typename D>
static void widen(const uint8_t* wq, const S* so, D* dst, int64_t ld, int64_t n0, int64_t n1, int64_t N, int64_t K,
                  int64_t gs) {
  const int64_t G = K / gs, nb = gs / 32;
  for (int64_t p0 = n0; p0 < n1; p0 += PANEL) {
    const int64_t R = std::min(PANEL, N - p0), chunk = 4 * R;
    const uint8_t* w = wq + p0 * (K / 2);
    const S* s = so + p0 * G * 2;
    D* col = dst + (p0 - n0);
    for (int64_t g = 0; g < G; ++g) {
      float sc[PANEL] = {}, z[PANEL] = {};
      for (int64_t r = 0; r < R; ++r) {
        sc[r] = f32(s[g * 2 * R + r]);
        z[r] = f32(s[g * 2 * R + R + r]);
      }
      for (int64_t b = g * nb; b < (g + 1) * nb; ++b) {
        for (int c = 0; c < 4; ++c) {
          const uint8_t* q = w + b * 4 * chunk + c * chunk;
          for (int i = 0; i < 8; ++i) {  // inputs 8c + i: byte i % 4 of each lane, low nibble for i < 4
            const int byte = i % 4, shift = i < 4 ? 0 : 4;
            D* out = col + (b * 32 + 8 * c + i) * ld;
#if defined(__AVX512F__)
            if (R == PANEL) {
              const __m512i lanes = _mm512_loadu_si512(q);
              store16(out, panel_values(lanes, 8 * byte + shift, _mm512_loadu_ps(sc), _mm512_loadu_ps(z)));
              continue;
            }
#endif
#if defined(__AVX2__) && !defined(__AVX512F__)
            if constexpr (std::is_same_v<D, float>) {  // float32 tiles: two halves of eight lanes
              if (R == PANEL) {
                for (int h = 0; h < 2; ++h) {
                  const __m256i lanes = _mm256_loadu_si256((const __m256i*)(q + 32 * h));
                  const __m256i v = _mm256_and_si256(_mm256_srli_epi32(lanes, 8 * byte + shift), _mm256_set1_epi32(15));
                  _mm256_storeu_ps(out + 8 * h, _mm256_fmadd_ps(_mm256_cvtepi32_ps(v), _mm256_loadu_ps(sc + 8 * h),
                                                                 _mm256_loadu_ps(z + 8 * h)));
                }
                continue;
              }
            }
#endif
            for (int64_t r = 0; r < R; ++r) {
              out[r] = static_cast<D>(float((q[4 * r + byte] >> shift) & 15) * sc[r] + z[r]);
            }
          }
        }
      }
    }
  }
}

// Many token rows: x (M, K) float32 or bfloat16 -> (M, N) in x's dtype, the tiles in x's dtype.
at::Tensor int4_tiles(at::Tensor x, at::Tensor packed, at::Tensor so, int64_t tile) {
  const int64_t M = x.size(0), K = x.size(1), N = packed.size(0), gs = K / so.size(1);
  TORCH_CHECK(tile % PANEL == 0, "int4_tiles: tile must hold whole panels of ", PANEL, " rows, got ", tile);
  const bool half = x.scalar_type() == at::kBFloat16;
  auto out = at::empty({M, N}, x.options());
  const uint8_t* wq = packed.data_ptr<uint8_t>();
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kBFloat16, at::kHalf, so.scalar_type(), "int4_tiles", [&] {
    const scalar_t* s = so.data_ptr<scalar_t>();
    at::parallel_for(0, (N + tile - 1) / tile, 1, [&](int64_t b, int64_t e) {
      auto w = at::empty({K, tile}, x.options());  // the tile transposed: (in, rows)
      auto part = at::empty({M, tile}, x.options());
      for (int64_t t = b; t < e; ++t) {
        const int64_t n0 = t * tile, n1 = std::min(n0 + tile, N);
        if (half) {
          widen<scalar_t, at::BFloat16>(wq, s, w.data_ptr<at::BFloat16>(), tile, n0, n1, N, K, gs);
        } else {
          widen<scalar_t, float>(wq, s, w.data_ptr<float>(), tile, n0, n1, N, K, gs);
        }
        auto o = part.narrow(1, 0, n1 - n0);
        at::mm_out(o, x, w.narrow(1, 0, n1 - n0));
        out.narrow(1, n0, n1 - n0).copy_(o);
      }
    });
  });
  return out;
}

// The product for any number of token rows: x (..., K) in its dtype -> (..., N) in x's dtype (the leading dims kept,
// so a layer's forward reshapes nothing); the int8 rows below `tile_from` token rows, else the widened tiles, at
// most `tile` rows each and one tile per thread at least.
at::Tensor int4_mm(at::Tensor x, at::Tensor packed, at::Tensor so, int64_t tile_from, int64_t tile,
                   int64_t grain, bool fetch_ahead) {
  auto shape = x.sizes().vec();
  shape.back() = packed.size(0);
  const int64_t K = x.size(-1), M = K > 0 ? x.numel() / K : 0;
  if (M < tile_from) {  // no views made and undone
    return q8_product(x.contiguous(), M, K, packed, so, grain, shape, fetch_ahead);
  }
  auto rows = x.reshape({-1, K}).contiguous();  // (M, K)
  tile = balanced_tile(packed.size(0), tile, PANEL);  // whole panels, the same work for every thread (tiles_source.py)
  if (rows.scalar_type() == at::kBFloat16) return int4_tiles(rows, packed, so, tile).view(shape);  // twice float32's
  return int4_tiles(rows.to(at::kFloat), packed, so, tile).to(rows.scalar_type()).view(shape);
}

"""
