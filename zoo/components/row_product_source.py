"""The C++ of zoo's one-row CPU products (``zoo/components/row_product.py``): one row times a
float32, bfloat16, float16 or int8 matrix, accumulated in float32.

ATen's vector types (``at::vec::Vectorized``) are real SIMD registers only where a
``CPU_CAPABILITY_*`` macro names the instruction set; in an extension nothing defines it,
and without one they are plain arrays looped over (a float32 product then streamed at 17
GB/s against 78 GB/s in cache). So the source defines the macro for what the compiler
targets (``-march=native``: AVX512 or AVX2), and leaves it undefined elsewhere, where the
arrays stay correct. Each row is reduced in four accumulators; rows are split over torch's
threads (``at::parallel_for``) in grains of 64.
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

// out[r] = sum_k w[r, k] * x[k] for rows r of w (rows, n); x float32.
template <typename T>
static void rows_times(const T* w, const float* x, float* out, int64_t rows, int64_t n) {
  const int64_t full = n - n % (4 * S);
  at::parallel_for(0, rows, 64, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      const T* row = w + r * n;
      fVec a0(0.f), a1(0.f), a2(0.f), a3(0.f);
      int64_t k = 0;
      for (; k < full; k += 4 * S) {
        fVec w0, w1, w2, w3;
        widen(row + k, w0, w1);
        widen(row + k + 2 * S, w2, w3);
        a0 = at::vec::fmadd(w0, fVec::loadu(x + k), a0);
        a1 = at::vec::fmadd(w1, fVec::loadu(x + k + S), a1);
        a2 = at::vec::fmadd(w2, fVec::loadu(x + k + 2 * S), a2);
        a3 = at::vec::fmadd(w3, fVec::loadu(x + k + 3 * S), a3);
      }
      float sum = at::vec::vec_reduce_all<float>([](fVec& p, fVec& q) { return p + q; }, (a0 + a1) + (a2 + a3));
      for (; k < n; ++k) sum += static_cast<float>(row[k]) * x[k];
      out[r] = sum;
    }
  });
}

// weight (out, in) float32 / bfloat16 / float16, x (in) -> weight @ x (+ bias) (out) in x's dtype.
torch::Tensor row_product(torch::Tensor weight, torch::Tensor x, c10::optional<torch::Tensor> bias) {
  TORCH_CHECK(weight.is_contiguous() && weight.dim() == 2 && weight.size(1) == x.numel(), "row_product: shapes");
  const int64_t rows = weight.size(0), n = weight.size(1);
  auto xf = x.to(torch::kFloat).contiguous();
  auto out = torch::empty({rows}, x.options().dtype(torch::kFloat));
  const float* xp = xf.data_ptr<float>();
  float* op = out.data_ptr<float>();
  if (weight.scalar_type() == torch::kFloat) rows_times(weight.data_ptr<float>(), xp, op, rows, n);
  else if (weight.scalar_type() == torch::kBFloat16) rows_times(weight.data_ptr<at::BFloat16>(), xp, op, rows, n);
  else if (weight.scalar_type() == torch::kHalf) rows_times(weight.data_ptr<at::Half>(), xp, op, rows, n);
  else TORCH_CHECK(false, "row_product: weight dtype ", weight.scalar_type(), "; allowed: float32, bfloat16, float16");
  if (bias.has_value()) out.add_(bias->to(torch::kFloat));
  return x.scalar_type() == torch::kFloat ? out : out.to(x.scalar_type());
}

// qweight (out, in) int8, scales (out), x (in) -> (qweight * scales[:, None]) @ x (out) in x's dtype.
torch::Tensor int8_rows(torch::Tensor qweight, torch::Tensor scales, torch::Tensor x) {
  TORCH_CHECK(qweight.is_contiguous() && qweight.dim() == 2 && qweight.size(1) == x.numel(), "int8_rows: shapes");
  TORCH_CHECK(qweight.scalar_type() == torch::kChar, "int8_rows: qweight must be int8");
  auto xf = x.to(torch::kFloat).contiguous();
  auto out = torch::empty({qweight.size(0)}, x.options().dtype(torch::kFloat));
  rows_times(qweight.data_ptr<int8_t>(), xf.data_ptr<float>(), out.data_ptr<float>(), qweight.size(0), qweight.size(1));
  out.mul_(scales.to(torch::kFloat));
  return x.scalar_type() == torch::kFloat ? out : out.to(x.scalar_type());
}
"""
