"""The C++ of Infini-attention's one-token step (``cpu_steps.infini_step``), part of the
``cpu_steps`` extension's source (``cpu_steps_source.SOURCE``, after its prelude, the column
loops of ``cpu_columns_source`` and ``FLOATS``): the local softmax over the ring of the
segment's keys, the compressive memory's read, and at a segment's end its write (linear or
delta rule), for every (row, head) on torch's threads.
"""

INFINI = r"""
static inline int64_t floordiv(int64_t a, int64_t b) { return a >= 0 ? a / b : -((-a + b - 1) / b); }

// sigma(q) M / (sigma(q) z + eps) for one head: q (D) raw, M (D, D), z (D) -> out (D); f (D) scratch.
static void memory_read(const float* q, const float* M, const float* z, float* out, int64_t D, float eps, float* f) {
  float den = 0.f;
  for (int64_t i = 0; i < D; ++i) {
    f[i] = feature(q[i]);
    den += f[i] * z[i];
  }
  by_columns(D, [&](int64_t j, auto cols) {  // the sums in registers, one sweep over M's rows
    using C = decltype(cols);
    typename C::V acc[C::U] = {};
    for (int64_t i = 0; i < D; ++i)
      for (int u = 0; u < C::U; ++u) acc[u] += f[i] * load<typename C::V>(M + i * D + j + u * C::W);
    for (int u = 0; u < C::U; ++u) store(out + j + u * C::W, acc[u] / (den + eps));
  });
}

// Infini-attention at cache slot t0 = time[0] (int64): q, k, v (B, H, D); ring_k, ring_v (B, H, R, D)
// (slot = time mod R); mem (B, H, D, D), z (B, H, D); key_valid (B, max_len) bool or empty. Returns
// sigmoid(gate) * memory read + (1 - sigmoid(gate)) * local softmax (B, H, D); writes the token into the
// ring and, when it ends a segment, the segment (linear or delta rule) into mem and z, after the read.
// A ring row in float32: the row itself, or widened into buf.
static inline const float* widen_row(const float* row, float*, int64_t) { return row; }
template <typename RT>
static inline const float* widen_row(const RT* row, float* buf, int64_t D) {
  for (int64_t i = 0; i < D; ++i) buf[i] = static_cast<float>(row[i]);
  return buf;
}

// The ring is float32 or the model's dtype (whose values k and v, widened, hold exactly): its rows are read
// into float32 and the token written back in the ring's dtype.
template <typename RT>
static void infini_rows(at::Tensor& q, at::Tensor& k, at::Tensor& v, RT* rk, RT* rv,
                        at::Tensor& mem, at::Tensor& z, at::Tensor& gate, at::Tensor& key_valid,
                        int64_t t0, int64_t R, int64_t S, bool delta, double eps, at::Tensor& y) {
  const int64_t batch = q.size(0), H = q.size(1), D = q.size(2);
  const int64_t slots = key_valid.numel() ? key_valid.size(1) : 0;
  const bool* kv = key_valid.numel() ? key_valid.data_ptr<bool>() : nullptr;
  const Floats qf(q), kf(k), vf(v), gf(gate);
  const float *qp = qf.p, *kp = kf.p, *vp = vf.p;
  float* mp = mem.data_ptr<float>();
  float *zp = z.data_ptr<float>(), *yp = y.data_ptr<float>();
  const float *gp = gf.p, scale = 1.f / std::sqrt((float)D);
  at::parallel_for(0, batch * H, 1, [&](int64_t begin, int64_t end) {
    std::vector<float> w(R + 1), read(D), seg(S * D), val(S * D), kbuf(D), vbuf(D), fq(D);
    std::vector<int64_t> lag_of(R + 1);
    for (int64_t job = begin; job < end; ++job) {
      const int64_t b = job / H, h = job % H;
      int64_t pads = 0;
      for (int64_t s = 0; kv && s < slots; ++s) pads += !kv[b * slots + s];
      const int64_t pos = t0 - pads;
      auto valid = [&](int64_t time) { return time >= 0 && (!kv || kv[b * slots + time]); };
      const float *qh = qp + job * D, *kh = kp + job * D, *vh = vp + job * D;
      RT *RK = rk + job * R * D, *RV = rv + job * R * D;
      float *M = mp + job * D * D, *Z = zp + job * D;
      int64_t n = 0;  // local keys: the ring's in this token's segment, then the token itself
      float top = -INFINITY;
      for (int64_t lag = R; lag >= 0; --lag) {
        const int64_t time = t0 - lag;
        if (lag > 0 && !(valid(time) && floordiv(pos - lag, S) == floordiv(pos, S))) continue;
        const float* key = lag ? widen_row(RK + (time % R) * D, kbuf.data(), D) : kh;
        float s = 0.f;
        for (int64_t i = 0; i < D; ++i) s += qh[i] * key[i];
        w[n] = s * scale, lag_of[n] = lag, top = std::max(top, w[n]);
        ++n;
      }
      float total = 0.f;
      for (int64_t m = 0; m < n; ++m) total += (w[m] = std::exp(w[m] - top));
      const float g = sigmoid(gp[h]);
      float* o = yp + job * D;
      memory_read(qh, M, Z, read.data(), D, (float)eps, fq.data());
      for (int64_t j = 0; j < D; ++j) o[j] = g * read[j];
      for (int64_t m = 0; m < n; ++m) {
        const float* value = lag_of[m] ? widen_row(RV + ((t0 - lag_of[m]) % R) * D, vbuf.data(), D) : vh;
        const float p = (1.f - g) * w[m] / total;
        for (int64_t j = 0; j < D; ++j) o[j] += p * value[j];
      }
      if (pos >= 0 && pos % S == S - 1) {  // the segment's S tokens: lags S-1 .. 0
        for (int64_t s = 0; s < S; ++s) {
          const int64_t lag = S - 1 - s, time = t0 - lag;
          const float* key = lag ? widen_row(RK + (time % R) * D, kbuf.data(), D) : kh;
          const float* value = lag ? widen_row(RV + (time % R) * D, vbuf.data(), D) : vh;
          const float keep = valid(time) ? 1.f : 0.f;
          for (int64_t i = 0; i < D; ++i) seg[s * D + i] = feature(key[i]) * keep, val[s * D + i] = value[i];
        }
        if (delta)  // what M already returns for each key, from M and z before this segment
          for (int64_t s = 0; s < S; ++s) {
            float den = 0.f;
            for (int64_t i = 0; i < D; ++i) den += seg[s * D + i] * Z[i];
            for (int64_t j = 0; j < D; ++j) {
              float r = 0.f;
              for (int64_t i = 0; i < D; ++i) r += seg[s * D + i] * M[i * D + j];
              val[s * D + j] -= r / (den + (float)eps);
            }
          }
        for (int64_t s = 0; s < S; ++s)
          for (int64_t i = 0; i < D; ++i) {
            Z[i] += seg[s * D + i];
            for (int64_t j = 0; j < D; ++j) M[i * D + j] += seg[s * D + i] * val[s * D + j];
          }
      }
      for (int64_t i = 0; i < D; ++i)
        RK[(t0 % R) * D + i] = static_cast<RT>(kh[i]), RV[(t0 % R) * D + i] = static_cast<RT>(vh[i]);
    }
    });
}

at::Tensor infini_step(at::Tensor q, at::Tensor k, at::Tensor v, at::Tensor ring_k,
                       at::Tensor ring_v, at::Tensor mem, at::Tensor z, at::Tensor gate,
                       at::Tensor key_valid, at::Tensor time, int64_t S, bool delta, double eps) {
  const int64_t t0 = time.data_ptr<int64_t>()[0], R = ring_k.size(2);
  TORCH_CHECK(ring_k.scalar_type() == ring_v.scalar_type(), "infini_step: ring_k and ring_v differ in dtype");
  auto y = at::empty({q.size(0), q.size(1), q.size(2)}, mem.options());
  switch (ring_k.scalar_type()) {
    case at::kFloat:
      infini_rows(q, k, v, ring_k.data_ptr<float>(), ring_v.data_ptr<float>(), mem, z, gate, key_valid, t0, R, S, delta,
                  eps, y);
      break;
    case at::kBFloat16:
      infini_rows(q, k, v, ring_k.data_ptr<at::BFloat16>(), ring_v.data_ptr<at::BFloat16>(), mem, z, gate,
                  key_valid, t0, R, S, delta, eps, y);
      break;
    case at::kHalf:
      infini_rows(q, k, v, ring_k.data_ptr<at::Half>(), ring_v.data_ptr<at::Half>(), mem, z, gate, key_valid, t0, R, S,
                  delta, eps, y);
      break;
    default:
      TORCH_CHECK(false, "infini_step: ring dtype ", ring_k.scalar_type(), "; allowed: float32, bfloat16, float16");
  }
  return narrowed(y, q.scalar_type());  // in the model's dtype, for the output projection
}
"""
