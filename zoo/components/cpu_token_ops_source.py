"""The C++ of a token's norms, rotary rotation, GELU, SwiGLU and greedy pick (``cpu_token_ops.py``).

Appended to the one-row products' source (``row_product_source.py``: its headers and
``widen1``), so that it is one more function of that extension and costs no build of its own.
The norm, rotation, GELU and SwiGLU loops are over rows of the last dimension, in the tensor's
own dtype, with the float32 arithmetic and the roundings of the PyTorch expressions they
replace (``norms.RMSNorm``, ``norms.LayerNorm``, ``rope.RopeRotation``, ``F.gelu``; GELU's tanh
form excepted, see ``gelu_one``), rows split over torch's threads where there are enough of
them; the greedy pick compares the logits' bits as ordered integers (``order_key``).
"""

from __future__ import annotations

SOURCE = r"""
// Rows per thread: below this a row's work is less than a thread's wake-up.
static constexpr int64_t TOKEN_GRAIN = 32;

// x (..., n) with rows of n contiguous, weight (n) in x's dtype -> (..., n): each row times
// rsqrt(mean(row^2) + eps) in float32; Llama's order (rounded to x's dtype, then times the weight, rounded) or,
// with unit_offset, Gemma's (times 1 + weight in float32, rounded once).
template <typename T>
static void rms_rows(const T* x, const T* w, T* out, int64_t rows, int64_t n, float eps, bool unit_offset) {
  at::parallel_for(0, rows, TOKEN_GRAIN, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      const T* row = x + r * n;
      T* o = out + r * n;
      float squares = 0.f;
      for (int64_t i = 0; i < n; ++i) squares += widen1(row[i]) * widen1(row[i]);
      const float inv = 1.f / std::sqrt(squares / static_cast<float>(n) + eps);
      if (unit_offset) {
        for (int64_t i = 0; i < n; ++i) o[i] = static_cast<T>(widen1(row[i]) * inv * (1.f + widen1(w[i])));
      } else {
        for (int64_t i = 0; i < n; ++i) {
          const T normed = static_cast<T>(widen1(row[i]) * inv);
          o[i] = static_cast<T>(widen1(w[i]) * widen1(normed));
        }
      }
    }
  });
}

at::Tensor rms_norm(at::Tensor x, at::Tensor weight, double eps, bool unit_offset) {
  const int64_t n = x.size(-1);
  TORCH_CHECK(weight.dim() == 1 && weight.size(0) == n && weight.scalar_type() == x.scalar_type(), "rms_norm: weight");
  auto xc = x.contiguous();
  auto wc = weight.contiguous();
  auto out = at::empty_like(xc);
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kBFloat16, at::kHalf, x.scalar_type(), "rms_norm", [&] {
    rms_rows<scalar_t>(xc.data_ptr<scalar_t>(), wc.data_ptr<scalar_t>(), out.data_ptr<scalar_t>(), xc.numel() / n, n,
                       static_cast<float>(eps), unit_offset);
  });
  return out;
}

// x (..., n) with rows of n contiguous, weight and bias (n) in x's dtype (bias may be absent) -> (..., n): each row's
// mean and variance in float32, then ATen's expression (x * rstd - mean * rstd) * weight + bias in float32,
// rounded once to x's dtype, as torch's layer_norm computes it.
template <typename T>
static void layer_rows(const T* x, const T* w, const T* bias, T* out, int64_t rows, int64_t n, float eps) {
  at::parallel_for(0, rows, TOKEN_GRAIN, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      const T* row = x + r * n;
      T* o = out + r * n;
      float sum = 0.f;
      for (int64_t i = 0; i < n; ++i) sum += widen1(row[i]);
      const float mean = sum / static_cast<float>(n);
      float squares = 0.f;
      for (int64_t i = 0; i < n; ++i) squares += (widen1(row[i]) - mean) * (widen1(row[i]) - mean);
      const float rstd = 1.f / std::sqrt(squares / static_cast<float>(n) + eps), shift = -mean * rstd;
      for (int64_t i = 0; i < n; ++i) {
        const float normed = (widen1(row[i]) * rstd + shift) * widen1(w[i]);
        o[i] = static_cast<T>(bias == nullptr ? normed : normed + widen1(bias[i]));
      }
    }
  });
}

at::Tensor layer_norm(at::Tensor x, at::Tensor weight, c10::optional<at::Tensor> bias, double eps) {
  const int64_t n = x.size(-1);
  TORCH_CHECK(weight.dim() == 1 && weight.size(0) == n && weight.scalar_type() == x.scalar_type(),
              "layer_norm: weight");
  TORCH_CHECK(!bias.has_value() || (bias->dim() == 1 && bias->size(0) == n && bias->scalar_type() == x.scalar_type()),
              "layer_norm: bias");
  auto xc = x.contiguous();
  auto wc = weight.contiguous();
  auto bc = bias.has_value() ? bias->contiguous() : at::Tensor();
  auto out = at::empty_like(xc);
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kBFloat16, at::kHalf, x.scalar_type(), "layer_norm", [&] {
    const scalar_t* b = bc.defined() ? bc.data_ptr<scalar_t>() : nullptr;
    layer_rows<scalar_t>(xc.data_ptr<scalar_t>(), wc.data_ptr<scalar_t>(), b, out.data_ptr<scalar_t>(),
                         xc.numel() / n, n, static_cast<float>(eps));
  });
  return out;
}

// 2 * S values at p, in order, as two float32 registers (a: the first S), and back, rounded to p's dtype.
static inline void load_pair(const float* p, fVec& a, fVec& b) { a = fVec::loadu(p); b = fVec::loadu(p + S); }
static inline void store_pair(float* p, const fVec& a, const fVec& b) { a.store(p); b.store(p + S); }
static inline void load_pair(const at::BFloat16* p, fVec& a, fVec& b) {
  std::tie(a, b) = at::vec::convert_to_float<at::BFloat16>(at::vec::Vectorized<at::BFloat16>::loadu(p));
}
static inline void load_pair(const at::Half* p, fVec& a, fVec& b) {
  std::tie(a, b) = at::vec::convert_to_float<at::Half>(at::vec::Vectorized<at::Half>::loadu(p));
}
static inline void store_pair(at::BFloat16* p, const fVec& a, const fVec& b) {
  at::vec::convert_from_float<at::BFloat16>(a, b).store(p);
}
static inline void store_pair(at::Half* p, const fVec& a, const fVec& b) {
  at::vec::convert_from_float<at::Half>(a, b).store(p);
}

// GELU of one value in float32. Exact: x/2 (1 + erf(x / sqrt 2)). Tanh: x/2 (1 + tanh(u)), u = beta (x + kappa x^3),
// computed as x * sigmoid(2u) = x / (1 + exp(-2u)), the same function: ATen's vectorised tanh (Sleef's, to 1 ulp)
// made torch's GELU 4 ns a value here, its arithmetic and not its dispatch, where one exponential is a fraction.
constexpr float GELU_BETA = static_cast<float>(M_SQRT2 * M_2_SQRTPI * 0.5), GELU_KAPPA = 0.044715f;
constexpr float GELU_EXP_MAX = 88.f;  // exp_u20 has no overflow branch: -2u clamped below float32's largest exponent

static inline fVec gelu_vec(const fVec& v, bool tanh_form) {
  if (tanh_form) {
    const fVec u2 = fVec(-2.f * GELU_BETA) * (v + fVec(GELU_KAPPA) * (v * v * v));  // -2u
    return v / (fVec(1.f) + at::vec::minimum(u2, fVec(GELU_EXP_MAX)).exp_u20());
  }
  return v * fVec(0.5f) * (fVec(1.f) + (v * fVec(static_cast<float>(M_SQRT1_2))).erf());
}
static inline float gelu_one(float v, bool tanh_form) {
  if (tanh_form) return v / (1.f + std::exp(std::min(-2.f * GELU_BETA * (v + GELU_KAPPA * v * v * v), GELU_EXP_MAX)));
  return v * 0.5f * (1.f + std::erf(v * static_cast<float>(M_SQRT1_2)));
}

// GELU of n values of x's dtype T into out, 2 * S at a time in float32, each rounded once to T.
template <typename T>
static void gelu_values(const T* x, T* out, int64_t n, bool tanh_form) {
  int64_t i = 0;
  if constexpr (!std::is_same_v<T, double>)  // float64 (a dtype AT_DISPATCH brings) value by value
    for (; i + 2 * S <= n; i += 2 * S) {
      fVec a, b;
      load_pair(x + i, a, b);
      store_pair(out + i, gelu_vec(a, tanh_form), gelu_vec(b, tanh_form));
    }
  for (; i < n; ++i) out[i] = static_cast<T>(gelu_one(widen1(x[i]), tanh_form));
}

// x (..., n) with rows of n contiguous -> GELU(x) (..., n) in x's dtype: the tanh approximation where tanh_form.
at::Tensor gelu(at::Tensor x, bool tanh_form) {
  auto xc = x.contiguous();
  auto out = at::empty_like(xc);
  const int64_t n = xc.size(-1), rows = n == 0 ? 0 : xc.numel() / n;
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kBFloat16, at::kHalf, x.scalar_type(), "gelu", [&] {
    const scalar_t* xp = xc.data_ptr<scalar_t>();
    scalar_t* op = out.data_ptr<scalar_t>();
    at::parallel_for(0, rows, TOKEN_GRAIN, [&](int64_t begin, int64_t end) {
      for (int64_t r = begin; r < end; ++r) gelu_values(xp + r * n, op + r * n, n, tanh_form);
    });
  });
  return out;
}

// One head's row of D: its first R channels rotated half against half into o (row * c + roll(row, R/2) * s,
// each product and the sum rounded to T_), the rest copied. rope() below and append_attention's keys and queries.
template <typename T_>
static inline void rotate_half_row(const T_* row, const T_* c, const T_* s, T_* o, int64_t R, int64_t D) {
  const int64_t half = R / 2;
  for (int64_t j = 0; j < R; ++j) {
    const T_ straight = static_cast<T_>(widen1(row[j]) * widen1(c[j]));
    const T_ turned = static_cast<T_>(widen1(row[j < half ? j + half : j - half]) * widen1(s[j]));
    o[j] = static_cast<T_>(widen1(straight) + widen1(turned));
  }
  for (int64_t j = R; j < D; ++j) o[j] = row[j];
}

// x (B, H, T, D) with rows of D contiguous; cos and signed_sin (B or 1, 1, T, R) in x's dtype, R <= D even ->
// (B, H, T, D) contiguous: the first R channels rotated half against half (x * cos + roll(x, R/2) * signed_sin,
// each product and the sum rounded to x's dtype), the rest copied.
at::Tensor rope(at::Tensor x, at::Tensor cos, at::Tensor sin) {
  const int64_t B = x.size(0), H = x.size(1), T = x.size(2), D = x.size(3), R = cos.size(3);
  TORCH_CHECK(x.dim() == 4 && x.stride(3) == 1 && R % 2 == 0 && R <= D && cos.sizes() == sin.sizes() &&
                  cos.size(1) == 1 && cos.size(2) == T && (cos.size(0) == 1 || cos.size(0) == B),
              "rope: shapes");
  TORCH_CHECK(cos.scalar_type() == x.scalar_type() && sin.scalar_type() == x.scalar_type(), "rope: dtypes");
  auto cc = cos.contiguous();
  auto sc = sin.contiguous();
  auto out = at::empty({B, H, T, D}, x.options());
  const int64_t table_batch = cc.size(0) == 1 ? 0 : T * R;
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kBFloat16, at::kHalf, x.scalar_type(), "rope", [&] {
    using T_ = scalar_t;
    const T_* xp = x.data_ptr<T_>();
    const T_* cp = cc.data_ptr<T_>();
    const T_* sp = sc.data_ptr<T_>();
    T_* op = out.data_ptr<T_>();
    at::parallel_for(0, B * H * T, TOKEN_GRAIN, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) {
        const int64_t b = i / (H * T), h = (i / T) % H, t = i % T;
        const T_* row = xp + b * x.stride(0) + h * x.stride(1) + t * x.stride(2);
        rotate_half_row(row, cp + b * table_batch + t * R, sp + b * table_batch + t * R, op + i * D, R, D);
      }
    });
  });
  return out;
}

// joint (..., 2F) with rows contiguous, [gate | up] (a fused gate and up projection's output) -> (..., F):
// silu(gate) * up with torch's roundings (silu in float32 rounded to the dtype, the product rounded again).
at::Tensor silu_and_mul(at::Tensor joint) {
  const int64_t width = joint.size(-1), F = width / 2;
  TORCH_CHECK(width % 2 == 0 && joint.stride(-1) == 1, "silu_and_mul: rows of [gate | up]");
  auto rows = joint.reshape({-1, width});
  auto shape = joint.sizes().vec();
  shape.back() = F;
  auto out = at::empty({rows.size(0), F}, joint.options());
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kBFloat16, at::kHalf, joint.scalar_type(), "silu_and_mul", [&] {
    using T_ = scalar_t;
    const T_* xp = rows.data_ptr<T_>();
    T_* op = out.data_ptr<T_>();
    const int64_t stride = rows.stride(0);
    at::parallel_for(0, rows.size(0), TOKEN_GRAIN, [&](int64_t begin, int64_t end) {
      for (int64_t r = begin; r < end; ++r) {
        const T_* gate = xp + r * stride;
        const T_* up = gate + F;
        T_* o = op + r * F;
        for (int64_t j = 0; j < F; ++j) {
          const float g = widen1(gate[j]);
          const T_ act = static_cast<T_>(g / (1.f + std::exp(-g)));
          o[j] = static_cast<T_>(widen1(act) * widen1(up[j]));
        }
      }
    });
  });
  return out.view(shape);
}

// Greedy pick. A float's bits (read as a signed integer of its width) as an ordered integer key: ±0 one key,
// every NaN above +inf (torch.argmax answers a row's first NaN), the rest ordered as the values. Integer keys
// keep the NaN and infinity cases under this extension's -ffast-math, and the block maxima below vectorise.
template <typename Key>
static inline Key order_key(Key bits, Key inf_bits) {
  constexpr int sign_shift = sizeof(Key) * 8 - 1;
  constexpr Key magnitude_mask = std::numeric_limits<Key>::max();
  const Key magnitude = bits & magnitude_mask;
  Key key = bits ^ ((bits >> sign_shift) & magnitude_mask);  // negative values: larger magnitude, smaller key
  key = magnitude == 0 ? Key(0) : key;
  return magnitude > inf_bits ? magnitude_mask : key;
}

// Logits a thread's share of rows holds at least: a smaller share is less work than a thread's wake-up.
static constexpr int64_t PICK_GRAIN_LOGITS = 1 << 16;
// Logits per block maximum: the first block that holds the row's maximum is the one scanned.
static constexpr int64_t PICK_BLOCK = 256;

// Each row's first index of its largest key: block maxima first (vectorised), then a scan of the first block
// that reaches the row's maximum.
template <typename Key>
static void pick_rows(const Key* x, int64_t rows, int64_t n, int64_t stride, Key inf_bits, int64_t* out) {
  const int64_t grain = std::max<int64_t>(1, PICK_GRAIN_LOGITS / n);
  at::parallel_for(0, rows, grain, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      const Key* row = x + r * stride;
      Key best = std::numeric_limits<Key>::min();
      int64_t best_block = 0;
      for (int64_t start = 0; start < n; start += PICK_BLOCK) {
        const int64_t stop = std::min(n, start + PICK_BLOCK);
        Key block_max = std::numeric_limits<Key>::min();
#pragma omp simd reduction(max : block_max)
        for (int64_t i = start; i < stop; ++i) {
          const Key key = order_key(row[i], inf_bits);
          block_max = block_max > key ? block_max : key;
        }
        if (block_max > best || start == 0) {
          best = block_max;
          best_block = start;
        }
      }
      int64_t index = best_block;
      while (order_key(row[index], inf_bits) != best) ++index;
      out[r] = index;
    }
  });
}

// logits (..., V) with rows of V contiguous -> (...) int64: torch.argmax(logits, -1), the greedy token.
at::Tensor greedy(at::Tensor logits) {
  TORCH_CHECK(logits.dim() >= 1 && logits.size(-1) > 0 && logits.stride(-1) == 1, "greedy: rows of logits");
  const int64_t V = logits.size(-1);
  auto rows = logits.reshape({-1, V});  // a view wherever the leading dimensions collapse
  auto shape = logits.sizes().vec();
  shape.pop_back();
  auto out = at::empty({rows.size(0)}, logits.options().dtype(at::kLong));
  const int64_t stride = rows.size(0) > 1 ? rows.stride(0) : V;
  const void* data = rows.data_ptr();
  int64_t* picked = out.data_ptr<int64_t>();
  switch (logits.scalar_type()) {
    case at::kFloat:
      pick_rows<int32_t>(static_cast<const int32_t*>(data), rows.size(0), V, stride, 0x7f800000, picked);
      break;
    case at::kBFloat16:
      pick_rows<int16_t>(static_cast<const int16_t*>(data), rows.size(0), V, stride, 0x7f80, picked);
      break;
    case at::kHalf:
      pick_rows<int16_t>(static_cast<const int16_t*>(data), rows.size(0), V, stride, 0x7c00, picked);
      break;
    default:
      TORCH_CHECK(false, "greedy: logits in float32, bfloat16 or float16, got ", logits.scalar_type());
  }
  return out.view(shape);
}
"""
