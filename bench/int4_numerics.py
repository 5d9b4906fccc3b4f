"""Which numerics zoo's CPU int4 product uses, by measurement: one decode token through every
int4 matrix of a SmolLM2-135M-shaped model (30 layers of q, k, v, o, gate, up, down; 66 MB of
packed weights, more than the caches hold), bfloat16 activations as a packed GGUF run has.

Candidates, each timed in every round (the order rotates; medians over rounds, and the
median of per-round ratios against torch's kernel):
- ``aten``: ``aten._weight_int4pack_mm_for_cpu`` on torch's own packing (what zoo used);
- ``float``: exact weight-only numerics (float32 rows, nibbles widened to float, group scale
  and offset factored out of the inner loop), AVX-512, four rows at once, prefetching as
  zoo's kernel does; its C++ is here (``FLOAT_SOURCE``), not in zoo;
- ``q8 rows``: llama.cpp's numerics (the row quantized to int8 per block of 32, integer dot
  products) over row-major blocks, four weight rows at a time: zoo's kernel before its
  panel layout; its C++ is here too;
- ``q8``: zoo's kernel (``int4_cpu.matmul``, one row: ``int4_q8``), the same numerics over
  panels of 16 interleaved rows (zoo/quant/int4_cpu.py), the row's quantization included in
  the time.
``--model qwen3-0.6b`` takes Qwen3-0.6B's shapes and zoo's default group of 128 instead.
Also printed: each one's error against the float32 product with the dequantized weight.

    python bench/int4_numerics.py --threads 1
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

import torch

from zoo.components.cpu_extension import cpu_extension
from zoo.quant import int4_cpu
from zoo.quant.int4_cpu import SOURCE

QUANTIZE_FROM, QUANTIZE_TO = "// Token rows quantized", "// x (M, K) float32"  # the library's quantize_rows

# exact weight-only numerics: nibbles widened to float, the group scale and offset factored out
FLOAT_SOURCE = r"""
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

static inline float f32(float v) { return v; }
static inline float f32(c10::BFloat16 v) { return static_cast<float>(v); }
static inline float f32(c10::Half v) { return static_cast<float>(v); }

// llama.cpp's numerics: x quantized per 32-block to int8; xq (M, K) int8, xd (M, K/32) block scales,
// xs (M, K/32) = xd * sum(xq) per block.
// acc[r] += sum over the 32 inputs of block `blk` of x * q for R rows `w[r]` (16 bytes per block).
template <int R>
struct FloatRows {
#if defined(__AVX512F__)
  __m512 a[R], b[R];
  void zero() { for (int r = 0; r < R; ++r) { a[r] = _mm512_setzero_ps(); b[r] = _mm512_setzero_ps(); } }
  void block(const uint8_t* const* w, int64_t blk, const float* x) {
    const __m512 xa = _mm512_loadu_ps(x), xb = _mm512_loadu_ps(x + 16);
    const __m128i m = _mm_set1_epi8(0x0F);
    for (int r = 0; r < R; ++r) {
      if (blk % 4 == 0) _mm_prefetch((const char*)(w[r] + blk * 16 + 4096), _MM_HINT_T0);
      const __m128i v = _mm_loadu_si128((const __m128i*)(w[r] + blk * 16));
      const __m512 lo = _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm_and_si128(v, m)));
      const __m512 hi = _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm_and_si128(_mm_srli_epi16(v, 4), m)));
      a[r] = _mm512_fmadd_ps(lo, xa, a[r]);
      b[r] = _mm512_fmadd_ps(hi, xb, b[r]);
    }
  }
  // total[r] += scale[r] * (group sum); the group accumulators restart.
  void close(__m512* total, const float* scale) {
    for (int r = 0; r < R; ++r) {
      total[r] = _mm512_fmadd_ps(_mm512_add_ps(a[r], b[r]), _mm512_set1_ps(scale[r]), total[r]);
    }
    zero();
  }
  using Total = __m512;
  static Total none() { return _mm512_setzero_ps(); }
  static float sum(Total t) { return _mm512_reduce_add_ps(t); }
#elif defined(__AVX2__)
  __m256 a[R][4];
  void zero() { for (int r = 0; r < R; ++r) for (int i = 0; i < 4; ++i) a[r][i] = _mm256_setzero_ps(); }
  void block(const uint8_t* const* w, int64_t blk, const float* x) {
    const __m128i m = _mm_set1_epi8(0x0F);
    for (int r = 0; r < R; ++r) {
      const __m128i v = _mm_loadu_si128((const __m128i*)(w[r] + blk * 16));
      const __m128i lo = _mm_and_si128(v, m), hi = _mm_and_si128(_mm_srli_epi16(v, 4), m);
      const __m128i parts[4] = {lo, _mm_srli_si128(lo, 8), hi, _mm_srli_si128(hi, 8)};
      for (int i = 0; i < 4; ++i) {
        const __m256 q = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(parts[i]));
        a[r][i] = _mm256_fmadd_ps(q, _mm256_loadu_ps(x + 8 * i), a[r][i]);
      }
    }
  }
  void close(__m256* total, const float* scale) {
    for (int r = 0; r < R; ++r) {
      const __m256 s = _mm256_add_ps(_mm256_add_ps(a[r][0], a[r][1]), _mm256_add_ps(a[r][2], a[r][3]));
      total[r] = _mm256_fmadd_ps(s, _mm256_set1_ps(scale[r]), total[r]);
    }
    zero();
  }
  using Total = __m256;
  static Total none() { return _mm256_setzero_ps(); }
  static float sum(Total t) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(t), _mm256_extractf128_ps(t, 1));
    s = _mm_hadd_ps(s, s);
    s = _mm_hadd_ps(s, s);
    return _mm_cvtss_f32(s);
  }
#else
  float a[R];
  void zero() { for (int r = 0; r < R; ++r) a[r] = 0.f; }
  void block(const uint8_t* const* w, int64_t blk, const float* x) {
    for (int r = 0; r < R; ++r) {
      const uint8_t* v = w[r] + blk * 16;
      float s = 0.f;
      for (int j = 0; j < 16; ++j) s += x[j] * float(v[j] & 15) + x[j + 16] * float(v[j] >> 4);
      a[r] += s;
    }
  }
  void close(float* total, const float* scale) { for (int r = 0; r < R; ++r) total[r] += a[r] * scale[r]; zero(); }
  using Total = float;
  static Total none() { return 0.f; }
  static float sum(Total t) { return t; }
#endif
};

// out[m][n] for R rows starting at n and every token row m; xsum (M, G): per-group sums of x.
template <int R, typename S, typename T>
static void rows_float(const uint8_t* wq, const S* so, const float* x, const float* xsum, T* out,
                       int64_t n, int64_t M, int64_t N, int64_t K, int64_t gs) {
  const int64_t G = K / gs, nb = gs / 32;
  const uint8_t* w[R];
  for (int r = 0; r < R; ++r) w[r] = wq + (n + r) * (K / 2);
  for (int64_t m = 0; m < M; ++m) {
    const float* xm = x + m * K;
    FloatRows<R> acc;
    acc.zero();
    typename FloatRows<R>::Total total[R];
    float offsets[R], scale[R];
    for (int r = 0; r < R; ++r) { total[r] = FloatRows<R>::none(); offsets[r] = 0.f; }
    for (int64_t g = 0; g < G; ++g) {
      for (int64_t b = 0; b < nb; ++b) acc.block(w, g * nb + b, xm + (g * nb + b) * 32);
      for (int r = 0; r < R; ++r) {
        const S* p = so + ((n + r) * G + g) * 2;
        scale[r] = f32(p[0]);
        offsets[r] += f32(p[1]) * xsum[m * G + g];
      }
      acc.close(total, scale);
    }
    for (int r = 0; r < R; ++r) out[m * N + n + r] = static_cast<T>(FloatRows<R>::sum(total[r]) + offsets[r]);
  }
}

// Token rows as float32 (M, K) and their per-group sums (M, G).
template <typename T>
static void widen_rows(const T* x, std::vector<float>& xf, std::vector<float>& xsum, int64_t M, int64_t K, int64_t gs) {
  xf.resize(M * K);
  xsum.assign(M * (K / gs), 0.f);
  for (int64_t i = 0; i < M * K; ++i) {
    xf[i] = f32(x[i]);
    xsum[i / gs] += xf[i];
  }
}

// Few token rows: x (M, K) float32 / bfloat16 / float16, packed (N, K / 2) uint8, so (N, G, 2) -> (M, N) in x's dtype.
// Each thread takes whole groups of 4 weight rows, at least `grain` groups.
torch::Tensor int4_rows(torch::Tensor x, torch::Tensor packed, torch::Tensor so, int64_t grain) {
  const int64_t M = x.size(0), K = x.size(1), N = packed.size(0), gs = K / so.size(1);
  auto out = torch::empty({M, N}, x.options());
  const uint8_t* wq = packed.data_ptr<uint8_t>();
  std::vector<float> xf, xsum;
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kBFloat16, at::kHalf, so.scalar_type(), "int4_rows", [&] {
    using S = scalar_t;
    const S* s = so.data_ptr<S>();
    AT_DISPATCH_FLOATING_TYPES_AND2(at::kBFloat16, at::kHalf, x.scalar_type(), "int4_rows_x", [&] {
      using T = scalar_t;
      widen_rows<T>(x.data_ptr<T>(), xf, xsum, M, K, gs);
      T* op = out.data_ptr<T>();
      at::parallel_for(0, (N + 3) / 4, grain, [&](int64_t b, int64_t e) {
        int64_t n = b * 4;
        const int64_t end = std::min(e * 4, N);
        for (; n + 4 <= end; n += 4) rows_float<4, S, T>(wq, s, xf.data(), xsum.data(), op, n, M, N, K, gs);
        for (; n < end; ++n) rows_float<1, S, T>(wq, s, xf.data(), xsum.data(), op, n, M, N, K, gs);
      });
    });
  });
  return out;
}

// zoo's kernel before its panel layout: llama.cpp's numerics, four row-major weight rows at a time.
constexpr int64_t PREFETCH = 4096;
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

QUANTIZE_ROWS

// x (M, K) float32 / bfloat16 / float16, packed (N, K / 2) uint8, so (N, G, 2) -> (M, N) in x's dtype, with
// llama.cpp's numerics. Each thread takes whole groups of 4 weight rows, at least `grain` groups.
torch::Tensor int4_rows_q8(torch::Tensor x, torch::Tensor packed, torch::Tensor so, int64_t grain) {
  const int64_t M = x.size(0), K = x.size(1), N = packed.size(0), gs = K / so.size(1);
  auto out = torch::empty({M, N}, x.options());
  const uint8_t* wq = packed.data_ptr<uint8_t>();
  std::vector<int8_t> xq(M * K);
  std::vector<float> xd(M * K / 32), xg(M * (K / gs));
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kBFloat16, at::kHalf, so.scalar_type(), "int4_rows_q8", [&] {
    using S = scalar_t;
    const S* s = so.data_ptr<S>();
    AT_DISPATCH_FLOATING_TYPES_AND2(at::kBFloat16, at::kHalf, x.scalar_type(), "int4_rows_q8_x", [&] {
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

"""

MODELS = {  # (out, in) of one layer's q, k, v, o, gate, up, down; group size
    "smollm2-135m": ([(576, 576), (192, 576), (192, 576), (576, 576), (1536, 576), (1536, 576), (576, 1536)], 32),
    "qwen3-0.6b": (
        [(2048, 1024), (1024, 1024), (1024, 1024), (1024, 2048), (3072, 1024), (3072, 1024), (1024, 3072)],
        128,
    ),
}


def layers(model: str, n_layers: int) -> list[dict[str, torch.Tensor]]:
    shapes, group = MODELS[model]
    made = []
    generator = torch.Generator().manual_seed(0)
    for _ in range(n_layers):
        for out_features, in_features in shapes:
            values = torch.randint(0, 16, (out_features, in_features), generator=generator, dtype=torch.int32)
            so = (torch.rand(out_features, in_features // group, 2, generator=generator) * 0.02).bfloat16()
            zeros = torch.stack([so[..., 0], so[..., 1] + 8 * so[..., 0]], -1).transpose(0, 1).contiguous()
            packed, panel_so = int4_cpu.pack(values, so)
            made.append(
                {
                    "rows": row_major(values),
                    "packed": packed,
                    "so": panel_so,
                    "row_so": so,
                    "group": in_features // so.shape[1],
                    "aten": torch.ops.aten._convert_weight_to_int4pack_for_cpu(values, 1),
                    "aten_sz": zeros,  # (G, out, 2): zero at q = 8
                    "x": torch.randn(1, in_features, generator=generator).bfloat16(),
                }
            )
    return made


def row_major(values: torch.Tensor) -> torch.Tensor:
    """The layout before panels: per row, per block of 32, byte j = value j | value j + 16 << 4 (GGUF's Q4 blocks)."""
    out_features, in_features = values.shape
    blocks = values.to(torch.uint8).reshape(out_features, in_features // 32, 2, 16)  # (out, B, 2, 16)
    return (blocks[:, :, 0] | blocks[:, :, 1] << 4).reshape(out_features, in_features // 2).contiguous()


def candidates(made: list[dict[str, torch.Tensor]]) -> dict[str, Callable[[], list[torch.Tensor]]]:
    source = FLOAT_SOURCE.replace("QUANTIZE_ROWS", SOURCE[SOURCE.index(QUANTIZE_FROM) : SOURCE.index(QUANTIZE_TO)])
    module = cpu_extension("zoo_bench_int4_rows", source, ["int4_rows", "int4_rows_q8"])
    assert module is not None

    aten = torch.ops.aten._weight_int4pack_mm_for_cpu
    return {
        "aten": lambda: [aten(m["x"], m["aten"], m["group"], m["aten_sz"]) for m in made],
        "float": lambda: [module.int4_rows(m["x"], m["rows"], m["row_so"], 64) for m in made],
        "q8 rows": lambda: [module.int4_rows_q8(m["x"], m["rows"], m["row_so"], 64) for m in made],
        "q8": lambda: [int4_cpu.matmul(m["x"], m["packed"], m["so"]) for m in made],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--calls", type=int, default=20)
    parser.add_argument("--layers", type=int, default=30)
    parser.add_argument("--model", choices=sorted(MODELS), default="smollm2-135m")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    made = layers(args.model, args.layers)
    runs = candidates(made)
    reference = [int4_cpu.reference(m["x"], m["packed"], m["so"]) for m in made]
    for name, run in runs.items():
        outs = run()
        error = max(((o.float() - r).abs().max() / r.abs().max()).item() for o, r in zip(outs, reference, strict=True))
        print(f"{name}: max relative error against the float32 product {error:.2e}")
    times: dict[str, list[float]] = {name: [] for name in runs}
    names = list(runs)
    for round_index in range(args.rounds):
        for name in names[round_index % len(names) :] + names[: round_index % len(names)]:
            start = time.perf_counter()
            for _ in range(args.calls):
                runs[name]()
            times[name].append((time.perf_counter() - start) / args.calls * 1e3)
    weight_bytes = sum(m["packed"].numel() for m in made)
    print(f"threads {args.threads}, {len(made)} matrices, {weight_bytes / 1e6:.1f} MB of 4-bit values")
    for name in names:
        ms = statistics.median(times[name])
        ratio = statistics.median(a / b for a, b in zip(times["aten"], times[name], strict=True))
        print(f"{name:8s} {ms:7.2f} ms/token  {weight_bytes / ms / 1e6:6.1f} GB/s  {ratio:5.2f}x aten")


if __name__ == "__main__":
    main()
