"""Mamba-1's one-token decode step as one fused C++ call: the ``cpu-step`` kernel of ``MambaMixer``.

Between in_proj and out_proj a PyTorch decode step of Mamba-1 is some thirty dispatched ops:
the convolution window's concatenation and copy, its dot product and SiLU, x_proj, the split
into dt, B and C, dt_proj, softplus, ``-exp(A_log)`` over the whole (d_inner, N) matrix, the
state update (``cpu_scan`` or ``selective_step``), the D skip and the SiLU gate, each a
dispatch of microseconds over a few kilobytes. Here they are one call: the window is shifted
in place while it is read (as ``cpu_steps``' ``conv_row``), x_proj (d_inner -> dt_rank + 2N)
and dt_proj (dt_rank -> d_inner), two small products (about 1% of a layer's weights), run
inside on the float32 activations with the weights in their own dtype, and the state is read
and written once. Only in_proj and out_proj, the layer's big products, stay torch's (the
part a roofline counts). The decay ``A = -exp(A_log)`` changes with the weights, not the
token: made every step it was half the step's exponentials, so the kernel takes ``A_log`` and
keeps its decay (``decay_of``: made by ATen as ``MambaMixer.decay`` makes it, kept until
``A_log`` changes), in a compiled graph too, which recomputed it each token where the decay
came in as a tensor of the graph.

x_proj runs through the one-row product loops of every other product (``row_product_source.LOOPS``:
four rows streamed at once, bfloat16 widened in registers); dt_proj, softplus, the gate and the
state update share one pass over the channels by blocks of 16 (``cpu_mamba_channels_source``:
sums made sixteen at a time, the state rows as independent chains). On a 2-core Xeon (AVX512),
Mamba-130m's shapes in bfloat16, the blocks against one channel at a time beside them in one
process: 0.72x a call at two threads (73.6 -> 52.8 µs, warm), a decode step 0.945x eager and
1.05x the tokens/s compiled.

The maths is the reference's (``MambaMixer.forward`` with ``causal_conv.causal_conv`` and
``selective_step``) operation for operation, in float32 (Falcon-Mamba's weightless RMS norms
on dt, B and C included); in a half-precision model the reference rounds the activations
between its ops to that dtype and this kernel does not. Built with zoo's flags
and registered as a custom op (``cpu_ops.CppExtension``: ``torch.ops.zoo.cpu_mamba_step_mamba_step``,
the window and state written in place), so a compiled decode step runs it too; where it
cannot be built the reference runs. Inference only: the mixer asks ``cpu_steps.step_ready``
(float32 state, no autograd, no padding token; the convolution window may be in the model's
dtype too, see ``cpu_steps.window_fits``) before it calls ``mamba_step``.
"""

from __future__ import annotations

import torch

from zoo.components import cpu_token_ops, row_product
from zoo.components.cpu_mamba_channels_source import CHANNELS
from zoo.components.cpu_ops import CppExtension, CppFunction
from zoo.components.cpu_steps_source import CONV_ROW, FLOATS, PRELUDE
from zoo.components.kernels import Kernel
from zoo.components.linear import StepTensors
from zoo.components.row_product_source import LOOPS
from zoo.specs.interfaces import TokenNorm

SOURCE = (
    LOOPS
    + row_product.PROJECTIONS
    + PRELUDE
    + "#include <mutex>\n#include <unordered_map>\n"
    + FLOATS
    + CONV_ROW
    + r"""
// In place: v / sqrt(mean(v^2) + eps) (F.rms_norm without a weight).
static void weightless_rms(float* v, int64_t n, float eps) {
  float ss = 0.f;
  for (int64_t i = 0; i < n; ++i) ss += v[i] * v[i];
  const float scale = 1.f / std::sqrt(ss / n + eps);
  for (int64_t i = 0; i < n; ++i) v[i] *= scale;
}

// The decay A = -exp(A_log) (D, N) in float32, made by ATen's own ops (so equal to MambaMixer.decay's) and kept per
// A_log tensor until that tensor changes: it depends on the weights only, and a compiled graph, which cannot keep a
// tensor between its calls, recomputed it every token (13-15 us a layer, 3% of a Mamba-130m step). Kept by the
// tensor's identity (a weak reference: a freed tensor's entry is dropped, never matched by a new tensor at its
// address), its data and its version counter (an in-place write, load_state_dict or an optimiser step bumps it),
// as MambaMixer.decay keeps it in Python. An inference tensor has no version counter: made every call.
struct Decay {
  c10::weak_intrusive_ptr<c10::TensorImpl> owner;
  const void* data;
  int64_t version;
  at::Tensor values;
};

static at::Tensor decay_of(const at::Tensor& A_log) {
  if (A_log.is_inference()) return at::neg(at::exp(A_log.to(at::kFloat))).contiguous();
  static std::mutex lock;
  static std::unordered_map<const c10::TensorImpl*, Decay> kept;
  const c10::TensorImpl* impl = A_log.unsafeGetTensorImpl();
  const int64_t version = impl->version_counter().current_version();
  std::lock_guard<std::mutex> guard(lock);
  const auto found = kept.find(impl);
  if (found != kept.end() && !found->second.owner.expired() && found->second.data == A_log.data_ptr() &&
      found->second.version == version)
    return found->second.values;
  for (auto it = kept.begin(); it != kept.end();) it = it->second.owner.expired() ? kept.erase(it) : std::next(it);
  auto values = at::neg(at::exp(A_log.to(at::kFloat))).contiguous();
  kept.insert_or_assign(impl, Decay{c10::weak_intrusive_ptr<c10::TensorImpl>(A_log.getIntrusivePtr()),
                                    A_log.data_ptr(), version, values});
  return values;
}

"""
    + CHANNELS
    + r"""
// x_proj as an int8 model holds it, int8 rows w (rows, n) with a scale a row (an int4 model's panels go through the
// layer's own int4_q8, projection_row): out[r] = scale[r] * (w[r] . x), the
// weights widened in registers, summed in float32.
static void int8_rows_into(const int8_t* w, const float* scales, const float* x, float* out, int64_t rows,
                           int64_t n) {
  for (int64_t r = 0; r < rows; ++r) {
    const int8_t* row = w + r * n;
    fVec acc(0.f);
    int64_t k = 0;
    for (; k + S <= n; k += S) {
      float wide[S];
      for (int64_t j = 0; j < S; ++j) wide[j] = static_cast<float>(row[k + j]);
      acc = at::vec::fmadd(fVec::loadu(wide), fVec::loadu(x + k), acc);
    }
    float sum = at::vec::vec_reduce_all<float>([](fVec& p, fVec& q) { return p + q; }, acc);
    for (; k < n; ++k) sum += static_cast<float>(row[k]) * x[k];
    out[r] = sum * scales[r];
  }
}

// xz (B, 2D) in_proj's output [x, z] -> y (B, D) = (C . h + D x) * silu(z) in xz's dtype, out_proj's input.
// window (B, D, K) (float32 or the model's dtype) and ssm (B, D, N) float32, updated in place; x_proj
// (R + 2N, D) in dt_w's (D, R) dtype, int8 rows with x_scales (R + 2N) or int4 panels with their scale_offsets
// (R + 2N, G, 2) (a quantized model's); A_log (D, N), whose
// decay -exp(A_log) is kept (decay_of); xz and the other parameters in any floating dtype (Floats);
// conv_b, dt_b empty when absent; eps <= 0: no norms on dt, B, C.
at::Tensor mamba_step(at::Tensor xz, at::Tensor conv_w, at::Tensor conv_b, at::Tensor window,
                      at::Tensor x_proj, c10::optional<at::Tensor> x_scales, at::Tensor dt_w, at::Tensor dt_b,
                      at::Tensor A_log, at::Tensor Dskip, at::Tensor ssm, double eps) {
  const int64_t batch = ssm.size(0), D = ssm.size(1), N = ssm.size(2), R = dt_w.size(1);
  // dt_proj read in x_proj's float dtype, or in xz's (the model's) beside a quantized x_proj
  dt_w = dt_w.to(x_scales.has_value() ? xz.scalar_type() : x_proj.scalar_type()).contiguous();
  x_proj = x_proj.contiguous();
  const bool int4 = x_scales.has_value() && x_proj.scalar_type() == at::kByte;  // int4 panels: the layer's int4_q8
  if (int4) {
    TORCH_CHECK(x_proj.dim() == 2 && x_proj.size(0) == R + 2 * N && x_proj.size(1) * 2 == D && x_scales->dim() == 3 &&
                    x_scales->size(0) == R + 2 * N,
                "mamba_step: x_proj's int4 panels (", x_proj.sizes(), "); allowed: (", R + 2 * N, ", ", D / 2, ")");
  } else if (x_scales.has_value()) {
    TORCH_CHECK(x_proj.scalar_type() == at::kChar && x_proj.is_contiguous() && x_proj.size(0) == R + 2 * N &&
                    x_proj.size(1) == D && x_scales->numel() == R + 2 * N,
                "mamba_step: x_proj's int8 rows (", x_proj.sizes(), ") and scales; allowed: (", R + 2 * N, ", ", D,
                ") int8 and a scale a row");
  }
  const Floats xsc(x_scales.has_value() && !int4 ? *x_scales : at::Tensor());
  auto y = at::empty({batch, D}, xz.options().dtype(at::kFloat));
  const at::Tensor A = decay_of(A_log);  // (D, N) float32, contiguous
  const Floats xzf(xz), cw(conv_w), cb(conv_b), db(dt_b), decay(A), dp(Dskip);
  // scratch for this token, not zero-filled (each value is written before it is read)
  std::unique_ptr<float[]> scratch(new float[2 * D + R + 2 * N]);
  float *xs = scratch.get(), *dt = xs + D, *dbc = dt + D;
  std::vector<float> laid;
  for (int64_t b = 0; b < batch; ++b) {
    const float *x = xzf.p + b * 2 * D, *z = x + D;
    float *h = ssm.data_ptr<float>() + b * D * N, *out = y.data_ptr<float>() + b * D;
    conv_window_row(x, cw.p, cb.p, window, b, xs);
    AT_DISPATCH_FLOATING_TYPES_AND2(at::kBFloat16, at::kHalf, dt_w.scalar_type(), "mamba_step", [&] {
      if (int4) {  // the int4 layer's own one-row product (projection_row: int4_q8), on the float32 row
        const auto row = at::from_blob(xs, {1, D}, at::TensorOptions().dtype(at::kFloat));
        const auto got = projection_row(x_proj, x_scales, row, c10::nullopt, false);  // (1, R + 2N) float32
        std::copy(got.data_ptr<float>(), got.data_ptr<float>() + R + 2 * N, dbc);
      } else if (x_scales.has_value()) {
        int8_rows_into(x_proj.data_ptr<int8_t>(), xsc.p, xs, dbc, R + 2 * N, D);
      } else {
        rows_times(x_proj.data_ptr<scalar_t>(), xs, dbc, R + 2 * N, D);  // x_proj: [dt, B, C]
      }
      if (eps > 0) {
        weightless_rms(dbc, R, (float)eps);
        weightless_rms(dbc + R, N, (float)eps);
        weightless_rms(dbc + R + N, N, (float)eps);
      }
      const float* dt_x = dbc;
      if constexpr (std::is_same_v<scalar_t, at::BFloat16> && BF16_EVEN_ODD) dt_x = even_odd(dbc, R, laid);
      const scalar_t* w = dt_w.data_ptr<scalar_t>();
      at::parallel_for(0, (D + BLOCK - 1) / BLOCK, 4, [&](int64_t begin, int64_t end) {  // whole blocks: the same
        channels(w, dt_x, db.p, dbc, xs, z, decay.p, dp.p, h, dt, out, begin * BLOCK, std::min(end * BLOCK, D), R, N);
      });  // sums whatever the threads
    });
  }
  return narrowed(y, xz.scalar_type());  // in the model's dtype, for out_proj
}

// An eager decode step's whole mixer for one token: x (1, 1, C) through in_proj (its rows [x | z], 2D of them, for
// the state's D channels; projection_row), mamba_step, and out_proj (projection_row) -> (1, 1, C_out): the mixer's
// three calls in one, each the kernel it calls, so the same bits. An undefined tensor (None in Python), with nothing
// written, where x is not one token or a projection is not one the layer steps take (layer_fits); the window and the
// state are the mixer's to check (cpu_steps.conv_step_ready), as for mamba_step. conv_w is conv1d's (D, 1, K).
at::Tensor mamba_token(at::Tensor x, at::Tensor in_weight, MaybeTensor in_scales, MaybeTensor in_bias,
                       at::Tensor conv_w, MaybeTensor conv_b, at::Tensor window, at::Tensor x_proj,
                       MaybeTensor x_scales, at::Tensor dt_w,
                       at::Tensor dt_b, at::Tensor A_log, at::Tensor Dskip, at::Tensor ssm, double eps,
                       at::Tensor out_weight, MaybeTensor out_scales, MaybeTensor out_bias,
                       MaybeTensor pre_weight, MaybeTensor pre_bias, double pre_eps, int64_t pre_kind,
                       bool past_cache) {
  const auto dtype = x.scalar_type();
  if (!one_token(x) || ssm.dim() != 3 || ssm.size(0) != 1 || conv_w.dim() != 3 || conv_w.size(1) != 1) return {};
  const int64_t C = x.size(2), D = ssm.size(1);
  if (!layer_fits(in_weight, in_scales, in_bias, C, dtype) || in_weight.size(0) != 2 * D ||
      !layer_fits(out_weight, out_scales, out_bias, D, dtype) ||
      !pre_norm_fits(x, pre_weight, pre_bias, pre_kind, out_weight.size(0)))
    return {};
  const auto none = at::empty({0}, ssm.options());  // mamba_step's absent bias
  const auto h = pre_normed(x, pre_weight, pre_bias, pre_eps, pre_kind);  // (1, 1, C): the block's norm, if given
  auto xz = projection_row(in_weight, in_scales, h.view({1, C}), in_bias, past_cache);  // (1, 2D)
  auto y = mamba_step(xz, conv_w.select(1, 0), conv_b.value_or(none), window, x_proj, x_scales, dt_w, dt_b, A_log,
                      Dskip, ssm, eps);
  auto out = projection_row(out_weight, out_scales, y.view({1, 1, D}), out_bias, past_cache);  // (1, 1, C_out)
  return with_residual(out, x, pre_kind);
}
"""
)


EXTENSION = CppExtension(
    "zoo_cpu_mamba_step",
    SOURCE,
    [
        CppFunction(
            "mamba_step",
            "(Tensor xz, Tensor conv_w, Tensor conv_b, Tensor(a!) window, Tensor x_proj, Tensor? x_scales, "
            "Tensor dt_w, Tensor dt_b, Tensor A_log, Tensor Dskip, Tensor(b!) ssm, float eps) -> Tensor",
            lambda xz, ssm, **_: xz.new_empty(ssm.shape[0], ssm.shape[1]),  # (B, d_inner)
        ),
        CppFunction(
            "mamba_token",
            "(Tensor x, Tensor in_weight, Tensor? in_scales, Tensor? in_bias, Tensor conv_w, Tensor? conv_b, "
            "Tensor(a!) window, Tensor x_proj, Tensor? x_scales, Tensor dt_w, Tensor dt_b, Tensor A_log, Tensor Dskip, "
            "Tensor(b!) ssm, float eps, Tensor out_weight, Tensor? out_scales, Tensor? out_bias, "
            "Tensor? pre_weight, Tensor? pre_bias, float pre_eps, int pre_kind, bool past_cache) -> Tensor",
            lambda x, out_weight, **_: x.new_empty(*x.shape[:-1], out_weight.shape[0]),  # (1, 1, C_out)
        ),
    ],
)


KERNEL = Kernel("cpu-step", "cpu", EXTENSION.available, compiles=True)


def mamba_step(
    xz: torch.Tensor,
    conv: torch.nn.Conv1d,
    x_proj: tuple[torch.Tensor, torch.Tensor | None],
    dt_proj: tuple[torch.Tensor, torch.Tensor],
    params: tuple[torch.Tensor, torch.Tensor],
    state: dict[str, torch.Tensor],
    eps: float | None,
) -> torch.Tensor:
    """Mamba-1 between in_proj and out_proj for one token: ``xz`` (B, 2 d_inner), in_proj's
    output; x_proj's rows (dt_rank + 2N, d_inner) and, quantized (int8 rows or int4 panels),
    their scales (None: float rows; ``RowStackable.kernel_rows``); dt_proj's weight (d_inner, dt_rank) and
    bias; ``params`` A_log (d_inner, N), whose decay -exp(A_log) the kernel keeps until A_log
    changes (``decay_of``), and D (d_inner,); ``state``'s ``conv`` (B, d_inner,
    d_conv), float32 or ``xz``'s dtype, and ``ssm`` (B, d_inner, N) float32, updated in place; ``eps`` the weightless
    norms' (None: none) -> the gated y (B, d_inner) in xz's dtype (computed in float32)."""
    conv_bias = torch.empty(0) if conv.bias is None else conv.bias
    dt_weight, dt_bias = dt_proj
    A_log, D = params
    rows, scales = x_proj
    return EXTENSION.op("mamba_step")(
        xz,
        conv.weight[:, 0],
        conv_bias,
        state["conv"],
        rows,
        scales,
        dt_weight,  # read in the rows' float dtype, or xz's beside quantized rows (the C++)
        dt_bias,
        A_log,
        D,
        state["ssm"],
        -1.0 if eps is None else eps,
    )


def mamba_token(
    x: torch.Tensor,
    in_proj: StepTensors,
    conv: torch.nn.Conv1d,
    x_proj: tuple[torch.Tensor, torch.Tensor | None],
    dt_proj: tuple[torch.Tensor, torch.Tensor],
    params: tuple[torch.Tensor, torch.Tensor],
    state: dict[str, torch.Tensor],
    eps: float | None,
    out_proj: StepTensors,
    norm: TokenNorm | None = None,
) -> torch.Tensor | None:
    """One token x (1, 1, C) through the whole mixer in one C++ call: in_proj, ``mamba_step``
    (the arguments as it takes them) and out_proj, each projection as its layer's
    ``step_tensors`` give it and made by the one-row products' extension (``layer_row``), so
    the result is the three calls' bit for bit -> (1, 1, C_out); None where the call does not
    compute it (nothing written then: checked in C++, as the layer steps check theirs). The
    mixer's three calls paid ~50 µs of Python a layer between them (2-core Xeon). Eager calls
    only (``cpu_token_ops.token_calls_run``). With ``norm``: x + the mixer of norm(x) (a
    pre-norm block's branch, ``cpu_token_ops.pre_norm_args``)."""
    if not cpu_token_ops.token_calls_run():
        return None
    dt_weight, dt_bias = dt_proj
    A_log, D = params
    args = (conv.weight, conv.bias, state["conv"], *x_proj, dt_weight, dt_bias, A_log, D, state["ssm"])
    call = EXTENSION.op("mamba_token")
    pre = cpu_token_ops.pre_norm_args(norm)
    return call(x, *in_proj, *args, -1.0 if eps is None else eps, *out_proj, *pre, row_product.PastCache.on)
