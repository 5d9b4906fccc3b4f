"""Grids: --vary parsing, presets, TOML files, key checks before any run, stable ids."""

from __future__ import annotations

import pytest

from tests.harness.sweep_helpers import write_sweep_file, write_tiny_spec
from zoo.analysis.counts import kv_bytes_per_token
from zoo.errors import BenchError, SpecError
from zoo.harness.sweep.grid import SweepPlan, load_plan, plan_from_options
from zoo.harness.sweep.parsing import parse_vary, split_values
from zoo.harness.sweep.points import point_config, point_spec, reduced_depth


def test_vary_values_are_yaml_scalars_split_outside_braces():
    assert split_values("a,{kind: moe, top_k: 2},[1, 2]") == ["a", "{kind: moe, top_k: 2}", "[1, 2]"]
    axes = parse_vary(["attention.kind=mha,gqa", "attention.window=null,128", "ffn={kind: mlp},{kind: swiglu}"])
    assert axes == {
        "attention.kind": ["mha", "gqa"],
        "attention.window": [None, 128],
        "ffn": [{"kind": "mlp"}, {"kind": "swiglu"}],
    }


def test_attention_shorthand_expands_in_order_with_stable_ids():
    plan = plan_from_options(arch="llama-3.2-1b", attention="mha,gqa,mqa", vary=["batch_size=1,4"])
    points = plan.expand()
    assert [p.label for p in points[:2]] == ["attention.kind=mha batch_size=1", "attention.kind=mha batch_size=4"]
    assert len(points) == 6 and len({p.id for p in points}) == 6
    again = plan_from_options(arch="llama-3.2-1b", attention=["mha", "gqa", "mqa"], vary={"batch_size": [1, 4]})
    assert [p.id for p in again.expand()] == [p.id for p in points]  # same plan, same ids
    changed = plan_from_options(arch="llama-3.2-1b", attention="mha,gqa,mqa", vary=["batch_size=1,4"], repeats=3)
    assert not {p.id for p in changed.expand()} & {p.id for p in points}  # another run, other ids


def test_a_point_applies_kind_swap_set_and_run_options_together():
    plan = plan_from_options(arch="llama-3.2-1b", attention="mqa", set=["n_layers=3"], vary=["batch_size=4"])
    point = plan.expand()[0]
    spec = point_spec(plan, point)
    assert (spec.attention.kind, spec.attention.n_kv_heads, spec.n_layers) == ("mqa", 1, 3)
    assert point_config(plan, point).batch_size == 4


def test_a_shared_kv_head_count_yields_to_kinds_that_fix_it():
    """--set attention.n_kv_heads=2 --attention mha,gqa,mqa: MHA keeps one K/V head per query
    head, GQA the 2 set, MQA one; K/V bytes per token by hand: 2 layers x (K, V) x heads x 16 x 4 B."""
    plan = plan_from_options(
        arch="llama-3.2-1b",
        attention="mha,gqa,mqa",
        set=["n_layers=2", "attention.n_heads=8", "attention.n_kv_heads=2", "attention.head_dim=16"],
    )
    specs = [point_spec(plan, point) for point in plan.expand()]
    assert [(s.attention.kind, s.attention.n_kv_heads) for s in specs] == [("mha", 8), ("gqa", 2), ("mqa", 1)]
    assert [kv_bytes_per_token(s, "float32") for s in specs] == [2 * 2 * h * 16 * 4 for h in (8, 2, 1)]


def test_reduced_depth_keeps_slices_and_drops_layers_past_the_cut():
    import zoo

    gemma = reduced_depth(zoo.spec("gemma-3-270m"), 2)
    assert gemma.n_layers == 2 and gemma.layers == {}  # '5::6' names no layer of the first two
    spec = zoo.spec("qwen3-0.6b").override(
        {"layers": {"1,20": {"attention": {"window": 8}}, "25": {"attention": {"window": 4}}}}
    )
    cut = reduced_depth(spec, 2)
    assert cut.layers == {"1": {"attention": {"window": 8}}}


@pytest.mark.parametrize(
    "options,error,message",
    [
        ({"vary": ["attention.n_kv_head=1,2"]}, SpecError, "n_kv_heads"),
        ({"vary": ["batch_sise=1,2"]}, SpecError, "batch_size"),
        ({"vary": ["attention.kind=mqaa"]}, SpecError, "mqa"),
        ({"vary": ["arch=llama-3.2-1x"]}, SpecError, "llama-3.2-1b"),
        ({"vary": ["batch_size="]}, BenchError, "empty"),
        ({"vary": []}, BenchError, "empty"),
        ({"attention": ""}, BenchError, "empty"),
        ({"vary": ["seed=1"], "baseline": "sead=1"}, SpecError, "seed"),
    ],
)
def test_bad_grids_fail_before_any_run(options, error, message):
    with pytest.raises(error, match=message):
        plan_from_options(arch="llama-3.2-1b", **options)


def test_options_of_a_kind_named_on_another_axis_are_known():
    plan = plan_from_options(arch="qwen3-0.6b", vary=["ffn.kind=swiglu,moe", "ffn.n_experts=4"])
    assert len(plan.expand()) == 2


def test_toml_sweep_file(tmp_path):
    plan = load_plan(write_sweep_file(tmp_path))
    assert isinstance(plan, SweepPlan) and plan.name == "grid" and plan.depth is None
    assert plan.spec["name"] == "tiny-qwen3" and plan.baseline == {"attention.kind": "gqa"}
    assert len(plan.expand()) == 25


@pytest.mark.parametrize(
    "text,message",
    [
        ("name = [unclosed\n", "not valid TOML"),
        ('arch = "gpt2"\n[vary]\n"attention.bogus" = [1]\n', "attention.bogus"),
        ('arch = "gpt2"\nvary = 3\n', "vary"),
        ('arch = "gpt2"\n[vary]\nseed = []\n', "empty"),
        ('arch = "gpt2"\nfrobnicate = 1\n[vary]\nseed = [1]\n', "frobnicate"),
    ],
)
def test_bad_sweep_files_name_the_file(tmp_path, text, message):
    path = tmp_path / "bad.toml"
    path.write_text(text)
    with pytest.raises((BenchError, SpecError), match=message) as info:
        load_plan(path)
    assert "bad.toml" in str(info.value)


def test_spec_file_path_is_relative_to_the_sweep_file(tmp_path):
    write_tiny_spec(tmp_path)
    (tmp_path / "s.toml").write_text('spec_file = "tiny.yaml"\n[vary]\n"norm.kind" = ["rmsnorm", "layernorm"]\n')
    assert load_plan(tmp_path / "s.toml").spec["d_model"] == 64
