"""The out-of-tree zoo-rwkv plugin through its entry point: kinds, the checkpoint format,
the preset in `zoo show` and `zoo plugins`, and a public-API-only import rule."""

import ast
import json

import pytest

import zoo
from zoo.cli import main
from zoo.specs.registry import get_registry

from .conftest import ZOO_RWKV

PUBLIC = {"zoo", "zoo.specs.interfaces", "zoo.parts", "zoo.errors", "zoo.hub.family"}


@pytest.fixture(autouse=True)
def _installed(zoo_rwkv):
    return zoo_rwkv


def test_the_plugin_arrives_through_its_entry_point():
    info = get_registry().plugins["rwkv"]
    assert (info.source, info.distribution, info.version) == ("entry point", "zoo-rwkv", "0.1.0")
    assert {("attention", "rwkv"), ("ffn", "rwkv"), ("block", "rwkv")} <= set(info.components)
    assert info.architectures == ("rwkv-4-169m-pile",) and info.checkpoint_formats == ("rwkv",)


def test_zoo_show_and_zoo_plugins(capsys):
    assert main(["show", "rwkv-4-169m-pile", "--format", "json"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown["spec"]["block"]["kind"] == "rwkv"
    assert shown["analysis"]["params"]["total"] == 169_342_464
    assert main(["plugins", "--json"]) == 0
    rwkv = next(p for p in json.loads(capsys.readouterr().out)["plugins"] if p["name"] == "rwkv")
    assert rwkv["components"] == {"attention": ["rwkv"], "block": ["rwkv"], "ffn": ["rwkv"]}
    assert rwkv["checkpoint_formats"] == ["rwkv"]


def test_the_plugin_imports_public_zoo_api_only():
    for path in sorted((ZOO_RWKV / "zoo_rwkv").glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else []
            if isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module]
            for name in names:
                if name == "zoo" or name.startswith("zoo."):
                    assert name in PUBLIC, f"{path.name} imports {name}"


def test_the_channel_mix_owns_its_state_and_needs_a_block_that_feeds_it():
    spec = zoo.spec("rwkv-4-169m-pile").override(
        {"d_model": 32, "n_layers": 1, "vocab_size": 40, "attention.attention_hidden": 32, "ffn.hidden": 64}
    )
    zoo.build(spec, seed=0)
    # with another mixer the channel mix still keeps its token shift: its own declared state
    mixed = zoo.build(spec.override({"attention": {"kind": "mha", "n_heads": 2}}), device="meta")
    paths = [path for path, _ in mixed.stateful_modules()]
    assert paths == ["layers.0.attention", "layers.0.ffn"]
    assert set(mixed.state_layout(1, 8)[1]) == {"ffn_x"}
    with pytest.raises(
        zoo.errors.SpecError, match="ffn.kind: rwkv keeps state.*pre_norm block.*allowed block kinds: rwkv"
    ):
        zoo.build(spec.override({"block": {"kind": "pre_norm"}}), device="meta")


def test_the_time_mix_works_in_a_built_in_block():
    """A hybrid: RWKV time mixing as the mixer of a pre-norm SwiGLU block, decoding as it prefills."""
    import torch

    from zoo.model.cache import KVCache
    from zoo.model.generation import decode_step, prefill

    spec = zoo.spec("rwkv-4-169m-pile").override(
        {
            "d_model": 32,
            "n_layers": 2,
            "vocab_size": 40,
            "attention.attention_hidden": 16,
            "ffn": {"kind": "swiglu", "hidden": 48},
            "block": {"kind": "pre_norm"},
            "layers": {"1": {"attention": {"kind": "gqa", "n_heads": 2, "n_kv_heads": 1}}},
        }
    )
    model = zoo.build(spec, seed=0).eval()
    ids = torch.randint(0, 40, (2, 9))
    with torch.no_grad():
        full = model(ids)
    cache = KVCache(model, batch_size=2, max_len=9)
    steps = [prefill(model, ids[:, :6], cache)] + [decode_step(model, ids[:, t : t + 1], cache) for t in range(6, 9)]
    torch.testing.assert_close(torch.stack(steps, dim=1), full[:, 5:], atol=1e-5, rtol=1e-5)
