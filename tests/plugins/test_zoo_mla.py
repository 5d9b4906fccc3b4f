"""The out-of-tree zoo-mla plugin, pip-installed, used through a spec, `zoo show` and `zoo plugins`."""

import json

import pytest
import torch

import zoo
from zoo.cli import main
from zoo.specs.registry import get_registry


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
    tiny = spec.override(
        {
            "d_model": 32,
            "n_layers": 2,
            "vocab_size": 50,
            "attention.n_heads": 2,
            "attention.kv_lora_rank": 8,
            "attention.qk_nope_head_dim": 8,
            "attention.qk_rope_head_dim": 4,
            "attention.v_head_dim": 8,
            "ffn.n_experts": 4,
            "ffn.top_k": 2,
            "ffn.hidden": 8,
            "layers": {"0": {"ffn": {"kind": "swiglu", "hidden": 16}}},
        }
    )
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


def test_zoo_bench_measures_the_plugins_latent_cache(capsys):
    import zoo as zoo_api

    spec = zoo_api.spec("deepseek-v2-lite").override(
        {
            "d_model": 32,
            "n_layers": 2,
            "vocab_size": 50,
            "attention.n_heads": 2,
            "attention.kv_lora_rank": 8,
            "attention.qk_nope_head_dim": 8,
            "attention.qk_rope_head_dim": 4,
            "attention.v_head_dim": 8,
            "ffn.n_experts": 4,
            "ffn.top_k": 2,
            "ffn.hidden": 8,
            "layers": {"0": {"ffn": {"kind": "swiglu", "hidden": 16}}},
        }
    )
    argv = [
        "bench",
        "--arch",
        "deepseek-v2-lite",
        "--json",
        "--no-save",
        "--device",
        "cpu",
        "--prompt-len",
        "8",
        "--gen-len",
        "4",
        "--repeats",
        "1",
    ]
    for key, value in spec.to_dict().items():
        if key in ("d_model", "n_layers", "vocab_size"):
            argv += ["--set", f"{key}={value}"]
    for key in ("n_heads", "kv_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim"):
        argv += ["--set", f"attention.{key}={getattr(spec.attention, key)}"]
    argv += [
        "--set",
        "ffn.n_experts=4",
        "--set",
        "ffn.top_k=2",
        "--set",
        "ffn.hidden=8",
        "--set",
        "layers={'0': {'ffn': {'kind': 'swiglu', 'hidden': 16}}}",
    ]
    assert main(argv) == 0
    out = json.loads(capsys.readouterr().out)
    # the allocated cache holds the latent (8) and the rope key (4) per layer, nothing per head
    assert out["kv_bytes"] == zoo_api.kv_cache_bytes(spec, 1, 12, dtype="float32") == 2 * 12 * (8 + 4) * 4
    assert out["decode_tokens_per_s"] > 0
