import pytest

import zoo
from zoo.errors import PluginError, SpecError
from zoo.specs.model import ModelSpec
from zoo.specs.options import Options
from zoo.specs.registry import Registry, get_registry, reset_registry


def test_every_family_has_its_builtin_kinds():
    registry = get_registry()
    assert {"layernorm", "rmsnorm"} <= set(registry.kinds("norm"))
    assert {"learned", "sinusoidal", "rope", "alibi", "none"} <= set(registry.kinds("positional"))
    assert {"mha", "gqa", "mqa"} <= set(registry.kinds("attention"))
    assert {"mlp", "gated", "swiglu", "geglu", "moe"} <= set(registry.kinds("ffn"))
    assert {"pre_norm", "post_norm", "parallel", "sandwich"} <= set(registry.kinds("block"))


def test_unknown_kind_suggests_a_close_one():
    with pytest.raises(SpecError, match=r"did you mean 'rmsnorm'"):
        get_registry().component("norm", "rmsnrom")


def test_two_plugins_claiming_one_kind_name_both():
    registry = Registry()
    registry.register_component("norm", "mine", lambda o, d: None, Options, plugin="first")
    with pytest.raises(PluginError, match="'first' and 'second'"):
        registry.register_component("norm", "mine", lambda o, d: None, Options, plugin="second")
    registry.register_component("norm", "mine", lambda o, d: None, Options, plugin="second", override=True)
    assert registry.component("norm", "mine").plugin == "second"


def test_unknown_slot_is_a_plugin_error():
    with pytest.raises(PluginError, match="unknown slot 'normz'"):
        Registry().register_component("normz", "x", lambda: None)


def test_register_plugin_object_at_run_time():
    class NotebookPlugin:
        @zoo.hookimpl
        def zoo_register_architectures(self, register):
            register("tiny-notebook", lambda: zoo.spec("gpt2").override({"n_layers": 1, "name": "tiny-notebook"}))

    try:
        zoo.register_plugin(NotebookPlugin(), name="notebook")
        assert zoo.spec("tiny-notebook").n_layers == 1
    finally:
        reset_registry()


def test_a_plugin_whose_hook_raises_changes_nothing():
    class HalfBroken:
        @zoo.hookimpl
        def zoo_register_components(self, register):
            register("norm", "half", lambda o, d: None)
            raise ValueError("oops")

    try:
        with pytest.raises(PluginError, match="'half-broken': zoo_register_components raised ValueError: oops"):
            zoo.register_plugin(HalfBroken(), name="half-broken")
        assert "half" not in get_registry().kinds("norm")
        assert "half-broken" not in get_registry().plugins
    finally:
        reset_registry()


def test_registering_again_under_a_name_replaces_the_notebook_plugin():
    def plugin(kind):
        class Notebook:
            @zoo.hookimpl
            def zoo_register_components(self, register):
                register("norm", kind, lambda o, d: None)

        return Notebook()

    try:
        zoo.register_plugin(plugin("first_try"), name="cell")
        zoo.register_plugin(plugin("second_try"), name="cell")
        kinds = get_registry().kinds("norm")
        assert "second_try" in kinds and "first_try" not in kinds
        assert get_registry().plugins["cell"].components == (("norm", "second_try"),)
    finally:
        reset_registry()


def test_an_object_without_hooks_is_refused():
    with pytest.raises(PluginError, match="implements no zoo hook"):
        zoo.register_plugin(object(), name="nothing")
    assert "nothing" not in get_registry().plugins


def test_clashing_with_a_builtin_names_both_and_leaves_the_registry_alone():
    class Clash:
        @zoo.hookimpl
        def zoo_register_components(self, register):
            from zoo.parts import Attention

            register("attention", "gqa", lambda o, c: None, module=Attention)

    with pytest.raises(PluginError, match=r"'zoo.components.attention' \(built in\) and 'clash'"):
        zoo.register_plugin(Clash(), name="clash")
    assert get_registry().component("attention", "gqa").plugin == "zoo.components.attention"


def test_the_spec_reads_hf_configs_through_the_registered_reader():
    from zoo.hub.config import spec_from_hf_config

    registry = get_registry()
    assert registry.spec_reader("hf_config") is spec_from_hf_config
    assert registry.plugins["zoo.hub.families"].spec_readers == ("hf_config",)
    config = {"model_type": "gpt2", "n_embd": 32, "n_layer": 1, "n_head": 2, "vocab_size": 100, "n_positions": 64}
    assert ModelSpec.from_hf_config(config) == spec_from_hf_config(config)
    with pytest.raises(
        SpecError, match=r"unknown config format 'hf_conifg' \(did you mean 'hf_config'\?\); allowed: hf_config"
    ):
        registry.spec_reader("hf_conifg")


def test_a_plugin_replaces_a_spec_reader_only_on_purpose():
    class Reader:
        @zoo.hookimpl
        def zoo_register_spec_readers(self, register):
            register("hf_config", lambda config, name=None: None)

    with pytest.raises(PluginError, match=r"spec reader 'hf_config' is registered by both 'zoo.hub.families'"):
        zoo.register_plugin(Reader(), name="reader")
    assert "reader" not in get_registry().plugins


def test_follows_must_name_options_of_the_kind():
    class Tied(Options):
        width: int = 1
        follows = {"heads": "width"}  # heads is no option of Tied

    with pytest.raises(PluginError, match=r"declares follows \{'heads': 'width'\}.*allowed: width"):
        Registry().register_component("norm", "tied", lambda o, d: None, Tied, plugin="p")


def test_tiny_must_name_options_of_the_kind():
    class Narrow(Options):
        width: int = 1
        tiny = {"width": 2, "depth": 1}  # depth is no option of Narrow

    with pytest.raises(PluginError, match=r"declares tiny values for depth.*allowed: width"):
        Registry().register_component("norm", "narrow", lambda o, d: None, Narrow, plugin="p")
