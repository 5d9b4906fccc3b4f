"""C++ for the recurrent mixers' inner loops (the decode steps' ``cpu_steps_source``, the
prompt scans' ``cpu_prefill``): a head's state (rows, cols) updated and read in one sweep over
its rows, with the sums over those rows (one per column) kept in registers.

Written as plain loops (``o[j] += q[i] * S[i, j]`` inside the row loop), GCC vectorised the
column loop but stored every partial sum back to memory at each row, with a check that the
output and the state did not overlap at each row: Gated DeltaNet's step (12 heads of 128 x 64
on an AVX2 EPYC) stored two vectors per eight state values in each of its two sweeps, four
where one is needed, and was store-bound. Here a head's columns are taken 32 at a time (four
registers of eight floats, GCC's vector extension: one AVX2 register, two SSE or NEON ones
elsewhere), then eight at a time, then one at a time; a chunk's sums stay in registers for
the whole row loop and are stored once.
"""

COLUMNS = r"""
#include <cstring>

// Eight floats (GCC/Clang vector extension): one AVX2 register, two SSE or NEON ones elsewhere.
typedef float f8 __attribute__((vector_size(32)));

template <typename V>
static inline V load(const float* p) {  // unaligned: a row of the state starts anywhere
  V v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
template <typename V>
static inline void store(float* p, V v) { std::memcpy(p, &v, sizeof v); }

// A chunk of columns: U values of V (f8 or float), W floats each.
template <typename V_, int U_>
struct Cols {
  using V = V_;
  static constexpr int U = U_;
  static constexpr int64_t W = sizeof(V_) / sizeof(float);
};

// chunk(j, Cols<V, U>{}) over the columns [0, n): 32 at a time, then 8, then one.
template <typename Chunk>
static inline void by_columns(int64_t n, Chunk&& chunk) {
  int64_t j = 0;
  for (; j + 32 <= n; j += 32) chunk(j, Cols<f8, 4>{});
  for (; j + 8 <= n; j += 8) chunk(j, Cols<f8, 1>{});
  for (; j < n; ++j) chunk(j, Cols<float, 1>{});
}

// One token of the gated delta rule on one head, over the columns [j, j + U W) of its state S (dk, dv), in
// place: S <- S decay + k delta^T with delta = (v - k^T (S decay)) beta, then o = q^T S. Two sweeps over the
// rows: the first only reads, the second writes each value once; the chunk's sums stay in registers. The
// decode step (cpu_steps) and the prompt's scan (cpu_prefill) both take it.
template <typename C>
static inline void delta_columns(float* S, const float* k, const float* q, const float* v, float decay, float beta,
                                 float* o, int64_t dk, int64_t dv, int64_t j) {
  using V = typename C::V;
  constexpr int U = C::U;
  V seen[U] = {}, delta[U], out[U] = {};
  for (int64_t i = 0; i < dk; ++i)
    for (int u = 0; u < U; ++u) seen[u] += k[i] * (load<V>(S + i * dv + j + u * C::W) * decay);
  for (int u = 0; u < U; ++u) delta[u] = (load<V>(v + j + u * C::W) - seen[u]) * beta;
  for (int64_t i = 0; i < dk; ++i)
    for (int u = 0; u < U; ++u) {
      float* p = S + i * dv + j + u * C::W;
      const V s = load<V>(p) * decay + k[i] * delta[u];
      store(p, s);
      out[u] += q[i] * s;
    }
  for (int u = 0; u < U; ++u) store(o + j + u * C::W, out[u]);
}
"""
