import json

import pytest

import zoo
from zoo.errors import SpecError
from zoo.specs.model import ModelSpec, parse_layer_selector


def test_preset_fields_follow_the_public_contract():
    spec = zoo.spec("qwen3-0.6b")
    assert (spec.vocab_size, spec.d_model, spec.n_layers, spec.max_seq_len) == (151936, 1024, 28, 40960)
    assert spec.attention.kind == "gqa"
    assert (spec.attention.n_heads, spec.attention.n_kv_heads, spec.attention.head_dim) == (16, 8, 128)
    assert spec.ffn.hidden == 3072 and spec.positional.theta == 1e6
    assert spec.source.startswith("https://huggingface.co/Qwen/Qwen3-0.6B")


def test_override_returns_a_new_validated_spec():
    spec = zoo.spec("qwen3-0.6b")
    mqa = spec.override({"attention.n_kv_heads": 1})
    assert mqa.attention.n_kv_heads == 1 and spec.attention.n_kv_heads == 8
    assert spec.override(["attention.n_kv_heads=2", "ffn.hidden=1024"]).ffn.hidden == 1024


def test_kind_swap_keeps_shared_options_and_applies_new_defaults():
    spec = zoo.spec("qwen3-0.6b")
    alibi = spec.override({"positional.kind": "alibi"})
    assert alibi.positional.kind == "alibi" and alibi.positional.max_bias == 8.0
    mqa = spec.override({"attention.kind": "mqa"})
    assert mqa.attention.n_kv_heads == 1 and mqa.attention.qk_norm and mqa.attention.head_dim == 128
    mha = spec.override({"attention.kind": "mha"})
    assert mha.attention.n_kv_heads == 16
    mlp = spec.override({"ffn.kind": "mlp"})
    assert mlp.ffn.hidden == 3072 and mlp.ffn.activation == "gelu"


def test_kind_swap_works_on_every_preset():
    for name in zoo.list_architectures():
        spec = zoo.spec(name)
        for key, value in [
            ("positional.kind", "alibi"),
            ("positional.kind", "none"),
            ("attention.kind", "mqa"),
            ("ffn.kind", "mlp"),
        ]:
            updates = {key: value}
            if key == "attention.kind" and "n_heads" not in spec.attention.options_dict():
                updates["attention.n_heads"] = 4  # a mixer without heads (mamba) has none to carry over
            assert getattr(spec.override(updates), key.split(".")[0]).kind == value


def test_per_layer_overrides_resolve_per_layer():
    oss = zoo.spec("gpt-oss-20b")
    assert [oss.layer(i).attention.options.window for i in range(4)] == [128, None, 128, None]
    gemma = zoo.spec("gemma-3-1b")
    globals_ = [i for i in range(gemma.n_layers) if gemma.layer(i).attention.options.window is None]
    assert globals_ == [5, 11, 17, 23]
    assert gemma.layer(5).positional.options.theta == 1e6 and gemma.layer(4).positional.options.theta == 1e4


@pytest.mark.parametrize(
    "key,expected",
    [("3", [3]), ("0,2,4", [0, 2, 4]), ("1-3", [1, 2, 3]), ("0::2", [0, 2, 4, 6]), ("5::6", [5]), (":2", [0, 1])],
)
def test_layer_selectors(key, expected):
    assert parse_layer_selector(key, 8) == expected


@pytest.mark.parametrize("key", ["x", "9", "1:2:3:4"])
def test_bad_layer_selectors_name_the_key(key):
    with pytest.raises(SpecError, match=r"layers\."):
        parse_layer_selector(key, 8)


@pytest.mark.parametrize(
    "updates,match",
    [
        ({"attention.n_kv_heads": 3}, r"attention\.n_kv_heads: .*not divisible.*allowed"),
        ({"attention.kind": "gqq"}, r"attention\.kind: unknown attention kind 'gqq' \(did you mean 'gqa'\?\)"),
        ({"attention.n_head": 4}, r"attention\.n_head: unknown key \(did you mean 'n_heads'\?\)"),
        ({"ffn.hidden": -4}, r"ffn\.hidden: .*greater than 0"),
        ({"d_model": -1}, r"d_model: .*greater than 0"),
        ({"dmodel": 4}, r"dmodel: unknown key \(did you mean 'd_model'\?\)"),
        ({"attention.kind": "mqa", "attention.n_kv_heads": 2}, r"attention\.n_kv_heads: mqa needs"),
        ({"ffn.kind": "moe"}, r"ffn\.n_experts: required"),
        ({"layers": {"99": {"attention": {"window": 4}}}}, r"layers\.99: layer 99 is out of range"),
        (
            {"layers": {"0": {"atention": {"window": 4}}}},
            r"layers\.0\.atention: unknown component \(did you mean 'attention'\?\)",
        ),
    ],
)
def test_bad_input_raises_spec_error_naming_the_field(updates, match):
    with pytest.raises(SpecError, match=match):
        zoo.spec("qwen3-0.6b").override(updates)


@pytest.mark.parametrize(
    "n_heads,n_kv_heads,allowed", [(16, 3, " (1, 2, 4, 8, 16)"), (2**31 - 1, 2, " (1, 2147483647)"), (720720, 17, "")]
)
def test_the_heads_error_lists_the_divisors_of_n_heads_only_where_they_are_few(n_heads, n_kv_heads, allowed):
    """n_heads from a tampered config.json (2**31 - 1) once took 7 minutes to fail: its divisors
    were listed one candidate at a time; 720720 has 240 divisors, too many to list."""
    with pytest.raises(SpecError) as error:
        zoo.spec("qwen3-0.6b").override({"attention.n_heads": n_heads, "attention.n_kv_heads": n_kv_heads})
    assert str(error.value).endswith(f"allowed: a divisor of n_heads{allowed}"), str(error.value)


def test_direct_construction_raises_spec_error():
    with pytest.raises(SpecError, match="n_layers: required"):
        ModelSpec(
            vocab_size=10,
            d_model=8,
            max_seq_len=8,
            norm="rmsnorm",
            positional="rope",
            attention={"kind": "gqa", "n_heads": 2},
            ffn="swiglu",
        )


def test_head_dim_defaults_to_d_model_over_heads_only_when_absent():
    spec = ModelSpec(
        vocab_size=10,
        d_model=64,
        n_layers=1,
        max_seq_len=8,
        norm="rmsnorm",
        positional="rope",
        attention={"kind": "gqa", "n_heads": 4},
        ffn="swiglu",
    )
    assert spec.attention.head_dim == 16 and spec.ffn.hidden == 256


def test_yaml_and_json_round_trip(tmp_path):
    spec = zoo.spec("gpt-oss-20b")
    (tmp_path / "a.yaml").write_text(spec.to_yaml())
    (tmp_path / "a.json").write_text(spec.to_json())
    assert ModelSpec.from_file(tmp_path / "a.yaml") == spec
    assert ModelSpec.from_file(tmp_path / "a.json") == spec
    assert json.loads(spec.to_json())["layers"] == {"0::2": {"attention": {"window": 128}}}


def test_unparsable_spec_file_names_the_file(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("d_model: [1, 2\n")
    with pytest.raises(SpecError, match="bad.yaml: not valid YAML"):
        ModelSpec.from_file(bad)
    with pytest.raises(SpecError, match="missing.yaml: cannot read"):
        ModelSpec.from_file(tmp_path / "missing.yaml")


def test_every_preset_cites_its_hugging_face_config():
    """...or, for a model without a published checkpoint (the original Transformer), its paper."""
    for name in zoo.list_architectures():
        source = zoo.spec(name).source
        hub = source.startswith("https://huggingface.co/") and source.endswith("/config.json")
        assert hub or source.startswith("https://arxiv.org/abs/"), (name, source)


def test_an_option_that_follows_another_is_carried_along():
    """mha's n_kv_heads follows n_heads (Options.follows): setting n_heads re-derives it."""
    bert = zoo.spec("bert-base-uncased")
    four = bert.override(["attention.n_heads=4"])
    assert (four.attention.n_heads, four.attention.n_kv_heads) == (4, 4) and bert.attention.n_kv_heads == 12
    layered = zoo.spec("gpt2").override({"layers": {"0": {"attention": {"n_heads": 4}}}})
    assert [
        (layered.layer(i).attention.options.n_heads, layered.layer(i).attention.options.n_kv_heads) for i in (0, 1)
    ] == [(4, 4), (12, 12)]
    cross = zoo.spec("transformer-base").override(["cross_attention.n_heads=2"])  # cross-attention: the same rule
    assert (cross.cross_attention.n_heads, cross.cross_attention.n_kv_heads) == (2, 2)
    with pytest.raises(SpecError, match="mha needs n_kv_heads == n_heads"):  # both given: no silent change
        bert.override(["attention.n_heads=4", "attention.n_kv_heads=2"])
    with pytest.raises(SpecError, match="n_heads=4 is not divisible by n_kv_heads=8"):  # gqa: free, not tied
        zoo.spec("qwen3-0.6b").override(["attention.n_heads=4"])
