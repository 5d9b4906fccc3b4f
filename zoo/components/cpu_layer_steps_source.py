"""The C++ of a layer's whole one-token step as one call: ``attention_token`` (a decode step's
attention: its products, q/k norms, cache write, rotation and attention; ``cpu_attention.py``),
``cross_attention_token`` (a decoder's attention over the encoder's memory) and ``mlp_token``
(a feed-forward's two products and activation; ``cpu_token_ops.py``).

Each is the extension's own kernels called in the order the module calls them (``row_product``,
``rms_norm``, ``append_attention``, ``one_query_attention``, ``gelu``, ``silu_and_mul``), so
results are theirs bit for bit; what goes is the Python between them. Each first checks every
shape, dtype and layout its kernels need and returns an undefined tensor (None in Python), with
nothing written, where one does not hold, so the module runs its own calls: those checks cost
microseconds in Python and nothing here. Appended last to the one-row products' extension.

Given a pre-norm (``pre_kind``: a pre-norm block's branch, ``TokenMixer.residual_token``), a step
also applies the block's norm first (``layer_norm`` or ``rms_norm``, as the norm modules call
them) and adds the residual last (aten's add, in place on its own output: ``x + out``'s
rounding), so the block's two norms and adds go too: ~35 µs of Python a gpt2 layer on this
project's Zen 4 VM; an eager decode step took 0.94-0.98x the time (gpt2, bfloat16, int8 and
int4 weights), 0.94-0.96x (qwen3-0.6b int8, int4) and 0.88-0.93x (t5-small), both ways
interleaved in one process. The recurrent mixers' one-call steps (Mamba's, Mamba2's, Gated
DeltaNet's, linear and Infini-attention's) take the pre-norm too (``FITS``' ``pre_norm_fits`` and
``with_residual``; ``projection_call``'s ``pre_normed`` makes the norm through this extension's
ops): 0.96-0.98x (mamba-130m, mamba2-130m int8), 0.97-0.99x (Gated DeltaNet and its hybrid),
0.96-0.99x (linear and Infini-attention).

The recurrent mixers' one-call steps (Mamba's ``mamba_token`` in ``cpu_mamba_step.py``; Mamba2's,
Gated DeltaNet's, linear and Infini-attention's in ``cpu_token_steps_source.py``) live in their
own kernels' extensions: they check their projections with ``FITS`` and make them through this
extension's ``layer_row`` op, called through the dispatcher (``projection_call``), so the products
are the same kernels, bit for bit, with one copy of their code.
"""

from __future__ import annotations

# An int4 projection in a layer step is zoo.quant's int4 panels' one-row product (``int4_cpu``'s
# ``int4_q8``, llama.cpp's numerics), called through the dispatcher by this name with this grain
# (``int4_cpu.PANEL_GRAIN`` is this; tests/components/test_cpu_layer_steps.py checks the name):
# the int4 kernel lives in its own extension, built with the quantized layers.
INT4_ROWS_OP = "zoo::int4_cpu_int4_q8"
INT4_GRAIN = 16  # a thread's share is at least 16 panels (256 weight rows): smaller splits lost at 2 threads

# What a one-token layer step asks of its input and its projections, before it writes anything: in
# the one-row products' extension (``row_product_fitting`` and the steps below; ``SOURCE`` of
# ``row_product_source.py`` includes it) and in the recurrent mixers' own extensions, whose one-call
# steps make their products through this one (``projection_call``, ``row_product.PROJECTIONS``).
FITS = r"""
using MaybeTensor = c10::optional<at::Tensor>;  // a schema's Tensor?

// Whether x is one token (1, 1, C) on the CPU in float32, bfloat16 or float16: every layer step's input.
static bool one_token(const at::Tensor& x) {
  const auto dtype = x.scalar_type();
  return x.dim() == 3 && x.size(0) == 1 && x.size(1) == 1 && x.is_cpu() &&
         (dtype == at::kFloat || dtype == at::kBFloat16 || dtype == at::kHalf);
}

// Whether row_product takes weight for rows of `width` values of `dtype`: a contiguous CPU matrix of that many
// columns in that dtype, of at least min_bytes (row_product.fits), its bias (if any) one value a row in that dtype.
static bool row_fits(const at::Tensor& weight, const c10::optional<at::Tensor>& bias, int64_t width,
                     at::ScalarType dtype, int64_t min_bytes) {
  return weight.dim() == 2 && weight.size(1) == width && weight.scalar_type() == dtype && weight.is_contiguous() &&
         weight.is_cpu() && weight.numel() * weight.element_size() >= min_bytes &&
         (!bias.has_value() || (bias->dim() == 1 && bias->size(0) == weight.size(0) && bias->scalar_type() == dtype &&
                                bias->is_cpu()));
}

// Whether an int4 projection's panels fit rows of `width`: packed (N, width / 2) uint8 and scale_offsets (N, G, 2)
// in a floating dtype, groups of a multiple of 32 inputs (int4_q8 quantizes x by blocks of 32).
static bool int4_fits(const at::Tensor& packed, const at::Tensor& so, int64_t width) {
  return packed.dim() == 2 && packed.size(1) * 2 == width && packed.is_contiguous() && packed.is_cpu() &&
         so.dim() == 3 && so.size(0) == packed.size(0) && so.size(1) >= 1 && so.size(2) == 2 && so.is_contiguous() &&
         so.is_cpu() && c10::isFloatingType(so.scalar_type()) && width % so.size(1) == 0 &&
         (width / so.size(1)) % 32 == 0;
}

// A projection as the layer steps take it (the layer's step_tensors: it says whether its kernel takes its product,
// size floor included): float rows (no scales: row_product, its bias in x's dtype), int8 rows with a scale a row
// (int8_rows) or int4 panels (uint8) with their scales and offsets (int4_q8), then + bias as QuantizedLinear adds
// it, for rows of `width` values of `dtype`.
static bool layer_fits(const at::Tensor& weight, const MaybeTensor& scales, const MaybeTensor& bias, int64_t width,
                       at::ScalarType dtype) {
  if (!scales.has_value()) return row_fits(weight, bias, width, dtype, 0);
  const bool biased = !bias.has_value() || (bias->dim() == 1 && bias->size(0) == weight.size(0) && bias->is_cpu() &&
                                            c10::isFloatingType(bias->scalar_type()));
  if (weight.scalar_type() == at::kByte) return biased && int4_fits(weight, *scales, width);
  return weight.dim() == 2 && weight.size(1) == width && weight.scalar_type() == at::kChar && weight.is_contiguous() &&
         weight.is_cpu() && scales->dim() == 1 && scales->size(0) == weight.size(0) && scales->is_cpu() &&
         c10::isFloatingType(scales->scalar_type()) && biased;
}

// A layer step's pre-norm (cpu_token_ops.PRE_*): none, or the pre-norm block's norm before the step and
// its residual after it (layer_norm; rms_norm, by w or by 1 + w)
constexpr int64_t PRE_NONE = 0, PRE_LAYER = 1, PRE_RMS = 2, PRE_RMS_UNIT = 3;

// Whether a step's pre-norm fits x (1, 1, C) and a step writing C_out values: none; or a known kind whose weight
// (and a layer norm's bias, if any) is one value a channel in x's dtype on the CPU, and C_out == C (the residual).
static bool pre_norm_fits(const at::Tensor& x, const MaybeTensor& weight, const MaybeTensor& bias, int64_t kind,
                          int64_t out_width) {
  if (kind == PRE_NONE) return true;
  if (kind < PRE_NONE || kind > PRE_RMS_UNIT || !weight.has_value() || out_width != x.size(2)) return false;
  const auto fits = [&](const at::Tensor& t) {
    return t.dim() == 1 && t.size(0) == x.size(2) && t.scalar_type() == x.scalar_type() && t.is_cpu();
  };
  return fits(*weight) && (!bias.has_value() || (kind == PRE_LAYER && fits(*bias)));
}

// A step's output with its pre-norm's residual added (x + out, as the block's Python adds it: aten's add, the
// same rounding), in place on the step's own output; out itself without a pre-norm.
static at::Tensor with_residual(at::Tensor out, const at::Tensor& x, int64_t kind) {
  return kind == PRE_NONE ? out : out.add_(x);
}
"""

SOURCE = r"""
// mlp_token's activations (cpu_token_ops.MLP_ACTIVATIONS)
constexpr int64_t MLP_GELU = 0, MLP_GELU_TANH = 1, MLP_SILU_AND_MUL = 2, MLP_RELU = 3;

#include <ATen/core/dispatch/Dispatcher.h>

// One row x through int4 panels (int4_q8 of zoo.quant's extension, loaded with its layers, through the dispatcher
// straight to its CPU kernel) -> x's shape with the last dim the panels' rows, in x's dtype.
static at::Tensor int4_row(const at::Tensor& packed, const at::Tensor& so, const at::Tensor& x, bool fetch_ahead) {
  static const auto op = c10::Dispatcher::singleton()
                             .findSchemaOrThrow("INT4_ROWS_OP", "")
                             .typed<at::Tensor(at::Tensor, at::Tensor, at::Tensor, int64_t, bool)>();
  auto shape = x.sizes().vec();
  shape.back() = packed.size(0);
  const auto cpu = c10::DispatchKeySet(c10::DispatchKey::CPU);
  return op.redispatch(cpu, x.reshape({1, x.size(-1)}), packed, so, INT4_GRAIN, fetch_ahead).view(shape);
}

// One row x through a projection that layer_fits: its product (+ bias), as the layer's own forward computes it.
static at::Tensor layer_row(const at::Tensor& weight, const MaybeTensor& scales, const at::Tensor& x,
                            const MaybeTensor& bias, bool past_cache) {
  if (!scales.has_value()) return row_product(weight, x, bias, past_cache);
  auto out = weight.scalar_type() == at::kByte ? int4_row(weight, *scales, x, past_cache)
                                                       : int8_rows(weight, *scales, x, past_cache);
  return bias.has_value() ? out + bias->to(out.scalar_type()) : out;  // in x's dtype
}

// x through the step's pre-norm (x itself without one): the norm kernels the norm modules call.
static at::Tensor pre_normed(const at::Tensor& x, const MaybeTensor& weight, const MaybeTensor& bias, double eps,
                             int64_t kind) {
  if (kind == PRE_NONE) return x;
  if (kind == PRE_LAYER) return layer_norm(x, *weight, bias, eps);
  return rms_norm(x, *weight, eps, kind == PRE_RMS_UNIT);
}

// Whether attention_token computes this step (its arguments below): every shape, dtype and layout its calls need,
// checked before anything is written, so that a step it declines runs the module's own calls instead.
static bool attention_fits(const at::Tensor& x, const at::Tensor& qkv_weight, const MaybeTensor& qkv_scales,
                           const MaybeTensor& qkv_bias, const MaybeTensor& q_norm, const MaybeTensor& k_norm,
                           const at::Tensor& k_cache, const at::Tensor& v_cache, int64_t n, const MaybeTensor& cos,
                           const MaybeTensor& sin, const MaybeTensor& mask, const at::Tensor& o_weight,
                           const MaybeTensor& o_scales, const MaybeTensor& o_bias) {
  const auto dtype = x.scalar_type();
  if (!one_token(x) || k_cache.dim() != 4 || qkv_weight.dim() != 2) return false;
  const int64_t Hkv = k_cache.size(1), L = k_cache.size(2), D = k_cache.size(3), width = qkv_weight.size(0);
  if (k_cache.size(0) != 1 || Hkv < 1 || D < 1 || width % D != 0) return false;
  const int64_t H = width / D - 2 * Hkv;
  if (H < 1 || H % Hkv != 0 || n < 1 || n > L) return false;
  if (!layer_fits(qkv_weight, qkv_scales, qkv_bias, x.size(2), dtype) ||
      !layer_fits(o_weight, o_scales, o_bias, H * D, dtype))
    return false;
  if (q_norm.has_value() != k_norm.has_value()) return false;
  for (const auto* norm : {&q_norm, &k_norm})
    if (norm->has_value() && ((*norm)->dim() != 1 || (*norm)->size(0) != D || (*norm)->scalar_type() != dtype))
      return false;
  if (k_cache.sizes() != v_cache.sizes() || k_cache.scalar_type() != dtype || v_cache.scalar_type() != dtype ||
      k_cache.stride(3) != 1 || v_cache.stride(3) != 1 || !k_cache.is_cpu() || !v_cache.is_cpu())
    return false;
  if (cos.has_value() != sin.has_value()) return false;
  if (cos.has_value()) {  // (1, 1, 1, R), R even and at most D
    if (cos->dim() != 4 || cos->sizes() != sin->sizes() || cos->size(0) != 1 || cos->size(1) != 1 ||
        cos->size(2) != 1 || cos->size(3) % 2 != 0 || cos->size(3) > D || cos->scalar_type() != dtype ||
        sin->scalar_type() != dtype || !cos->is_cpu() || !sin->is_cpu())
      return false;
  }
  if (mask.has_value()) {
    if (mask->dim() != 4 || mask->size(0) != 1 || mask->size(2) != 1 || mask->size(3) != n || !mask->is_cpu())
      return false;
    if (mask->scalar_type() == at::kBool) return mask->size(1) == 1;
    return c10::isFloatingType(mask->scalar_type()) && (mask->size(1) == 1 || mask->size(1) == H);
  }
  return true;
}

// An eager decode step's whole attention for one token: x (1, 1, C) through the fused q|k|v projection (qkv_weight
// ((H + 2 Hkv) D, C), layer_row), q and k normed per head where q_norm and k_norm are given (rms_norm), the new k
// and v written to slot n - 1 of the caches (1, Hkv, L, D) and q attending over their first n slots, rotated with
// cos and sin (1, 1, 1, R) where given (append_attention), then the heads (1, 1, H D) through o_weight
// (layer_row) -> (1, 1, C_out): the calls the attention module makes one after another, with no Python between
// them. An undefined tensor (None in Python), with nothing written, where attention_fits does not hold.
at::Tensor attention_token(at::Tensor x, at::Tensor qkv_weight, MaybeTensor qkv_scales,
                           MaybeTensor qkv_bias, MaybeTensor q_norm, MaybeTensor k_norm,
                           double norm_eps, bool unit_offset, at::Tensor k_cache, at::Tensor v_cache, int64_t n,
                           MaybeTensor cos, MaybeTensor sin, MaybeTensor mask,
                           double scale, at::Tensor o_weight, MaybeTensor o_scales, MaybeTensor o_bias,
                           MaybeTensor pre_weight, MaybeTensor pre_bias, double pre_eps, int64_t pre_kind,
                           bool past_cache) {
  if (!attention_fits(x, qkv_weight, qkv_scales, qkv_bias, q_norm, k_norm, k_cache, v_cache, n, cos, sin, mask,
                      o_weight, o_scales, o_bias) ||
      !pre_norm_fits(x, pre_weight, pre_bias, pre_kind, o_weight.size(0)))
    return at::Tensor();
  const int64_t Hkv = k_cache.size(1), D = k_cache.size(3), H = qkv_weight.size(0) / D - 2 * Hkv;
  const auto h = pre_normed(x, pre_weight, pre_bias, pre_eps, pre_kind);  // (1, 1, C)
  auto joint = layer_row(qkv_weight, qkv_scales, h, qkv_bias, past_cache);  // (1, 1, (H + 2 Hkv) D)
  auto q = joint.narrow(2, 0, H * D).view({1, 1, H, D});
  auto k = joint.narrow(2, H * D, Hkv * D).view({1, 1, Hkv, D});
  auto v = joint.narrow(2, (H + Hkv) * D, Hkv * D).view({1, 1, Hkv, D});
  if (q_norm.has_value()) {
    q = rms_norm(q, *q_norm, norm_eps, unit_offset);
    k = rms_norm(k, *k_norm, norm_eps, unit_offset);
  }
  auto heads = append_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), k_cache, v_cache, n, cos, sin,
                                mask, scale);  // (1, H, 1, D), contiguous
  auto out = layer_row(o_weight, o_scales, heads.view({1, 1, H * D}), o_bias, past_cache);  // (1, 1, C_out)
  return with_residual(out, x, pre_kind);
}

// Whether cross_attention_token computes this step: x one row (1, 1, C) on the CPU in a floating dtype, both
// products ones the kernels take (layer_fits), the memory's keys and values (1, Hkv, M, D) in x's dtype with rows
// contiguous, query heads a multiple of theirs, and the mask, if any, a boolean (1, 1, 1, M).
static bool cross_fits(const at::Tensor& x, const at::Tensor& q_weight, const MaybeTensor& q_scales,
                       const MaybeTensor& q_bias, const at::Tensor& k, const at::Tensor& v, const MaybeTensor& mask,
                       const at::Tensor& o_weight, const MaybeTensor& o_scales, const MaybeTensor& o_bias) {
  const auto dtype = x.scalar_type();
  if (!one_token(x) || k.dim() != 4 || q_weight.dim() != 2) return false;
  const int64_t Hkv = k.size(1), M = k.size(2), D = k.size(3), width = q_weight.size(0);
  if (k.size(0) != 1 || Hkv < 1 || M < 1 || D < 1 || width % D != 0 || (width / D) % Hkv != 0) return false;
  if (!layer_fits(q_weight, q_scales, q_bias, x.size(2), dtype) ||
      !layer_fits(o_weight, o_scales, o_bias, width, dtype))
    return false;
  if (k.sizes() != v.sizes() || k.scalar_type() != dtype || v.scalar_type() != dtype || k.stride(3) != 1 ||
      v.stride(3) != 1 || !k.is_cpu() || !v.is_cpu())
    return false;
  return !mask.has_value() || (mask->dim() == 4 && mask->scalar_type() == at::kBool && mask->size(0) == 1 &&
                               mask->size(1) == 1 && mask->size(2) == 1 && mask->size(3) == M && mask->is_cpu());
}

// An eager decode step's cross-attention for one token: x (1, 1, C) through q_weight (H D, C) (layer_row), the
// query heads over the memory's keys and values (1, Hkv, M, D) written at prefill (one_query_attention), then
// through o_weight (layer_row) -> (1, 1, C_out): the module's calls in one. An undefined tensor (None in Python)
// where cross_fits does not hold.
at::Tensor cross_attention_token(at::Tensor x, at::Tensor q_weight, MaybeTensor q_scales,
                                 MaybeTensor q_bias, at::Tensor k, at::Tensor v, MaybeTensor mask,
                                 double scale, at::Tensor o_weight, MaybeTensor o_scales,
                                 MaybeTensor o_bias, MaybeTensor pre_weight, MaybeTensor pre_bias, double pre_eps,
                                 int64_t pre_kind, bool past_cache) {
  if (!cross_fits(x, q_weight, q_scales, q_bias, k, v, mask, o_weight, o_scales, o_bias) ||
      !pre_norm_fits(x, pre_weight, pre_bias, pre_kind, o_weight.size(0)))
    return at::Tensor();
  const int64_t D = k.size(3), H = q_weight.size(0) / D;
  const auto h = pre_normed(x, pre_weight, pre_bias, pre_eps, pre_kind);  // (1, 1, C)
  auto q = layer_row(q_weight, q_scales, h, q_bias, past_cache).view({1, 1, H, D}).transpose(1, 2);  // (1, H, 1, D)
  auto heads = one_query_attention(q, k, v, mask, scale);  // (1, H, 1, D), contiguous
  auto out = layer_row(o_weight, o_scales, heads.view({1, 1, H * D}), o_bias, past_cache);  // (1, 1, C_out)
  return with_residual(out, x, pre_kind);
}

// Whether mlp_token computes this step: x one row (1, 1, C) on the CPU in a floating dtype, both products ones the
// kernels take (layer_fits), the inner width even for a gated activation (its [gate | up] halves).
static bool mlp_fits(const at::Tensor& x, const at::Tensor& up_weight, const MaybeTensor& up_scales,
                     const MaybeTensor& up_bias, const at::Tensor& down_weight, const MaybeTensor& down_scales,
                     const MaybeTensor& down_bias, int64_t activation) {
  const auto dtype = x.scalar_type();
  if (!one_token(x) || activation < MLP_GELU || activation > MLP_RELU) return false;
  if (!layer_fits(up_weight, up_scales, up_bias, x.size(2), dtype)) return false;
  const int64_t inner = up_weight.size(0);
  if (activation == MLP_SILU_AND_MUL && inner % 2 != 0) return false;
  const int64_t width = activation == MLP_SILU_AND_MUL ? inner / 2 : inner;
  return layer_fits(down_weight, down_scales, down_bias, width, dtype);
}

// An eager decode step's feed-forward for one token: x (1, 1, C) through up_weight (layer_row), the activation
// (MLP_GELU: gelu; MLP_GELU_TANH: gelu's tanh form; MLP_SILU_AND_MUL: silu(gate) * up of a fused [gate | up]
// product; MLP_RELU: relu) and down_weight (layer_row) -> (1, 1, C_out): the module's three calls in one. An
// undefined tensor (None in Python) where mlp_fits does not hold.
at::Tensor mlp_token(at::Tensor x, at::Tensor up_weight, MaybeTensor up_scales, MaybeTensor up_bias,
                     at::Tensor down_weight, MaybeTensor down_scales, MaybeTensor down_bias,
                     int64_t activation, MaybeTensor pre_weight, MaybeTensor pre_bias, double pre_eps,
                     int64_t pre_kind, bool past_cache) {
  if (!mlp_fits(x, up_weight, up_scales, up_bias, down_weight, down_scales, down_bias, activation) ||
      !pre_norm_fits(x, pre_weight, pre_bias, pre_kind, down_weight.size(0)))
    return at::Tensor();
  const auto h = pre_normed(x, pre_weight, pre_bias, pre_eps, pre_kind);  // (1, 1, C)
  auto inner = layer_row(up_weight, up_scales, h, up_bias, past_cache);  // (1, 1, F) or (1, 1, 2F)
  if (activation == MLP_SILU_AND_MUL) inner = silu_and_mul(inner);
  else if (activation == MLP_RELU) inner.relu_();  // F.relu's op, in place on the product's own output
  else inner = gelu(inner, activation == MLP_GELU_TANH);
  auto out = layer_row(down_weight, down_scales, inner, down_bias, past_cache);  // (1, 1, C_out)
  return with_residual(out, x, pre_kind);
}
"""


SOURCE = SOURCE.replace("INT4_ROWS_OP", INT4_ROWS_OP).replace("INT4_GRAIN", str(INT4_GRAIN))


def projection_call(layer_row_op: str, layer_norm_op: str, rms_norm_op: str) -> str:
    """The C++ a mixer's own extension includes (after ``FITS``) to make its
    one-call step's projections through ``layer_row_op``, the one-row products' ``layer_row``,
    and its pre-norm (``pre_normed``) through their ``layer_norm_op`` and ``rms_norm_op``: the
    products and norms a layer's and a block's own calls make, bit for bit, without a second
    copy of their kernels in every extension."""
    return (
        (
            r"""
#include <ATen/core/dispatch/Dispatcher.h>

// One row x through a projection that layer_fits, made by the one-row products' extension (its layer_row op, which
// the caller has loaded: row_product.available()): for a mixer's one-call step built in its own extension. Straight
// to the op's CPU kernel: every tensor here is on the CPU, and the step runs without autograd.
static at::Tensor projection_row(const at::Tensor& weight, const MaybeTensor& scales, const at::Tensor& x,
                                 const MaybeTensor& bias, bool past_cache) {
  static const auto op =
      c10::Dispatcher::singleton()
          .findSchemaOrThrow("LAYER_ROW_OP", "")
          .typed<at::Tensor(const at::Tensor&, const MaybeTensor&, const at::Tensor&, const MaybeTensor&, bool)>();
  return op.redispatch(c10::DispatchKeySet(c10::DispatchKey::CPU), weight, scales, x, bias, past_cache);
}

// x through a step's pre-norm (pre_norm_fits; x itself without one), made by the one-row products' extension's
// layer_norm or rms_norm op: the kernels the block's norm modules call.
static at::Tensor pre_normed(const at::Tensor& x, const MaybeTensor& weight, const MaybeTensor& bias, double eps,
                             int64_t kind) {
  if (kind == PRE_NONE) return x;
  const auto cpu = c10::DispatchKeySet(c10::DispatchKey::CPU);
  if (kind == PRE_LAYER) {
    static const auto op = c10::Dispatcher::singleton()
                               .findSchemaOrThrow("LAYER_NORM_OP", "")
                               .typed<at::Tensor(at::Tensor, at::Tensor, MaybeTensor, double)>();  // as registered
    return op.redispatch(cpu, x, *weight, bias, eps);
  }
  static const auto op = c10::Dispatcher::singleton()
                             .findSchemaOrThrow("RMS_NORM_OP", "")
                             .typed<at::Tensor(at::Tensor, at::Tensor, double, bool)>();
  return op.redispatch(cpu, x, *weight, eps, kind == PRE_RMS_UNIT);
}
"""
        )
        .replace("LAYER_ROW_OP", layer_row_op)
        .replace("LAYER_NORM_OP", layer_norm_op)
        .replace("RMS_NORM_OP", rms_norm_op)
    )
