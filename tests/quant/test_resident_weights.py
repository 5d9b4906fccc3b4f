"""A quantized model holds its packed weights only: no float copy of a linear weight stays resident."""

from __future__ import annotations

import pytest
from torch import nn

import zoo
from tests.conftest import tiny_spec
from zoo.quant import quantize, stored_bytes


@pytest.mark.parametrize("arch", ["gpt2", "mamba-130m"])
@pytest.mark.parametrize("weights_dtype", ["int8", "int4"])
def test_after_quantize_the_model_holds_exactly_its_stored_bytes(arch: str, weights_dtype: str):
    spec = tiny_spec(arch)
    if "hidden" in spec.ffn.options_dict():
        spec = spec.override({"ffn.hidden": 64})  # int4 groups of 32 divide every input width
    model = zoo.build(spec, device="cpu", dtype="bfloat16", seed=0)
    quantize(model, weights_dtype, 32)
    held = {id(t): t for t in [*model.parameters(), *model.buffers()]}
    assert sum(t.numel() * t.element_size() for t in held.values()) == stored_bytes(model)
    assert not [name for name, m in model.named_modules() if isinstance(m, nn.Linear)]  # every linear replaced
