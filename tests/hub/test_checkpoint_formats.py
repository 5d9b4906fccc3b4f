"""The checkpoint-format hook: a plugin's Hugging Face family read, loaded and saved through
zoo's own entry points, with the registry's usual checks (bad registrations, clashes)."""

from __future__ import annotations

import json
import re
from types import SimpleNamespace

import pytest
import torch

import zoo
from zoo.errors import CheckpointError, PluginConflictError, PluginError
from zoo.hub.family import CheckpointFamily
from zoo.specs.registry import get_registry, reset_registry


def toy_family(model_type: str = "toy") -> SimpleNamespace:
    """A family of small pre-norm decoders whose tensors sit under ``toy.``."""

    def read_config(r):  # type: ignore[no-untyped-def]
        d = r.need("width")
        return {
            "vocab_size": r.need("vocab_size"),
            "d_model": d,
            "n_layers": r.need("depth"),
            "max_seq_len": 16,
            "norm": {"kind": "rmsnorm"},
            "positional": {"kind": "none"},
            "attention": {"kind": "mha", "n_heads": 2, "head_dim": d // 2},
            "ffn": {"kind": "swiglu", "hidden": 2 * d},
            "block": {"kind": "pre_norm"},
            "tie_embeddings": False,
        }

    def write_config(spec):  # type: ignore[no-untyped-def]
        return {"model_type": model_type, "vocab_size": spec.vocab_size, "width": spec.d_model, "depth": spec.n_layers}

    def tensor_rules(zoo_names, hf_keys):  # type: ignore[no-untyped-def]
        return [], [(r"(.+)", r"toy.\1")]

    return SimpleNamespace(
        MODEL_TYPE=model_type,
        ARCHITECTURE="ToyForCausalLM",
        IGNORED=re.compile(r"^toy\.extra$"),
        read_config=read_config,
        write_config=write_config,
        tensor_rules=tensor_rules,
    )


def plugin(*families: object, override: bool = False) -> object:
    class FormatPlugin:
        @zoo.hookimpl
        def zoo_register_checkpoint_formats(self, register):  # type: ignore[no-untyped-def]
            for family in families:
                register(family, override=override)

    return FormatPlugin()


@pytest.fixture(autouse=True)
def _fresh_registry():
    reset_registry()
    yield
    reset_registry()


def test_a_registered_family_reads_loads_and_saves(tmp_path):
    family = toy_family()
    assert isinstance(family, CheckpointFamily)
    zoo.register_plugin(plugin(family), name="toy-formats")
    assert get_registry().plugins["toy-formats"].checkpoint_formats == ("toy",)
    spec = zoo.ModelSpec.from_hf_config({"model_type": "toy", "vocab_size": 40, "width": 16, "depth": 2})
    model = zoo.build(spec, seed=0)
    out = zoo.save_pretrained(model, tmp_path / "toy")  # the family is found by trying, like a built-in one
    config = json.loads((out / "config.json").read_text())
    assert config["model_type"] == "toy" and config["architectures"] == ["ToyForCausalLM"]
    loaded = zoo.from_pretrained(out, progress=False)
    ids = torch.randint(0, 40, (1, 6))
    with torch.no_grad():
        torch.testing.assert_close(loaded(ids), model(ids))


def test_unknown_model_types_list_the_registered_ones():
    zoo.register_plugin(plugin(toy_family()), name="toy-formats")
    with pytest.raises(
        CheckpointError, match=r"model_type: 'toyy' is not supported \(did you mean 'toy'\?\); allowed: .*\btoy\b"
    ):
        zoo.ModelSpec.from_hf_config({"model_type": "toyy"})


def test_an_incomplete_family_is_refused_at_registration():
    broken = SimpleNamespace(MODEL_TYPE="half", ARCHITECTURE=1, read_config=lambda r: {})
    with pytest.raises(PluginError, match=r"lacks IGNORED, write_config, tensor_rules"):
        zoo.register_plugin(plugin(broken), name="broken-formats")
    assert "broken-formats" not in get_registry().plugins


def test_two_plugins_registering_one_model_type_clash():
    zoo.register_plugin(plugin(toy_family()), name="first-formats")
    with pytest.raises(PluginConflictError, match=r"checkpoint format 'toy'.*'first-formats'.*'second-formats'"):
        zoo.register_plugin(plugin(toy_family()), name="second-formats")


def test_a_builtin_model_type_is_taken_over_only_with_override():
    gpt2 = {"model_type": "gpt2", "vocab_size": 40, "n_embd": 16, "n_layer": 1, "n_head": 2, "n_positions": 16}
    with pytest.raises(
        PluginConflictError,
        match=r"checkpoint format 'gpt2' is registered by both "
        r"'zoo.hub.families' \(built in\) and 'sneaky-formats'.*override=True",
    ):
        zoo.register_plugin(plugin(toy_family("gpt2")), name="sneaky-formats")
    assert "sneaky-formats" not in get_registry().plugins
    assert zoo.ModelSpec.from_hf_config(gpt2).positional.kind == "learned"  # still the built-in reader
    zoo.register_plugin(plugin(toy_family("gpt2"), override=True), name="explicit-formats")
    with pytest.raises(CheckpointError, match="width"):  # now the plugin's reader, which wants its own keys
        zoo.ModelSpec.from_hf_config(gpt2)


def test_one_plugin_registering_a_model_type_twice_names_both():
    first, second = toy_family(), toy_family()
    with pytest.raises(PluginConflictError, match=r"checkpoint format 'toy' is registered twice by 'twice-formats'"):
        zoo.register_plugin(plugin(first, second), name="twice-formats")
    assert "twice-formats" not in get_registry().plugins and "toy" not in get_registry().checkpoint_formats


def test_every_built_in_family_is_reached_through_the_registry():
    """The built-in families are registered by one built-in plugin, one module per model_type."""
    formats = get_registry().checkpoint_formats
    builtin = {t for t, entry in formats.items() if entry.plugin == "zoo.hub.families"}
    assert {"gpt2", "llama", "mistral", "phi3", "bert", "roberta", "mamba2", "qwen3_next", "t5"} <= builtin
    for model_type in builtin:
        assert formats[model_type].family.__name__ == f"zoo.hub.families.{model_type.replace('-', '_')}"
        assert isinstance(formats[model_type].family, CheckpointFamily)


def test_a_runtime_llama_like_family_loads_a_tiny_checkpoint(tmp_path):
    """A family written by a user from the shared llama-like helpers, registered at run time,
    loads and saves a checkpoint like a built-in one."""
    from zoo.hub import llama_like

    def read_config(r):  # type: ignore[no-untyped-def]
        return llama_like.read_llama_like(r)

    def write_config(spec):  # type: ignore[no-untyped-def]
        return llama_like.write_llama_like(spec, "my_llama")

    family = SimpleNamespace(
        MODEL_TYPE="my_llama",
        ARCHITECTURE="MyLlamaForCausalLM",
        IGNORED=re.compile("$^"),
        read_config=read_config,
        write_config=write_config,
        tensor_rules=llama_like.no_rules(llama_like.LLAMA_RENAMES),
    )
    zoo.register_plugin(plugin(family), name="my-llama-formats")
    config = {
        "model_type": "my_llama",
        "vocab_size": 40,
        "hidden_size": 16,
        "num_hidden_layers": 2,
        "num_attention_heads": 2,
        "intermediate_size": 24,
        "max_position_embeddings": 32,
    }
    model = zoo.build(zoo.ModelSpec.from_hf_config(config), seed=0)
    out = zoo.save_pretrained(model, tmp_path / "mine", model_type="my_llama")
    assert json.loads((out / "config.json").read_text())["architectures"] == ["MyLlamaForCausalLM"]
    loaded = zoo.from_pretrained(out, progress=False)
    assert loaded.hf_model_type == "my_llama"
    ids = torch.randint(0, 40, (1, 6))
    with torch.no_grad():
        torch.testing.assert_close(loaded(ids), model(ids))
    reset_registry()  # the plugin gone, its model_type is unknown again
    with pytest.raises(CheckpointError, match=r"model_type: 'my_llama' is not supported"):
        zoo.from_pretrained(out, progress=False)


def test_a_writer_bug_is_not_swallowed_by_save_pretrained(tmp_path):
    """Only a CheckpointError means 'this family cannot describe the spec'; anything else propagates."""
    family = toy_family("buggy")

    def write_config(spec):  # type: ignore[no-untyped-def]
        raise AttributeError("a bug in the writer")

    zoo.register_plugin(plugin(SimpleNamespace(**{**vars(family), "write_config": write_config})), name="buggy-formats")
    model = zoo.build(zoo.ModelSpec.from_hf_config({"model_type": "buggy", "vocab_size": 40, "width": 16, "depth": 1}))
    with pytest.raises(AttributeError, match="a bug in the writer"):
        zoo.save_pretrained(model, tmp_path / "buggy")
