"""The channels of Mamba-1's fused one-token step (``cpu_mamba_step``), C++ source: after x_proj,
each channel's dt (its dt_proj row, the dt bias, softplus), its SiLU gate, its state row
(h <- exp(dt A) h + dt x B) and its output y = (C . h + D x) silu(z).

Channels go by blocks of 16 (``BLOCK``), which is where the time went: made one at a time, each
channel's dt row and its C . h were reductions of a register, four shuffles and four adds in a
chain, and its state row's exponential a library call that kept channels from overlapping
(Mamba-130m: ~50 µs of a ~100 µs call on each of two threads, 2-core Xeon). By blocks, the 16
dt rows are summed together and their sums made by one tree of 45 shuffles and adds
(``sums_of``; sixteen chains of eight before), softplus and SiLU run on registers, and the 16
state rows are independent chains with ATen's inlined ``exp_u20``. A block's sums come out in
another order than a row's own reduction, so a thread takes whole blocks (``mamba_step`` splits
by blocks): the same bits whatever the thread count. A state row of other than a whole number
of registers, and the last block short of 16, take one channel at a time (``state_row``,
``rows_at``). Appended after ``row_product_source.LOOPS`` (``fVec``, ``widen``, ``rows_at``). The
prompt kernels (``cpu_scan``, ``cpu_conv``) take their blocks, ``block_of`` and ``silu_of`` from here too.
"""

CHANNELS = r"""
// The channels a thread takes together: their dt rows (dt_proj) summed at once, their dt and gate made by registers,
// their state rows as independent chains, their sums of lanes by one tree (sums_of).
constexpr int64_t BLOCK = 16;
constexpr int64_t GROUP = 4 * BLOCK;  // a prompt kernel's job: whole 64-byte bfloat16 lines (cpu_scan, cpu_conv)

// m <= BLOCK values of row p, widened to float32, zero past m: a block of a prompt's row (cpu_scan, cpu_conv).
template <typename T>
static inline void block_of(const T* p, int64_t m, float* out) {
  if (m == BLOCK) {
    for (int64_t i = 0; i < BLOCK; i += S) widen_one(p + i).store(out + i);
    return;
  }
  for (int64_t i = 0; i < BLOCK; ++i) out[i] = i < m ? static_cast<float>(p[i]) : 0.f;
}

// The sums of sixteen registers' lanes, sums[i] = sum(v[i]) (as vec_reduce_all each, in another order): with S = 16
// (AVX512) a tree of 45 shuffles and adds for all sixteen, each step pairing registers (lanes 0+2 | 1+3 of two
// registers, then the 64-bit halves of two pairs, then the 128-bit quarters twice), where sixteen reductions
// of four shuffles and four adds, each a chain, were the state update's longest part.
static inline void sums_of(const fVec* v, float* sums) {
#if defined(CPU_CAPABILITY_AVX512)
  if constexpr (S == 16) {
    static_assert(BLOCK == 16, "sums_of: the tree sums sixteen registers");
    __m512 pairs[8], quads[4];
    for (int i = 0; i < 8; ++i) {  // per quarter [a0+a2, b0+b2, a1+a3, b1+b3]
      const __m512 a = v[2 * i], b = v[2 * i + 1];
      pairs[i] = _mm512_add_ps(_mm512_unpacklo_ps(a, b), _mm512_unpackhi_ps(a, b));
    }
    for (int j = 0; j < 4; ++j) {  // per quarter the quarter's sums of registers 4j .. 4j + 3
      const __m512d c = _mm512_castps_pd(pairs[2 * j]), d = _mm512_castps_pd(pairs[2 * j + 1]);
      quads[j] = _mm512_add_ps(_mm512_castpd_ps(_mm512_unpacklo_pd(c, d)), _mm512_castpd_ps(_mm512_unpackhi_pd(c, d)));
    }
    const __m512 u0 = _mm512_add_ps(_mm512_shuffle_f32x4(quads[0], quads[1], 0x88),
                                    _mm512_shuffle_f32x4(quads[0], quads[1], 0xDD));  // quarters 0+1, 2+3
    const __m512 u1 = _mm512_add_ps(_mm512_shuffle_f32x4(quads[2], quads[3], 0x88),
                                    _mm512_shuffle_f32x4(quads[2], quads[3], 0xDD));
    _mm512_storeu_ps(sums, _mm512_add_ps(_mm512_shuffle_f32x4(u0, u1, 0x88), _mm512_shuffle_f32x4(u0, u1, 0xDD)));
    return;
  }
#endif
  for (int64_t i = 0; i < BLOCK; ++i)
    sums[i] = at::vec::vec_reduce_all<float>([](fVec& p, fVec& q) { return p + q; }, v[i]);
}

// softplus and SiLU of S values, as the scalar softplus and silu (exp_u20, inlined, for the library's exp)
static inline fVec softplus_of(const fVec x) {
  const fVec big(20.f);
  return fVec::blendv(at::vec::minimum(x, big).exp_u20().log1p(), x, x > big);
}
static inline fVec silu_of(const fVec x) { return x / (fVec(1.f) + x.neg().exp_u20()); }

// One channel's state row for a step: h[n] <- exp(step * a[n]) h[n] + input B[n], returning C . h.
static inline float state_row(float* __restrict h, const float* __restrict a, const float* __restrict Bv,
                              const float* __restrict Cv, float step, float input, int64_t N) {
  fVec acc(0.f);
  int64_t n = 0;
  for (; n + S <= N; n += S) {
    const fVec value = at::vec::fmadd((fVec(step) * fVec::loadu(a + n)).exp_u20(), fVec::loadu(h + n),
                                      fVec(input) * fVec::loadu(Bv + n));
    value.store(h + n);
    acc = at::vec::fmadd(fVec::loadu(Cv + n), value, acc);
  }
  float sum = at::vec::vec_reduce_all<float>([](fVec& p, fVec& q) { return p + q; }, acc);
  for (; n < N; ++n) {
    const float value = std::exp(step * a[n]) * h[n] + input * Bv[n];
    h[n] = value;
    sum += Cv[n] * value;
  }
  return sum;
}

// A whole block's state rows where N is a whole number of registers: BLOCK independent chains (the exponential
// inlined, so the compiler interleaves them), their sums by one tree (sums_of).
static inline void state_block(float* __restrict h, const float* __restrict a, const float* __restrict Bv,
                               const float* __restrict Cv, const float* step, const float* input, float* sums,
                               int64_t N) {
  fVec acc[BLOCK];
  for (int64_t i = 0; i < BLOCK; ++i) acc[i] = fVec(0.f);
  for (int64_t n = 0; n < N; n += S) {
    const fVec B = fVec::loadu(Bv + n), C = fVec::loadu(Cv + n);
    for (int64_t i = 0; i < BLOCK; ++i) {
      float* hi = h + i * N + n;
      const fVec value =
          at::vec::fmadd((fVec(step[i]) * fVec::loadu(a + i * N + n)).exp_u20(), fVec::loadu(hi), fVec(input[i]) * B);
      value.store(hi);
      acc[i] = at::vec::fmadd(C, value, acc[i]);
    }
  }
  sums_of(acc, sums);
}

// dt_proj's rows d0 .. d0 + BLOCK: out[i] = w[d0 + i] . x + bias[d0 + i], as rows_at sums a row (x laid out as it
// reads it: even_odd for bfloat16) with the sixteen sums by one tree (sums_of) where rows_at reduced each row alone.
template <typename W>
static inline void dt_block(const W* w, const float* x, const float* bias, float* out, int64_t d0, int64_t R) {
  const int64_t full = R - R % (2 * S), tail = R - full >= S ? full + S : full;
  fVec acc[BLOCK];
  for (int64_t i = 0; i < BLOCK; ++i) {
    const W* row = w + (d0 + i) * R;
    fVec lo(0.f), hi(0.f);
    for (int64_t k = 0; k < full; k += 2 * S) {
      fVec w0, w1;
      widen(row + k, w0, w1);
      lo = at::vec::fmadd(w0, fVec::loadu(x + k), lo);
      hi = at::vec::fmadd(w1, fVec::loadu(x + k + S), hi);
    }
    if (tail > full) lo = at::vec::fmadd(widen_one(row + full), fVec::loadu(x + full), lo);
    acc[i] = lo + hi;
  }
  sums_of(acc, out);
  for (int64_t i = 0; i < BLOCK; ++i) {
    const W* row = w + (d0 + i) * R;
    for (int64_t k = tail; k < R; ++k) out[i] += static_cast<float>(row[k]) * x[k];
    if (bias != nullptr) out[i] += bias[d0 + i];
  }
}

// Channels [begin, end) of one batch row, after x_proj, by blocks of BLOCK: dt = softplus(dt_proj(dbc[:R]) + dt bias)
// and the SiLU gate, then each channel's state row and its y = (C . h + D x) * silu(z). dt_x is dbc[:R] as rows_at
// reads it.
template <typename W>
static void channels(const W* dt_w, const float* dt_x, const float* dt_b, const float* dbc, const float* xs,
                     const float* z, const float* a, const float* skip, float* h, float* dt, float* out, int64_t begin,
                     int64_t end, int64_t R, int64_t N) {
  const float *Bv = dbc + R, *Cv = Bv + N;
  alignas(64) float step[BLOCK], gate[BLOCK], input[BLOCK], sums[BLOCK];
  for (int64_t d0 = begin; d0 < end; d0 += BLOCK) {
    const int64_t m = std::min(BLOCK, end - d0);
    if (m == BLOCK) {
      dt_block(dt_w, dt_x, dt_b, step, d0, R);
      for (int64_t i = 0; i < BLOCK; i += S) fVec::loadu(z + d0 + i).store(gate + i);
    } else {
      for (int64_t d = d0; d < d0 + m; ++d) rows_at<1>(dt_w, dt_x, dt, d, 0, R, dt_b);
      for (int64_t i = 0; i < BLOCK; ++i) {
        step[i] = i < m ? dt[d0 + i] : 0.f;
        gate[i] = i < m ? z[d0 + i] : 0.f;
      }
    }
    for (int64_t i = 0; i < BLOCK; i += S) {
      softplus_of(fVec::loadu(step + i)).store(step + i);
      silu_of(fVec::loadu(gate + i)).store(gate + i);
    }
    for (int64_t i = 0; i < m; ++i) input[i] = step[i] * xs[d0 + i];
    if (m == BLOCK && N % S == 0) {
      state_block(h + d0 * N, a + d0 * N, Bv, Cv, step, input, sums, N);
    } else {
      for (int64_t i = 0; i < m; ++i)
        sums[i] = state_row(h + (d0 + i) * N, a + (d0 + i) * N, Bv, Cv, step[i], input[i], N);
    }
    for (int64_t i = 0; i < m; ++i) out[d0 + i] = (sums[i] + xs[d0 + i] * skip[d0 + i]) * gate[i];
  }
}

"""
