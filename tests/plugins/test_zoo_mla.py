"""The out-of-tree zoo-mla plugin, pip-installed, used through a spec, `zoo show` and `zoo plugins`."""

import json

import pytest
import torch

import zoo
from zoo.cli import main
from zoo.registry import get_registry


@pytest.fixture(autouse=True)
def _installed(zoo_mla):
    return zoo_mla


def test_the_plugin_arrives_through_its_entry_point():
    info = get_registry().plugins["mla"]
    assert (info.source, info.distribution, info.version) == ("entry point", "zoo-mla", "0.1.0")
    assert ("attention", "mla") in info.components and ("ffn", "deepseek_moe") in info.components
    assert "deepseek-v2-lite" in info.architectures


def test_deepseek_v2_lite_through_a_spec():
    spec = zoo.spec("deepseek-v2-lite")
    assert zoo.count_params(spec).total == 15_706_484_224
    assert zoo.kv_bytes_per_token(spec) == 27 * (512 + 64) * 2  # latent + rope key per layer, bf16
    tiny = spec.override({"d_model": 32, "n_layers": 2, "vocab_size": 50, "attention.n_heads": 2,
                          "attention.kv_lora_rank": 8, "attention.qk_nope_head_dim": 8,
                          "attention.qk_rope_head_dim": 4, "attention.v_head_dim": 8, "ffn.n_experts": 4,
                          "ffn.top_k": 2, "ffn.hidden": 8, "layers": {"0": {"ffn": {"kind": "swiglu", "hidden": 16}}}})
    logits = zoo.build(tiny, seed=0)(torch.randint(0, 50, (1, 5)))
    assert logits.shape == (1, 5, 50) and torch.isfinite(logits).all()


def test_zoo_show_and_zoo_plugins(capsys):
    assert main(["show", "deepseek-v2-lite", "--format", "json"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown["spec"]["attention"]["kind"] == "mla"
    assert shown["analysis"]["params"]["total"] == 15_706_484_224
    assert shown["analysis"]["kv_bytes_per_token"]["bfloat16"] == 31_104
    assert main(["plugins", "--json"]) == 0
    mla = next(p for p in json.loads(capsys.readouterr().out)["plugins"] if p["name"] == "mla")
    assert mla["components"] == {"attention": ["mla"], "ffn": ["deepseek_moe"]}
    assert mla["version"] == "0.1.0" and mla["distribution"] == "zoo-mla"
