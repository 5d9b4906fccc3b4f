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

from zoo.components.cpu_ops import CppExtension, CppFunction
from zoo.components.cpu_steps_source import CONV_ROW, FLOATS, PRELUDE
from zoo.components.kernels import Kernel

SOURCE = (
    PRELUDE
    + "#include <mutex>\n#include <unordered_map>\n"
    + FLOATS
    + CONV_ROW
    + r"""
// out (rows) = W (rows, cols) . x (cols) (+ bias), W in its own dtype, accumulated in float32.
template <typename W>
static void gemv(const W* w, const float* x, const float* bias, float* out, int64_t rows, int64_t cols) {
  at::parallel_for(0, rows, 8, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      const W* row = w + r * cols;
      float acc = 0.f;
      for (int64_t c = 0; c < cols; ++c) acc += static_cast<float>(row[c]) * x[c];
      out[r] = bias ? acc + bias[r] : acc;
    }
  });
}

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

// xz (B, 2D) in_proj's output [x, z] -> y (B, D) = (C . h + D x) * silu(z) in xz's dtype, out_proj's input.
// window (B, D, K) (float32 or the model's dtype) and ssm (B, D, N) float32, updated in place; x_proj
// (R + 2N, D) and dt_w (D, R) in one dtype; A_log (D, N), whose decay -exp(A_log) is kept (decay_of); xz and
// the other parameters in any floating dtype (Floats);
// conv_b, dt_b empty when absent; eps <= 0: no norms on dt, B, C.
at::Tensor mamba_step(at::Tensor xz, at::Tensor conv_w, at::Tensor conv_b, at::Tensor window,
                      at::Tensor x_proj, at::Tensor dt_w, at::Tensor dt_b, at::Tensor A_log,
                      at::Tensor Dskip, at::Tensor ssm, double eps) {
  TORCH_CHECK(x_proj.scalar_type() == dt_w.scalar_type(), "mamba_step: x_proj and dt_proj differ in dtype");
  const int64_t batch = ssm.size(0), D = ssm.size(1), N = ssm.size(2), R = dt_w.size(1);
  auto y = at::empty({batch, D}, xz.options().dtype(at::kFloat));
  const at::Tensor A = decay_of(A_log);  // (D, N) float32, contiguous
  const Floats xzf(xz), cw(conv_w), cb(conv_b), db(dt_b), decay(A), dp(Dskip);
  // scratch for this token, not zero-filled (each value is written before it is read)
  std::unique_ptr<float[]> scratch(new float[3 * D + R + 2 * N]);
  float *xs = scratch.get(), *dt = xs + D, *gate = dt + D, *dbc = gate + D;
  for (int64_t b = 0; b < batch; ++b) {
    const float *x = xzf.p + b * 2 * D, *z = x + D;
    conv_window_row(x, cw.p, cb.p, window, b, xs);
    AT_DISPATCH_FLOATING_TYPES_AND2(at::kBFloat16, at::kHalf, x_proj.scalar_type(), "mamba_step", [&] {
      gemv(x_proj.data_ptr<scalar_t>(), xs, nullptr, dbc, R + 2 * N, D);
      if (eps > 0) {
        weightless_rms(dbc, R, (float)eps);
        weightless_rms(dbc + R, N, (float)eps);
        weightless_rms(dbc + R + N, N, (float)eps);
      }
      gemv(dt_w.data_ptr<scalar_t>(), dbc, db.p, dt, D, R);
    });
    for (int64_t d = 0; d < D; ++d) {  // per channel, in loops of their own: vectorised
      dt[d] = softplus(dt[d]);
      gate[d] = silu(z[d]);
    }
    const float *Bv = dbc + R, *Cv = Bv + N, *a = decay.p, *skip = dp.p;
    float *h = ssm.data_ptr<float>() + b * D * N, *out = y.data_ptr<float>() + b * D;
    at::parallel_for(0, D, 64, [&](int64_t begin, int64_t end) {
      for (int64_t d = begin; d < end; ++d) {
        const float step = dt[d], input = step * xs[d];
        float* state = h + d * N;
        float acc = 0.f;
        for (int64_t n = 0; n < N; ++n) {
          const float value = std::exp(step * a[d * N + n]) * state[n] + input * Bv[n];
          state[n] = value;
          acc += Cv[n] * value;
        }
        out[d] = (acc + xs[d] * skip[d]) * gate[d];
      }
    });
  }
  return narrowed(y, xz.scalar_type());  // in the model's dtype, for out_proj
}
"""
)


EXTENSION = CppExtension(
    "zoo_cpu_mamba_step",
    SOURCE,
    [
        CppFunction(
            "mamba_step",
            "(Tensor xz, Tensor conv_w, Tensor conv_b, Tensor(a!) window, Tensor x_proj, Tensor dt_w, Tensor dt_b, "
            "Tensor A_log, Tensor Dskip, Tensor(b!) ssm, float eps) -> Tensor",
            lambda xz, ssm, **_: xz.new_empty(ssm.shape[0], ssm.shape[1]),  # (B, d_inner)
        )
    ],
)


KERNEL = Kernel("cpu-step", "cpu", EXTENSION.available, compiles=True)


def mamba_step(
    xz: torch.Tensor,
    conv: torch.nn.Conv1d,
    x_proj: torch.Tensor,
    dt_proj: tuple[torch.Tensor, torch.Tensor],
    params: tuple[torch.Tensor, torch.Tensor],
    state: dict[str, torch.Tensor],
    eps: float | None,
) -> torch.Tensor:
    """Mamba-1 between in_proj and out_proj for one token: ``xz`` (B, 2 d_inner), in_proj's
    output; x_proj's weight (dt_rank + 2N, d_inner); dt_proj's weight (d_inner, dt_rank) and
    bias; ``params`` A_log (d_inner, N), whose decay -exp(A_log) the kernel keeps until A_log
    changes (``decay_of``), and D (d_inner,); ``state``'s ``conv`` (B, d_inner,
    d_conv), float32 or ``xz``'s dtype, and ``ssm`` (B, d_inner, N) float32, updated in place; ``eps`` the weightless
    norms' (None: none) -> the gated y (B, d_inner) in xz's dtype (computed in float32)."""
    conv_bias = torch.empty(0) if conv.bias is None else conv.bias
    dt_weight, dt_bias = dt_proj
    A_log, D = params
    return EXTENSION.op("mamba_step")(
        xz,
        conv.weight[:, 0],
        conv_bias,
        state["conv"],
        x_proj.contiguous(),
        dt_weight.to(x_proj.dtype).contiguous(),
        dt_bias,
        A_log,
        D,
        state["ssm"],
        -1.0 if eps is None else eps,
    )
