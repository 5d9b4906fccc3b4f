"""Several-row CPU products through oneDNN's linear where the host probe measured it faster.

torch's CPU wheels send a float32 ``F.linear`` / ``@`` to MKL's GEMM and a half-precision one
to oneDNN's. On this project's Zen 4 EPYC VM (two threads, torch 2.13) oneDNN's linear
(``torch.ops.mkldnn._linear_pointwise``, the op inductor's CPU freezing passes use) took
0.75x MKL's time for gpt2's four layer products over 128 float32 token rows, 0.82x over 512
(the weights as they are, reordered inside each call: 0.80x and 0.85x; prepacked 0.75x and
0.82x, but a packed copy would double the weights held), and a square 2048 product ran at 200
against 160 GFLOP/s; for bfloat16 rows both paths are oneDNN's (1.03x). Where MKL is the faster
(an Intel CPU it tunes for), the choice goes the other way, so the host probe times both on
its square products (``host_probe.HostPeaks.onednn_faster``) and a ``zoo bench``/``compare``
run takes oneDNN, around its phases (``onednn_products``), only in the dtypes where it won.

Only work outside autograd takes it: the op has no backward (training keeps aten's GEMM). It
is called through zoo's own op (``zoo::onednn_linear``, C++ that calls oneDNN's through the
dispatcher), opaque to ``torch.compile``: inductor asserts on oneDNN's op given a plain weight,
and lowering ``F.linear`` instead left a compiled float32 prefill on MKL (gpt2 866 against 1002
tokens/s eager at 512 tokens); through the opaque op a compiled GEMM + GELU ran 0.87x the
time of inductor's. The sums are float32's in oneDNN's order: within 4e-6 of MKL's relative
to the output's scale.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable

import torch

from zoo.components.cpu_ops import CppExtension, CppFunction
from zoo.components.run_dtypes import RunDtypes

SOURCE = r"""
#include <ATen/ATen.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <string>
#include <vector>

// x (..., in) @ weight (out, in).T (+ bias) -> (..., out) by oneDNN's linear (torch's mkldnn::_linear_pointwise, no
// fused activation), called through the dispatcher.
at::Tensor linear(at::Tensor x, at::Tensor weight, c10::optional<at::Tensor> bias) {
  static const auto op = c10::Dispatcher::singleton().findSchemaOrThrow("mkldnn::_linear_pointwise", "");
  std::vector<c10::IValue> stack{x, weight, bias, std::string("none"), c10::List<c10::optional<at::Scalar>>(),
                                 c10::optional<std::string>()};
  op.callBoxed(&stack);
  return stack[0].toTensor();
}
"""

EXTENSION = CppExtension(
    "zoo_onednn",
    SOURCE,
    [
        CppFunction(
            "linear",
            "(Tensor x, Tensor weight, Tensor? bias) -> Tensor",
            lambda x, weight, **_: x.new_empty(*x.shape[:-1], weight.shape[0]),  # (..., out)
        )
    ],
)
_ONEDNN = RunDtypes()  # the dtypes whose several-row products go through oneDNN, during a run


def available() -> bool:
    """Whether oneDNN's linear can run here: torch built with oneDNN and zoo's op built."""
    return torch.backends.mkldnn.is_available() and EXTENSION.available()


def onednn_products(dtypes: Iterable[torch.dtype]) -> contextlib.AbstractContextManager[None]:
    """Send the several-row CPU products of ``dtypes`` through oneDNN while the block runs: a
    harness run on the CPU wraps its phases in it with the dtypes the host probe measured faster."""
    return _ONEDNN.during(dtypes)


def takes(x: torch.Tensor, weight: torch.Tensor) -> bool:
    """Whether ``x @ weight.T`` goes through oneDNN: several rows of x on the CPU in a dtype of the
    current run's set (which only holds dtypes where ``available``), the weight a matrix in that
    dtype, outside autograd."""
    return (
        x.dtype in _ONEDNN.dtypes
        and x.numel() > x.shape[-1]
        and x.device.type == "cpu"
        and weight.dtype == x.dtype
        and weight.dim() == 2
        and not torch.is_grad_enabled()
    )


def linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    """``F.linear(x, weight, bias)`` (..., in) -> (..., out) by oneDNN's linear (zoo's op: opaque
    in a compiled graph)."""
    return EXTENSION.op("linear")(x, weight, bias)  # (..., out)
