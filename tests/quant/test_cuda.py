"""The CUDA path of quantized layers (tinygemm int4, dequantizing int8): gpu-marked."""

import pytest
import torch
import torch.nn.functional as F

import zoo
from tests.conftest import tiny_spec
from zoo.quant import quantize
from zoo.quant.linear import Int4Linear, Int8Linear

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")]


@pytest.mark.parametrize(
    "make",
    [
        lambda w: Int8Linear(w, None, torch.bfloat16),
        lambda w: Int4Linear(w, None, torch.bfloat16, 32),
    ],
    ids=["int8", "int4"],
)
def test_cuda_kernel_equals_the_dequantized_linear(make):
    weight = (torch.randn(96, 256, generator=torch.Generator().manual_seed(0)) * 0.05).to("cuda", torch.bfloat16)
    layer = make(weight)
    x = torch.randn(4, 256, device="cuda", dtype=torch.bfloat16)  # (M, in)
    expected = F.linear(x.float(), layer.dequantize().float())  # (M, out)
    torch.testing.assert_close(layer(x).float(), expected, atol=3e-2, rtol=3e-2)
    assert (layer.dequantize().float() - weight.float()).abs().max() < 0.1 * weight.abs().max().float()


def test_a_quantized_cuda_run_reports_fidelity():
    spec = tiny_spec("llama-3.2-1b").override({"ffn.hidden": 64, "vocab_size": 300})
    m = zoo.bench(spec, weights_dtype="int4", device="cuda", prompt_len=8, gen_len=4, repeats=1)
    assert m.weights_dtype == "int4" and m.fidelity_kl is not None and m.fidelity_kl < 0.01
    model = quantize(zoo.build(spec, device="cuda", dtype="bfloat16", seed=0), "int8")
    assert model(torch.zeros(1, 4, dtype=torch.long, device="cuda")).shape == (1, 4, 300)
