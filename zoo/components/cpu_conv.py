"""The recurrent mixers' depthwise causal convolution over a prompt, on the CPU, as one C++ pass.

Mamba, Mamba2 and Gated DeltaNet convolve their projected channels (kernel 4) and SiLU them
before the scan. In torch (``causal_conv.causal_conv``) that is a transpose of in_proj's
output to (B, C, T), a concatenation with the window, ``F.conv1d`` on the transposed layout,
a SiLU, and a copy back to (B, T, C) for the scan, which reads tokens by rows: five passes
over the activations (Mamba-130m, bfloat16, 512 tokens: ~5 ms a layer of a ~25 ms layer,
mostly the convolution reading across its rows). Here it is one pass that reads in_proj's
output where it lies (rows of a split, possibly strided), the window's last K - 1 inputs in
place of the zero padding, and writes SiLU(conv) (B, T, C) contiguous in the model's dtype,
summed in float32 (as the one-token steps of ``cpu_steps`` sum theirs). Channels go by
blocks of 16 across registers (``cpu_mamba_channels_source``'s ``BLOCK``, ``block_of`` and
``silu_of``), each a token's K rows times the block's K weights, tokens in order, jobs of
(batch row, 64 channels) spread over torch's threads.

The window is the caller's to update (``causal_conv_rows`` below): the op reads it and
writes nothing in place. A custom op (``cpu_ops``), so a compiled prefill runs it too.
Inference only (no backward); the mixers call it where their own CPU scan runs, whose
``Kernel`` loads this extension too.
"""

from __future__ import annotations

import torch

from zoo.components.cpu_mamba_channels_source import CHANNELS
from zoo.components.cpu_ops import CppExtension, CppFunction
from zoo.components.row_product_source import LOOPS

SOURCE = (
    LOOPS
    + CHANNELS
    + r"""
// Channels [c0, c1) of batch row b: out[t, c] = silu(bias[c] + sum_k w[c, k] in[t - K + 1 + k, c]), where the inputs
// before token 0 are the window's last K - 1 (history (K - 1, P) float32) and the rest x's rows; wt (K, P) and bias (P)
// float32, P the channels padded to whole blocks.
template <typename T>
static void conv_group(const T* x, int64_t x_row, const float* wt, const float* bias, const float* history, T* out,
                       int64_t c0, int64_t c1, int64_t steps, int64_t C, int64_t P, int64_t K) {
  alignas(64) float in[BLOCK], sum[BLOCK];
  for (int64_t t = 0; t < steps; ++t) {
    for (int64_t c = c0; c < c1; c += BLOCK) {
      const int64_t m = std::min(BLOCK, c1 - c);
      for (int64_t i = 0; i < BLOCK; i += S) fVec::loadu(bias + c + i).store(sum + i);
      for (int64_t k = 0; k < K; ++k) {
        const int64_t row = t - K + 1 + k;
        if (row < 0) {
          block_of(history + (K - 1 + row) * P + c, m, in);
        } else {
          block_of(x + row * x_row + c, m, in);
        }
        for (int64_t i = 0; i < BLOCK; i += S)
          at::vec::fmadd(fVec::loadu(wt + k * P + c + i), fVec::loadu(in + i), fVec::loadu(sum + i)).store(sum + i);
      }
      for (int64_t i = 0; i < BLOCK; i += S) silu_of(fVec::loadu(sum + i)).store(sum + i);
      for (int64_t i = 0; i < m; ++i) out[t * C + c + i] = static_cast<T>(sum[i]);
    }
  }
}

// x (B, T, C) rows (its last dimension contiguous), weight (C, K), bias (C) or none, window (B, C, K) or none (zeros)
// -> SiLU(causal depthwise conv) (B, T, C) contiguous in x's dtype, summed in float32. The window is not written.
at::Tensor conv_rows(at::Tensor x, at::Tensor weight, c10::optional<at::Tensor> bias,
                     c10::optional<at::Tensor> window) {
  TORCH_CHECK(x.dim() == 3 && x.stride(2) == 1 && weight.dim() == 2 && weight.size(0) == x.size(2),
              "conv_rows: x (B, T, C) with its last dimension contiguous, weight (C, K); got ", x.sizes(), " and ",
              weight.sizes());
  const int64_t batch = x.size(0), steps = x.size(1), C = x.size(2), K = weight.size(1);
  const int64_t padded = (C + BLOCK - 1) / BLOCK * BLOCK;  // whole blocks: the last one's loads
  auto wt = at::zeros({K, padded}, x.options().dtype(at::kFloat));     // (K, C) a tap's weights along channels
  wt.narrow(1, 0, C).copy_(weight.t());
  auto b = at::zeros({padded}, wt.options());
  if (bias.has_value()) b.narrow(0, 0, C).copy_(*bias);
  auto history = at::zeros({batch, K - 1, padded}, wt.options());  // (B, K - 1, C): the inputs before token 0
  if (window.has_value()) {
    TORCH_CHECK(window->dim() == 3 && window->size(0) == batch && window->size(1) == C && window->size(2) == K,
                "conv_rows: window ", window->sizes(), "; allowed: (", batch, ", ", C, ", ", K, ")");
    history.narrow(2, 0, C).copy_(window->narrow(2, 1, K - 1).transpose(1, 2));
  }
  auto y = at::empty({batch, steps, C}, x.options());
  const int64_t groups = (C + GROUP - 1) / GROUP;
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kBFloat16, at::kHalf, x.scalar_type(), "conv_rows", [&] {
    const scalar_t* xp = x.data_ptr<scalar_t>();
    scalar_t* yp = y.data_ptr<scalar_t>();
    at::parallel_for(0, batch * groups, 1, [&](int64_t begin, int64_t end) {
      for (int64_t job = begin; job < end; ++job) {
        const int64_t n = job / groups, c0 = (job % groups) * GROUP, c1 = std::min(c0 + GROUP, C);
        conv_group(xp + n * x.stride(0), x.stride(1), wt.data_ptr<float>(), b.data_ptr<float>(),
                   history.data_ptr<float>() + n * (K - 1) * padded, yp + n * steps * C, c0, c1, steps, C, padded, K);
      }
    });
  });
  return y;
}
"""
)

EXTENSION = CppExtension(
    "zoo_cpu_conv",
    SOURCE,
    [
        CppFunction(
            "conv_rows",
            "(Tensor x, Tensor weight, Tensor? bias, Tensor? window) -> Tensor",
            lambda x, **_: x.new_empty(x.shape),  # (B, T, C)
        )
    ],
)


def causal_conv_rows(
    x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, window: torch.Tensor | None
) -> torch.Tensor:
    """``causal_conv.causal_conv`` laid out by tokens: x (B, T, C) (rows of a split as they
    lie), weight (C, 1, K) as nn.Conv1d stores it, window (B, C, K) or None -> SiLU(conv)
    (B, T, C) contiguous in x's dtype; the window, as ``causal_conv`` leaves it, updated in
    place after the op has read it."""
    x = x if x.stride(-1) == 1 else x.contiguous()
    y = EXTENSION.op("conv_rows")(x, weight[:, 0], bias, window)  # (B, T, C)
    if window is not None:
        kernel, steps = window.shape[-1], x.shape[1]
        if steps >= kernel:
            window.copy_(x[:, steps - kernel :].transpose(1, 2))  # (B, C, K): the last K inputs
        else:
            window.copy_(torch.cat([window[:, :, steps:], x.transpose(1, 2).to(window.dtype)], dim=-1))
    return y
