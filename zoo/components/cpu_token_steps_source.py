"""The C++ of the recurrent mixers' one-call token steps, in ``cpu_steps``' extension after its
``SOURCE`` (the steps) and ``row_product.PROJECTIONS`` (``layer_fits``, ``projection_row``, the
pre-norm's ``pre_norm_fits``, ``pre_normed`` and ``with_residual``).

Mamba2's, Gated DeltaNet's, linear and Infini-attention's whole mixer for one token: their input
projections, step and output projection in one call, the projections made by the one-row
products' extension, so the same bits as the mixer's own calls; given a pre-norm block's norm,
that norm first and the residual last (``cpu_layer_steps_source.py``). An undefined tensor (None
in Python), with nothing written, where x is not one token or a projection or norm is not one
the steps take. The window and the state are the mixer's to check (``cpu_steps.conv_step_ready``),
as for the steps in ``cpu_steps_source.py`` (linear_token and infini_token check their state's
shapes and dtypes too); conv_w is the Conv1d's (C, 1, K).
"""

from __future__ import annotations

TOKEN_STEPS = r"""
// Mamba2: x (1, 1, C) -> in_proj [z, xBC, dt] (H P + C_conv + H rows) -> mamba2_step -> out_proj -> (1, 1, C_out).
at::Tensor mamba2_token(at::Tensor x, at::Tensor in_weight, MaybeTensor in_scales, MaybeTensor in_bias,
                        at::Tensor conv_w, MaybeTensor conv_b, at::Tensor window, at::Tensor dt_bias,
                        at::Tensor A_log, at::Tensor Dskip, at::Tensor norm_w, at::Tensor state, int64_t groups,
                        double eps, double dt_min, double dt_max, at::Tensor out_weight, MaybeTensor out_scales,
                        MaybeTensor out_bias, MaybeTensor pre_weight, MaybeTensor pre_bias, double pre_eps,
                        int64_t pre_kind, bool past_cache) {
  const auto dtype = x.scalar_type();
  if (!one_token(x) || state.dim() != 4 || state.size(0) != 1 || window.dim() != 3 || conv_w.dim() != 3 ||
      conv_w.size(1) != 1)
    return {};
  const int64_t C = x.size(2), H = state.size(1), inner = H * state.size(2);
  if (!layer_fits(in_weight, in_scales, in_bias, C, dtype) || in_weight.size(0) != inner + window.size(1) + H ||
      !layer_fits(out_weight, out_scales, out_bias, inner, dtype) ||
      !pre_norm_fits(x, pre_weight, pre_bias, pre_kind, out_weight.size(0)))
    return {};
  const auto none = at::empty({0}, state.options());  // mamba2_step's absent bias
  const auto h = pre_normed(x, pre_weight, pre_bias, pre_eps, pre_kind);  // (1, 1, C): the block's norm, if given
  auto proj = projection_row(in_weight, in_scales, h.view({1, C}), in_bias, past_cache);  // (1, inner + C_conv + H)
  auto y = mamba2_step(proj, conv_w.select(1, 0), conv_b.value_or(none), window, dt_bias, A_log, Dskip, norm_w,
                       state, groups, eps, dt_min, dt_max);  // (1, inner)
  auto out = projection_row(out_weight, out_scales, y.view({1, 1, inner}), out_bias, past_cache);  // (1, 1, C_out)
  return with_residual(out, x, pre_kind);
}

// Gated DeltaNet: x (1, 1, C) -> in_proj_qkvz (Hk (2 dk + 2 r dv) rows) and in_proj_ba (2 Hv rows) -> gdn_step
// -> out_proj -> (1, 1, C_out); state (1, Hv, dk, dv), r = Hv / Hk.
at::Tensor gdn_token(at::Tensor x, at::Tensor qkvz_weight, MaybeTensor qkvz_scales, MaybeTensor qkvz_bias,
                     at::Tensor ba_weight, MaybeTensor ba_scales, MaybeTensor ba_bias, at::Tensor conv_w,
                     at::Tensor window, at::Tensor dt_bias, at::Tensor A_log, at::Tensor norm_w, at::Tensor state,
                     int64_t k_heads, double eps, at::Tensor out_weight, MaybeTensor out_scales,
                     MaybeTensor out_bias, MaybeTensor pre_weight, MaybeTensor pre_bias, double pre_eps,
                     int64_t pre_kind, bool past_cache) {
  const auto dtype = x.scalar_type();
  if (!one_token(x) || state.dim() != 4 || state.size(0) != 1 || window.dim() != 3 || conv_w.dim() != 3 ||
      conv_w.size(1) != 1 || k_heads < 1 || state.size(1) % k_heads != 0)
    return {};
  const int64_t C = x.size(2), H = state.size(1), dk = state.size(2), dv = state.size(3), per = H / k_heads;
  if (!layer_fits(qkvz_weight, qkvz_scales, qkvz_bias, C, dtype) ||
      qkvz_weight.size(0) != k_heads * (2 * dk + 2 * per * dv) ||
      !layer_fits(ba_weight, ba_scales, ba_bias, C, dtype) || ba_weight.size(0) != 2 * H ||
      !layer_fits(out_weight, out_scales, out_bias, H * dv, dtype) ||
      !pre_norm_fits(x, pre_weight, pre_bias, pre_kind, out_weight.size(0)))
    return {};
  const auto h = pre_normed(x, pre_weight, pre_bias, pre_eps, pre_kind).view({1, C});  // the block's norm, if given
  auto qkvz = projection_row(qkvz_weight, qkvz_scales, h, qkvz_bias, past_cache);  // (1, Hk W)
  auto ba = projection_row(ba_weight, ba_scales, h, ba_bias, past_cache);  // (1, 2 Hv)
  auto mixed = gdn_step(qkvz, ba, conv_w.select(1, 0), window, dt_bias, A_log, norm_w, state, k_heads, eps);
  auto out = projection_row(out_weight, out_scales, mixed.view({1, 1, H * dv}), out_bias, past_cache);  // (1, 1, C_out)
  return with_residual(out, x, pre_kind);
}

// A kernel-attention state S (1, H, D, D) and z (1, H, D), float32 and contiguous (linear and Infini-attention's).
static bool feature_state_fits(const at::Tensor& S, const at::Tensor& z) {
  const auto plain = [](const at::Tensor& t) { return t.scalar_type() == at::kFloat && t.is_contiguous(); };
  return S.dim() == 4 && S.size(0) == 1 && S.size(2) == S.size(3) && z.dim() == 3 && z.size(0) == 1 &&
         z.size(1) == S.size(1) && z.size(2) == S.size(2) && plain(S) && plain(z);
}

// A kernel-attention step's layers and pre-norm: a fused q|k|v layer of 3 * inner rows over x's width and an output
// layer over inner values, ones the layer steps take (layer_fits), and the pre-norm, if any (pre_norm_fits).
static bool feature_layers_fit(const at::Tensor& x, const at::Tensor& qkv_weight, const MaybeTensor& qkv_scales,
                               const MaybeTensor& qkv_bias, const at::Tensor& out_weight, const MaybeTensor& out_scales,
                               const MaybeTensor& out_bias, const MaybeTensor& pre_weight,
                               const MaybeTensor& pre_bias, int64_t pre_kind, int64_t inner) {
  return layer_fits(qkv_weight, qkv_scales, qkv_bias, x.size(2), x.scalar_type()) &&
         qkv_weight.size(0) == 3 * inner && layer_fits(out_weight, out_scales, out_bias, inner, x.scalar_type()) &&
         pre_norm_fits(x, pre_weight, pre_bias, pre_kind, out_weight.size(0));
}

// The fused q|k|v product's row (1, 3 inner) of x through the step's pre-norm (the block's norm, if given).
static at::Tensor normed_qkv(const at::Tensor& x, const at::Tensor& qkv_weight, const MaybeTensor& qkv_scales,
                             const MaybeTensor& qkv_bias, const MaybeTensor& pre_weight, const MaybeTensor& pre_bias,
                             double pre_eps, int64_t pre_kind, bool past_cache) {
  const auto h = pre_normed(x, pre_weight, pre_bias, pre_eps, pre_kind);  // (1, 1, C)
  return projection_row(qkv_weight, qkv_scales, h.view({1, x.size(2)}), qkv_bias, past_cache);
}

// Part i of the fused q|k|v product's row (1, 3 H D): q, k or v as (1, H, D), a view.
static at::Tensor qkv_part(const at::Tensor& qkv, int64_t i, int64_t H, int64_t D) {
  return qkv.narrow(1, i * H * D, H * D).view({1, H, D});
}

// Linear attention: x (1, 1, C) -> qkv_proj [q | k | v] (3 H D rows: fused, zoo.fuse_projections) -> linear_step
// -> o_proj -> (1, 1, C_out); kv (1, H, D, D) and z (1, H, D) float32, contiguous.
at::Tensor linear_token(at::Tensor x, at::Tensor qkv_weight, MaybeTensor qkv_scales, MaybeTensor qkv_bias,
                        at::Tensor kv, at::Tensor z, double eps, at::Tensor out_weight, MaybeTensor out_scales,
                        MaybeTensor out_bias, MaybeTensor pre_weight, MaybeTensor pre_bias, double pre_eps,
                        int64_t pre_kind, bool past_cache) {
  if (!one_token(x) || !feature_state_fits(kv, z)) return {};
  const int64_t H = kv.size(1), D = kv.size(2);
  if (!feature_layers_fit(x, qkv_weight, qkv_scales, qkv_bias, out_weight, out_scales, out_bias, pre_weight, pre_bias,
                          pre_kind, H * D))
    return {};
  const auto qkv = normed_qkv(x, qkv_weight, qkv_scales, qkv_bias, pre_weight, pre_bias, pre_eps, pre_kind, past_cache);
  auto y = linear_step(qkv_part(qkv, 0, H, D), qkv_part(qkv, 1, H, D), qkv_part(qkv, 2, H, D), kv, z, eps);
  auto out = projection_row(out_weight, out_scales, y.view({1, 1, H * D}), out_bias, past_cache);  // (1, 1, C_out)
  return with_residual(out, x, pre_kind);
}

// Infini-attention: x (1, 1, C) -> qkv_proj [q | k | v] (fused) -> infini_step at cache slot time[0] -> o_proj ->
// (1, 1, C_out); ring_k, ring_v (1, H, R, D) float32 or x's dtype; mem (1, H, D, D), z (1, H, D) float32; key_valid
// (1, max_len) bool or empty.
at::Tensor infini_token(at::Tensor x, at::Tensor qkv_weight, MaybeTensor qkv_scales, MaybeTensor qkv_bias,
                        at::Tensor ring_k, at::Tensor ring_v, at::Tensor mem, at::Tensor z, at::Tensor gate,
                        at::Tensor key_valid, at::Tensor time, int64_t segment, bool delta, double eps,
                        at::Tensor out_weight, MaybeTensor out_scales, MaybeTensor out_bias,
                        MaybeTensor pre_weight, MaybeTensor pre_bias, double pre_eps, int64_t pre_kind,
                        bool past_cache) {
  if (!one_token(x) || !feature_state_fits(mem, z)) return {};
  const int64_t H = mem.size(1), D = mem.size(2);
  const auto ring_fits = [&](const at::Tensor& r) {
    return r.dim() == 4 && r.size(0) == 1 && r.size(1) == H && r.size(2) >= 1 && r.size(3) == D &&
           r.is_contiguous() && r.scalar_type() == ring_k.scalar_type() &&
           (r.scalar_type() == at::kFloat || r.scalar_type() == x.scalar_type());
  };
  if (!ring_fits(ring_k) || !ring_fits(ring_v) || ring_v.size(2) != ring_k.size(2) || gate.numel() != H ||
      time.numel() != 1 || time.scalar_type() != at::kLong || segment < 1)
    return {};
  const int64_t t0 = time.data_ptr<int64_t>()[0];
  if (t0 < 0 || (key_valid.numel() && (key_valid.dim() != 2 || key_valid.size(0) != 1 || !key_valid.is_contiguous() ||
                                       key_valid.scalar_type() != at::kBool || t0 >= key_valid.size(1))))
    return {};
  if (!feature_layers_fit(x, qkv_weight, qkv_scales, qkv_bias, out_weight, out_scales, out_bias, pre_weight, pre_bias,
                          pre_kind, H * D))
    return {};
  const auto qkv = normed_qkv(x, qkv_weight, qkv_scales, qkv_bias, pre_weight, pre_bias, pre_eps, pre_kind, past_cache);
  auto y = infini_step(qkv_part(qkv, 0, H, D), qkv_part(qkv, 1, H, D), qkv_part(qkv, 2, H, D), ring_k, ring_v, mem, z,
                       gate, key_valid, time, segment, delta, eps);  // (1, H, D) in x's dtype
  auto out = projection_row(out_weight, out_scales, y.view({1, 1, H * D}), out_bias, past_cache);  // (1, 1, C_out)
  return with_residual(out, x, pre_kind);
}
"""
