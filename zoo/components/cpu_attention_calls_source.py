"""The C++ of one query's attention as tensor calls (``zoo/components/cpu_attention.py``):
``one_query_attention`` spreads a call's (sequence, key/value head) pairs, and where they do
not share evenly their keys in parts, over the threads and runs each through the per-head
loops of ``cpu_attention_source.py``; ``append_attention`` is an eager decode step's cache
write, rotation and attention in one call. Appended after those loops (and the token ops'
``rotate_half_row``) in the one-row products' extension.
"""

from __future__ import annotations

SOURCE = r"""
constexpr int64_t MIN_PART_KEYS = 64;  // keys a part holds at least: below, a thread's share is its call's cost

// How many parts each (sequence, key/value head)'s keys split into: 1 where those pairs already split evenly over
// the threads (or the heads have no register-blocked loop), else enough parts that they do (three K/V heads over
// two threads: two parts each, six even shares), as long as each part holds MIN_PART_KEYS keys.
static int64_t key_parts(int64_t pairs, int64_t S, bool blocked) {
  const int64_t threads = at::get_num_threads();
  if (!blocked || threads <= 1 || pairs % threads == 0) return 1;
  const int64_t parts = std::min(threads / std::gcd(pairs, threads), S / MIN_PART_KEYS);
  return parts > 1 ? parts : 1;
}

// one_query_attention's result with each (sequence, key/value head)'s keys in `parts` parts spread over the threads
// (flash-decoding's split): each part's max, sum and unnormalised weighted sum of V (attend_part), then per query
// head the parts rescaled to their common max and summed, out = sum_c e^(top_c - top) acc_c / sum_c e^(top_c -
// top) sums_c. The same softmax, its sums added in another order.
template <typename T>
static void attend_in_parts(const T* qp, const T* kp, const T* vp, const bool* mp, const float* ap, T* op,
                            const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, int64_t B,
                            int64_t H, int64_t Hkv, int64_t S, int64_t D, int64_t parts, float scale) {
  const int64_t G = H / Hkv, span = (S + parts - 1) / parts, stride = G * (D + 2);  // per part: acc, sums, tops
  std::vector<float> results(B * Hkv * parts * stride);
  at::parallel_for(0, B * Hkv * parts, 1, [&](int64_t begin, int64_t end) {
    std::vector<float> scores;
    for (int64_t i = begin; i < end; ++i) {
      const int64_t pair = i / parts, s0 = (i % parts) * span, n = std::min(span, S - s0);
      const int64_t b = pair / Hkv, h = pair % Hkv;
      float* acc = results.data() + i * stride;
      float *sums = acc + G * D, *tops = sums + G;
      if (n <= 0) {  // a last part past the keys: nothing to add
        std::fill(acc, acc + G * D + G, 0.f);
        std::fill(tops, tops + G, -INFINITY);
        continue;
      }
      scores.resize(G * ((n + 15) / 16 * 16));
      attend_part<T>(qp + b * q.stride(0) + h * G * q.stride(1), q.stride(1),
                     kp + b * k.stride(0) + h * k.stride(1) + s0 * k.stride(2),
                     vp + b * v.stride(0) + h * v.stride(1) + s0 * v.stride(2), k.stride(2), v.stride(2),
                     mp == nullptr ? nullptr : mp + b * S + s0, ap == nullptr ? nullptr : ap + (b * H + h * G) * S + s0,
                     S, G, n, D, scale, scores.data(), tops, sums, acc);
    }
  });
  std::vector<float> row(D);
  for (int64_t pair = 0; pair < B * Hkv; ++pair) {
    const int64_t b = pair / Hkv, h = pair % Hkv;
    for (int64_t g = 0; g < G; ++g) {
      float top = -INFINITY, total = 0.f;
      for (int64_t c = 0; c < parts; ++c) top = std::max(top, results[(pair * parts + c) * stride + G * D + G + g]);
      std::fill(row.begin(), row.end(), 0.f);
      for (int64_t c = 0; c < parts; ++c) {
        const float* part = results.data() + (pair * parts + c) * stride;
        const float weight = std::exp(part[G * D + G + g] - top);  // a part with no key seen: e^-inf = 0
        if (weight == 0.f) continue;
        total += weight * part[G * D + g];
        for (int64_t d = 0; d < D; ++d) row[d] += weight * part[g * D + d];
      }
      T* o = op + (b * H + h * G + g) * D;
      for (int64_t d = 0; d < D; ++d) o[d] = static_cast<T>(row[d] / total);
    }
  }
}

// A mask (B or 1, H or 1, 1, S) read through its strides into out (B, H, S), contiguous, converted to
// out's type: no ATen calls (an expand, a reshape and a dtype copy were 2-4 µs of each decode step's
// masked attention call, dispatch and allocation for a few hundred values).
template <typename S_T, typename O_T>
static void broadcast_rows(const S_T* src, const at::Tensor& mask, int64_t B, int64_t H, int64_t S, O_T* out) {
  const int64_t sb = mask.size(0) == 1 ? 0 : mask.stride(0), sh = mask.size(1) == 1 ? 0 : mask.stride(1);
  const int64_t ss = mask.stride(3);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < H; ++h)
      for (int64_t s = 0; s < S; ++s) out[(b * H + h) * S + s] = static_cast<O_T>(src[b * sb + h * sh + s * ss]);
}

// q (B, H, 1, D), k and v (B, Hkv, S, D), each row contiguous; mask (B or 1, 1, 1, S) bool (True: attend), or
// (B or 1, H or 1, 1, S) floating (added to the scores: a position bias, -inf where masked), or absent ->
// (B, H, 1, D) in q's dtype, k and v in q's dtype. Sequences and key/value heads split over threads.
at::Tensor one_query_attention(at::Tensor q, at::Tensor k, at::Tensor v, c10::optional<at::Tensor> mask,
                               double scale) {
  const int64_t B = q.size(0), H = q.size(1), D = q.size(3), Hkv = k.size(1), S = k.size(2), G = H / Hkv;
  TORCH_CHECK(q.size(2) == 1 && H % Hkv == 0 && k.sizes() == v.sizes() && k.size(3) == D,
              "one_query_attention: shapes");
  TORCH_CHECK(k.scalar_type() == q.scalar_type() && v.scalar_type() == q.scalar_type(), "one_query_attention: dtypes");
  TORCH_CHECK(q.stride(3) == 1 && k.stride(3) == 1 && v.stride(3) == 1, "one_query_attention: rows not contiguous");
  auto out = at::empty({B, H, 1, D}, q.options());
  std::unique_ptr<bool[]> m;     // the boolean mask as (B, S)
  std::unique_ptr<float[]> add;  // or the additive one as (B, H, S) in float32
  if (mask.has_value()) {
    const bool boolean = mask->scalar_type() == at::kBool;
    TORCH_CHECK(mask->dim() == 4 && (mask->size(0) == 1 || mask->size(0) == B) && mask->size(2) == 1 &&
                    mask->size(3) == S && (boolean ? mask->size(1) == 1 : mask->size(1) == 1 || mask->size(1) == H),
                "one_query_attention: mask shape");
    if (boolean) {
      m.reset(new bool[B * S]);
      broadcast_rows(mask->data_ptr<bool>(), *mask, B, 1, S, m.get());
    } else {
      add.reset(new float[B * H * S]);
      AT_DISPATCH_FLOATING_TYPES_AND2(at::kBFloat16, at::kHalf, mask->scalar_type(), "attention_mask", [&] {
        broadcast_rows(mask->data_ptr<scalar_t>(), *mask, B, H, S, add.get());
      });
    }
  }
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kBFloat16, at::kHalf, q.scalar_type(), "one_query_attention", [&] {
    const scalar_t* qp = q.data_ptr<scalar_t>();
    const scalar_t* kp = k.data_ptr<scalar_t>();
    const scalar_t* vp = v.data_ptr<scalar_t>();
    scalar_t* op = out.data_ptr<scalar_t>();
    const bool* mp = m.get();
    const float* ap = add.get();
    const int64_t parts = key_parts(B * Hkv, S, attends_blocked<scalar_t>(D));
    if (parts > 1) {
      attend_in_parts<scalar_t>(qp, kp, vp, mp, ap, op, q, k, v, B, H, Hkv, S, D, parts, static_cast<float>(scale));
      return;
    }
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
at::Tensor append_attention(at::Tensor q, at::Tensor k, at::Tensor v, at::Tensor k_cache,
                            at::Tensor v_cache, int64_t n, c10::optional<at::Tensor> cos,
                            c10::optional<at::Tensor> sin, c10::optional<at::Tensor> mask, double scale) {
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
  at::Tensor cc, sc;
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
  auto rotated = rotates ? at::empty({B, H, 1, D}, q.options()) : q;
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
