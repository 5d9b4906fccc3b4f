"""zoo's FFN kinds against the encoder families' FFNs on the same weights.

T5 (v1.0) is ``mlp`` with relu and no biases, T5 v1.1's gated-gelu is ``geglu`` (tanh GELU),
ModernBERT's GLU is ``gated`` with exact GELU, its fused ``Wi`` split as [gate, up].
"""

import pytest
import torch

from zoo.components.ffn import MLP, GatedMLP

transformers = pytest.importorskip("transformers")


def _t5_config(proj: str):  # type: ignore[no-untyped-def]
    return transformers.T5Config(d_model=32, d_ff=48, feed_forward_proj=proj, dropout_rate=0.0)


def test_t5_relu_ffn_is_mlp() -> None:
    from transformers.models.t5.modeling_t5 import T5DenseActDense

    theirs = T5DenseActDense(_t5_config("relu")).eval()
    ours = MLP(32, 48, "relu", bias=False)
    with torch.no_grad():
        ours.up_proj.weight.copy_(theirs.wi.weight)
        ours.down_proj.weight.copy_(theirs.wo.weight)
    x = torch.randn(2, 5, 32)
    torch.testing.assert_close(ours(x), theirs(x))


def test_t5_gated_gelu_is_geglu() -> None:
    from transformers.models.t5.modeling_t5 import T5DenseGatedActDense

    theirs = T5DenseGatedActDense(_t5_config("gated-gelu")).eval()
    ours = GatedMLP(32, 48, "gelu_tanh", bias=False)  # the geglu kind
    with torch.no_grad():
        ours.gate_proj.weight.copy_(theirs.wi_0.weight)
        ours.up_proj.weight.copy_(theirs.wi_1.weight)
        ours.down_proj.weight.copy_(theirs.wo.weight)
    x = torch.randn(2, 5, 32)
    torch.testing.assert_close(ours(x), theirs(x))


def test_modernbert_glu_is_gated_gelu() -> None:
    from transformers.models.modernbert.modeling_modernbert import ModernBertMLP

    config = transformers.ModernBertConfig(hidden_size=32, intermediate_size=48, mlp_bias=False)
    theirs = ModernBertMLP(config).eval()
    ours = GatedMLP(32, 48, "gelu", bias=False)
    with torch.no_grad():
        gate, up = theirs.Wi.weight.chunk(2, dim=0)  # Wi's first half is activated
        ours.gate_proj.weight.copy_(gate)
        ours.up_proj.weight.copy_(up)
        ours.down_proj.weight.copy_(theirs.Wo.weight)
    x = torch.randn(2, 5, 32)
    torch.testing.assert_close(ours(x), theirs(x))
