"""The C++ of a token's RMS norm, rotary rotation, SwiGLU and greedy pick (``zoo/components/cpu_token_ops.py``).

Appended to the one-row products' source (``row_product_source.py``: its headers and
``widen1``), so that it is one more function of that extension and costs no build of its own.
The norm, rotation and SwiGLU loops are over rows of the last dimension, in the tensor's own
dtype, with the float32 arithmetic and the roundings of the PyTorch expressions they replace
(``norms.RMSNorm``, ``rope.RopeRotation``), rows split over torch's threads where there are
enough of them; the greedy pick compares the logits' bits as ordered integers (``order_key``).
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
